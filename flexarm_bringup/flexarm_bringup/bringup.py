"""Which nodes a bring-up starts, with which parameter files and overrides — the one owner of that knowledge,
used by the launch files (as launch_ros Node actions), by `flexarm run` (as processes) and by the tests (which
spawn exactly these commands: CI has no `ros2 launch`). No ROS imports.

`command(spec)` is the command line launch_ros builds for a Node action: the installed executable,
`--ros-args -r __node:=<name>` (`-r __ns:=<namespace>` outside the root namespace, and the bring-up's remappings),
`--enclave <enclave>` with a keystore (flexarm_bringup/security.py), one `--params-file` per shipped file, then one
for the overrides (a YAML file `{<fully qualified name>: {ros__parameters: overrides}}`, as launch_ros writes for a
parameter dictionary).

Namespaces (many arms on one domain): every topic and service name is relative (flexarm_sim/ros/names.py), so a
bring-up in namespace /armB runs on /armB/flexarm/state, /armB/effort_controller/commands, /armB/flexarm/reset, ...
The shipped parameter files' sections (`plant:`) name nodes in the root namespace; rcl matches a section by the
node's fully qualified name, so outside the root namespace each shipped file is handed to the node as a copy keyed
`/<namespace>/<name>` (`params_files_for`), written next to the overrides file.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import yaml

from flexarm_control.controller.kinds import KINDS as CONTROLLERS     # one registration per controller
from flexarm_control.controller.kinds import SHAPINGS as SHAPERS     # (the launch files' name)
from flexarm_sim.arms import arm_id, resolve_arm
from flexarm_sim.plant.config import CONTROL_RATE as DEFAULT_CONTROL_RATE, TIME_MODES
from flexarm_sim.ros import names
from flexarm_sim.sensors import PRESETS as SENSOR_SETS
from flexarm_sim.sensors import preset_values

ESTIMATORS = ('none',) + SENSOR_SETS      # estimator:= a sensor set (flexarm_sim.sensors.preset_values), or none
ESTIMATE_TOPIC = names.STATE_ESTIMATE
HARDWARE_ESTIMATORS = ('none', 'encoders')    # hardware measures joints only


@dataclass(frozen=True)
class NodeSpec:
    package: str
    executable: str
    name: str
    params_files: tuple = ()
    overrides: dict = field(default_factory=dict)
    namespace: str = '/'
    remappings: tuple = ()           # ((from, to), ...): names.remappings(namespace)
    enclave: str = ''                # SROS2 enclave (a keystore was given), else ''

    @property
    def fqn(self) -> str:
        """The node's fully qualified name (/plant, /armB/plant)."""
        return names.resolve(self.name, self.namespace)

    def params_yaml(self) -> str:
        """The overrides as launch_ros writes them for a parameter dictionary."""
        return yaml.safe_dump({self.fqn: {'ros__parameters': dict(self.overrides)}}, default_flow_style=False)

    def ros_arguments(self) -> list:
        """The ROS arguments beyond name and parameters: namespace, remappings, enclave (launch_ros: namespace=,
        remappings=, ros_arguments=)."""
        out = [] if self.namespace == '/' else ['-r', f'__ns:={self.namespace}']
        for a, b in self.remappings:
            out += ['-r', f'{a}:={b}']
        return out + (['--enclave', self.enclave] if self.enclave else [])


def share_dir(package: str) -> str:
    """The installed share directory of a workspace package (its source tree when not installed)."""
    try:
        from ament_index_python.packages import get_package_share_directory
        return get_package_share_directory(package)
    except Exception:  # noqa: BLE001 - no ament index: the source tree
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', package))


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
    argv += spec.ros_arguments()
    for f in params_files_for(spec, tmpdir):
        argv += ['--params-file', f]
    if spec.overrides:
        fd, path = tempfile.mkstemp(prefix=f'launch_params_{spec.name}_', suffix='.yaml', dir=tmpdir)
        with os.fdopen(fd, 'w') as fh:
            fh.write(spec.params_yaml())
        argv += ['--params-file', path]
    return argv


def params_files_for(spec: NodeSpec, tmpdir: str | None = None) -> list:
    """The parameter files to hand the node: the shipped ones as they are in the root namespace; outside it, copies
    whose root-namespace section for this node (`<name>:` or `/<name>:`) is keyed by the node's fully qualified name
    (rcl matches sections by it), written to tmpdir."""
    if spec.namespace == '/':
        return list(spec.params_files)
    out = []
    for path in spec.params_files:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
        keys = [k for k in (spec.name, '/' + spec.name) if k in data]
        if not keys:
            out.append(path)              # no section of this node: as given (the node warns, naming both)
            continue
        moved = {(spec.fqn if k in keys else k): v for k, v in data.items()}
        fd, copy = tempfile.mkstemp(prefix=f'launch_params_{spec.name}_ns_', suffix='.yaml', dir=tmpdir)
        with os.fdopen(fd, 'w') as fh:
            yaml.safe_dump(moved, fh, default_flow_style=False)
        out.append(copy)
    return out


def namespaced(specs, namespace='/', keystore: str = '') -> list:
    """The specs of a bring-up in `namespace` (names.namespace: validated, '/' = root), with their enclaves when a
    keystore is given (flexarm_bringup/security.py; its enclaves must exist: checked before anything starts)."""
    import dataclasses
    ns = names.namespace(namespace)
    out = [dataclasses.replace(s, namespace=ns, remappings=tuple(names.remappings(ns))) for s in specs]
    if str(keystore or '').strip():
        from .security import enclave_for, check_keystore
        out = [dataclasses.replace(s, enclave=enclave_for(s.executable, ns)) for s in out]
        check_keystore(keystore, [s.enclave for s in out])
    return out


def launch_node_args(spec: NodeSpec, extra_parameters=()) -> dict:
    """The keyword arguments of launch_ros's Node for a spec beyond package, executable and name: parameters (the
    parameter files as params_files_for hands them, then extra_parameters), namespace, remappings, the enclave."""
    kw = {'parameters': params_files_for(spec) + list(extra_parameters)}
    if spec.namespace != '/':
        kw['namespace'] = spec.namespace
    if spec.remappings:
        kw['remappings'] = [tuple(r) for r in spec.remappings]
    if spec.enclave:
        kw['ros_arguments'] = ['--enclave', spec.enclave]
    return kw


def security_environment(keystore) -> dict:
    """The environment of a bring-up under DDS-Security with this keystore ({} without one)."""
    if not str(keystore or '').strip():
        return {}
    from .security import environment
    return environment(str(keystore).strip())


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


def _one_of(name: str, value, allowed):
    """ValueError naming the argument unless value is one of allowed."""
    if value not in allowed:
        raise ValueError(f'{name} must be one of {", ".join(a for a in allowed if a) or "(empty)"}, got {value!r}')


def sim_nodes(arm: str, controller: str = 'pd_servo', time_mode: str = 'realtime', rate='', control_rate='',
              shaping='', plant_extra=None, controller_extra=None, estimator: str = 'none', namespace='/',
              keystore: str = '', plant_arm='') -> list:
    """The plant, the state estimator (estimator != 'none') and one controller of sim.launch.py / `flexarm run`
    (empty strings keep the YAML's values).

    control_rate goes to both the plant's publish_rates.state and the controller's rate (one control rate);
    with a controller, the plant holds the arm until its first command (wait_for_command). With an estimator
    (a sensor set, flexarm_sim.sensors.preset_values): the plant models those sensors (/joint_states becomes the
    encoders' reading, at the control rate), the state_estimator fuses them (config/estimator.yaml) and the
    controller feeds back its estimate (state_topic).

    plant_arm (a model-mismatch study): the plant simulates this arm while the controller and the estimator keep
    `arm` (their model); its joints and modes must be laid out as `arm`'s (the controller accepts such states, warning
    with both arm ids)."""
    _one_of('controller', controller, CONTROLLERS + ('none',))
    _one_of('time_mode', time_mode, TIME_MODES)
    _one_of('shaping', shaping, ('',) + SHAPERS)
    _one_of('estimator', estimator, ESTIMATORS)
    config = os.path.join(share_dir('flexarm_bringup'), 'config')
    path = arm_path(arm)
    plant = {'arm': arm_path(plant_arm) if plant_arm else path, 'time_mode': time_mode,
             'wait_for_command': controller != 'none'}
    if rate not in ('', None):
        plant['loop_rate'] = _rate(rate, 'rate')
    if control_rate not in ('', None):
        plant['publish_rates.state'] = _rate(control_rate, 'control_rate')
    est = None
    if estimator != 'none':
        est, sensors = estimator_node(path, estimator, config, _rate(control_rate, 'control_rate')
                                      if control_rate not in ('', None) else DEFAULT_CONTROL_RATE, time_mode)
    plant.update(plant_extra or {})
    if est is not None:
        plant.update(sensors)       # the estimator's tick: /joint_states at the control rate, whatever the extras say
    nodes = [NodeSpec('flexarm_sim', 'plant', 'plant', (os.path.join(config, 'plant.yaml'),), plant)]
    if est is not None:
        nodes.append(est)
    if controller != 'none':
        ctl = {'arm': path, 'use_sim_time': time_mode != 'realtime', 'lockstep': time_mode == 'lockstep'}
        if control_rate not in ('', None):
            ctl['rate'] = _rate(control_rate, 'control_rate')
        if shaping:
            ctl['shaping'] = shaping
        if est is not None:
            ctl['state_topic'] = ESTIMATE_TOPIC
        ctl.update(controller_extra or {})
        nodes.append(NodeSpec('flexarm_control', controller, controller,
                              (os.path.join(config, 'controllers.yaml'),), ctl))
    return namespaced(nodes, namespace, keystore)


def estimator_node(path: str, sensor_set: str, config: str, rate: float, time_mode: str = 'realtime'):
    """(the state_estimator's NodeSpec, the plant's sensor parameters) for a sensor set at control rate `rate`:
    the plant samples every sensor at the control rate (its /joint_states is the estimator's tick). In lock-step the
    estimator predicts with the stamped command (exactly what the plant applies over the period); in real time and
    simtime with the drives' measured torque of /joint_states (input:=measured_effort): a command reaches the plant
    somewhere within the period, after the transport, and predicting with the latest command then misplaces the torque
    step by up to a period (measured over DDS: 25 resets in 20 s with the command, none with the measured torque)."""
    from flexarm_sim.model import load_arm
    values = preset_values(load_arm(path), sensor_set)
    plant = dict(values, **{'publish_rates.joint_states': rate, 'sensors.strain.rate': rate,
                            'sensors.accelerometer.rate': rate})
    est = {'arm': path, 'rate': rate, 'use_sim_time': time_mode != 'realtime', 'lockstep': time_mode == 'lockstep',
           'input': 'command' if time_mode == 'lockstep' else 'measured_effort',
           'sensors.accelerometer.enabled': values['sensors.accelerometer.enabled'],
           'sensors.accelerometer.rate': rate}
    if values['sensors.strain.gauges']:
        est['sensors.strain.gauges'] = values['sensors.strain.gauges']
        plant['sensors.strain.gauges'] = values['sensors.strain.gauges']
    else:
        plant.pop('sensors.strain.gauges')      # [] is 'not set' in a parameter file anyway
    return NodeSpec('flexarm_control', 'state_estimator', 'state_estimator',
                    (os.path.join(config, 'estimator.yaml'),), est), plant


def hardware_estimator(arm_file: str, rate: float):
    """(the state_estimator's NodeSpec, the controller's extra overrides) for hardware: encoders only (the bridge
    measures joints), at the bridge's loop_rate (each /joint_states reading is one period); the controller runs at
    that rate too and feeds back the estimate. The prediction applies the servos' measured torque (the effort of
    /joint_states: present current x torque constant), not the command: a command reaches the servos up to a
    period later and is clipped at their current limit, which the command does not say."""
    config = os.path.join(share_dir('flexarm_bringup'), 'config')
    est = NodeSpec('flexarm_control', 'state_estimator', 'state_estimator', (os.path.join(config, 'estimator.yaml'),),
                   {'arm': arm_file, 'rate': float(rate), 'input': 'measured_effort'})
    return est, {'state_topic': ESTIMATE_TOPIC, 'rate': float(rate)}


def urdf_nodes(path: str, segments=8, use_sim_time: bool = False, namespace: str = '/') -> list:
    """robot_state_publisher with the arm's URDF as robot_description (`flexarm urdf <arm> -K <segments>`: each
    flexible link as `segments` rigid cells joined by virtual joints) and flex_joint_states, which turns
    /flexarm/state into the angles of those joints: robot_description, /tf and /tf_static of every link, as rviz's
    RobotModel and TF displays expect. Both on names.URDF_JOINT_STATES (the controllers' joint_states stays as it
    is), in the bring-up's namespace."""
    from .urdf_gen import generate_urdf, load
    try:
        k = int(str(segments).strip())
    except ValueError:
        raise ValueError(f'segments must be an integer (rigid cells per flexible link), got {segments!r}') from None
    if not 0 <= k <= 100:
        raise ValueError(f'segments must be 0..100, got {k}')
    ns = names.namespace(namespace)
    remap = tuple(names.remappings(ns)) + (('joint_states', names.resolve(names.URDF_JOINT_STATES, ns)),)
    return [NodeSpec('robot_state_publisher', 'robot_state_publisher', 'robot_state_publisher', (),
                     {'robot_description': generate_urdf(load(path), k), 'use_sim_time': bool(use_sim_time)},
                     namespace=ns, remappings=remap),
            NodeSpec('flexarm_bringup', 'flex_joint_states', 'flex_joint_states', (),
                     {'arm': path, 'segments': k, 'use_sim_time': bool(use_sim_time)}, namespace=ns, remappings=remap)]


ROBOT_STATE_PUBLISHER_MISSING = (
    'robot_state_publisher is not installed: no robot_description, no /tf of the links (the plant\'s '
    '/flexarm/markers still show the arm). Install ros-$ROS_DISTRO-robot-state-publisher for them, or pass '
    'robot_state_publisher:=false to silence this')


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
                   controller_extra=None, estimator: str = 'none', namespace='/', keystore: str = '') -> list:
    """The hardware bridge, the state estimator (estimator='encoders') and one controller of hardware.launch.py.

    The bridge reads `params_file` (default config/hardware_bridge.yaml; `port` and `baud_rate`, when not empty,
    override the file's). One control rate: the bridge publishes a state per cycle, so the controller's rate is
    the bridge's loop_rate. The arm's joints must be the bridge's joint_names (refused otherwise, naming both)."""
    from flexarm_control.bridge.config import load_yaml
    from flexarm_sim.model import load_arm
    _one_of('controller', controller, CONTROLLERS + ('none',))
    _one_of('shaping', shaping, ('',) + SHAPERS)
    _one_of('estimator', estimator, HARDWARE_ESTIMATORS)
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
    if controller != 'none' or estimator != 'none':
        path = arm_path(arm)
        joints = list(load_arm(path).joint_names)
        if joints != bridge.names:
            raise ValueError(f'the arm {os.path.basename(path)} has joints {joints} but the bridge ({params_file}) '
                             f'drives {bridge.names}: give an arm whose joints are the bridge\'s joint_names')
        if arm_id(path).rpartition(':')[2] != arm_id(resolve_arm(bridge['arm'], 'arm')).rpartition(':')[2]:
            # the same description (its hash), or the bridge's arm_id - what ~/enable is confirmed with - differs
            raise ValueError(f'the bridge ({params_file}) drives arm {bridge["arm"]!r}, not {arm!r}: set its '
                             f'`arm` parameter to the arm given here')
    extra = {}
    if estimator != 'none':
        est, extra = hardware_estimator(path, bridge['loop_rate'])
        nodes.append(est)
    if controller != 'none':
        ctl = {'arm': path, 'rate': float(bridge['loop_rate'])}
        ctl.update(extra)
        if shaping:
            ctl['shaping'] = shaping
        ctl.update(controller_extra or {})
        nodes.append(NodeSpec('flexarm_control', controller, controller, (os.path.join(config, 'controllers.yaml'),),
                              ctl))
    return namespaced(nodes, namespace, keystore)
