"""Publish one FlexState per 10 ms once a subscriber is matched (discovery by matched count)."""
import sys
import time

import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from flexarm_msgs.msg import FlexState, LinkDeflection

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20

rclpy.init()
node = rclpy.create_node('flexstate_talker')
# transient-local history: a reader whose side of discovery completes a little later still gets all
qos = QoSProfile(depth=N, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
pub = node.create_publisher(FlexState, '/flexarm/state', qos)
deadline = time.monotonic() + 30.0
while pub.get_subscription_count() < 1:
    if time.monotonic() > deadline:
        print('no subscriber matched', flush=True)
        sys.exit(2)
    rclpy.spin_once(node, timeout_sec=0.05)
print('matched', flush=True)
for i in range(N):
    msg = FlexState()
    msg.header.frame_id = 'base'
    msg.step = i
    msg.joint_names = ['shoulder', 'elbow']
    msg.position = [0.1 * i, -0.2 * i]
    link = LinkDeflection(link_name='shoulder_link', mode_plane=[0, 0],
                          modal_position=[1e-3 * i, -2e-3 * i], frequencies=[0.48, 1.80])
    link.tip_deflection.y = 0.01 * i
    msg.links = [link]
    msg.kinetic_energy = float(i)
    pub.publish(msg)
    time.sleep(0.01)
# keep the publisher alive until the listener is done (it disconnects) or a timeout
deadline = time.monotonic() + 20.0
while pub.get_subscription_count() > 0 and time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.05)
node.destroy_node()
rclpy.shutdown()
