"""Console scripts of flexarm_control (setup.py entry points).

Nothing heavy is imported at the top of this module: run_node installs the SIGINT/SIGTERM handlers before rclpy,
numpy and numba load (flexarm_sim/ros/node_main.py).
"""
import sys

from flexarm_sim.ros.node_main import exit_process, run_node


def _controller(kind, args):
    sys.setswitchinterval(0.0005)      # the state callback gets the GIL back quickly from the gain designer
    exit_process(run_node(f'flexarm_control.nodes.controller_node:{kind}', kind, args))


def pd_servo(args=None):
    """`pd_servo`: PD with joint servo compliance (Naganathan)."""
    return _controller('pd_servo', args)


def modal(args=None):
    """`modal`: LQR on joint and modal coordinates (gain-scheduled)."""
    return _controller('modal', args)


def computed_torque(args=None):
    """`computed_torque`: rigid computed torque."""
    return _controller('computed_torque', args)


def hardware_bridge(args=None):
    """`hardware_bridge`: Dynamixel X-series servos <-> ROS 2 (bridge/ros_node.py)."""
    sys.setswitchinterval(0.0005)
    exit_process(run_node('flexarm_control.bridge.ros_node:BridgeNode', 'hardware_bridge', args))


if __name__ == '__main__':
    sys.exit({'pd_servo': pd_servo, 'modal': modal, 'computed_torque': computed_torque,
              'hardware_bridge': hardware_bridge}[sys.argv[1]](
        sys.argv[2:] or None))
