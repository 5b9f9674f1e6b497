"""Helpers for plant system tests: start the plant process with a parameter file, talk to it over DDS."""
import math
import os
import time

import rclpy
import yaml
from rclpy.qos import QoSProfile, ReliabilityPolicy

from flexarm_sim.common.params import nest
from flexarm_sim.arms import shipped_arms_dir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
ARMS = shipped_arms_dir()


def write_params(tmp_path, params, name='plant.yaml'):
    path = os.path.join(str(tmp_path), name)
    with open(path, 'w') as f:
        yaml.safe_dump({'plant': {'ros__parameters': nest(params)}}, f)
    return path


def start_plant(spawn, tmp_path, **params):
    """Spawn the plant (python -m flexarm_sim.plant.node) with params (dotted names as keyword via dict)."""
    path = write_params(tmp_path, params)
    return spawn(['-m', 'flexarm_sim.plant.node', '--ros-args', '--params-file', path])


class Client:
    """An rclpy node in the test process on the plant's domain, collecting what the plant publishes."""

    def __init__(self, ros_env, plant=None):
        from diagnostic_msgs.msg import DiagnosticArray
        from flexarm_msgs.msg import FlexState
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        self.plant = plant
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=int(ros_env['ROS_DOMAIN_ID']))
        self.node = rclpy.create_node('plant_test_client', context=self.ctx)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.states, self.joint_states, self.diags, self.clocks = [], [], [], []
        self.on_state = None
        rel = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(FlexState, '/flexarm/state', self._state, rel)
        self.node.create_subscription(JointState, '/joint_states', self.joint_states.append, rel)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self.diags.append, rel)
        self.node.create_subscription(Clock, '/clock', self.clocks.append, rel)

    def _state(self, msg):
        self.states.append(msg)
        if self.on_state is not None:
            self.on_state(msg)

    def spin_until(self, pred, timeout=20.0, what='condition'):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            self.executor.spin_once(timeout_sec=0.02)
            if self.plant is not None and self.plant.poll() is not None:
                raise AssertionError(f'plant exited ({self.plant.returncode}): {self.plant.stderr.read()[-3000:]}')
        raise AssertionError(f'timed out waiting for {what}')

    def spin_for(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.02)

    def publisher(self, msg_type, topic, depth=10):
        pub = self.node.create_publisher(msg_type, topic, QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE))
        self.spin_until(lambda: pub.get_subscription_count() > 0, 30.0, f'plant subscribing to {topic}')
        return pub

    def call(self, srv_type, name, request, timeout=20.0):
        cli = self.node.create_client(srv_type, name)
        self.spin_until(lambda: cli.service_is_ready(), 30.0, f'service {name}')
        fut = cli.call_async(request)
        self.spin_until(fut.done, timeout, f'response of {name}')
        return fut.result()

    def wait_started(self, timeout=40.0):
        self.spin_until(lambda: self.states, timeout, 'first /flexarm/state')

    def diag(self):
        """Latest diagnostics as a dict (plus 'level' and 'message')."""
        st = self.diags[-1].status[0]
        d = {kv.key: kv.value for kv in st.values}
        d['level'] = st.level if isinstance(st.level, int) else ord(st.level)
        d['message'] = st.message
        return d

    def wait_diag(self, pred, timeout=20.0, what='diagnostics'):
        n0 = len(self.diags)
        self.spin_until(lambda: len(self.diags) > n0 and pred(self.diag()), timeout, what)
        return self.diag()

    def close(self):
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


def finite_state(m):
    vals = list(m.position) + list(m.velocity) + list(m.effort) + [m.kinetic_energy, m.elastic_energy,
                                                                     m.gravity_energy]
    for ld in m.links:
        vals += list(ld.modal_position) + list(ld.modal_velocity) + [ld.tip_deflection.y, ld.elastic_energy]
    p = m.end_effector_pose.position
    vals += [p.x, p.y, p.z]
    return all(math.isfinite(v) for v in vals)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            proc.kill()
    return proc
