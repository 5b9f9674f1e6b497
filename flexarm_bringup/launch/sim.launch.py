"""Simulated flexible arm: the plant + one controller (+ rviz).

    ros2 launch flexarm_bringup sim.launch.py [arm:=<yaml>] [controller:=pd_servo|modal|computed_torque|none]
                                              [rate:=<Hz>] [time_mode:=realtime|simtime|lockstep]
                                              [shaping:=none|zv|zvd] [rviz:=true|false]

Parameters come from config/plant.yaml and config/controllers.yaml; the launch arguments override
`arm` (plant and controller), `time_mode` (plant), `loop_rate` (plant, from rate:=) and `shaping`
(controller) — an empty value keeps the YAML file's. In simtime/lockstep the controller (and rviz)
run on /clock (use_sim_time); the plant keeps its own clock. rviz:=true includes view.launch.py.
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

CONTROLLERS = ('pd_servo', 'modal', 'computed_torque')
TIME_MODES = ('realtime', 'simtime', 'lockstep')
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
    time_mode = LaunchConfiguration('time_mode').perform(context)
    rate = LaunchConfiguration('rate').perform(context)
    shaping = LaunchConfiguration('shaping').perform(context)

    # with a controller, the plant holds the arm until the controller's first command (a gravity-loaded arm
    # would otherwise fall while the controller starts)
    plant_overrides = {'arm': arm, 'time_mode': time_mode, 'wait_for_command': controller != 'none'}
    if rate:
        plant_overrides['loop_rate'] = float(rate)
    actions = [Node(
        package='flexarm_sim', executable='plant', name='plant', output='screen',
        parameters=[os.path.join(share, 'config', 'plant.yaml'), plant_overrides])]
    if controller != 'none':
        overrides = {'arm': arm, 'use_sim_time': time_mode != 'realtime', 'lockstep': time_mode == 'lockstep'}
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
            'use_sim_time': PythonExpression(["'", LaunchConfiguration('time_mode'), "' != 'realtime'"]),
        }.items(),
        condition=IfCondition(LaunchConfiguration('rviz')))
    return LaunchDescription([
        DeclareLaunchArgument('arm', default_value=default_arm,
                              description='arm description YAML (path, or name of a file in config/arms)'),
        DeclareLaunchArgument('controller', default_value='pd_servo', choices=list(CONTROLLERS) + ['none'],
                              description='controller node to start next to the plant'),
        DeclareLaunchArgument('rate', default_value='',
                              description='plant loop rate in Hz (empty: config/plant.yaml loop_rate)'),
        DeclareLaunchArgument('time_mode', default_value='realtime', choices=list(TIME_MODES),
                              description='plant time mode'),
        DeclareLaunchArgument('shaping', default_value='', choices=[''] + list(SHAPERS),
                              description='input shaping of the reference (empty: config/controllers.yaml)'),
        DeclareLaunchArgument('rviz', default_value='false', choices=['true', 'false'],
                              description='start rviz2 (view.launch.py)'),
        OpaqueFunction(function=_nodes),
        view,
    ])
