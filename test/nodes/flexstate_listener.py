"""Receive FlexState messages and print one line per message: step, position, link data."""
import sys
import time

import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from flexarm_msgs.msg import FlexState

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
got = []

rclpy.init()
node = rclpy.create_node('flexstate_listener')
qos = QoSProfile(depth=N, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
node.create_subscription(FlexState, '/flexarm/state', got.append, qos)
deadline = time.monotonic() + 40.0
while len(got) < N and time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.05)
for m in got:
    link = m.links[0]
    print(m.step, ','.join(m.joint_names), *m.position, link.link_name, *link.modal_position,
          link.tip_deflection.y, m.kinetic_energy, flush=True)
node.destroy_node()
rclpy.shutdown()
sys.exit(0 if len(got) == N else 1)
