"""Helper of bench_plant_timing.py: the same work (one De Luca RK4 step + a JointState publish) in an
rclpy executor timer at `rate` Hz for `duration` s; prints JSON with the same period statistics."""
import json
import os
import sys
import time

import numpy as np
import rclpy
from sensor_msgs.msg import JointState

from flexarm_sim.model import kernels, load_model

rate, duration, arm = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
model = load_model(arm)
ws = model.workspace()
z, zd, tau = np.zeros(model.n_coords), np.zeros(model.n_coords), np.zeros(model.n_joints)
kernels.rk4_step(model.data, ws, z, zd, tau, 1.0 / rate, 1)
rclpy.init()
node = rclpy.create_node('timer_baseline')
pub = node.create_publisher(JointState, '/joint_states_baseline', 10)
names = list(model.spec.joint_names)
starts, compute = [], []


def tick():
    t0 = time.perf_counter()
    starts.append(time.monotonic())
    kernels.rk4_step(model.data, ws, z, zd, tau, 1.0 / rate, 1)
    msg = JointState(name=names, position=z[model.q_index].tolist(), velocity=zd[model.q_index].tolist(),
                     effort=tau.tolist())
    msg.header.stamp = node.get_clock().now().to_msg()
    pub.publish(msg)
    compute.append(time.perf_counter() - t0)


node.create_timer(1.0 / rate, tick)
c0 = os.times()
t_end = time.monotonic() + duration
while time.monotonic() < t_end:
    rclpy.spin_once(node, timeout_sec=0.1)
c1 = os.times()
iv = np.diff(np.array(starts))
err = np.abs(iv - 1.0 / rate)
print(json.dumps({
    'rate_hz': float(1.0 / iv.mean()), 'period_err_p50_s': float(np.percentile(err, 50)),
    'period_err_p99_s': float(np.percentile(err, 99)), 'period_err_max_s': float(err.max()),
    'overruns': int(np.sum(iv > 2.0 / rate)), 'compute_mean_s': float(np.mean(compute)),
    'compute_max_s': float(np.max(compute)),
    'cpu_percent': 100.0 * ((c1.user - c0.user) + (c1.system - c0.system)) / duration}), flush=True)
node.destroy_node()
rclpy.shutdown()
