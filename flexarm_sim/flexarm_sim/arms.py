"""The one resolver of arm descriptions: a path, or the name of a shipped arm (no ROS needed).

    resolve_arm('spatial_3r') -> '/.../arms/spatial_3r.yaml'
    arm_id(path) -> 'spatial_3r:1a2b3c4d5e6f'   (name + hash of the resolved description: nodes compare it)

Shipped arms are searched in the installed package share (ament index) and in the source tree.
"""
from __future__ import annotations

import hashlib
import json
import os

import yaml

from .common.params import ConfigError
from .model import ArmSpecError, load_model

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_DIRS = (os.path.normpath(os.path.join(_HERE, '..', '..', 'flexarm_description', 'arms')),)
_SHARE = (('flexarm_description', ('arms',)),)


def arm_dirs() -> list:
    """Directories holding the shipped arm descriptions (installed share first, then the source tree)."""
    out = []
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:          # plain Python environment without ROS
        get_package_share_directory = None
    for pkg, sub in _SHARE:
        if get_package_share_directory is None:
            break
        try:
            out.append(os.path.join(get_package_share_directory(pkg), *sub))
        except (PackageNotFoundError, ValueError, LookupError, OSError):   # OSError: no workspace sourced
            pass
    out.extend(d for d in _SOURCE_DIRS if os.path.isdir(d))
    return out


def shipped_arms_dir() -> str:
    """The directory the shipped arms resolve to (flexarm_description's installed share, else the source tree)."""
    dirs = arm_dirs()
    if not dirs:
        raise ConfigError('arm', 'no shipped arm directory: flexarm_description is neither installed nor in the '
                                 'source tree')
    return dirs[0]


def shipped_arms() -> list:
    """Names of the shipped arms."""
    names = set()
    for d in arm_dirs():
        if os.path.isdir(d):
            names.update(f[:-5] for f in os.listdir(d) if f.endswith('.yaml'))
    return sorted(names)


def resolve_arm(name: str, param: str = 'arm') -> str:
    """Absolute path of an arm description given as a path or as the name of a shipped arm; ConfigError naming
    `param` and what was tried otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(param, f'expected an arm name or a YAML path, got {name!r}')
    if os.path.isfile(name):
        return os.path.abspath(name)
    base = os.path.basename(name)
    fname = base if base.endswith(('.yaml', '.yml')) else base + '.yaml'
    tried = [os.path.abspath(name)]
    if os.sep not in name:                       # a bare name: a shipped arm
        for d in arm_dirs():
            p = os.path.join(d, fname)
            tried.append(p)
            if os.path.isfile(p):
                return os.path.abspath(p)
    raise ConfigError(param, f'arm description {name!r} not found (tried {", ".join(tried)}; shipped arms: '
                             f'{", ".join(shipped_arms()) or "none found"})')


def arm_id(path: str, name: str | None = None) -> str:
    """'<arm name>:<12 hex digits of the SHA-256 of the parsed description>': two nodes run the same arm iff
    their ids are equal (comments and formatting of the file do not count)."""
    with open(path) as f:
        canonical = json.dumps(yaml.safe_load(f), sort_keys=True, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    return f'{name or os.path.splitext(os.path.basename(path))[0]}:{digest}'


def load_arm_model(name: str, param: str = 'arm'):
    """(ArmModel, resolved path) of an arm parameter; ConfigError naming the parameter if it cannot be loaded."""
    path = resolve_arm(name, param)
    try:
        return load_model(path), path
    except (ArmSpecError, ValueError, OSError) as e:
        raise ConfigError(param, f'{path}: {e}') from e
