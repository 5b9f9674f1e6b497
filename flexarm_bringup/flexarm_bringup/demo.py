"""The main demonstration run by `make demo`.

Foundation stage: proves the ROS 2 stack end to end — a FlexState published by one node is received by
another over DDS (loopback). Later stages replace this with the simulated arm under control.
"""
import time

import rclpy
from flexarm_msgs.msg import FlexState


def main():
    rclpy.init()
    try:
        talker = rclpy.create_node('flexarm_demo_talker')
        listener = rclpy.create_node('flexarm_demo_listener')
        got = []
        listener.create_subscription(FlexState, '/flexarm/state', got.append, 10)
        pub = talker.create_publisher(FlexState, '/flexarm/state', 10)
        executor = rclpy.executors.SingleThreadedExecutor()
        executor.add_node(talker)
        executor.add_node(listener)
        deadline = time.monotonic() + 10.0
        while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        msg = FlexState(joint_names=['shoulder', 'elbow'], position=[0.0, 0.0])
        while not got and time.monotonic() < deadline:
            pub.publish(msg)
            executor.spin_once(timeout_sec=0.05)
        print('flexarm demo: FlexState round trip over DDS:', 'ok' if got else 'FAILED')
        return 0 if got else 1
    finally:
        rclpy.shutdown()
