"""Real servos: the hardware bridge + one controller (+ rviz of the rigid joints).

    ros2 launch flexarm_bringup hardware.launch.py [arm:=<yaml>] [controller:=pd_servo|modal|computed_torque|none]
                                                   [shaping:=none|zv|zvd] [rviz:=true|false]
                                                   [estimator:=none|encoders]

The bridge (flexarm_control `hardware_bridge`, config/hardware_bridge.yaml: port, servo ids, joint names,
limits — it has no arm description) publishes /joint_states and applies /effort_controller/commands; the
controller uses config/controllers.yaml with the arm given here (its joints must be the bridge's). Hardware has no modal
state, so rviz:=true shows the URDF with rigid links (segments:=0) driven directly by /joint_states.
estimator:=encoders starts the state_estimator on the bridge's /joint_states and the commanded effort
(flexarm_bringup.bringup.hardware_estimator: at the bridge's loop_rate) and the controller feeds back its estimate
of the modal state (modal control on hardware).
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


def _nodes(context):
    share = FindPackageShare('flexarm_bringup').perform(context)
    arm = _arm_path(LaunchConfiguration('arm').perform(context), share)
    controller = LaunchConfiguration('controller').perform(context)
    shaping = LaunchConfiguration('shaping').perform(context)
    actions = [Node(
        package='flexarm_control', executable='hardware_bridge', name='hardware_bridge', output='screen',
        parameters=[os.path.join(share, 'config', 'hardware_bridge.yaml')])]
    extra = {}
    if LaunchConfiguration('estimator').perform(context) != 'none':
        from flexarm_bringup.bringup import hardware_estimator
        est, extra = hardware_estimator(arm, os.path.join(share, 'config', 'hardware_bridge.yaml'))
        actions.append(Node(package=est.package, executable=est.executable, name=est.name, output='screen',
                            parameters=list(est.params_files) + [est.overrides]))
    if controller != 'none':
        overrides = dict({'arm': arm}, **extra)
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
        DeclareLaunchArgument('estimator', default_value='none', choices=['none', 'encoders'],
                              description='encoders: the controller feeds back the state_estimator\'s modal estimate '
                                          'from the joint encoders and the commanded effort'),
        OpaqueFunction(function=_nodes),
        view,
    ])
