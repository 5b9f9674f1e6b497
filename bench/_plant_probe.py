"""Helper of bench_plant_timing.py: listen to the plant for `duration` s, print JSON with the
/joint_states publish-to-receive latency percentiles and the plant's last /diagnostics values."""
import json
import sys
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

duration = float(sys.argv[1])
rclpy.init()
node = rclpy.create_node('plant_bench_probe')
lat = []
diag = {}
started = [None]


def on_js(m):
    now = time.time_ns()
    if started[0] is not None:
        lat.append((now - (m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)) * 1e-9)


def on_diag(m):
    diag.clear()
    diag.update({kv.key: kv.value for kv in m.status[0].values})


node.create_subscription(JointState, '/joint_states', on_js, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
t_end = None
while True:
    rclpy.spin_once(node, timeout_sec=0.05)
    if started[0] is None and node.count_publishers('/joint_states') > 0 and diag:
        started[0] = time.monotonic()
        t_end = started[0] + duration
        print(json.dumps({'event': 'started'}), flush=True)
    if t_end is not None and time.monotonic() > t_end:
        break
d0 = dict(diag)
t1 = time.monotonic() + 2.5                   # one more diagnostics report after the window
while time.monotonic() < t1 and diag == d0:
    rclpy.spin_once(node, timeout_sec=0.05)
a = np.array(lat) if lat else np.array([np.nan])
print(json.dumps({'latency_p50_s': float(np.percentile(a, 50)), 'latency_p99_s': float(np.percentile(a, 99)),
                  'received': len(lat), 'diag': diag}), flush=True)
node.destroy_node()
rclpy.shutdown()
