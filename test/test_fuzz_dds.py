"""Fuzz over DDS (issue 24 item 7): the plant, the modal controller and the state estimator as the launch files start
them in lock-step (bringup's commands, real processes, loopback: what holds does not depend on the machine's load),
fed a fixed, seeded set of bad and odd inputs on every topic
they take, every service they offer and every run-time parameter they declare — the inputs of issue 24 among them:
steps and past-stamped references, 10^4 / 10^5-point references and 10^6-name ones, 10^6-element commands,
future-stamped and duplicate-name joint states, resets at 99,999 rad/s or a modal coordinate of 5000, 5e-324 rates
and timeouts, PARAMETER_NOT_SET on every parameter. What must hold, checked after (and during) it:

* no node exits, none prints a traceback; each still answers its parameter services, with every parameter still
  declared (a NOT_SET undeclared them) and a valid set still accepted;
* nothing stalled: plant time kept advancing — no wall gap of more than STALL_S between new states while the large
  references were checked (the controller answers every state in lock-step: a reference checked under its lock
  once stopped control for 29.5 s) — and afterwards the arm follows a valid reference to its target;
* every state the plant published is finite, its joints within their limits, and the plant never diverged;
* every /diagnostics message is bounded (a 10^6-name reference once gave a 10.9 MB reason);
* SIGINT ends every node with exit code 0.

The counts (inputs per channel, accepted / refused by the nodes' own counters) are printed: `pytest -s` shows them.
Deterministic: one seed, the same inputs in the same order; bounded: N_* inputs, deadlines on every wait.
"""
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ros_support import RosClient, stop_cleanly  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SEED = 24
N_COMMANDS = 120
N_STAMPED = 40
N_REFERENCES = 40
N_READINGS = 60
N_RESETS = 16
STALL_S = 10.0
DIAG_LIMIT = 2000          # characters of a status message or value (common.commands.MAX_REASON and 4x that)


def _specs(tmp_path):
    from flexarm_bringup.bringup import estimator_node, share_dir, sim_nodes
    specs = sim_nodes('deluca_two_link', 'modal', 'lockstep', plant_extra={'publish_rates.diagnostics': 4.0})
    config = os.path.join(share_dir('flexarm_bringup'), 'config')
    est, sensors = estimator_node(specs[0].overrides['arm'], 'encoders', config, 500.0, 'lockstep')
    specs[0].overrides.update(sensors)
    return specs + [est]


class Fuzz:
    """The test's ROS side: publishers and service clients on the nodes' topics, what the nodes publish."""

    def __init__(self, ros_env):
        from diagnostic_msgs.msg import DiagnosticArray
        from flexarm_msgs.msg import FlexState, JointEffortCommand
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        self.c = RosClient(ros_env, 'fuzz')
        node = self.c.node
        q = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = {'/effort_controller/commands': node.create_publisher(Float64MultiArray,
                                                                         '/effort_controller/commands', q),
                    '/flexarm/effort_command': node.create_publisher(JointEffortCommand, '/flexarm/effort_command', q),
                    '/flexarm/reference': node.create_publisher(JointTrajectory, '/flexarm/reference', q),
                    '/joint_states': node.create_publisher(JointState, '/joint_states', q),
                    '/flexarm/state': node.create_publisher(FlexState, '/flexarm/state', q)}
        self.states, self.diags = [], {}
        self.diag_sizes = 0
        node.create_subscription(FlexState, '/flexarm/state', self._state, q)
        node.create_subscription(DiagnosticArray, '/diagnostics', self._diag, q)
        self.sent = {k: 0 for k in self.pub}

    def _state(self, msg):
        if msg.header.frame_id == 'fuzz':           # our own rogue states
            return
        self.states.append((time.monotonic(), msg))

    def _diag(self, msg):
        for st in msg.status:
            self.diag_sizes = max(self.diag_sizes, len(st.message), *(len(kv.value) for kv in st.values))
            self.diags[st.name] = {kv.key: kv.value for kv in st.values}

    def send(self, topic, msg):
        self.pub[topic].publish(msg)
        self.sent[topic] += 1
        self.c.executor.spin_once(timeout_sec=0.0)

    def spin(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.c.executor.spin_once(timeout_sec=0.01)


# ------------------------------------------------------------------------------ the inputs
def _numbers(rng, n):
    """n floats from the awkward set (nan, infinities, the largest, the smallest, zero) and ordinary ones."""
    odd = [math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.0, 1e6]
    return [float(rng.choice(odd)) if rng.random() < 0.3 else float(rng.normal(0, 0.5)) for _ in range(n)]


def _commands(rng):
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension
    from flexarm_sim.ros.cdr import serialize
    out = []
    for k in range(N_COMMANDS):
        n = int(rng.choice([0, 1, 2, 2, 2, 3, 50]))
        m = Float64MultiArray(data=_numbers(rng, n))
        if k % 17 == 0:
            m.layout.dim = [MultiArrayDimension(label='x' * 30, size=n, stride=n)]
        out.append(m)
    big = serialize(Float64MultiArray(data=[0.1] * 10 ** 6))        # issue 24: 10^6-element commands
    return out + [big] * 4


def _stamped(rng):
    from flexarm_msgs.msg import JointEffortCommand
    out = []
    for _ in range(N_STAMPED):
        m = JointEffortCommand(step=int(rng.integers(0, 2 ** 63)), effort=_numbers(rng, int(rng.choice([0, 2, 5]))))
        m.header.stamp.sec = int(rng.integers(0, 2 ** 31 - 1))
        out.append(m)
    return out


def _trajectory(names, points, stamp=0.0):
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    m = JointTrajectory(joint_names=list(names))
    m.header.stamp.sec = int(math.floor(stamp))
    m.header.stamp.nanosec = int(round((stamp - math.floor(stamp)) * 1e9)) % 1_000_000_000
    for t, q in points:
        s = int(math.floor(t))
        m.points.append(JointTrajectoryPoint(positions=list(q), time_from_start=Duration(
            sec=s, nanosec=int(round((t - s) * 1e9)) % 1_000_000_000)))
    return m


def _references(rng, names, now):
    """Bad and odd references: steps, past and future stamps, too fast, beyond the limits, unknown and duplicate
    names, non-finite, non-increasing times, oversized (serialized: points counted unread)."""
    from flexarm_sim.ros.cdr import serialize
    out = [
        _trajectory(names, [(0.0, [1.0, 1.0])]),                                  # a 1 rad step
        _trajectory(names, [(0.01, [1.0, 1.0])], stamp=max(0.0, now - 0.5)),     # past stamp: too fast anyway
        _trajectory(names, [(2.0, [0.3, 0.3])], stamp=max(0.0, now - 30.0)),     # 30 s late: refused
        _trajectory(names, [(2.0, [0.3, 0.3])], stamp=now + 1e7),                # months ahead
        _trajectory(names, [(0.05, [3.0, -3.0])]),                               # beyond the velocity limits
        _trajectory(names, [(2.0, [9.0, 0.0])]),                                 # beyond the position limits
        _trajectory(['shoulder', 'shoulder'], [(2.0, [0.1, 0.1])]),
        _trajectory(['nope', 'elbow'], [(2.0, [0.1, 0.1])]),
        _trajectory(names, [(2.0, [math.nan, 0.0])]),
        _trajectory(names, [(2.0, [0.1, 0.1]), (1.0, [0.2, 0.2])]),
        _trajectory(names, []),
    ]
    for _ in range(N_REFERENCES - len(out) - 3):
        k = int(rng.integers(1, 6))
        times = np.cumsum(rng.uniform(0.0, 1.5, k))
        pts = [(float(t), [float(x) for x in rng.uniform(-4.0, 4.0, 2)]) for t in times]
        out.append(_trajectory(names, pts, stamp=float(rng.choice([0.0, now + 0.5]))))
    dense = _trajectory(names, [(0.001 * (i + 1), [0.0, 0.0]) for i in range(10000)])    # at the size limit
    out += [serialize(dense),
            serialize(_trajectory(names, [(0.0001 * (i + 1), [0.0, 0.0]) for i in range(100000)])),   # 10^5
            serialize(_trajectory([f'j{i}' for i in range(10 ** 6)], [(1.0, [0.0])]))]              # 10^6 names
    return out


def _readings(rng, names, now):
    from flexarm_msgs.msg import FlexState
    from sensor_msgs.msg import JointState
    from flexarm_sim.ros.cdr import serialize
    out = []
    for k in range(N_READINGS):
        kind = k % 6
        js = JointState(name=list(names), position=_numbers(rng, 2))
        t = now
        if kind == 0:
            t = now + 5.0                                        # from the future
        elif kind == 1:
            js.name = [names[0], names[0]]                       # duplicate names
        elif kind == 2:
            js.name = list(names) + ['other']
            js.position = [0.0, 0.0]
        elif kind == 3:
            js.velocity = _numbers(rng, 3)
        sec = int(math.floor(max(t, 0.0)))
        js.header.stamp.sec, js.header.stamp.nanosec = sec, int((max(t, 0.0) - sec) * 1e9)
        out.append(('/joint_states', js))
        if kind == 4:                                            # a rogue state of another arm, one that is not finite
            st = FlexState(arm_id='other_arm:0123', joint_names=list(names), position=_numbers(rng, 2),
                           velocity=[0.0, 0.0], effort=[0.0, 0.0])
            st.header.frame_id = 'fuzz'
            out.append(('/flexarm/state', st))
    out.append(('/joint_states', serialize(JointState(name=[f'n{i}' for i in range(10 ** 5)],
                                                      position=[0.0] * 10 ** 5))))
    return out


def _resets(rng):
    from flexarm_msgs.srv import SetState
    out = [SetState.Request(position=[0.0, 0.0], velocity=[99999.0, 0.0]),
           SetState.Request(position=[0.0, 0.0], modal_position=[5000.0, 0.0, 0.0, 0.0]),
           SetState.Request(position=[100.0, 0.0]), SetState.Request(position=[1.0, 2.0, 3.0])]
    for _ in range(N_RESETS - len(out)):
        out.append(SetState.Request(to_initial=bool(rng.random() < 0.2), position=_numbers(rng, 2),
                                    velocity=_numbers(rng, int(rng.choice([0, 2]))),
                                    modal_position=[0.001 * x for x in _numbers(rng, int(rng.choice([0, 4])))]))
    return out + [SetState.Request(to_initial=True)]


def _parameter_values(rng):
    """Values of every ROS parameter type, the awkward ones first."""
    from rcl_interfaces.msg import ParameterType, ParameterValue
    T = ParameterType
    return [ParameterValue(type=T.PARAMETER_NOT_SET),
            ParameterValue(type=T.PARAMETER_DOUBLE, double_value=5e-324),
            ParameterValue(type=T.PARAMETER_DOUBLE, double_value=-1.0),
            ParameterValue(type=T.PARAMETER_DOUBLE, double_value=math.nan),
            ParameterValue(type=T.PARAMETER_DOUBLE, double_value=1e308),
            ParameterValue(type=T.PARAMETER_INTEGER, integer_value=2 ** 62),
            ParameterValue(type=T.PARAMETER_BOOL, bool_value=True),
            ParameterValue(type=T.PARAMETER_STRING, string_value='x' * 5000),
            ParameterValue(type=T.PARAMETER_DOUBLE_ARRAY, double_array_value=list(rng.uniform(-1, 1, 3))),
            ParameterValue(type=T.PARAMETER_DOUBLE_ARRAY, double_array_value=[0.1] * 100000)]


# ------------------------------------------------------------------------------ the test
def test_fuzz_over_dds_refuses_or_bounds_every_input_and_nothing_stalls(ros_env, tmp_path):
    from rcl_interfaces.msg import Parameter
    from rcl_interfaces.srv import SetParameters
    from std_srvs.srv import SetBool
    from flexarm_bringup.bringup import command
    from flexarm_msgs.srv import SetState
    from flexarm_sim.arms import load_arm_model

    rng = np.random.default_rng(SEED)
    model, _ = load_arm_model('deluca_two_link')
    names = list(model.spec.joint_names)
    lim = np.array([j.position_limits for j in model.spec.joints])
    specs = _specs(tmp_path)
    procs = {}
    for s in specs:
        procs[s.name] = subprocess.Popen(command(s, str(tmp_path)), env=ros_env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    fz = Fuzz(ros_env)
    counts = {'parameters': 0, 'parameters_refused': 0, 'resets': 0, 'resets_refused': 0}
    try:
        c = fz.c
        params = {n: c.parameters(n, p) for n, p in procs.items()}           # every node up (services answer)
        c.spin_until(lambda: len(fz.states) > 50 and 'flexarm_control/modal' in fz.diags, 120, 'the loop running',
                     procs['plant'])
        now = _stamp(fz.states[-1][1])
        t_fuzz = time.monotonic()

        # topics
        for m in _commands(rng):
            fz.send('/effort_controller/commands', m)
        for m in _stamped(rng):
            fz.send('/flexarm/effort_command', m)
        refs = _references(rng, names, now)
        for m in refs[:-3]:
            fz.send('/flexarm/reference', m)
            fz.spin(0.05)
        t_big = time.monotonic()
        for m in refs[-3:]:                    # the large ones, serialized: then plant time must keep advancing
            fz.send('/flexarm/reference', m)
            fz.spin(1.0)
        fz.spin(3.0)
        t_big_end = time.monotonic()
        # readings and rogue states (lock-step: the estimator and the controller take every one, depth 100)
        for topic, m in _readings(rng, names, _stamp(fz.states[-1][1])):
            fz.send(topic, m)
            fz.spin(0.01)
        # services
        for req in _resets(rng):
            r = c.call(SetState, '/flexarm/reset', req, proc=procs['plant'])
            counts['resets'] += 1
            counts['resets_refused'] += not r.success
            assert len(r.message) <= DIAG_LIMIT
        for on in (True, False, True, False):
            c.call(SetBool, '/flexarm/pause', SetBool.Request(data=on), proc=procs['plant'])
        # parameters: every run-time-changeable one of every node, every awkward value; then the original back
        values = _parameter_values(rng)
        for n, original in params.items():
            for name in sorted(original):
                for v in values:
                    r = c.call(SetParameters, f'/{n}/set_parameters',
                               SetParameters.Request(parameters=[Parameter(name=name, value=v)]), proc=procs[n])
                    counts['parameters'] += 1
                    counts['parameters_refused'] += not r.results[0].successful
                    assert len(r.results[0].reason) <= DIAG_LIMIT + 200, (n, name)
            restore = [Parameter(name=k, value=_pv(v)) for k, v in original.items() if v is not None]
            r = c.call(SetParameters, f'/{n}/set_parameters', SetParameters.Request(parameters=restore),
                       proc=procs[n])
            refused = [(p.name, x.reason) for p, x in zip(restore, r.results) if not x.successful]
            assert not [r for r in refused if 'read-only' not in r[1]], [r for r in refused if 'read-only' not in r[1]]
            again = c.parameters(n, procs[n])
            assert set(again) == set(original), (n, set(original) - set(again))   # none undeclared
        fuzz_s = time.monotonic() - t_fuzz
        r = c.call(SetState, '/flexarm/reset', SetState.Request(to_initial=True), proc=procs['plant'])
        assert r.success, r.message
        c.call(SetBool, '/flexarm/pause', SetBool.Request(data=False), proc=procs['plant'])    # (pause_at paused it)

        # still working: the arm follows a valid reference to its target
        fz.spin(1.0)
        state = fz.states[-1][1]
        now = state.header.stamp.sec + 1e-9 * state.header.stamp.nanosec
        target = [0.3, -0.2]
        accepted = int(fz.diags['flexarm_control/modal']['references_accepted'])
        fz.send('/flexarm/reference', _trajectory(names, [(6.0, target)]))
        c.spin_until(lambda: int(fz.diags['flexarm_control/modal']['references_accepted']) > accepted, 30,
                     'the valid reference accepted', procs['modal'])

        def arrived():
            return fz.states and np.allclose(fz.states[-1][1].position, target, atol=0.05)
        try:
            c.spin_until(arrived, 60, 'the arm at the reference after the fuzz', procs['modal'])
        except AssertionError:
            raise AssertionError(f'the arm did not follow: last position {list(fz.states[-1][1].position)}; '
                                 f'plant {fz.diags.get("flexarm plant")}; modal {fz.diags.get("flexarm_control/modal")}')
        for n, p in procs.items():
            assert p.poll() is None, (n, p.stderr.read()[-3000:])
        plant, modal = fz.diags.get('flexarm plant', {}), fz.diags['flexarm_control/modal']
        est = fz.diags.get('flexarm_control/state_estimator', {})
        assert fz.diag_sizes <= DIAG_LIMIT
        for _, m in fz.states:
            q, qd = np.array(m.position), np.array(m.velocity)
            assert np.all(np.isfinite(q)) and np.all(np.isfinite(qd))
            assert np.all(q >= lim[:, 0] - 0.1) and np.all(q <= lim[:, 1] + 0.1)       # (+ the stops' give)
        assert plant['divergences'] == '0', plant
        new = [(t, _stamp(m)) for t, m in fz.states if t_big <= t <= t_big_end]
        new = [t for (t, s), (_, s0) in zip(new[1:], new[:-1]) if s != s0]
        gaps = np.diff([t_big] + new + [t_big_end]) if new else [math.inf]
        assert max(gaps) < STALL_S, f'plant time stood still {max(gaps):.1f} s while large references were checked'
        print(f'\nfuzz (seed {SEED}, {fuzz_s:.1f} s): sent {fz.sent}; resets {counts["resets"]} '
              f'({counts["resets_refused"]} refused); parameter sets {counts["parameters"]} '
              f'({counts["parameters_refused"]} refused); plant commands accepted/rejected '
              f'{plant.get("commands_accepted")}/{plant.get("commands_rejected")}; modal references accepted/'
              f'rejected {modal.get("references_accepted")}/{modal.get("references_rejected")}, states rejected '
              f'{modal.get("states_rejected")}; estimator encoders rejected {est.get("encoders_rejected")}; '
              f'states received {len(fz.states)}')
        assert int(modal['references_rejected']) >= 14 and int(plant['commands_rejected']) > 0
        assert int(est['encoders_rejected']) > 0 and int(modal['states_rejected']) > 0
    finally:
        fz.c.close()
        for n, p in procs.items():
            if p.poll() is None:
                code, dt, err = stop_cleanly(p, signal.SIGINT)
                assert code == 0 and 'Traceback' not in err, (n, code, err[-3000:])


def _stamp(msg):
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def _pv(value):
    """An rcl_interfaces/ParameterValue of a Python value (what `ros2 param set` sends)."""
    from rcl_interfaces.msg import ParameterType as T
    from rcl_interfaces.msg import ParameterValue
    if isinstance(value, bool):
        return ParameterValue(type=T.PARAMETER_BOOL, bool_value=value)
    if isinstance(value, int):
        return ParameterValue(type=T.PARAMETER_INTEGER, integer_value=value)
    if isinstance(value, float):
        return ParameterValue(type=T.PARAMETER_DOUBLE, double_value=value)
    if isinstance(value, str):
        return ParameterValue(type=T.PARAMETER_STRING, string_value=value)
    if all(isinstance(x, str) for x in value):
        return ParameterValue(type=T.PARAMETER_STRING_ARRAY, string_array_value=list(value))
    if value and all(isinstance(x, bool) for x in value):
        return ParameterValue(type=T.PARAMETER_BOOL_ARRAY, bool_array_value=list(value))
    if value and all(isinstance(x, int) for x in value):
        return ParameterValue(type=T.PARAMETER_INTEGER_ARRAY, integer_array_value=list(value))
    return ParameterValue(type=T.PARAMETER_DOUBLE_ARRAY, double_array_value=[float(x) for x in value])
