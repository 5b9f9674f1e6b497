"""The controller runtime in-process (no ROS, no timing): references checked against the arm, no input makes a law
raise, and the overload safe mode keeps a delayed loop bounded where the designed law runs away."""
import math
import os
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from flexarm_control.controller import config
from flexarm_control.controller.runtime import ControllerRuntime
from flexarm_control.laws import ComputedTorque, ModalLQR, PDServo, PointToPoint
from flexarm_sim.model import load_model
from flexarm_sim.plant.engine import PlantCore
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


def _values(kind, **kw):
    return dict(config.TABLES[kind].defaults(), **kw)


def _traj(names, points, stamp=0.0):
    """A trajectory_msgs/JointTrajectory look-alike: points = [(t, positions, velocities)]."""
    sec = math.floor(stamp)
    pts = [SimpleNamespace(positions=list(p), velocities=list(v), accelerations=[],
                           time_from_start=SimpleNamespace(sec=int(math.floor(t)), nanosec=int((t % 1) * 1e9)))
           for t, p, v in points]
    return SimpleNamespace(joint_names=list(names), points=pts,
                           header=SimpleNamespace(stamp=SimpleNamespace(sec=int(sec), nanosec=int((stamp - sec) * 1e9))))


def test_references_are_checked_against_the_arm_and_a_refused_one_keeps_the_previous(deluca):
    rt = ControllerRuntime('pd_servo', deluca, _values('pd_servo', lockstep=True))
    z, zd = np.zeros(deluca.n_coords), np.zeros(deluca.n_coords)
    rt.hold(z, 0.0)
    names = deluca.spec.joint_names
    ok, why = rt.on_reference(_traj(names, [(1.0, [0.5, 0.5], [0.0, 0.0])]), 0.0)
    assert ok, why
    good = rt.law.references.active
    for bad, words in (
            ([(1.0, [1e308, 0.0], [0.0, 0.0])], ('shoulder', 'outside its limits')),     # issue 18's 1e308
            ([(1.0, [0.5, 4.0], [0.0, 0.0])], ('elbow', 'outside its limits')),          # beyond +-pi
            ([(0.1, [0.5, 3.0], [0.0, 0.0])], ('velocity', 'exceeds its limit')),        # 10 rad/s limit
            ([(1.0, [0.1, 0.1], [0.0, 0.0]), (0.5, [0.2, 0.2], [0.0, 0.0])], ('increasing',)),
            ([(1.0, [float('nan'), 0.0], [0.0, 0.0])], ('non-finite',)),
            ([(1.0, [0.1], [0.0])], ('one position per joint',))):
        ok, why = rt.on_reference(_traj(names, bad), 0.0)
        assert not ok and all(w in why for w in words), why
        assert rt.law.references.active is good
    ok, why = rt.on_reference(_traj(names, [(1.0, [0.1, 0.1], [0.0, 0.0])], stamp=1e9), 0.0)
    assert not ok and 'ahead' in why
    assert rt.references_rejected == 7
    tau = rt.on_state(z, zd, 0.5)
    assert np.all(np.isfinite(tau)) and rt.law.n_faults == 0


def test_references_are_feasible_from_the_current_state_and_start_time(deluca):
    """Issue 24: a reference is checked from where the current reference is and from the time it really starts. A
    first point at time_from_start 0 somewhere else is a step (a 1 rad step saturated both joints and drove the
    elbow to 39.7 rad/s, limit 10): refused. A stamp in the past up to MAX_LATE_S is re-timed to start now, with a
    warning (the past-stamped 1 rad in 0.01 s reached 841 mm at the tip: re-timed, it is refused for its speed);
    later it is refused. Accelerations the drives cannot give (inertia x acceleration > effort limit) are refused.
    Oversized references are refused before anything is built, their reasons bounded."""
    from flexarm_control.laws.reference import MAX_LATE_S, MAX_POINTS
    rt = ControllerRuntime('modal', deluca, _values('modal', lockstep=True))
    z = np.zeros(deluca.n_coords)
    rt.hold(z, 10.0)
    names = deluca.spec.joint_names
    step = 1.0 / rt.rate * 10.0                   # what the joint covers in a period at its velocity limit
    for points, stamp, words in (
            ([(0.0, [1.0, 1.0])], 0.0, ('step of 1 rad', 'time_from_start 0')),
            ([(0.0, [0.5 * step, 0.0]), (3.0, [0.3, 0.3])], 0.0, None),              # within one period: fine
            ([(0.01, [1.0, 1.0])], 9.99, ('velocity', 'exceeds its limit')),        # 10 ms late: re-timed, too fast
            ([(3.0, [0.5, 0.5])], 10.0 - 1.5 * MAX_LATE_S, ('in the past',)),
            ([(0.3, [0.0, 0.5])], 0.0, ('acceleration', 'effort limit', 'elbow'))):
        pts = [(t, p, []) for t, p in points]
        ok, why = rt.on_reference(_traj(names, pts, stamp=stamp), 10.0)
        if words is None:
            assert ok, why
        else:
            assert not ok and all(w in why for w in words), why
    ok, why = rt.on_reference(_traj(names, [(2.0, [0.2, 0.2], [])], stamp=9.9), 10.0)
    assert ok and 're-timed to start now' in why and '100.0 ms' in why
    assert rt.law.references.active.t0 == 10.0
    big = SimpleNamespace(joint_names=list(names), points=[None] * (MAX_POINTS + 1),
                          header=SimpleNamespace(stamp=SimpleNamespace(sec=0, nanosec=0)))
    ok, why = rt.on_reference(big, 10.0)
    assert not ok and f'at most {MAX_POINTS}' in why
    many = SimpleNamespace(joint_names=[f'j{i}' for i in range(10 ** 5)], points=[],
                           header=SimpleNamespace(stamp=SimpleNamespace(sec=0, nanosec=0)))
    ok, why = rt.on_reference(many, 10.0)
    assert not ok and '100000 joint names' in why and len(why) < 200
    dup = _traj(['shoulder', 'shoulder'], [(1.0, [0.1, 0.1], [0.0, 0.0])])
    ok, why = rt.on_reference(dup, 10.0)
    assert not ok and 'at most once' in why


@pytest.mark.parametrize('law_kind', ['pd_servo', 'modal', 'computed_torque'])
def test_no_state_or_reference_makes_a_law_raise(law_kind, deluca):
    """Absurd but finite states (1e308, huge rates) and references at the limits: a finite, bounded torque or zero
    torque with a fault — never an exception (issue 18: the modal law raised a TypeError on 1e308)."""
    law = {'pd_servo': lambda: PDServo(deluca), 'modal': lambda: ModalLQR(deluca),
           'computed_torque': lambda: ComputedTorque(deluca)}[law_kind]()
    rng = np.random.default_rng(5)
    N = deluca.n_coords
    law.set_reference(PointToPoint(np.zeros(2), np.array([3.14, -3.14]), 1.0))
    for k in range(60):
        scale = 10.0 ** rng.integers(-3, 309)
        z = rng.standard_normal(N) * scale
        zd = rng.standard_normal(N) * 10.0 ** rng.integers(-3, 309)
        tau = law(0.01 * k, z, zd)
        assert tau.shape == (2,) and np.all(np.isfinite(tau)) and np.all(np.abs(tau) <= law.effort_limit)


def _delayed_run(model, kind, delay_s, T=3.0, safe_mode=True, dt=1e-3, rate=500.0):
    """De Luca arm, 60 deg cycloid in 2.5 s, control at `rate` whose commands act `delay_s` late (a transport
    delay line), states stamped at their sample instants so the runtime sees their age; returns the peak tip
    deflection (m) and the runtime."""
    values = _values(kind, rate=rate)
    rt = ControllerRuntime(kind, model, values)
    if not safe_mode:
        rt.safe_mode_applies = False
    if rt.designer is not None:                    # in-process: design the schedule synchronously
        rt.law.design_on_demand = True
    core = PlantCore(model, dt)
    steps_per_control = int(round(1.0 / (rate * dt)))
    delay_steps = int(round(delay_s / dt))
    pending = deque()                               # (step at which it applies, torque)
    tau = np.zeros(model.n_joints)
    rt.hold(core.z, 0.0)
    rt.law.references.set(PointToPoint(np.zeros(2), np.full(2, math.pi / 3), 2.5, 0.1), 0.0)
    peak = 0.0
    qi = model.q_index
    for k in range(int(T / dt)):
        if k % steps_per_control == 0:
            u = rt.on_state(core.z.copy(), core.zd.copy(), k * dt, age_s=delay_s)
            pending.append((k + delay_steps, u))
        while pending and pending[0][0] <= k:
            tau = pending.popleft()[1]
        if not core.advance(tau):
            return math.inf, rt
        z = core.z
        rigid = z.copy()
        rigid[model.mode_index] = 0.0
        peak = max(peak, float(np.linalg.norm(model.tip_pose(z)[1] - model.tip_pose(rigid)[1])))
        if not np.all(np.abs(z[qi]) < 50.0):
            return math.inf, rt
    return peak, rt


def test_overload_safe_mode_keeps_a_delayed_loop_bounded(deluca):
    """The modal LQR designed for one period (2 ms) of delay runs away behind 20 ms of delay (a loaded machine:
    issue 18 saw 80 m of 'tip deflection'); with the runtime's safe mode (state age > its limit) the fallback law
    keeps the arm bounded. Without delay the safe mode never engages and the figure is the designed one."""
    nominal, rt0 = _delayed_run(deluca, 'modal', 0.002)
    assert rt0.safe_mode_entries == 0 and 0.1 < nominal < 0.3
    runaway, _ = _delayed_run(deluca, 'modal', 0.020, safe_mode=False)
    # the designed law does not survive it: 4.7x nominal with the linear model (growing without bound); with
    # the geometric nonlinearity the stiffening holds it to a large oscillation, 3.0x nominal at 3 s (4.2x at 6 s)
    assert runaway > 2.5 * nominal
    safe, rt = _delayed_run(deluca, 'modal', 0.020)
    assert rt.safe_mode and rt.safe_mode_entries == 1
    assert safe < 1.5 * nominal, (safe, nominal)
    level, message, values = rt.diagnostics(stale=False)
    assert level == 'warn' and 'safe mode' in message and values['safe_mode'] == 'on'


def test_safe_mode_resumes_the_law_when_states_are_on_time_again(deluca):
    rt = ControllerRuntime('pd_servo', deluca, _values('pd_servo', **{'safe_mode.trigger_count': 3,
                                                                      'safe_mode.recover_time': 0.5}))
    z, zd = np.zeros(deluca.n_coords), np.zeros(deluca.n_coords)
    period = 1.0 / rt.rate
    t = 0.0
    for _ in range(2):
        rt.on_state(z, zd, t, age_s=10 * rt.max_state_age)
        t += period
    assert not rt.safe_mode                                         # 2 late states: below the trigger count (3)
    rt.on_state(z, zd, t, age_s=10 * rt.max_state_age)
    assert rt.safe_mode
    t += period
    while t < 0.4:                                                  # on time, but not yet recover_time (0.5 s)
        rt.on_state(z, zd, t, age_s=0.0)
        t += period
    assert rt.safe_mode
    # pd_servo does not return the arm by itself: the hold law's return (at least SafeMode.return_time_min) ends first
    while t < max(1.0, rt.safe.return_time_min + 0.1):
        rt.on_state(z, zd, t, age_s=0.0)
        t += period
    assert not rt.safe_mode and rt.safe_mode_entries == 1
    # each skipped state period counts as one period of age: 10 missed (a 22 ms stall) is one late state, ridden
    # through; a command held beyond stall_limit (0.1 s) switches at once
    t += 10 * period                                          # the last state was at t - period: 10 missed
    rt.on_state(z, zd, t, age_s=0.0)
    assert not rt.safe_mode and rt.states_skipped == 10 and rt.late_states == 4
    t += period
    for _ in range(200):                                      # on time for 0.4 s: the late state leaves the window
        rt.on_state(z, zd, t, age_s=0.0)
        t += period
    t += rt.values['safe_mode.stall_limit'] + period
    rt.on_state(z, zd, t, age_s=0.0)
    assert rt.safe_mode and rt.safe_mode_entries == 2 and rt.late_states == 5


def test_rate_mismatch_is_reported(deluca):
    logs = []
    rt = ControllerRuntime('pd_servo', deluca, _values('pd_servo', lockstep=True), log=lambda lv, m: logs.append(m))
    z, zd = np.zeros(deluca.n_coords), np.zeros(deluca.n_coords)
    for k in range(60):
        rt.on_state(z, zd, k * 0.01)            # states at 100 Hz, rate 500 Hz (issue 12's plant.yaml vs controllers)
    assert rt.measured_rate == pytest.approx(100.0)
    assert any('states arrive at 100 Hz' in m and '500 Hz' in m for m in logs)


def test_a_plant_waiting_for_the_first_command_is_no_late_state(deluca):
    """Before a command of the controller takes effect, a plant started with wait_for_command publishes every 50 ms
    (its idle period): those gaps held no command of the controller's and do not enter the safe mode (they put every
    real-time run there at its start). Once the states come one period apart, skipped periods count: each one
    period of age (two states arriving together are on time for the modal law, designed for two periods of delay at 500 Hz),
    25 of them are late; trigger_count of them within 0.25 s enter the safe mode."""
    rt = ControllerRuntime('modal', deluca, _values('modal'))
    n = rt.safe.trigger_count
    z, zd = np.zeros(deluca.n_coords), np.zeros(deluca.n_coords)
    period = 1.0 / rt.rate
    assert rt.input_delay == pytest.approx(2 * period)           # the modal law's real-time design at 500 Hz
    t = 0.0
    for _ in range(5):                                            # the waiting plant's cadence
        rt.on_state(z, zd, t, age_s=0.001)
        t += 0.05
    assert not rt.safe_mode and rt.late_states == 0
    for _ in range(5):                                            # the loop closed: one period apart
        rt.on_state(z, zd, t, age_s=0.001)
        t += period
    rt.on_state(z, zd, t + period, age_s=0.001)                   # one skipped: 1 + 2 ms of 8 ms
    assert not rt.safe_mode and rt.late_states == 0
    t += 26 * period
    rt.on_state(z, zd, t, age_s=0.001)                            # 24 skipped: 49 ms, one late state: ridden through
    assert not rt.safe_mode and rt.late_states == 1
    for _ in range(n - 1):                                        # more within 0.25 s: persistent lateness
        assert not rt.safe_mode
        t += 6 * period
        rt.on_state(z, zd, t, age_s=0.001)
    assert rt.safe_mode and rt.late_states == n
