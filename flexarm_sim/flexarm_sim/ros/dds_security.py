"""Is DDS-Security (SROS2) really in force? Never run silently unprotected.

ROS 2 turns DDS-Security on with ROS_SECURITY_ENABLE=true (ROS_SECURITY_STRATEGY=Enforce | Permissive,
ROS_SECURITY_KEYSTORE, `--ros-args --enclave`). Whether it can be honoured depends on how the DDS was built: the
Fast DDS of the PyPI wheels (libfastdds.so 3.2) has no security plugins (no "builtin.PKI-DH" authentication, its
strings say "... but security is disabled"), and its rmw then fails to create the participant with "This Fast DDS
version doesn't have the security libraries" deep inside rcl — or, with the Permissive strategy and an enclave the
keystore lacks, runs unprotected with nothing more than a log line.

Every flexarm node (node_main.run_node) and `flexarm run` call `refusal()` before rclpy.init: with security
requested and a DDS that cannot provide it, the node prints one line saying so and exits 2 (whatever the strategy:
the user asked for security). `support()` tells from the DDS library mapped into this process (after `import
rclpy`): Fast DDS and Cyclone DDS are recognised by their security plugins; another middleware is reported as
unknown and not refused. No rclpy import here.
"""
from __future__ import annotations

import mmap
import os

FASTDDS_AUTH_PLUGIN = b'builtin.PKI-DH'         # the name Fast DDS registers its authentication plugin under
CYCLONE_SECURITY_LIBS = ('libdds_security_auth.so', 'libdds_security_ac.so', 'libdds_security_crypto.so')


def requested(env=None) -> bool:
    """ROS_SECURITY_ENABLE=true (rcl's rule: exactly 'true')."""
    env = os.environ if env is None else env
    return env.get('ROS_SECURITY_ENABLE', '') == 'true'


def strategy(env=None) -> str:
    env = os.environ if env is None else env
    return 'Enforce' if env.get('ROS_SECURITY_STRATEGY', '') == 'Enforce' else 'Permissive'


def mapped_libraries(maps='/proc/self/maps') -> list:
    """Paths of the shared libraries mapped into this process."""
    out = []
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].strip().startswith('/') and '.so' in parts[5]:
                    p = parts[5].strip()
                    if p not in out:
                        out.append(p)
    except OSError:
        pass
    return out


def _contains(path: str, needle: bytes) -> bool:
    with open(path, 'rb') as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(needle) >= 0


def support(libraries=None):
    """(supported, what) of the DDS in this process: True / False, or None when it cannot be told (a middleware
    this function does not know); `what` names the library and the evidence."""
    libs = mapped_libraries() if libraries is None else list(libraries)
    for path in libs:
        base = os.path.basename(path)
        if base.startswith('libfastdds.so') or base.startswith('libfastrtps.so'):
            try:
                ok = _contains(path, FASTDDS_AUTH_PLUGIN)
            except (OSError, ValueError) as e:
                return None, f'{path}: not readable ({e})'
            return ok, (f'{path} has the DDS-Security plugins' if ok else
                        f'{path} was built without the DDS-Security plugins (no "{FASTDDS_AUTH_PLUGIN.decode()}" '
                        'authentication)')
        if base.startswith('libddsc.so'):
            where = os.path.dirname(path)
            missing = [x for x in CYCLONE_SECURITY_LIBS if not any(
                n.startswith(x) for n in os.listdir(where))]
            return not missing, (f'{path} with its security plugins' if not missing else
                                 f'{path} without the security plugins {", ".join(missing)}')
    return None, 'no Fast DDS or Cyclone DDS library in this process (an RMW whose security support is not checked)'


def refusal(env=None, libraries=None) -> str:
    """'' if the node may start; else the one-line reason it must not (security requested, not available)."""
    if not requested(env):
        return ''
    ok, what = support(libraries)
    if ok is not False:
        return ''
    return (f'ROS_SECURITY_ENABLE=true (strategy {strategy(env)}) but this ROS 2 installation cannot secure its '
            f'traffic: {what}. Refusing to run unprotected. Use a ROS 2 whose DDS has DDS-Security (e.g. the '
            'distribution\'s binary packages) or unset ROS_SECURITY_ENABLE to run without it.')
