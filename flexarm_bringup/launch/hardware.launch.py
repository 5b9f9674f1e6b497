"""Real servos: the hardware bridge + one controller (+ rviz of the rigid joints).

    ros2 launch flexarm_bringup hardware.launch.py [arm:=<name or yaml>] [controller:=pd_servo|modal|computed_torque|none]
                                                   [shaping:=none|zv|zvd] [rviz:=true|false]
                                                   [params_file:=<bridge yaml>] [port:=<device>] [baud_rate:=<bps>]
                                                   [estimator:=none|encoders] [namespace:=<ns>]
                                                   [keystore:=<SROS2 keystore>]

Which nodes start with which parameters is flexarm_bringup.bringup.hardware_nodes: the bridge (flexarm_control
`hardware_bridge`) with `params_file` (default config/hardware_bridge.yaml: port, servo ids, joint names, limits,
fault policy; `port` and `baud_rate`, when given, override the file's), which publishes /joint_states and a
joints-only /flexarm/state and applies /effort_controller/commands; the controller with config/controllers.yaml,
the arm given here (its joints must be the bridge's joint_names: refused before anything starts otherwise) and
the bridge's loop_rate as its rate (one state per bridge cycle). Hardware has no modal state, so rviz:=true shows
the URDF with rigid links (segments:=0) driven directly by /joint_states; without rviz2 it refuses to start.
estimator:=encoders starts the state_estimator on the bridge's /joint_states and the commanded effort (at the
bridge's loop_rate, config/estimator.yaml) and the controller feeds back its estimate of the modal state (modal
control on hardware).
namespace:= and keystore:= as in sim.launch.py (`flexarm security create <dir> --bringup hardware`): with a
keystore only the controller's enclave may publish commands and only the operator's may call ~/enable, ~/disable,
~/reboot and set parameters.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction, SetEnvironmentVariable
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from flexarm_bringup.bringup import (CONTROLLERS, SHAPERS, hardware_nodes, launch_node_args, require_package,
                                     security_environment, share_dir)


def _actions(context):
    def arg(name):
        return LaunchConfiguration(name).perform(context)
    rviz = arg('rviz') == 'true'
    if rviz:
        require_package('rviz2', 'rviz:=true')      # refuse before anything starts
    specs = hardware_nodes(arg('arm'), arg('controller'), arg('shaping'), arg('params_file'), arg('port'),
                           arg('baud_rate'), estimator=arg('estimator'), namespace=arg('namespace'),
                           keystore=arg('keystore'))
    actions = [SetEnvironmentVariable(k, v) for k, v in security_environment(arg('keystore')).items()]
    actions += [Node(package=s.package, executable=s.executable, name=s.name, output='screen',
                     **launch_node_args(s, [s.overrides] if s.overrides else [])) for s in specs]
    if rviz:
        actions.append(IncludeLaunchDescription(
            PythonLaunchDescriptionSource(share_dir('flexarm_bringup') + '/launch/view.launch.py'),
            launch_arguments={'arm': arg('arm'), 'urdf': 'true', 'segments': '0', 'flex_joint_states': 'false',
                              'joint_states_topic': 'joint_states', 'namespace': specs[0].namespace}.items()))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('arm', default_value='deluca_two_link',
                              description='arm description for the controller (a shipped arm\'s name or a YAML '
                                          'path); its joints must be the bridge\'s joint_names'),
        DeclareLaunchArgument('controller', default_value='pd_servo', choices=list(CONTROLLERS) + ['none'],
                              description='controller node to start next to the bridge'),
        DeclareLaunchArgument('shaping', default_value='', choices=[''] + list(SHAPERS),
                              description='input shaping of the reference (empty: config/controllers.yaml)'),
        DeclareLaunchArgument('rviz', default_value='false', choices=['true', 'false'],
                              description='start rviz2 with the arm model (view.launch.py)'),
        DeclareLaunchArgument('params_file', default_value='',
                              description="the bridge's parameter file (empty: config/hardware_bridge.yaml)"),
        DeclareLaunchArgument('port', default_value='',
                              description="serial device of the servo bus (empty: the parameter file's `port`)"),
        DeclareLaunchArgument('baud_rate', default_value='',
                              description="bus baud rate, bit/s (empty: the parameter file's `baud_rate`)"),
        DeclareLaunchArgument('estimator', default_value='none', choices=['none', 'encoders'],
                              description="encoders: the controller feeds back the state_estimator's modal estimate "
                                          'from the joint encoders and the commanded effort'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of every node, topic and service of this arm (empty: /)'),
        DeclareLaunchArgument('keystore', default_value='',
                              description='SROS2 keystore: run under DDS-Security, each node in its enclave (empty: '
                                          'no security)'),
        OpaqueFunction(function=_actions),
    ])
