"""Endpoints the runner can never match: a best-effort /diagnostics publisher (its reliable subscription refuses
it) and a transient-local /flexarm/reference subscription (its volatile publisher cannot serve it). Runs until
killed."""
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from trajectory_msgs.msg import JointTrajectory

rclpy.init()
node = rclpy.create_node('qos_strangers')
pub = node.create_publisher(DiagnosticArray, '/diagnostics',
                            QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))
node.create_subscription(JointTrajectory, '/flexarm/reference', lambda m: None,
                         QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                    durability=DurabilityPolicy.TRANSIENT_LOCAL))
print('up', flush=True)
while True:
    pub.publish(DiagnosticArray())
    rclpy.spin_once(node, timeout_sec=0.1)
    time.sleep(0.1)
