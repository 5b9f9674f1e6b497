"""Which nodes a bring-up starts, with which parameter files and overrides — the one owner of that knowledge,
used by the launch files (as launch_ros Node actions), by `flexarm run` (as processes) and by the tests (which
spawn exactly these commands: CI has no `ros2 launch`). No ROS imports.

`command(spec)` is the command line launch_ros builds for a Node action: the installed executable,
`--ros-args -r __node:=<name>`, one `--params-file` per shipped file, then one for the overrides (a YAML file
`{/<name>: {ros__parameters: overrides}}`, as launch_ros writes for a parameter dictionary).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import yaml

from flexarm_sim.arms import resolve_arm

CONTROLLERS = ('pd_servo', 'modal', 'computed_torque')
TIME_MODES = ('realtime', 'simtime', 'lockstep')
SHAPERS = ('none', 'zv', 'zvd')
DEFAULT_CONTROL_RATE = 500.0       # Hz: plant state rate = controller rate (closes the loop on 2 cores)


@dataclass(frozen=True)
class NodeSpec:
    package: str
    executable: str
    name: str
    params_files: tuple = ()
    overrides: dict = field(default_factory=dict)

    def params_yaml(self) -> str:
        """The overrides as launch_ros writes them for a parameter dictionary."""
        return yaml.safe_dump({'/' + self.name: {'ros__parameters': dict(self.overrides)}}, default_flow_style=False)


def share_dir(package: str) -> str:
    """The installed share directory of a workspace package (source tree when not installed)."""
    try:
        from ament_index_python.packages import get_package_share_directory
        return get_package_share_directory(package)
    except Exception:  # noqa: BLE001 - no ament index: the source tree
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))


def executable(package: str, name: str) -> str:
    """Path of an installed executable (<prefix>/lib/<package>/<name>), as `ros2 run` finds it."""
    from ament_index_python.packages import get_package_prefix
    path = os.path.join(get_package_prefix(package), 'lib', package, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'executable {name} of package {package} not found ({path}): build the workspace')
    return path


def command(spec: NodeSpec, tmpdir: str | None = None) -> list:
    """The argv launch_ros runs for this node (the overrides go to a file in tmpdir)."""
    argv = [executable(spec.package, spec.executable), '--ros-args', '-r', f'__node:={spec.name}']
    for f in spec.params_files:
        argv += ['--params-file', f]
    if spec.overrides:
        fd, path = tempfile.mkstemp(prefix=f'launch_params_{spec.name}_', suffix='.yaml', dir=tmpdir)
        with os.fdopen(fd, 'w') as fh:
            fh.write(spec.params_yaml())
        argv += ['--params-file', path]
    return argv


def arm_path(arm: str) -> str:
    """An arm launch argument (a shipped arm's name or a path) -> the resolved path handed to every node."""
    return resolve_arm(arm)


def _rate(value, what):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f'{what} must be a number in Hz, got {value!r}') from None
    if not v > 0:
        raise ValueError(f'{what} must be > 0 Hz, got {value!r}')
    return v


def sim_nodes(arm: str, controller: str = 'pd_servo', time_mode: str = 'realtime', rate='', control_rate='',
              shaping='', plant_extra=None, controller_extra=None) -> list:
    """The plant and one controller of sim.launch.py / `flexarm run` (empty strings keep the YAML's values).

    control_rate goes to both the plant's publish_rates.state and the controller's rate (one control rate);
    with a controller, the plant holds the arm until its first command (wait_for_command)."""
    if controller not in CONTROLLERS + ('none',):
        raise ValueError(f'controller must be one of {", ".join(CONTROLLERS + ("none",))}, got {controller!r}')
    if time_mode not in TIME_MODES:
        raise ValueError(f'time_mode must be one of {", ".join(TIME_MODES)}, got {time_mode!r}')
    if shaping not in ('',) + SHAPERS:
        raise ValueError(f'shaping must be one of {", ".join(SHAPERS)}, got {shaping!r}')
    config = os.path.join(share_dir('flexarm_bringup'), 'config')
    path = arm_path(arm)
    plant = {'arm': path, 'time_mode': time_mode, 'wait_for_command': controller != 'none'}
    if rate not in ('', None):
        plant['loop_rate'] = _rate(rate, 'rate')
    if control_rate not in ('', None):
        plant['publish_rates.state'] = _rate(control_rate, 'control_rate')
    plant.update(plant_extra or {})
    nodes = [NodeSpec('flexarm_sim', 'plant', 'plant', (os.path.join(config, 'plant.yaml'),), plant)]
    if controller != 'none':
        ctl = {'arm': path, 'use_sim_time': time_mode != 'realtime', 'lockstep': time_mode == 'lockstep'}
        if control_rate not in ('', None):
            ctl['rate'] = _rate(control_rate, 'control_rate')
        if shaping:
            ctl['shaping'] = shaping
        ctl.update(controller_extra or {})
        nodes.append(NodeSpec('flexarm_control', controller, controller,
                              (os.path.join(config, 'controllers.yaml'),), ctl))
    return nodes


def package_installed(package: str) -> bool:
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        return False
    try:
        get_package_prefix(package)
        return True
    except (PackageNotFoundError, ValueError, LookupError):
        return False


def require_package(package: str, why: str):
    """RuntimeError naming the missing ROS package (a launch file refuses before it starts anything)."""
    if not package_installed(package):
        raise RuntimeError(f'{why} needs the ROS package {package!r}, which is not installed in this environment '
                           f'(install it, e.g. ros-$ROS_DISTRO-{package.replace("_", "-")}, or leave {why.split(":=")[0]} '
                           'at its default); nothing was started')


def hardware_nodes(arm: str, controller: str = 'pd_servo', shaping='', params_file='', port='', baud_rate='',
                   controller_extra=None) -> list:
    """The hardware bridge and one controller of hardware.launch.py.

    The bridge reads `params_file` (default config/hardware_bridge.yaml; `port` and `baud_rate`, when not empty,
    override the file's). One control rate: the bridge publishes a state per cycle, so the controller's rate is
    the bridge's loop_rate. The arm's joints must be the bridge's joint_names (refused otherwise, naming both)."""
    from flexarm_control.bridge.config import load_yaml
    from flexarm_sim.model import load_arm
    if controller not in CONTROLLERS + ('none',):
        raise ValueError(f'controller must be one of {", ".join(CONTROLLERS + ("none",))}, got {controller!r}')
    if shaping not in ('',) + SHAPERS:
        raise ValueError(f'shaping must be one of {", ".join(SHAPERS)}, got {shaping!r}')
    config = os.path.join(share_dir('flexarm_bringup'), 'config')
    params_file = params_file or os.path.join(config, 'hardware_bridge.yaml')
    bridge = load_yaml(params_file)                      # validated: a bad file is refused before anything starts
    overrides = {}
    if str(port).strip():
        overrides['port'] = str(port).strip()
    if str(baud_rate).strip():
        try:
            overrides['baud_rate'] = int(str(baud_rate).strip())
        except ValueError:
            raise ValueError(f'baud_rate must be an integer (bit/s), got {baud_rate!r}') from None
    nodes = [NodeSpec('flexarm_control', 'hardware_bridge', 'hardware_bridge', (params_file,), overrides)]
    if controller != 'none':
        path = arm_path(arm)
        joints = list(load_arm(path).joint_names)
        if joints != bridge.names:
            raise ValueError(f'the arm {os.path.basename(path)} has joints {joints} but the bridge ({params_file}) '
                             f'drives {bridge.names}: give an arm whose joints are the bridge\'s joint_names')
        ctl = {'arm': path, 'rate': float(bridge['loop_rate'])}
        if shaping:
            ctl['shaping'] = shaping
        ctl.update(controller_extra or {})
        nodes.append(NodeSpec('flexarm_control', controller, controller, (os.path.join(config, 'controllers.yaml'),),
                              ctl))
    return nodes
