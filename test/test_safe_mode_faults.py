"""System test of issue 28's faults on the real processes (the nodes sim.launch.py starts, over DDS, real time): the
controller stopped (SIGSTOP) or killed (SIGKILL) mid-move, the plant killed and restarted while the controller runs.

Real time on a shared 2-core machine: only what holds with two CPU hogs beside the run is asserted. The plant's
command watchdog acts in plant time (its hold is integrated with the arm, whatever the load), so the arm held after
the controller dies is asserted as such; what the controller achieves afterwards depends on the CPU it gets — with
it the arm is back on its reference (the in-process tests, flexarm_control/test/test_safe_mode.py, assert the 0.05
rad), without it the controller reports its safe mode and the drives hold the arm: never a lost arm (joint angles
within their limits, the end effector's deflection within twice the standard move's peak).

The bounds are the figures measured with two CPU hogs beside the run on the shared machine (load 12-17), with margin;
each test's docstring gives them."""
import math
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from flexarm_bringup.bringup import command, sim_nodes
from flexarm_msgs.msg import FlexState
from flexarm_sim.arms import arm_id, resolve_arm
from flexarm_sim.model import load_model
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.ros.flexstate import FlexStateDecoder
from flexarm_sim.ros.hotpath import HotLoop, HotSubscription
from flexarm_sim.ros.messages import qos

pytestmark = pytest.mark.ros

# 30 deg: on the 60 deg move the modal law alone bends link 1 beyond the model's validity (17.5 % in lock-step, more
# in real time), where no figure is physics; the bounds in the docstrings below were measured on the 60 deg move
ANGLE, MOVE_TIME = math.pi / 6, 2.5


class Run:
    """The plant and the modal controller as sim.launch.py starts them, a monitor of /flexarm/state in this process."""

    def __init__(self, env, tmp):
        self.env, self.tmp = env, str(tmp)
        path = resolve_arm('deluca_two_link')
        self.model = load_model(path)
        self.layout = ArmLayout.of(self.model, arm_id(path, self.model.spec.name))
        self.specs = sim_nodes(path, 'modal', 'realtime',
                               plant_extra={'publish_rates.diagnostics': 2.0, 'publish_rates.markers': 0.0})
        self.procs = {}
        for s in self.specs:
            self.start(s)
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=int(env['ROS_DOMAIN_ID']))
        self.node = rclpy.create_node('safe_mode_faults', context=self.ctx)
        self.rows, self.diags, self.lock = [], {}, threading.Lock()
        self.decoder = FlexStateDecoder(self.layout)
        self.hot = HotSubscription(self.node, FlexState, '/flexarm/state', qos(1000))
        self.loop = HotLoop(self.hot, self._on_state, 'faults-states')
        self.loop.start()
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 50)
        self.ref = self.node.create_publisher(JointTrajectory, '/flexarm/reference', qos(10))
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.spin = threading.Thread(target=self.executor.spin, daemon=True)
        self.spin.start()

    def start(self, spec):
        log = open(os.path.join(self.tmp, f'{spec.name}.log'), 'ab')      # kept with tmp_path for a post-mortem
        self.procs[spec.name] = subprocess.Popen(command(spec, self.tmp), env=self.env, stdout=log,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def _on_state(self, data):
        st = self.decoder.decode(data)
        with self.lock:
            self.rows.append((st.t, st.step, *st.z[self.layout.q_index],
                              float(np.linalg.norm(st.tip - st.rigid_tip))))

    def _on_diag(self, msg):
        for s in msg.status:
            d = {kv.key: kv.value for kv in s.values}
            d['_message'] = s.message
            with self.lock:
                self.diags[s.name] = d

    def latest(self):
        with self.lock:
            return self.rows[-1] if self.rows else None

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.02)
        raise AssertionError(f'timed out waiting for {what}')

    def start_move(self):
        """The standard move from where the arm is, 0.5 s of plant time ahead; returns (t_move, q0)."""
        self.wait(lambda: self.latest() is not None and self.latest()[1] > 0 and
                  self.ref.get_subscription_count() > 0, 240.0, 'the plant integrating and the controller listening')
        time.sleep(0.5)
        r = self.latest()
        q0, t_move = np.array(r[2:4]), r[0] + 0.5
        msg = JointTrajectory(joint_names=list(self.model.spec.joint_names))
        sec = int(math.floor(t_move))
        msg.header.stamp.sec, msg.header.stamp.nanosec = sec, int(round((t_move - sec) * 1e9))
        for k in range(51):
            tk = MOVE_TIME * k / 50
            s = tk / MOVE_TIME
            q = q0 + ANGLE * (s - math.sin(2 * math.pi * s) / (2 * math.pi))
            msg.points.append(JointTrajectoryPoint(positions=list(q), time_from_start=Duration(
                sec=int(tk), nanosec=int(round((tk % 1) * 1e9)))))
        self.ref.publish(msg)
        self.target = q0 + ANGLE
        return t_move, q0

    def until_plant_time(self, t, timeout=120.0):
        self.wait(lambda: self.latest()[0] >= t, timeout, f'plant time {t:.2f}')

    def array(self):
        with self.lock:
            return np.array(self.rows)

    def close(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for p in self.procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.loop.stop()
        self.hot.destroy()
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture
def hogs():
    """Two CPU hogs for the test's duration: what is asserted must hold beside them."""
    procs = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]
    yield
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def run(ros_env, tmp_path, hogs):
    r = Run(ros_env, tmp_path)
    yield r
    r.close()


def never_lost(run, a):
    """Joint angles within their limits (not in a stop), the end effector's deflection within twice the standard
    move's peak (0.24 m)."""
    np.save(os.path.join(run.tmp, 'states.npy'), a)            # kept with the test's tmp_path for a post-mortem
    assert np.all(np.abs(a[:, 2:4]) < math.pi - 0.05), a[np.argmax(np.max(np.abs(a[:, 2:4]), axis=1))]
    assert a[:, 4].max() < 0.5, a[:, 4].max()


def test_controller_killed_mid_move_the_plant_holds_the_arm(run):
    """kill -9 of the controller mid-move (issue 28: the arm coasted from 0.90 to 2.53 rad): the plant's watchdog holds
    it — 3 s later it is at rest (creeping < 0.2 rad/s; measured 0.003-0.13 with two hogs at machine load 12-17) within
    1.2 rad of where the controller died (measured 0.11-0.85: the soft, overdamped hold lets the light elbow be
    carried on by the swinging links) and out of the joint stops."""
    t_move, _ = run.start_move()
    run.until_plant_time(t_move + 1.25)
    q_kill = np.array(run.latest()[2:4])
    os.killpg(run.procs['modal'].pid, signal.SIGKILL)
    t_kill = run.latest()[0]
    run.until_plant_time(t_kill + 3.0)
    a = run.array()
    late = a[a[:, 0] >= t_kill + 2.5]
    rate = np.max(np.abs(late[-1, 2:4] - late[0, 2:4])) / (late[-1, 0] - late[0, 0])   # creep over 0.5 s
    print(f'killed: creep {rate:.3f} rad/s, moved {np.max(np.abs(a[-1, 2:4] - q_kill)):.3f} rad, peak tip '
          f'{a[:, 4].max():.3f} m')
    assert rate < 0.2, rate
    assert np.max(np.abs(a[-1, 2:4] - q_kill)) < 1.2, (a[-1, 2:4], q_kill)
    never_lost(run, a)
    run.wait(lambda: 'timeout' in run.diags.get('flexarm plant', {}).get('watchdog', ''), 10.0,
             'the plant reporting its watchdog')
    assert run.diags['flexarm plant']['watchdog_action'] == 'hold'


def test_controller_stopped_2s_then_the_arm_is_back_or_held(run):
    """SIGSTOP of the controller for 2 s mid-move (issue 28: the elbow drifted to 2.98 rad): the plant holds the arm
    meanwhile (it moves less than 1 rad; measured 0.33-0.75 with two hogs at machine load 5-17, 0.50 in process);
    afterwards, never lost, and RETURN_WINDOW_S later either within 0.05 rad of the move's target or the controller
    reports its safe mode (no CPU to close the loop: the drives hold the arm). The controller resumes on a backlog of
    stale states: its safe mode returns the arm at safe_mode.return_speed, the modal law takes over within 0.02 rad
    or RETURN_SETTLE_S after the return and returns once more from where the arm is: the window of the plant restart
    below (5 s was marginal: 0.0003 rad with the safe mode on at +5 s and off at +8 s with two hogs beside a suite,
    0.085 rad with the safe mode just off at +5 s in a CI run)."""
    t_move, _ = run.start_move()
    run.until_plant_time(t_move + 1.25)
    q_stop = np.array(run.latest()[2:4])
    os.killpg(run.procs['modal'].pid, signal.SIGSTOP)
    time.sleep(2.0)
    a = run.array()
    os.killpg(run.procs['modal'].pid, signal.SIGCONT)
    t_cont = run.latest()[0]
    print(f'stopped: moved {np.max(np.abs(a[-1, 2:4] - q_stop)):.3f} rad while stopped')
    np.save(os.path.join(run.tmp, 'states_stop.npy'), a)
    assert np.max(np.abs(a[-1, 2:4] - q_stop)) < 1.0
    run.until_plant_time(t_cont + RETURN_WINDOW_S)
    a = run.array()
    never_lost(run, a)
    back_or_held(run, a, 'stopped')


def back_or_held(run, a, label):
    """The arm within 0.05 rad of the move's target, or the controller reporting its safe mode; a failure shows the
    error's course and the controller's own account of its modes."""
    err = float(np.max(np.abs(a[-1, 2:4] - run.target)))
    ctl = run.diags.get('flexarm_control/modal', {})
    print(f'{label}: final error {err:.4f} rad, safe mode {ctl.get("safe_mode")}, peak tip {a[:, 4].max():.3f} m')
    if err <= 0.05 or ctl.get('safe_mode') == 'on':
        return
    course = [(round(float(r[0]), 1), round(float(np.max(np.abs(r[2:4] - run.target))), 4)) for r in a[::250]]
    with open(os.path.join(run.tmp, 'modal.log'), errors='replace') as f:
        modes = [ln.strip() for ln in f if 'safe mode' in ln or 'law resumed' in ln or 'hold law' in ln]
    raise AssertionError(f'{label}: {err:.4f} rad from the target, safe mode off; error by plant time {course}; '
                         f'controller: {modes[-12:]}; diagnostics {ctl}')


RETURN_WINDOW_S = 12.0


def test_plant_restarted_the_controller_brings_the_arm_back_or_reports(run):
    """kill -9 of the plant mid-move and a new one 2 s later (issue 28: the controller resumed 6.9 s later but stayed
    in its safe mode, the arm drifting): the new plant holds the arm at its initial state until the controller
    commands; RETURN_WINDOW_S later the arm is within 0.05 rad of the target, or the controller reports its safe mode;
    never lost. The new plant starts 1.05 rad (60 deg) from the target: the return at safe_mode.return_speed
    (0.5 rad/s) takes ~2.5 s, the hold law (6.4 % authority) lags it, the modal law resumes within 0.02 rad or 3 s after
    the return, then settles (slowest joint poles 1.2-2.9 1/s): 8 s was marginal (0.003-0.069 rad measured, 0.12 once
    with the safe mode off in a full suite run)."""
    t_move, _ = run.start_move()
    run.until_plant_time(t_move + 1.25)
    os.killpg(run.procs['plant'].pid, signal.SIGKILL)
    run.procs['plant'].wait()
    time.sleep(2.0)
    n_before = len(run.array())
    run.start(run.specs[0])
    run.wait(lambda: len(run.array()) > n_before and run.latest()[1] > 0, 240.0, 'the new plant integrating')
    t_new = run.latest()[0]
    run.until_plant_time(t_new + RETURN_WINDOW_S)
    a = run.array()[n_before:]
    never_lost(run, a)
    back_or_held(run, a, 'restarted')
