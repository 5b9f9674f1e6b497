"""The state_estimator node over DDS (installed executable, real rclpy), and the hardware-in-the-loop result of
issue 17: the estimator on the hardware bridge's /joint_states and the commanded effort, against emulated servos
driven by the flexible-arm model, lets the modal LQR reach and hold its target.

Waits are on conditions (matched endpoints, messages, diagnostics), never fixed sleeps; time bounds are generous
(loaded 2-core machines). The physics of the estimator is tested in-process (flexarm_control/test/test_estimation.py).
"""
import math
import os
import sys
import time

import numpy as np
import pytest
import rclpy
import yaml
from rclpy.qos import QoSProfile, ReliabilityPolicy

from flexarm_sim.ros.hotpath import HotSubscription

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plant_harness import stop  # noqa: E402
from bridge_harness import EmulatorProcess  # noqa: E402
from ros_support import start_node, stop_cleanly  # noqa: E402
from flexarm_sim.arms import shipped_arms_dir  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]

ROOT = os.path.abspath(os.path.join(HERE, '..'))
ARMS = shipped_arms_dir()
KT = 1.78                  # the emulator's XM430-W350 torque constant


class Client:
    """An rclpy node of the test: publishers, the estimate, /joint_states and /diagnostics by status name."""

    def __init__(self, env, procs):
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import JointState

        from flexarm_msgs.msg import FlexState
        self.procs = procs
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=int(env['ROS_DOMAIN_ID']))
        self.node = rclpy.create_node('estimator_test', context=self.ctx)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.estimates, self.js, self.diags = [], [], {}
        self.node.create_subscription(FlexState, '/flexarm/state_estimate', self.estimates.append, self.qos)
        self.node.create_subscription(JointState, '/joint_states', self.js.append, self.qos)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._diag, self.qos)

    def _diag(self, msg):
        for st in msg.status:
            d = {kv.key: kv.value for kv in st.values}
            d['level'] = st.level if isinstance(st.level, int) else ord(st.level)
            d['message'] = st.message
            self.diags.setdefault(st.name, []).append(d)

    def diag(self, name):
        return self.diags[name][-1] if self.diags.get(name) else {}

    def spin_until(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            self.executor.spin_once(timeout_sec=0.005)
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise AssertionError(f'{name} exited ({p.returncode}): {p.stderr.read()[-3000:]}')
        raise AssertionError(f'timed out waiting for {what}; diagnostics (each status\'s messages in order, '
                             f'repeats folded): {self.history()}')

    def history(self):
        """{status name: [message (times in a row)]}: what each node reported, in order (why a real-time run failed)."""
        out = {}
        for name, ds in self.diags.items():
            seq = []
            for d in ds:
                if seq and seq[-1][0] == d.get('message'):
                    seq[-1][1] += 1
                else:
                    seq.append([d.get('message'), 1])
            out[name] = [f'{m} (x{n})' for m, n in seq[-12:]]
        return out

    def publisher(self, msg_type, topic, subscribers=1):
        pub = self.node.create_publisher(msg_type, topic, self.qos)
        self.spin_until(lambda: pub.get_subscription_count() >= subscribers, 60.0, f'a subscriber of {topic}')
        return pub

    def close(self):
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


def _params_file(tmp_path, node, params):
    path = tmp_path / f'{node}.yaml'
    path.write_text(yaml.safe_dump({node: {'ros__parameters': params}}))
    return str(path)


def test_estimator_node_estimates_and_reports_bad_and_missing_readings(ros_env, tmp_path):
    """The node on synthetic readings (the arm at rest): it answers /joint_states with estimates stamped with the
    readings' sample instants and carrying the commanded effort; non-finite strain readings and readings of
    a gauge it does not know are rejected and counted; strain that stops is reported missing (WARN) and back (OK)
    when it returns; SIGINT ends it cleanly."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from flexarm_msgs.msg import StrainGauges
    gauges = ['shoulder@0.025', 'elbow@0.025']
    pf = _params_file(tmp_path, 'state_estimator', {
        'arm': os.path.join(ARMS, 'deluca_two_link.yaml'), 'rate': 100.0, 'sensors.strain.gauges': gauges,
        'sensors.strain.timeout': 0.2})
    proc = start_node('state_estimator', ['--ros-args', '--params-file', pf], ros_env)
    c = Client(ros_env, {'state_estimator': proc})
    name = 'flexarm_control/state_estimator'
    try:
        js_pub = c.publisher(JointState, '/joint_states')
        st_pub = c.publisher(StrainGauges, '/flexarm/strain')
        cmd_pub = c.publisher(Float64MultiArray, '/effort_controller/commands')
        # running: its first diagnostics (a real-time node's executor spins once its readings thread has started,
        # after its cell design process is ready: estimation/runtime.py start)
        c.spin_until(lambda: c.diags.get(name), 60.0, 'the estimator running')
        cmd_pub.publish(Float64MultiArray(data=[0.0, 0.0]))
        state = {'k': 0, 'strain': 'ok'}

        def send():
            """One sample instant: strain (as configured), then the joint state (the tick)."""
            k = state['k']
            state['k'] += 1
            t = c.node.get_clock().now().nanoseconds
            if state['strain'] != 'off':
                m = StrainGauges()
                m.header.stamp.sec, m.header.stamp.nanosec = t // 10 ** 9, t % 10 ** 9
                m.names = ['shoulder_link@0.025', 'elbow_link@0.025' if state['strain'] != 'other' else 'x@1']
                m.strain = [float('nan'), 0.0] if state['strain'] == 'nan' else [1e-6 * math.sin(k), 0.0]
                st_pub.publish(m)
            js = JointState()
            js.header.stamp.sec, js.header.stamp.nanosec = t // 10 ** 9, t % 10 ** 9
            js.name = ['shoulder', 'elbow']
            js.position = [0.0, 0.0]
            js_pub.publish(js)
            return t

        def run_for(n):
            stamps = []
            for _ in range(n):
                stamps.append(send())
                t_next = time.monotonic() + 0.01
                while time.monotonic() < t_next:
                    c.executor.spin_once(timeout_sec=0.002)
            return stamps
        sent = run_for(60)
        c.spin_until(lambda: len(c.estimates) >= 30, 30.0, 'estimates')
        got = {e.header.stamp.sec * 10 ** 9 + e.header.stamp.nanosec for e in c.estimates}
        # stamped with the readings' sample instants (real time: a busy node estimates from the newest reading)
        assert len(got & set(sent)) >= 30
        e = c.estimates[-1]
        assert len(e.links) == 2 and e.arm_id.startswith('deluca_two_link:')
        assert all(math.isfinite(x) for x in list(e.position) + list(e.velocity)
                   + [v for lk in e.links for v in list(lk.modal_position) + list(lk.modal_velocity)])
        # a tiny torque (the synthetic joints do not move: a real one would soon disagree with them and reset)
        cmd_pub.publish(Float64MultiArray(data=[1e-5, -2e-5]))
        cmd_pub.publish(Float64MultiArray(data=[float('nan'), 0.0]))        # rejected: the previous one stays
        run_for(10)
        c.spin_until(lambda: list(c.estimates[-1].effort) == [1e-5, -2e-5], 20.0, 'the command in the estimate')
        state['strain'] = 'nan'
        run_for(5)
        state['strain'] = 'other'
        run_for(5)
        state['strain'] = 'ok'
        run_for(10)
        c.spin_until(lambda: int(c.diag(name).get('strain_rejected', 0)) >= 10
                     and int(c.diag(name).get('commands_rejected', 0)) >= 1, 20.0, 'rejections counted')
        assert 'strain' in c.diag(name).get('strain_last_reject', '')
        state['strain'] = 'off'
        deadline = time.monotonic() + 30.0
        while not (c.diag(name).get('level') == 1 and 'strain gauges' in c.diag(name).get('message', '')):
            run_for(10)
            assert time.monotonic() < deadline, c.diag(name)
        state['strain'] = 'ok'
        deadline = time.monotonic() + 30.0
        while c.diag(name).get('level') != 0:
            run_for(10)
            assert time.monotonic() < deadline, c.diag(name)
        assert c.diag(name)['resets'] == '0'
    finally:
        c.close()
        code, dt, err = stop_cleanly(proc)
    assert code == 0 and 'Traceback' not in err, err[-3000:]


def test_hardware_in_the_loop_modal_lqr_from_the_estimate(spawn, tmp_path, ros_env):
    """Issue 17's hardware-in-the-loop result: hardware_bridge (its own process) on an emulated Dynamixel (real pty)
    driving the slewing-beam flexible arm model; state_estimator on the bridge's /joint_states and the commanded
    effort; the modal LQR (state_topic /flexarm/state_estimate) moves the hub 0.5 rad in 2 s, reaches the target and
    holds it, the link's vibration damped; the estimator reports no reset."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from flexarm_bringup.runner import cycloid_trajectory
    from flexarm_sim.model import load_model
    arm = os.path.join(ARMS, 'slewing_beam.yaml')
    model = load_model(arm)
    rate, target = 100.0, 0.5           # Hz: within what a loaded 2-core machine keeps (the 39 Hz mode < Nyquist)
    link = str(tmp_path / 'ttyHIL3')
    bridge = {'port': link, 'baud_rate': 1000000, 'loop_rate': rate, 'read_timeout': 0.2,
              'fault_after_errors': 2, 'command_timeout': 0.5, 'watchdog_action': 'torque_off',
              'diagnostics_period': 0.2, 'joint_names': ['hub'], 'arm': arm,
              'joints': {'hub': {'servo_id': 1, 'torque_constant': KT, 'current_limit': 1.0,
                                 'position_limits': [-3.0, 3.0], 'velocity_limit': 6.0}}}
    bridge_file = _params_file(tmp_path, 'hardware_bridge', bridge)
    # the servos are hardware of their own: the emulator in its own process, its serving thread SCHED_FIFO where
    # permitted (--realtime). In this process (it was) it shared the interpreter with the test's executor: a reply
    # sampled the arm tens of ms after the bridge stamped the request, which the estimator's innovation test saw as
    # 30-90 standard deviations (resets; 3 of 4 runs failed beside one CPU hog)
    emu = EmulatorProcess(link, env=ros_env, extra=('--arm', arm, '--params', bridge_file, '--realtime'))
    procs = {'emulator': emu.proc}
    c = None
    try:
        procs['bridge'] = spawn(['-m', 'flexarm_control.entry', 'hardware_bridge', '--ros-args', '--params-file',
                                 bridge_file])
        # the estimator as hardware.launch.py starts it (the shipped file and hardware_estimator's overrides: the
        # servos' measured torque as the prediction's input), the test's encoder timeout on top
        from flexarm_bringup.bringup import hardware_estimator
        est = hardware_estimator(arm, rate)[0]
        procs['state_estimator'] = start_node(
            'state_estimator', ['--ros-args', *[a for f in est.params_files for a in ('--params-file', f)],
                                '--params-file', _params_file(tmp_path, 'state_estimator', dict(
                                    est.overrides, **{'sensors.encoders.timeout': 0.3}))], ros_env)
        procs['modal'] = start_node('modal', ['--ros-args', '--params-file', _params_file(tmp_path, 'modal', {
            'arm': arm, 'rate': rate, 'state_topic': '/flexarm/state_estimate', 'state_timeout': 0.5,
            'safe_mode.max_state_age': 0.1})], ros_env)      # the estimator's hop on a loaded machine
        c = Client(ros_env, procs)
        bname, ename = 'flexarm hardware_bridge', 'flexarm_control/state_estimator'
        c.spin_until(lambda: c.diag(bname).get('state') == 'disabled', 60.0, 'bridge connected')
        # the controller answers the estimates (holding q = 0) before the torque goes on: no watchdog
        c.spin_until(lambda: int(c.diag(bname).get('commands_accepted', 0)) > 50, 120.0, 'controller commanding')
        from flexarm_msgs.srv import Enable
        from flexarm_sim.arms import arm_id
        cli = c.node.create_client(Enable, '/hardware_bridge/enable')
        c.spin_until(cli.service_is_ready, 30.0, 'enable service')
        fut = cli.call_async(Enable.Request(arm_id=arm_id(arm, model.spec.name)))   # the confirmation
        c.spin_until(fut.done, 30.0, 'enable')
        assert fut.result().success, fut.result().message
        ref_pub = c.publisher(JointTrajectory, '/flexarm/reference')
        c.spin_until(lambda: len(c.estimates) > 0, 30.0, 'an estimate')
        t0 = c.estimates[-1].header.stamp.sec + 1e-9 * c.estimates[-1].header.stamp.nanosec + 0.2
        times, q, qd, qdd = cycloid_trajectory(np.zeros(1), target, 2.0, 21)
        msg = JointTrajectory()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(t0), int(round((t0 - int(t0)) * 1e9))
        msg.joint_names = ['hub']
        for k, tk in enumerate(times):
            pt = JointTrajectoryPoint(positions=[float(q[k, 0])], velocities=[float(qd[k, 0])],
                                      accelerations=[float(qdd[k, 0])])
            pt.time_from_start.sec, pt.time_from_start.nanosec = int(tk), int(round((tk - int(tk)) * 1e9))
            msg.points.append(pt)
        ref_pub.publish(msg)
        t_start = time.monotonic()

        def settled():
            recent = c.js[-100:]
            return (time.monotonic() - t_start > 2.5 and len(recent) == 100
                    and all(abs(m.position[0] - target) < 0.02 and abs(m.velocity[0]) < 0.1 for m in recent))
        c.spin_until(settled, 60.0, 'the hub at the target')
        # hold: 1 s more at the target, the bridge enabled throughout
        n0 = len(c.js)
        c.spin_until(lambda: len(c.js) > n0 + int(rate), 30.0, '1 s of holding')
        assert all(abs(m.position[0] - target) < 0.02 for m in c.js[n0:])
        z = np.array(emu.arm_state())
        assert z[model.q_index][0] == pytest.approx(target, abs=0.02)           # the model's joint, not the view
        tip = np.linalg.norm(model.tip_pose(z)[1] - model.tip_pose(np.r_[z[model.q_index], [0.0] * 3])[1])
        assert tip < 0.005, tip                                                   # the link's vibration damped
        d, e, m = c.diag(bname), c.diag(ename), c.diag('flexarm_control/modal')
        assert d['state'] == 'enabled' and d['watchdog'] == 'ok', d
        assert e.get('resets') == '0' and e.get('level') == 0, e
        assert m.get('law') == 'modal', m
        # (a loaded machine may still delay states beyond 0.1 s: the controller then holds with its fallback law for a
        # moment; its entries are reported, not failed: timing is not what this test holds)
        print(f'HIL modal LQR from the estimate: {target} rad reached and held {time.monotonic() - t_start:.1f} s '
              f'after the reference, hub {z[model.q_index][0]:.4f} rad, tip deflection {1e3 * tip:.2f} mm; estimator '
              f'{e.get("message")}, innovation max {e.get("encoders_innovation_max")} sigma, resets {e.get("resets")}; '
              f'controller safe-mode entries {m.get("safe_mode_entries")}; bridge {d.get("achieved_rate_hz")} Hz')
    finally:
        if c is not None:
            c.close()
        for name, p in procs.items():
            if name != 'emulator':
                stop(p)
        emu.stop_process()


class QueuedReadings:
    """Stand-in of a HotSubscription holding `items` already received (the readings thread's handler takes them)."""

    def __init__(self, items):
        self.items = list(items)

    def take_now(self):
        return self.items.pop(0) if self.items else None

    queued = HotSubscription.queued


def test_future_stamped_readings_are_refused_and_missing_encoders_still_flagged():
    """Issue 24: one /joint_states reading stamped in the future disabled the estimator's missing-encoder watch
    (its newest stamp lay ahead of every later tick: encoders silent for 5 s, estimates still published,
    encoders_missing False). The node (in-process, its callbacks called directly) refuses a reading stamped more
    than FUTURE_TOLERANCE_S ahead of its clock, counted; the encoders then silent are flagged missing. (The readings
    are handed to the readings thread's handler, as its HotSubscription would.)"""
    from sensor_msgs.msg import JointState
    from flexarm_control.nodes.estimator_node import FUTURE_TOLERANCE_S, EstimatorNode
    from flexarm_sim.ros.cdr import serialize
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=99)
    node = EstimatorNode(context=ctx)
    try:
        now = node.get_clock().now().nanoseconds

        def reading(t_ns, names=('shoulder', 'elbow')):
            js = JointState(name=list(names), position=[0.0] * len(names))
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(int(t_ns), 1_000_000_000)
            return serialize(js)
        node.hot, node.side = QueuedReadings([]), []   # nothing else queued (the node's own subscription unread)
        take = node._on_readings
        take(reading(now))
        tr = node.rt.tracks['encoders']
        assert tr.accepted == 1 and tr.rejected == 0
        take(reading(now + int((FUTURE_TOLERANCE_S + 5.0) * 1e9)))
        assert tr.rejected == 1 and 'ahead of this node' in tr.last_reject and tr.last_t == now * 1e-9
        take(reading(now + 1_000_000, names=('shoulder', 'shoulder')))
        assert tr.rejected == 2 and 'given twice' in tr.last_reject
        node.rt.tick(now * 1e-9 + 1.0)                 # a second later, nothing new: missing
        assert tr.missing
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


def test_a_backlog_of_readings_is_one_tick_and_one_estimate():
    """Issue 28: behind by a backlog, the estimator published one estimate per reading through the executor, each
    older than the last (~100 ms behind at 500 Hz, the controller's safe mode lost the arm). The readings thread's
    handler (in-process, the queued readings handed over by stand-ins of its HotSubscriptions) takes every joint
    reading queued behind the one that woke it and every queued strain reading, fuses them all at their own stamps
    in one tick (runtime.tick: one prediction per period, each reading's measured torque) and publishes one estimate,
    stamped with the newest joint reading; the estimate equals the one of a runtime fed and ticked reading by
    reading."""
    from sensor_msgs.msg import JointState
    from flexarm_control.estimation.runtime import EstimatorRuntime
    from flexarm_control.nodes.estimator_node import EstimatorNode
    from rclpy.serialization import deserialize_message

    from flexarm_msgs.msg import FlexState, StrainGauges
    from flexarm_sim.ros.cdr import serialize
    gauge = 'shoulder@0.05'
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=99, args=['--ros-args', '-p', f'sensors.strain.gauges:=["{gauge}"]',
                                                '-p', 'input:=measured_effort'])
    node = EstimatorNode(context=ctx)
    try:
        assert node.hot_loop is not None and len(node.side) == 2     # real time: commands, strain (readings thread)
        now = node.get_clock().now().nanoseconds
        dt_ns = int(round(1e9 / node.rt.rate))
        stamps = [now + k * dt_ns for k in range(6)]
        q = [[0.001 * k, -0.002 * k] for k in range(6)]
        eff = [[0.01 * k, 0.005] for k in range(6)]
        strain = [[1e-6 * k] for k in range(6)]

        def joint(k):
            js = JointState(name=['shoulder', 'elbow'], position=q[k], effort=eff[k])
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(stamps[k], 1_000_000_000)
            return serialize(js)

        def gauges(k):
            g = StrainGauges(arm_id=node.layout.arm_id, names=[node.rt.sensor_set.gauges[0].name], strain=strain[k])
            g.header.stamp.sec, g.header.stamp.nanosec = divmod(stamps[k], 1_000_000_000)
            return serialize(g)

        published = []
        node.pub = type('Pub', (), {'publish': lambda self, m: published.append(m)})()
        node.hot = QueuedReadings([])
        on_strain = node.side[1][1]
        node.side = [(QueuedReadings([gauges(0)]), on_strain)]
        node._on_readings(joint(0))                                       # the first reading initializes
        node.hot = QueuedReadings([joint(k) for k in range(2, 6)])        # 1 woke the thread, 2..5 queued behind
        node.side = [(QueuedReadings([gauges(k) for k in range(1, 6)]), on_strain)]
        node._on_readings(joint(1))
        assert len(published) == 2 and node.batches == 2 and node.largest_batch == 5
        assert node.rt.ticks == 1                    # the first reading initialized; the backlog was one tick
        assert node.rt.tracks["encoders"].accepted == 6, node.rt.tracks["encoders"].last_reject
        assert node.rt.tracks["strain"].accepted == 6, node.rt.tracks["strain"].last_reject
        assert node.rt.tracks['encoders'].late == 0 and node.rt.tracks['strain'].late == 0
        msg = deserialize_message(bytes(published[-1]), FlexState)
        assert msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec == stamps[-1]
        # the same readings fed one by one to a runtime of the node's parameters, ticked at every reading
        rt = EstimatorRuntime(node.model, node.params.values)
        for k in range(6):
            rt.strain(stamps[k] * 1e-9, strain[k])
            rt.joints(stamps[k] * 1e-9, q[k], None, eff[k])
            est = rt.tick(stamps[k] * 1e-9)
        np.testing.assert_allclose(node.rt.last_estimate.z, est.z, rtol=0, atol=1e-12)
        np.testing.assert_allclose(node.rt.last_estimate.zd, est.zd, rtol=0, atol=1e-9)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


def test_a_starved_readings_thread_does_not_make_the_encoders_missing():
    """Issue 28: beside two CPU hogs the estimator's readings thread was starved for up to 0.33 s; the executor's
    timer then found no joint reading taken for the encoders' timeout and ticked the estimate forward from the last
    command, which dropped the queued readings as late (the estimate 0.1-0.23 rad off the arm, then a filter reset).
    The timer (in-process, called directly, the queues stand-ins of the HotSubscriptions) now takes the queued joint
    readings itself and estimates them as the readings thread would: one tick at the newest, none late; with none
    queued it publishes a prediction that is not kept. The commands are taken with the readings (no executor callback
    at 500 Hz): a valid one drives that prediction, a malformed one is refused and counted."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from flexarm_control.nodes.estimator_node import EstimatorNode
    from rclpy.serialization import deserialize_message

    from flexarm_msgs.msg import FlexState
    from flexarm_sim.ros.cdr import serialize
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=99, args=['--ros-args', '-p', 'input:=measured_effort'])
    node = EstimatorNode(context=ctx)
    try:
        now = node.get_clock().now().nanoseconds - 20_000_000
        dt_ns = int(round(1e9 / node.rt.rate))
        stamps = [now + k * dt_ns for k in range(6)]

        def joint(k):
            js = JointState(name=['shoulder', 'elbow'], position=[0.001 * k, 0.0], effort=[0.01, 0.0])
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(stamps[k], 1_000_000_000)
            return serialize(js)

        published = []
        node.pub = type('Pub', (), {'publish': lambda self, m: published.append(m)})()
        on_command = node.side[0][1]
        node.hot = QueuedReadings([])
        node.side = [(QueuedReadings([serialize(Float64MultiArray(data=[0.3, -0.2])),
                                      serialize(Float64MultiArray(data=[1.0, 2.0, 3.0])),
                                      b'\x00\x01\x00\x00' + b'\xff' * 7]), on_command)]   # (no such message)
        node._on_readings(joint(0))                                        # initializes
        assert node.rt.commands_accepted == 1 and node.rt.commands_rejected == 2
        assert node.rt.last_command_reject == 'command: unreadable Float64MultiArray (RMWError)'
        np.testing.assert_array_equal(node.rt.u, [0.3, -0.2])
        node.hot = QueuedReadings([joint(k) for k in range(1, 6)])         # queued; the readings thread starved
        node._t_last_js -= 1.0
        node._on_timer()
        tr = node.rt.tracks['encoders']
        assert node.timer_batches == 1 and tr.accepted == 6 and tr.late == 0 and len(published) == 2
        msg = deserialize_message(bytes(published[-1]), FlexState)
        assert msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec == stamps[-1]
        t_last = node.rt.t_last
        node._t_last_js -= 1.0                                             # nothing queued: a prediction, not kept
        node._on_timer()
        assert node.timer_batches == 1 and len(published) == 3 and node.rt.t_last == t_last
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)
