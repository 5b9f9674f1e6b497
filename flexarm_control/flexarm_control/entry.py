"""Console scripts of flexarm_control (setup.py entry points).

Nothing heavy is imported at the top of this module: run_node installs the SIGINT/SIGTERM handlers before rclpy,
numpy and numba load (flexarm_sim/ros/node_main.py).
"""
import os
import sys

from flexarm_sim.ros.node_main import exit_process, run_node


def _controller(kind, args):
    sys.setswitchinterval(0.0005)      # the state callback gets the GIL back quickly from the gain designer
    exit_process(run_node(f'flexarm_control.nodes.controller_node:{kind}', kind, args))


def controller(args=None):
    """A controller node: its kind is the executable's name (`pd_servo`, `modal`, `computed_torque`,
    `tip_tracking`: controller/kinds.py; setup.py installs one executable per kind)."""
    kind = os.path.basename(sys.argv[0])
    return _controller(kind, args)


def _kind(kind):
    return lambda args=None: _controller(kind, args)


def hardware_bridge(args=None):
    """`hardware_bridge`: Dynamixel X-series servos <-> ROS 2 (bridge/ros_node.py)."""
    sys.setswitchinterval(0.0005)
    exit_process(run_node('flexarm_control.bridge.ros_node:BridgeNode', 'hardware_bridge', args))


def state_estimator(args=None):
    """`state_estimator`: modal state estimate from the encoders, the commanded torque and the optional strain gauges
    and tip accelerometer (nodes/estimator_node.py)."""
    exit_process(run_node('flexarm_control.nodes.estimator_node:EstimatorNode', 'state_estimator', args))


if __name__ == '__main__':
    commands = {'hardware_bridge': hardware_bridge, 'state_estimator': state_estimator}
    sys.exit((commands.get(sys.argv[1]) or _kind(sys.argv[1]))(sys.argv[2:] or None))
