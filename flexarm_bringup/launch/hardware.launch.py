"""Real servos: the hardware bridge + one controller (+ rviz of the rigid joints).

    ros2 launch flexarm_bringup hardware.launch.py [arm:=<yaml>] [controller:=pd_servo|modal|computed_torque|none]
                                                   [shaping:=none|zv|zvd] [rviz:=true|false]
                                                   [params_file:=<bridge yaml>] [port:=<device>] [baud_rate:=<bps>]

The bridge (flexarm_control `hardware_bridge`, `params_file`, default config/hardware_bridge.yaml: port, servo
ids, joint names, limits — it has no arm description; `port` and `baud_rate`, when given, override the file's)
publishes /joint_states and applies /effort_controller/commands; the
controller uses config/controllers.yaml with the arm given here (its joints must be the bridge's). Hardware has no modal
state, so rviz:=true shows the URDF with rigid links (segments:=0) driven directly by /joint_states.
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

CONTROLLERS = ('pd_servo', 'modal', 'computed_torque')
SHAPERS = ('none', 'zv', 'zvd')


def _arm_path(arm, share):
    """A name of a file in config/arms ('spatial_3r') -> its installed path; paths unchanged."""
    if os.sep in arm or arm.endswith(('.yaml', '.yml')):
        return arm
    return os.path.join(share, 'config', 'arms', arm + '.yaml')


def _bridge_parameters(context):
    """[parameter file, overrides]: `port` and `baud_rate` replace the file's values when not empty."""
    overrides = {}
    port = LaunchConfiguration('port').perform(context).strip()
    if port:
        overrides['port'] = port
    baud = LaunchConfiguration('baud_rate').perform(context).strip()
    if baud:
        try:
            overrides['baud_rate'] = int(baud)
        except ValueError:
            raise ValueError(f"hardware.launch.py: baud_rate must be an integer (bit/s), got {baud!r}") from None
    return [LaunchConfiguration('params_file').perform(context)] + ([overrides] if overrides else [])


def _nodes(context):
    share = FindPackageShare('flexarm_bringup').perform(context)
    arm = _arm_path(LaunchConfiguration('arm').perform(context), share)
    controller = LaunchConfiguration('controller').perform(context)
    shaping = LaunchConfiguration('shaping').perform(context)
    actions = [Node(
        package='flexarm_control', executable='hardware_bridge', name='hardware_bridge', output='screen',
        parameters=_bridge_parameters(context))]
    if controller != 'none':
        overrides = {'arm': arm}
        if shaping:
            overrides['shaping'] = shaping
        actions.append(Node(
            package='flexarm_control', executable=controller, name=controller, output='screen',
            parameters=[os.path.join(share, 'config', 'controllers.yaml'), overrides]))
    return actions


def generate_launch_description():
    default_arm = PathJoinSubstitution([FindPackageShare('flexarm_bringup'), 'config', 'arms',
                                        'deluca_two_link.yaml'])
    view = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            PathJoinSubstitution([FindPackageShare('flexarm_bringup'), 'launch', 'view.launch.py'])),
        launch_arguments={
            'arm': LaunchConfiguration('arm'),
            'urdf': 'true',
            'segments': '0',
            'flex_joint_states': 'false',
            'joint_states_topic': '/joint_states',
        }.items(),
        condition=IfCondition(LaunchConfiguration('rviz')))
    return LaunchDescription([
        DeclareLaunchArgument('arm', default_value=default_arm,
                              description='arm description YAML (path, or name of a file in config/arms)'),
        DeclareLaunchArgument('controller', default_value='pd_servo', choices=list(CONTROLLERS) + ['none'],
                              description='controller node to start next to the bridge'),
        DeclareLaunchArgument('shaping', default_value='', choices=[''] + list(SHAPERS),
                              description='input shaping of the reference (empty: config/controllers.yaml)'),
        DeclareLaunchArgument('rviz', default_value='false', choices=['true', 'false'],
                              description='start rviz2 with the arm model (view.launch.py)'),
        DeclareLaunchArgument('params_file', default_value=PathJoinSubstitution(
                                  [FindPackageShare('flexarm_bringup'), 'config', 'hardware_bridge.yaml']),
                              description="the bridge's parameter file (servo ids, joints, limits, port)"),
        DeclareLaunchArgument('port', default_value='',
                              description="serial device of the servo bus (empty: the parameter file's `port`)"),
        DeclareLaunchArgument('baud_rate', default_value='',
                              description="bus baud rate, bit/s (empty: the parameter file's `baud_rate`)"),
        OpaqueFunction(function=_nodes),
        view,
    ])
