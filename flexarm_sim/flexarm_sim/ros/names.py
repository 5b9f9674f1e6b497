"""Every topic and service name of flexarm, in one place (no ROS imports: the launch files, bringup and the keystore
generator read it too).

All names are *relative*: ROS 2 resolves them against the node's namespace, so a node in the root namespace (the
default, a single arm) uses exactly the absolute names of the interface tables (`joint_states` -> /joint_states,
`flexarm/state` -> /flexarm/state, `diagnostics` -> /diagnostics), and a bring-up in namespace /armB uses
/armB/joint_states, /armB/flexarm/state, ... (`namespace:=` of the launch files, `flexarm run --namespace`); two
arms then share a domain without crosstalk. Private names (`~/enable`) resolve under the node's own name.

The clock: the plant publishes `clock` (/clock in the root namespace); rclpy's time source subscribes the absolute
/clock, so a namespaced bring-up remaps /clock into its namespace for every node (`remappings(namespace)`), and each
simulated arm keeps its own time.
"""
from __future__ import annotations

import re

# topics
JOINT_STATES = 'joint_states'                       # sensor_msgs/JointState   plant/bridge ->
STATE = 'flexarm/state'                             # flexarm_msgs/FlexState   plant/bridge ->
STATE_ESTIMATE = 'flexarm/state_estimate'           # flexarm_msgs/FlexState   state_estimator ->
MARKERS = 'flexarm/markers'                         # visualization_msgs/MarkerArray  plant ->
STRAIN = 'flexarm/strain'                           # flexarm_msgs/StrainGauges  plant ->
TIP_IMU = 'flexarm/tip_imu'                         # sensor_msgs/Imu  plant ->
EFFORT_COMMANDS = 'effort_controller/commands'      # std_msgs/Float64MultiArray  controller -> plant/bridge
POSITION_COMMANDS = 'position_controller/commands'  # std_msgs/Float64MultiArray  controller -> plant/bridge
STAMPED_COMMAND = 'flexarm/effort_command'          # flexarm_msgs/JointEffortCommand  controller -> plant/bridge
APPLIED_EFFORT = 'flexarm/applied_effort'           # flexarm_msgs/AppliedEffort  bridge -> (each write to the servos)
REFERENCE = 'flexarm/reference'                     # trajectory_msgs/JointTrajectory  operator -> controller
URDF_JOINT_STATES = 'flexarm/urdf_joint_states'     # sensor_msgs/JointState  flex_joint_states ->
DIAGNOSTICS = 'diagnostics'                         # diagnostic_msgs/DiagnosticArray  every node ->
CLOCK = 'clock'                                     # rosgraph_msgs/Clock  plant (simtime, lockstep) ->
# services
RESET = 'flexarm/reset'                             # flexarm_msgs/srv/SetState  plant
PAUSE = 'flexarm/pause'                             # std_srvs/srv/SetBool  plant
BRIDGE_SERVICES = ('enable', 'disable', 'reboot')   # enable: flexarm_msgs/srv/Enable, the others std_srvs/srv/Trigger; hardware bridge, private (~/<name>)

# the topics a controller may publish and the plant / bridge obey: commands (command-source detection, keystore)
COMMAND_TOPICS = (EFFORT_COMMANDS, POSITION_COMMANDS, STAMPED_COMMAND)

_NS_TOKEN = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def namespace(value) -> str:
    """A namespace argument ('', '/', 'armB', '/armB', '/lab/armB/') -> '/' or '/armB' ...; ValueError naming what is
    wrong (ROS 2 name rules: tokens of letters, digits and underscores, not starting with a digit)."""
    text = str(value or '').strip()
    tokens = [t for t in text.split('/') if t]
    for t in tokens:
        if not _NS_TOKEN.match(t):
            raise ValueError(f'namespace {value!r}: {t!r} is not a valid name token (letters, digits and '
                             'underscores, not starting with a digit)')
    if '//' in text.strip('/'):
        raise ValueError(f'namespace {value!r}: empty token')
    return '/' + '/'.join(tokens)


def resolve(name: str, ns: str = '/') -> str:
    """The absolute name of a relative topic/service name in namespace ns ('flexarm/state', '/armB' ->
    '/armB/flexarm/state'); absolute names are returned unchanged."""
    if name.startswith('/'):
        return name
    ns = namespace(ns)
    return (ns.rstrip('/') + '/' + name) if ns != '/' else '/' + name


def remappings(ns: str = '/') -> list:
    """The remappings every node of a bring-up in namespace ns gets: none in the root namespace; elsewhere the
    absolute /clock (rclpy's time source) into the namespace."""
    ns = namespace(ns)
    return [] if ns == '/' else [('/clock', resolve(CLOCK, ns))]
