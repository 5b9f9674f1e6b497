"""Console scripts of flexarm_bringup (setup.py entry points).

Nothing heavy is imported at the top of this module: run_node installs the SIGINT/SIGTERM handlers before rclpy,
numpy and numba load (flexarm_sim/ros/node_main.py).
"""
import sys

from flexarm_sim.ros.node_main import exit_process, run_node


def flex_joint_states(args=None):
    """`flex_joint_states`: /flexarm/state -> joint states of the URDF's real and virtual joints."""
    exit_process(run_node('flexarm_bringup.flex_joint_states:FlexJointStates', 'flex_joint_states', args))


if __name__ == '__main__':
    sys.exit(flex_joint_states())
