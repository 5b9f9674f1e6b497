"""Simulated flexible arm: the plant + one controller (+ rviz).

    ros2 launch flexarm_bringup sim.launch.py [arm:=<name or yaml>] [controller:=pd_servo|modal|computed_torque|tip_tracking|none]
                                              [time_mode:=realtime|simtime|lockstep] [rate:=<Hz>] [control_rate:=<Hz>]
                                              [shaping:=none|zv|zvd] [rviz:=true|false]
                                              [estimator:=none|encoders|strain|strain_accel]
                                              [plant_arm:=<name or yaml>]
                                              [namespace:=<ns>] [keystore:=<SROS2 keystore>]

Which nodes start with which parameters is flexarm_bringup.bringup.sim_nodes (the same as `flexarm run`):
config/plant.yaml and config/controllers.yaml, overridden by `arm` (plant and controller), `time_mode`,
`rate` (plant loop_rate), `control_rate` (plant publish_rates.state AND controller rate: one control rate) and
`shaping`; an empty value keeps the YAML file's. In simtime/lockstep the controller (and rviz) run on /clock.
estimator:=<sensor set> also starts the state_estimator (config/estimator.yaml): the plant models those sensors
(encoders; + a strain gauge per flexible link; + a tip accelerometer) and the controller feeds back
/flexarm/state_estimate instead of the plant's true /flexarm/state.
plant_arm:=<arm> simulates another arm (same joints and modes, other parameters: a model-mismatch study) while the
controller keeps `arm` as its model.
rviz:=true includes view.launch.py; without rviz2 installed it refuses before starting anything.
namespace:=armB puts every node in /armB: all topics and services follow (/armB/flexarm/state,
/armB/flexarm/reset, ...), so several arms share a domain (flexarm_sim/ros/names.py); empty = the root namespace.
keystore:=<dir> runs the bring-up under DDS-Security (SROS2): ROS_SECURITY_KEYSTORE=<dir>, ROS_SECURITY_ENABLE=true,
ROS_SECURITY_STRATEGY=Enforce and each node in its enclave (`flexarm security create <dir> --bringup sim
[--namespace ...]` makes them; a missing enclave is refused before anything starts; a ROS 2 whose DDS has no
security makes every node refuse to start, flexarm_sim/ros/dds_security.py).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction, SetEnvironmentVariable
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from flexarm_bringup.bringup import (CONTROLLERS, ESTIMATORS, SHAPERS, TIME_MODES, launch_node_args, require_package,
                                     security_environment, share_dir, sim_nodes)


def _actions(context):
    def arg(name):
        return LaunchConfiguration(name).perform(context)
    rviz = arg('rviz') == 'true'
    if rviz:
        require_package('rviz2', 'rviz:=true')      # refuse before anything starts
    specs = sim_nodes(arg('arm'), arg('controller'), arg('time_mode'), rate=arg('rate'),
                      control_rate=arg('control_rate'), shaping=arg('shaping'), estimator=arg('estimator'),
                      plant_arm=arg('plant_arm'), namespace=arg('namespace'), keystore=arg('keystore'))
    actions = [SetEnvironmentVariable(k, v) for k, v in security_environment(arg('keystore')).items()]
    actions += [Node(package=s.package, executable=s.executable, name=s.name, output='screen',
                     **launch_node_args(s, [s.overrides])) for s in specs]
    if rviz:
        actions.append(IncludeLaunchDescription(
            PythonLaunchDescriptionSource(share_dir('flexarm_bringup') + '/launch/view.launch.py'),
            launch_arguments={'arm': specs[0].overrides['arm'], 'namespace': specs[0].namespace,
                              'use_sim_time': 'true' if arg('time_mode') != 'realtime' else 'false'}.items()))
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
        DeclareLaunchArgument('plant_arm', default_value='',
                              description='the arm the plant simulates when it differs from the controller\'s model '
                                          '(`arm`): same joints and modes, other parameters (empty: `arm`)'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of every node, topic and service of this arm (empty: /)'),
        DeclareLaunchArgument('keystore', default_value='',
                              description='SROS2 keystore: run under DDS-Security, each node in its enclave (empty: '
                                          'no security)'),
        OpaqueFunction(function=_actions),
    ])
