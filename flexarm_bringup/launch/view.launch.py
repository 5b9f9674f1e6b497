"""rviz2 with flexarm's configuration; optionally the URDF route (robot_state_publisher + flex_joint_states).

    ros2 launch flexarm_bringup view.launch.py [urdf:=true] [arm:=<yaml>] [segments:=8] [namespace:=<ns>]

Always: rviz2 -d flexarm_description's rviz/flexarm.rviz (fixed frame base_link; shows the plant's /flexarm/markers).
urdf:=true adds robot_state_publisher with the URDF generated from the arm (`python3 -m
flexarm_bringup.urdf_gen <arm> -K <segments>`, the same as `flexarm urdf`) and, with
flex_joint_states:=true (default), the node that turns /flexarm/state into the angles of the real and
virtual joints on joint_states_topic (default /flexarm/urdf_joint_states, so /joint_states keeps only
the real joints the controllers read). namespace:= (the arm's, as given to sim.launch.py) puts the nodes there;
rviz2's configuration names the root namespace's topics, which are remapped into it.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import (AndSubstitution, Command, FindExecutable, LaunchConfiguration,
                                  PathJoinSubstitution)
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from flexarm_sim.ros import names


# the topics rviz/flexarm.rviz names (absolute, the root namespace's) and rviz2's clock: remapped into the namespace
RVIZ_TOPICS = (names.MARKERS, names.CLOCK, 'robot_description')     # TF stays global (/tf)


def generate_launch_description():
    description = FindPackageShare('flexarm_description')     # the arm files and the rviz configuration
    arm = LaunchConfiguration('arm')
    segments = LaunchConfiguration('segments')
    urdf = LaunchConfiguration('urdf')
    topic = LaunchConfiguration('joint_states_topic')
    use_sim_time = LaunchConfiguration('use_sim_time')
    ns = LaunchConfiguration('namespace')
    robot_description = ParameterValue(
        Command([FindExecutable(name='python3'), ' -m flexarm_bringup.urdf_gen ', arm, ' -K ', segments]),
        value_type=str)
    return LaunchDescription([
        DeclareLaunchArgument('arm', default_value=PathJoinSubstitution([description, 'arms',
                                                                         'deluca_two_link.yaml']),
                              description='arm description YAML (path, or the name of a shipped arm: flexarm_description/arms)'),
        DeclareLaunchArgument('urdf', default_value='false', choices=['true', 'false'],
                              description='robot_state_publisher with the generated URDF (+ flex_joint_states)'),
        DeclareLaunchArgument('segments', default_value='8',
                              description='rigid cells per flexible link in the URDF (0 = rigid links)'),
        DeclareLaunchArgument('flex_joint_states', default_value='true', choices=['true', 'false'],
                              description='with urdf:=true, start flex_joint_states (needs /flexarm/state)'),
        DeclareLaunchArgument('joint_states_topic', default_value='flexarm/urdf_joint_states',
                              description='joint states of the URDF joints read by robot_state_publisher (relative '
                                          'to the namespace)'),
        DeclareLaunchArgument('namespace', default_value='/',
                              description='the arm\'s namespace (its topics; / = the root namespace)'),
        DeclareLaunchArgument('rviz_config', default_value=PathJoinSubstitution([description, 'rviz', 'flexarm.rviz']),
                              description='rviz2 configuration file'),
        DeclareLaunchArgument('use_sim_time', default_value='false', choices=['true', 'false', 'True', 'False'],
                              description='run rviz2 and robot_state_publisher on /clock'),
        Node(package='rviz2', executable='rviz2', name='rviz2', output='screen', namespace=ns,
             arguments=['-d', LaunchConfiguration('rviz_config')],
             parameters=[{'use_sim_time': use_sim_time}],
             remappings=[('/' + t, t) for t in RVIZ_TOPICS]),
        Node(package='robot_state_publisher', executable='robot_state_publisher', name='robot_state_publisher',
             output='screen', condition=IfCondition(urdf), namespace=ns,
             parameters=[{'robot_description': robot_description, 'use_sim_time': use_sim_time}],
             remappings=[('joint_states', topic), ('/clock', 'clock')]),
        Node(package='flexarm_bringup', executable='flex_joint_states', name='flex_joint_states',
             output='screen', condition=IfCondition(AndSubstitution(urdf, LaunchConfiguration('flex_joint_states'))),
             namespace=ns, parameters=[{'arm': arm, 'segments': segments}],
             remappings=[('joint_states', topic), ('/clock', 'clock')]),
    ])
