"""PlantCore stepping, divergence guard and reset; derived outputs and message building."""
import os
import threading
import time

import numpy as np
import pytest

from flexarm_sim.arms import load_arm_model, shipped_arms, shipped_arms_dir
from flexarm_sim.model import ArmState, load_model, step
from flexarm_sim.plant.engine import MAX_AUTO_SUBSTEPS, PlantCore, auto_substeps, initial_state
from flexarm_sim.plant.outputs import ArmOutputs, quaternion_xyzw

ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


@pytest.fixture(scope='module')
def spatial():
    return load_model(os.path.join(ARMS, 'spatial_3r.yaml'))


def test_core_matches_model_step(deluca):
    z0, zd0 = initial_state(deluca, [0.1, -0.2], [], [0.01, 0.0, 0.005, 0.0])
    core = PlantCore(deluca, 1e-3, 2)
    core.set_initial(z0, zd0)
    core.reset()
    s = ArmState(z0.copy(), zd0.copy(), 0.0, deluca.workspace())
    tau = np.array([0.3, -0.1])
    for _ in range(50):
        assert core.advance(tau)
        step(deluca, s, tau, 1e-3, 2)
    assert np.array_equal(core.z, s.z) and np.array_equal(core.zd, s.zd)
    assert core.step_index == 50 and core.t == pytest.approx(0.05)
    core.reset()
    assert core.step_index == 0 and np.array_equal(core.z, z0)


def test_initial_state_validation(deluca):
    with pytest.raises(ValueError, match='position'):
        initial_state(deluca, [0.1])
    with pytest.raises(ValueError, match='modal_velocity'):
        initial_state(deluca, [], [], [], [np.nan] * 4)


def test_divergence_guard_keeps_last_good_state(spatial):
    # RK4 at 1 ms without substeps is unstable for this stiff arm (stable step ~0.39 ms)
    core = PlantCore(spatial, 1e-3, substeps=1)
    core.reset()
    good = True
    for _ in range(5000):
        z_before = core.z.copy()
        good = core.advance(np.zeros(3))
        if not good:
            break
    assert not good and core.diverged and 'diverged' in core.diverged
    assert np.all(np.isfinite(core.z)) and np.all(np.isfinite(core.zd))
    assert np.array_equal(core.z, z_before)
    assert not core.advance(np.zeros(3))          # stays stopped until reset
    core.reset()
    assert core.diverged == '' and core.advance(np.zeros(3))


def test_bounds_trip_the_guard(deluca):
    core = PlantCore(deluca, 1e-3, 1, max_abs_velocity=0.5)
    core.reset()
    ok = all(core.advance(np.array([2.0, 2.0])) for _ in range(2000))
    assert not ok and 'bounds' in core.diverged


def test_auto_substeps_keep_rk4_stable(spatial):
    n = auto_substeps(spatial, 1e-3, 'rk4')
    assert n >= 3
    core = PlantCore(spatial, 1e-3, 0)
    core.reset()
    assert core.substeps == n
    assert all(core.advance(np.zeros(3)) for _ in range(500))
    assert auto_substeps(spatial, 1e-3, 'midpoint') == 1


def test_outputs_agree_with_model(deluca, spatial):
    for m in (deluca, spatial):
        out = ArmOutputs(m, 15)
        rng = np.random.default_rng(1)
        z = rng.normal(scale=0.01, size=m.n_coords)
        zd = rng.normal(scale=0.1, size=m.n_coords)
        R, p, v, w, pr = out.end_effector(z, zd)
        R0, p0 = m.tip_pose(z)
        assert np.allclose(R, R0) and np.allclose(p, p0)
        # velocity by a finite difference along the motion
        h = 1e-7
        assert np.allclose(v, (m.tip_pose(z + h * zd)[1] - p0) / h, atol=1e-5)
        zr = np.zeros_like(z)
        zr[m.q_index] = z[m.q_index]
        assert np.allclose(pr, m.tip_pose(zr)[1])
        joints, lines, tip = out.geometry(z)
        for j in range(m.n_joints):
            assert np.allclose(lines[j][1:], m.centerline(z, j, 15))
        assert np.allclose(tip, p0)
        total_el = sum(out.link_values(info, z, zd)[4] for info in out.links)
        assert total_el == pytest.approx(m.energies(z, zd)['elastic'])


def test_quaternion():
    from scipy.spatial.transform import Rotation
    for q in Rotation.random(20, random_state=3).as_quat():
        R = Rotation.from_quat(q).as_matrix()
        got = quaternion_xyzw(R)
        assert np.allclose(got, q if q[3] >= 0 else -q)


@pytest.mark.parametrize('arm', shipped_arms())
def test_every_shipped_arm_runs_in_the_plant(arm):
    """Issue 15 item 4: every shipped arm, with the plant's default sub-step rule (substeps 0) at 1 ms, both
    integrators, 1 s from its nominal configuration under 30 % of each joint's effort limit, sign flipped every
    0.25 s (the rigid PUMA also falls under gravity into a stop): no error, no divergence, a bounded number of
    sub-steps (the rule once gave the PUMA 1.3e9)."""
    model, _ = load_arm_model(arm)
    effort = np.array([js.effort_limit for js in model.spec.joints])
    effort = 0.3 * np.where(np.isfinite(effort), effort, 0.0)
    for method in ('rk4', 'midpoint'):
        core = PlantCore(model, 1e-3, 0, method)
        assert 1 <= core.substeps <= core.substeps_contact <= MAX_AUTO_SUBSTEPS
        z0, zd0 = initial_state(model, model.spec.nominal_configuration)
        core.set_initial(z0, zd0)
        core.reset()
        for k in range(1000):
            assert core.advance(effort if (k // 250) % 2 == 0 else -effort), core.diverged
        assert np.all(np.isfinite(core.z)) and core.t == pytest.approx(1.0)
        assert np.any(core.zd[model.q_index] != 0.0)


def test_validity_report(deluca):
    """PlantCore.validity: within the model's range at small deflections, flagged (and counted) beyond it."""
    core = PlantCore(deluca, 1e-3, 0)
    core.reset()
    core.advance(np.zeros(2))
    assert core.validity()[0] and 'valid up to 15 %' in core.validity()[1]
    z0, zd0 = initial_state(deluca, [], [], [0.5, 0.0, 0.0, 0.0])      # link 1 bent far beyond 15 %
    core.set_initial(z0, zd0)
    core.reset()
    core.advance(np.zeros(2))
    within, msg = core.validity()
    assert not within and core.relative_deflection > core.validity_limit and 'OUTSIDE' in msg
    assert core.validity_exceeded_steps == 1 and '1 steps beyond' in msg


def test_plant_diagnostics_report_validity_and_the_envelope(deluca):
    """The plant's /diagnostics values (PlantRuntime.diagnostics, no DDS): the model's validity turns an 'ok' into a
    WARN naming it; the joint-stop and velocity counters are listed per joint; a reset zeroes them."""
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    rt = PlantRuntime(deluca, config.resolved(dict(config.TABLE.defaults(), time_mode='lockstep'), deluca))
    level, msg, v = rt.diagnostics()
    assert level == 'ok' and v['steps_beyond_model_validity'] == 0
    assert v['joint_stop_contact_steps'] == [0, 0] and v['velocity_limit_exceeded_steps'] == [0, 0]
    c = rt.core
    z0, zd0 = initial_state(deluca, [], [], [0.5, 0.0, 0.0, 0.0])      # link 1 bent far beyond the validity
    c.set_initial(z0, zd0)
    c.reset()
    c.advance(np.zeros(2))
    level, msg, v = rt.diagnostics()
    assert level == 'warn' and 'OUTSIDE' in msg and v['steps_beyond_model_validity'] == 1
    assert v['max_tip_deflection_over_length'] > v['model_validity_limit']
    z0, zd0 = initial_state(deluca, [np.pi + 0.05, 0.0], [0.0, 0.0], [])   # the shoulder in its hard stop
    c.set_initial(z0, zd0)
    c.reset()
    c.advance(np.zeros(2))
    v = rt.diagnostics()[2]
    assert v['joint_stop_contact_steps'] == [1, 0] and v['joint_stop_penetration_rad'][0] > 0.04
    rt.reset(True)
    v = rt.diagnostics()[2]
    assert v['steps_beyond_model_validity'] == 0 and v['joint_stop_contact_steps'] == [0, 0]


def test_an_arm_driven_into_its_hard_stop_stays_within_the_stated_penetration(deluca):
    """Issue 18 item 2: the De Luca shoulder driven at its effort limit (2 N m) from 2.5 rad into its stop at pi.
    The default stop (arm_model.joint_stops) is stiff enough that the effort limit alone holds it within 1 deg and
    an impact at the velocity limit within 5 deg (k >= J_out (v_lim / 5 deg)^2), so a spring pushed by F = effort
    and hit at speed v bounds the penetration by F/k + sqrt((F/k)^2 + J_out v^2 / k) (energy; the damping only
    lowers it); after 3 s the arm rests within 1 deg of the stop. Contact and any velocity-limit excess are counted."""
    from flexarm_sim.model.arm_model import STOP_PENETRATION_AT_EFFORT as X_F, STOP_PENETRATION_AT_SPEED as X_V
    js = deluca.spec.joints[0]
    lo, hi = js.position_limits
    F, v_lim = js.effort_limit, js.velocity_limit
    lo_, hi_, k, c = deluca.data.joint_stop[0]
    assert hi_ == hi and k >= F / X_F * (1 - 1e-12)
    core = PlantCore(deluca, 1e-3, 0)
    z0, zd0 = initial_state(deluca, [2.5, 0.0])
    core.set_initial(z0, zd0)
    core.reset()
    qi = deluca.q_index[0]
    v_impact, pen = 0.0, []
    for _ in range(3000):
        assert core.advance(np.array([F, 0.0])), core.diverged
        q, qd = core.z[qi], core.zd[qi]
        if q < hi:
            v_impact = max(v_impact, qd)
        pen.append(q - hi)
    J_out = np.diag(deluca.mass_matrix(core.z))[qi]
    bound = F / k + np.sqrt((F / k) ** 2 + J_out * v_impact ** 2 / k)
    assert v_impact > 1.0 and 0.0 < max(pen) <= bound                   # it did hit, and no deeper than energy allows
    assert max(pen) <= X_F + X_V * v_impact / v_lim + 1e-9              # the stated figures
    assert 0.0 < pen[-1] <= X_F * 1.05                                   # resting against the stop, held by 2 N m
    assert core.stop_contact_steps[0] > 0 and core.stop_penetration[0] == pytest.approx(pen[-1])
    assert core.velocity_limit_violations[0] == 0 or v_impact > v_lim


class _TimelineSink:
    """Records what a lock-step plant publishes (thread-safe) and answers every state with a command."""

    def __init__(self, rt, tau):
        self.rt, self.tau = rt, tau
        self.lock = threading.Lock()
        self.events = []

    def _add(self, *e):
        with self.lock:
            self.events.append(e)

    def state(self, z, zd, tau, step, t_ns):
        self._add('state', step, t_ns)
        self.rt.submit_stamped(step + 1, t_ns, self.tau)

    def joint_state(self, z, zd, tau, t_ns):
        self._add('joint_state', t_ns)

    def clock(self, t_ns):
        self._add('clock', t_ns)

    def markers(self, joints, lines, tip, trail, t_ns):
        self._add('markers', t_ns, len(trail))

    def sensors(self, s):
        pass

    def diagnostics(self, *a):
        pass

    def log(self, *a):
        pass

    def unique(self, kind):
        with self.lock:
            return sorted({e[1:] for e in self.events if e[0] == kind})


def _wait(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.005)


def test_lockstep_timeline_from_step_0_to_pause_at(deluca):
    """start_paused: nothing is integrated until /flexarm/pause false (the initial state is re-sent meanwhile, with
    its stamp 0); pause_at: the plant pauses itself at the first control instant at or after it, so the run's
    timeline ends at the same step every time. Markers of a lock-step plant are computed in its loop, none dropped:
    one per markers period of plant time, the trail growing by one point per new instant (a re-sent one adds none)."""
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    v = config.resolved(dict(config.TABLE.defaults(), time_mode='lockstep', start_paused=True, pause_at=0.5,
                             **{'publish_rates.markers': 100.0}), deluca)
    rt = PlantRuntime(deluca, v)
    sink = _TimelineSink(rt, np.array([0.01, -0.01]))
    rt.start(sink)
    try:
        _wait(lambda: len(sink.unique('state')) >= 1 and len(sink.events) > 20)     # paused: re-sending step 0
        assert sink.unique('state') == [(0, 0)] and rt.core.step_index == 0
        rt.pause(False)
        _wait(lambda: rt.core.step_index > 100)
        rt.pause(True)                                                  # paused anywhere on the way (a recorder's
        time.sleep(0.2)                                                 # pace): nothing new on the timeline
        rt.pause(False)
        _wait(lambda: rt.paused and rt.core.step_index == 500)         # pause_at reached
        time.sleep(0.2)                                                 # re-sends of the last instant only
        states = sink.unique('state')
        assert [s for s, _ in states] == list(range(0, 501, 2))         # 500 Hz control, 1 kHz loop: 0 .. 500 ms
        assert states[-1][1] == 500_000_000
        marks = sink.unique('markers')
        assert [t for t, _ in marks] == [10_000_000 * k for k in range(51)]      # 100 Hz of plant time
        assert [n for _, n in marks] == list(range(1, 52))                        # one trail point per instant
        assert [t for (t,) in sink.unique('clock')][-1] == 500_000_000
    finally:
        rt.stop()


def test_paced_simtime_loop_is_fifo_until_it_never_sleeps(deluca):
    """plant/runtime.py: a simtime plant paced at a real-time factor runs its loop thread SCHED_FIFO at
    timing.realtime_priority (it sleeps between steps); set to real_time_factor 0 (as fast as possible, never
    sleeping) it returns to normal scheduling, or a FIFO thread would hog a core. Where FIFO is refused (no
    CAP_SYS_NICE) the loop is at normal scheduling throughout and says so."""
    import os
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    rt = PlantRuntime(deluca, config.resolved(dict(config.TABLE.defaults(), time_mode='simtime',
                                                   real_time_factor=1.0), deluca))
    sink = _TimelineSink(rt, np.zeros(2))
    rt.start(sink)
    loop = next(t for t in rt._threads if t.name == 'plant-loop')
    try:
        _wait(lambda: rt.core.step_index > 50)
        fifo = rt.loop_priority == 50
        assert os.sched_getscheduler(loop.native_id) == (os.SCHED_FIFO if fifo else os.SCHED_OTHER)
        if fifo:
            assert os.sched_getparam(loop.native_id).sched_priority == 50
        rt.apply(dict(rt.cfg, real_time_factor=0.0), changed=('real_time_factor',))
        _wait(lambda: rt.loop_priority == 0 and os.sched_getscheduler(loop.native_id) == os.SCHED_OTHER, timeout=10.0)
        steps = rt.core.step_index
        _wait(lambda: rt.core.step_index > steps + 100)                # and it still runs
    finally:
        rt.stop()


def test_reset_refuses_states_beyond_the_arm_and_the_model(deluca):
    """/flexarm/reset (PlantRuntime.reset): joint rates beyond the velocity limits, a tip deflection beyond the model's
    validity, and modal rates beyond what a mode reaches at its frequency with the largest valid amplitude are
    refused, naming the field (a reset to 99,999 rad/s or a modal coordinate of 5000 passed the divergence bounds and
    the plant 'diverged at step 1' with a 2e8 m tip). States within them are accepted."""
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    rt = PlantRuntime(deluca, config.resolved(dict(config.TABLE.defaults()), deluca))
    lm = deluca.link_modes[0]
    length = deluca.spec.joints[0].link.length
    reach = np.linalg.norm(deluca.data.phi_tip[0, :, 0])
    amplitude = rt.core.validity_limit * length / reach           # mode 1 of link 1 at the validity limit
    for args, words in (
            (([0, 0], [99999.0, 0], [], []), ('velocity[0]', 'shoulder', 'velocity limit')),
            (([0, 0], [0, -10.5], [], []), ('velocity[1]', 'elbow')),
            (([0, 0], [], [5000.0, 0, 0, 0], []), ('modal_position', 'shoulder', 'validity')),
            (([0, 0], [], [1.01 * amplitude, 0, 0, 0], []), ('modal_position',)),
            (([0, 0], [], [], [1.01 * lm.omega[0] * amplitude, 0, 0, 0]), ('modal_velocity[0]', 'mode 1'))):
        ok, why = rt.reset(False, *args)
        assert not ok and all(w in why for w in words), why
    for args in (([0.3, -0.2], [9.9, -9.9], [], []), ([0, 0], [], [0.99 * amplitude, 0, 0, 0],
                                                      [0.99 * lm.omega[0] * amplitude, 0, 0, 0])):
        ok, why = rt.reset(False, *args)
        assert ok, why


def test_simtime_never_catches_up_realtime_does(deluca):
    """plant/runtime.py: a late realtime step runs back to back up to max_catchup_steps (the wall clock is the
    plant's time); a late simtime step does not (simulated time owes the wall clock nothing: the real-time factor
    drops under load instead of steps bursting ahead of the controller's answers), whatever the parameter says."""
    from flexarm_sim.common.scheduler import FixedRateScheduler
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    for mode, expected in (('realtime', 7), ('simtime', 0)):
        rt = PlantRuntime(deluca, config.resolved(dict(config.TABLE.defaults(), time_mode=mode,
                                                       max_catchup_steps=7), deluca))
        assert rt.sched.max_catchup == expected, mode
        rt.apply(dict(rt.cfg, max_catchup_steps=9), changed=('max_catchup_steps',))
        assert rt.sched.max_catchup == (9 if mode == 'realtime' else 0), mode
    # what max_catchup 0 does: a step 3.5 periods late re-anchors (3 periods dropped), the next is due a period on
    t = [0.0]
    s = FixedRateScheduler(1e-3, max_catchup=0, clock=lambda: t[0], sleep=lambda dt: t.__setitem__(0, t[0] + dt))
    s.start(0.0)
    t[0] = 4.5e-3                                   # tick 1 was due at 1 ms
    s.wait()
    assert s.stats.overruns == 1 and s.stats.skipped == 3 and s.next_deadline == pytest.approx(5e-3)
