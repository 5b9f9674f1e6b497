"""Simulated flexible arm: the plant + one controller (+ rviz).

    ros2 launch flexarm_bringup sim.launch.py [arm:=<name or yaml>] [controller:=pd_servo|modal|computed_torque|none]
                                              [time_mode:=realtime|simtime|lockstep] [rate:=<Hz>] [control_rate:=<Hz>]
                                              [shaping:=none|zv|zvd] [rviz:=true|false]
                                              [estimator:=none|encoders|strain|strain_accel]
                                              [robot_state_publisher:=true|false] [segments:=8]

Which nodes start with which parameters is flexarm_bringup.bringup.sim_nodes (the same as `flexarm run`):
config/plant.yaml and config/controllers.yaml, overridden by `arm` (plant and controller), `time_mode`,
`rate` (plant loop_rate), `control_rate` (plant publish_rates.state AND controller rate: one control rate) and
`shaping`; an empty value keeps the YAML file's. In simtime/lockstep the controller (and rviz) run on /clock.
estimator:=<sensor set> also starts the state_estimator (config/estimator.yaml): the plant models those sensors
(encoders; + a strain gauge per flexible link; + a tip accelerometer) and the controller feeds back
/flexarm/state_estimate instead of the plant's true /flexarm/state.
robot_state_publisher:=true (default) also starts robot_state_publisher with the arm's URDF as robot_description
and flex_joint_states (bringup.urdf_nodes: /tf of every link, the flexible links as `segments` rigid cells each,
from /flexarm/state); where robot_state_publisher is not installed they are skipped with a message saying so.
rviz:=true includes view.launch.py; without rviz2 installed it refuses before starting anything.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, LogInfo, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from flexarm_bringup.bringup import (CONTROLLERS, ESTIMATORS, ROBOT_STATE_PUBLISHER_MISSING, SHAPERS, TIME_MODES,
                                     package_installed, require_package, share_dir, sim_nodes, urdf_nodes)


def _actions(context):
    def arg(name):
        return LaunchConfiguration(name).perform(context)
    rviz = arg('rviz') == 'true'
    if rviz:
        require_package('rviz2', 'rviz:=true')      # refuse before anything starts
    specs = sim_nodes(arg('arm'), arg('controller'), arg('time_mode'), rate=arg('rate'),
                      control_rate=arg('control_rate'), shaping=arg('shaping'), estimator=arg('estimator'))
    sim_time = arg('time_mode') != 'realtime'
    actions = []
    if arg('robot_state_publisher') == 'true':
        if package_installed('robot_state_publisher'):
            specs = specs + urdf_nodes(specs[0].overrides['arm'], arg('segments'), sim_time)
        else:
            actions.append(LogInfo(msg=ROBOT_STATE_PUBLISHER_MISSING))
    actions += [Node(package=s.package, executable=s.executable, name=s.name, output='screen',
                     parameters=list(s.params_files) + [s.overrides], remappings=list(s.remappings))
                for s in specs]
    if rviz:                    # rviz only: the URDF route is this file's (above)
        actions.append(IncludeLaunchDescription(
            PythonLaunchDescriptionSource(share_dir('flexarm_bringup') + '/launch/view.launch.py'),
            launch_arguments={'arm': specs[0].overrides['arm'], 'urdf': 'false',
                              'use_sim_time': 'true' if sim_time else 'false'}.items()))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('arm', default_value='deluca_two_link',
                              description='arm description: the name of a shipped arm or a YAML path'),
        DeclareLaunchArgument('controller', default_value='pd_servo', choices=list(CONTROLLERS) + ['none'],
                              description='controller node to start next to the plant'),
        DeclareLaunchArgument('time_mode', default_value='realtime', choices=list(TIME_MODES),
                              description='plant time mode'),
        DeclareLaunchArgument('rate', default_value='',
                              description='plant loop rate in Hz (empty: config/plant.yaml loop_rate)'),
        DeclareLaunchArgument('control_rate', default_value='',
                              description='control rate in Hz: plant state rate and controller rate (empty: the '
                                          'YAML files\', 500)'),
        DeclareLaunchArgument('shaping', default_value='', choices=[''] + list(SHAPERS),
                              description='input shaping of the reference (empty: config/controllers.yaml)'),
        DeclareLaunchArgument('rviz', default_value='false', choices=['true', 'false'],
                              description='start rviz2 (view.launch.py)'),
        DeclareLaunchArgument('estimator', default_value='none', choices=list(ESTIMATORS),
                              description='the controller feeds back the state_estimator\'s estimate from this sensor '
                                          'set (the plant models the sensors); none: the plant\'s true state'),
        DeclareLaunchArgument('robot_state_publisher', default_value='true', choices=['true', 'false'],
                              description='robot_state_publisher with the arm\'s URDF as robot_description + '
                                          'flex_joint_states: /tf of every link (skipped with a message where '
                                          'robot_state_publisher is not installed)'),
        DeclareLaunchArgument('segments', default_value='8',
                              description='rigid cells per flexible link in the URDF (0: rigid links)'),
        OpaqueFunction(function=_actions),
    ])
