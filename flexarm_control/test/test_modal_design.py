"""The modal feedback's design (issue 23 item 2): Bryson weights on physical quantities, no integrator without
friction, and robustness as a tested property — the sampled closed loop (laws.modal.closed_loop_radius) stays
stable for fed-back modal coordinates scaled by 0.85 and 1.15 and for plants with +-20 % payload and +-15 % E.I,
at the start, middle and end of the standard move, on every shipped arm with flexible links."""
import math

import numpy as np
import pytest

from flexarm_control.laws.modal import ModalLQR, closed_loop_radius, remembering_designs
from flexarm_control.laws.tip_tracking import TipTracking
from flexarm_control.moves import perturbed_model
from flexarm_sim.arms import resolve_arm, shipped_arms
from flexarm_sim.model import load_model
from flexarm_sim.model.spec import arm_from_dict, arm_to_dict

DT = 0.002
FLEXIBLE = [a for a in shipped_arms() if load_model(resolve_arm(a)).mode_index.size]


@pytest.fixture(scope='module')
def models():
    return {a: load_model(resolve_arm(a)) for a in FLEXIBLE}


def _configurations(model):
    q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
    return [q0, q0 + math.radians(30), q0 + math.radians(60)]


@pytest.mark.parametrize('arm', FLEXIBLE)
@pytest.mark.parametrize('law_class', [ModalLQR, TipTracking])
def test_lockstep_design_is_stable_for_modal_scale_and_payload_and_stiffness_errors(models, arm, law_class):
    model = models[arm]
    law = law_class(model, dt=DT)
    plants = [perturbed_model(model.spec, p, e) for p in (0.8, 1.2) for e in (0.85, 1.15)]
    worst = {}
    for q in _configurations(model):
        for s in (0.85, 1.0, 1.15):
            worst[f'modal x{s}'] = max(worst.get(f'modal x{s}', 0.0), closed_loop_radius(law, model, q, s))
        for p in plants:
            worst[p.spec.name] = max(worst.get(p.spec.name, 0.0), closed_loop_radius(law, p, q))
    assert max(worst.values()) < 1.0, worst


@pytest.mark.parametrize('arm', FLEXIBLE)
def test_real_time_design_for_one_period_of_delay_is_stable_on_the_nominal_arm(models, arm):
    """Real time: the gains are designed for the one-period transport delay (laws/modal.py) and the closed loop with
    that delay is stable on the nominal arm (its robustness ranges are reported by bench_controllers.py)."""
    model = models[arm]
    for law_class in (ModalLQR, TipTracking):
        law = law_class(model, dt=DT, input_delay=DT)
        for q in _configurations(model):
            assert closed_loop_radius(law, model, q) < 1.0


@pytest.mark.parametrize('rate, periods', [(1000.0, 4), (500.0, 2), (250.0, 1), (200.0, 1)])
def test_the_real_time_design_delay_is_4_ms_in_whole_periods(models, rate, periods):
    """The modal laws' real-time design is for 4 ms of delay in whole periods, at least one (ModalLQR.design_periods),
    not for two periods whatever the rate: at the bridge's 250 Hz two periods (8 ms) leave the loop unstable for actual
    delays below 2 ms (radius 1.04 at 0 ms), where the hardware path's prompt writes put the command (the emulated arm
    chattered into the bridge's velocity limit); at 1 kHz two periods hold 0-5 ms only. Here, De Luca arm, the
    controller runtime's derived delay at each rate, the loop stable from 0 ms to 4 ms of actual delay and beyond."""
    from flexarm_control.controller.runtime import ControllerRuntime
    from flexarm_control.controller import config as cconfig
    model = models['deluca_two_link']
    rt = ControllerRuntime('modal', model, dict(cconfig.TABLES['modal'].defaults(), rate=rate))
    assert rt.input_delay == pytest.approx(periods / rate)
    q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
    for d in (0.0, 0.001, 0.002, 0.004, 0.006):
        radius = max(closed_loop_radius(rt.law, model, q, input_delay=d) for q in (q0, q0 + 0.5))
        assert radius < 1.0, (rate, d, radius)
    if rate == 250.0:                 # the former rule, two periods (8 ms), without delay: unstable (measured 1.0415)
        two = ModalLQR(model, dt=1.0 / rate, input_delay=2.0 / rate)
        assert closed_loop_radius(two, model, q0, input_delay=0.0) > 1.01
    assert ModalLQR.design_periods(375.0) == 2 and ModalLQR.design_periods(100.0) == 1      # 1.5 rounds up; >= 1


def test_the_real_time_design_holds_a_band_of_actual_delays_the_one_period_design_does_not(models):
    """Why the modal laws design for two periods of delay in real time (ModalLQR.design_periods(500)): over DDS the
    actual delay varies (a few ms, more behind a stall). On the De Luca arm at the start, middle and end of the standard
    move, the loop designed for two periods (4 ms) is stable for every actual delay from 0 to 8 ms with the robust
    design (tip_tracking), 0-5 and 7 ms with the certainty-equivalent one (modal); the certainty-equivalent design for one period is unstable
    without delay and at 4 ms (1.36, 1.20), and so is a fractional 5 ms design at 4 ms (the integer designs are the
    robust ones; the robust one-period design: 1-3 and 5 ms). The delayed loop here (delay_augmented) is checked against the one-period
    formulation of test_every_closed_loop_mode_is_damped_at_least_the_floor at 2 ms."""
    from flexarm_control.controller.runtime import ControllerRuntime
    from flexarm_control.controller import config as cconfig
    model = models['deluca_two_link']
    for kind, law_class in (('modal', ModalLQR), ('tip_tracking', TipTracking)):
        rt = ControllerRuntime(kind, model, dict(cconfig.TABLES[kind].defaults(), rate=1 / DT))
        assert rt.input_delay == pytest.approx(2 * DT) and rt.law.input_delay == pytest.approx(2 * DT)
        qs = _configurations(model)
        remembering_designs(rt.law)
        # tip_tracking (robust design): 0-8 ms; modal (certainty-equivalent): 0-5 and 7 ms
        for d in np.arange(0.0, 0.0081, 0.001) if kind == 'tip_tracking' else [0.001 * k for k in (0, 1, 2, 3, 4, 5, 7)]:
            assert max(closed_loop_radius(rt.law, model, q, input_delay=d) for q in qs) < 1.0, (kind, d)
        # the certainty-equivalent designs (robust=0: the delayed LQR on the model alone)
        one = law_class(model, dt=DT, input_delay=DT, robust=0.0)
        assert closed_loop_radius(one, model, qs[0], input_delay=0.0) > 1.1
        assert closed_loop_radius(one, model, qs[0], input_delay=2 * DT) > 1.1
        frac = law_class(model, dt=DT, input_delay=2.5 * DT, robust=0.0)
        assert closed_loop_radius(frac, model, qs[0], input_delay=2 * DT) > 1.1
    # the general delayed loop against the one-period formulation (the damping test's), same law, same delay
    law = ModalLQR(model, dt=DT, input_delay=DT)
    ref = sorted(_closed_loop_damping(law, model, np.zeros(2)))
    from flexarm_control.laws.lti import delay_augmented, delayed_discretization
    from flexarm_sim.model import linearize
    from flexarm_sim.model.equilibrium import static_equilibrium
    K, _, _, _, Ku = law.design_delayed(np.zeros(2))
    z, tau = static_equilibrium(model, np.zeros(2))
    A, B = linearize(model, z, tau).state_space()
    Aa, Ba = delay_augmented(delayed_discretization(A, B, DT, DT), law.history)
    ev = np.linalg.eigvals(Aa - Ba @ np.hstack([K, Ku]))
    lam = np.log(ev[np.abs(ev) > 1e-12].astype(complex)) / DT
    mine = sorted((abs(s.imag) / (2 * math.pi), -s.real / abs(s)) for s in lam if s.imag > 1e-9)
    np.testing.assert_allclose(np.array(mine), np.array(ref), rtol=1e-6, atol=1e-9)


def test_the_real_time_design_is_robust_to_payload_stiffness_modal_scale_and_delay(models):
    """The real-time design (two periods of delay, laws/modal.py "Robust delay design"), De Luca arm, start, middle
    and end of the standard move. The certainty-equivalent delayed LQR (robust=0) loses the payload x stiffness
    corners (+-20 %, +-15 %: radius 1.0066 tip_tracking, 1.0078 modal; the +20 % payload / -15 % E.I arm's 2-3 Hz
    whole-arm modes undamped) and every corner at every actual delay 0-10 ms; the robust design keeps every corner
    stable for actual delays of 0-7 ms (measured radius <= 0.9994; 8 ms: 1.011), modal-coordinate scales 0.85 and
    1.14 (measured range x0.80-1.147 tip_tracking - short of 1.15: 1.0019 there -, x0.78-1.17 modal; the
    certainty-equivalent x0.80-1.08) and, in the nominal loop, the damping floor. Both laws design robustly."""
    from flexarm_control.controller import config as cconfig
    from flexarm_control.controller.runtime import ControllerRuntime
    model = models['deluca_two_link']
    qs = _configurations(model)
    corners = [perturbed_model(model.spec, p, e) for p in (0.8, 1.2) for e in (0.85, 1.15)]
    for kind, law_class in (('tip_tracking', TipTracking), ('modal', ModalLQR)):
        rt = ControllerRuntime(kind, model, dict(cconfig.TABLES[kind].defaults(), rate=1 / DT))
        law = remembering_designs(rt.law)
        assert law.input_delay == pytest.approx(2 * DT) and law.robust == 1.0
        for d in np.arange(0.0, 0.0071, 0.001):
            worst = max(closed_loop_radius(law, p, q, input_delay=d) for p in corners for q in qs)
            assert worst < 1.0, (kind, d, worst)
        for s in (0.85, 1.14):
            assert max(closed_loop_radius(law, model, q, s) for q in qs) < 1.0, (kind, s)
        assert law.robust_unconverged == 0
        for q in qs:
            worst = min(_closed_loop_damping(law, model, q), key=lambda m: m[1])
            assert worst[1] >= 0.01, (kind, q, worst)
        ce = remembering_designs(law_class(model, dt=DT, input_delay=2 * DT, robust=0.0))
        assert max(closed_loop_radius(ce, perturbed_model(model.spec, 1.2, 0.85), q) for q in qs) > 1.005
        assert max(closed_loop_radius(ce, model, q, 1.15) for q in qs) > 1.0


def test_the_multiplicative_noise_lqr_against_a_scalar_solution():
    """multiplicative_noise_lqr on x+ = (a + w da) x + b u, cost sum q x^2 + r u^2: the generalized Riccati equation
    p = q + a^2 p + da^2 p - a^2 b^2 p^2 / (r + b^2 p) solved in closed form (a quadratic in p), k = a b p / (r + b^2 p);
    without noise the plain LQR; noise beyond mean-square stabilizability (da^2 >= 1, no gain can help) reported
    unconverged with the last gain found."""
    from flexarm_control.laws.lti import multiplicative_noise_lqr
    a, b, q, r, da = 1.02, 0.5, 2.0, 0.3, 0.4
    # p (r + b^2 p) = (q + (a^2 + da^2) p)(r + b^2 p) - a^2 b^2 p^2  ->  c2 p^2 + c1 p + c0 = 0
    c2 = b * b * (1.0 - da * da)
    c1 = r - q * b * b - (a * a + da * da) * r
    c0 = -q * r
    p = max(np.roots([c2, c1, c0]).real)
    for tol, rel in ((1e-13, 1e-10), (None, 1e-6)):          # converged tightly; at the designs' tolerance
        kw = {} if tol is None else {'tol': tol}
        k, ok = multiplicative_noise_lqr(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]),
                                         [(np.array([[da]]), np.zeros((1, 1)))], **kw)
        assert ok and k[0, 0] == pytest.approx(a * b * p / (r + b * b * p), rel=rel)
    k0, ok0 = multiplicative_noise_lqr(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]), [])
    p0 = max(np.roots([b * b, r - q * b * b - a * a * r, -q * r]).real)
    assert ok0 and k0[0, 0] == pytest.approx(a * b * p0 / (r + b * b * p0), rel=1e-8)
    k_bad, bad = multiplicative_noise_lqr(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]),
                                          [(np.array([[1.1]]), np.zeros((1, 1)))])
    assert not bad and k_bad[0, 0] == k0[0, 0]            # not mean-square stabilizable: the noiseless gain


def test_a_robust_design_that_does_not_converge_falls_back_to_a_smaller_noise(models):
    """laws/modal.py ROBUST_FALLBACK_SCALES: the slewing beam sampled at 100 Hz behind 20 ms is not mean-square
    stabilizable at the full noise sizes (its 3rd clamped mode's -15 % E.I error); the fixed point's last iterate there
    was taken as the gain: joint gain 0.003 N m/rad against 19.0 certainty-equivalent (the tracking test's 240 mm).
    Now the noise is halved (it converges there: joint gain 17.9), and the design is counted as not fully robust."""
    beam = models['slewing_beam']
    law = ModalLQR(beam, dt=0.01, input_delay=0.02, robust=1.0)
    ce = ModalLQR(beam, dt=0.01, input_delay=0.02, robust=0.0)
    K = law.design_cell((3,))[0]
    K_ce = ce.design_cell((3,))[0]
    assert law.robust_unconverged == 1 and ce.robust_unconverged == 0
    assert 0.5 * K_ce[0, 0] < K[0, 0] < K_ce[0, 0], (K[0, 0], K_ce[0, 0])
    # the same design at 500 Hz / 4 ms converges at the full size
    fast = ModalLQR(beam, dt=0.002, input_delay=0.004, robust=1.0)
    fast.design_cell((3,))
    assert fast.robust_unconverged == 0


def test_a_delayed_command_acts_exactly_its_delay_after_its_state():
    """moves.DelayedCommand: a law run every 2 ms, the plant stepped every 1 ms, 3 ms of delay: the command computed
    at step k (its value: k) is in force from step k + 3 until the next one arrives; zero before the first."""
    from flexarm_control.moves import DelayedCommand
    calls = []

    def law(t, z, zd):
        calls.append(t)
        return np.array([float(len(calls) - 1) * 2])
    d = DelayedCommand(law, 0.002, 0.003, 0.001)
    out = [float(d(k * 0.001, None, None)[0]) for k in range(10)]
    assert out == [0, 0, 0, 0, 0, 2, 2, 4, 4, 6]
    with pytest.raises(ValueError):
        DelayedCommand(law, 0.002, 0.0025, 0.001)


def test_the_closed_loop_radius_sees_an_unstable_design():
    """The analysis can fail: a gain of the wrong sign is reported unstable."""
    model = load_model(resolve_arm('slewing_beam'))
    law = ModalLQR(model, dt=DT)
    law.design_delayed = lambda q, _d=law.design_delayed: (lambda g: (-g[0],) + g[1:])(_d(q))
    assert closed_loop_radius(law, model, np.zeros(1)) > 1.0


def test_weights_are_bryson_allowances_on_physical_quantities(models):
    model = models['deluca_two_link']
    law = TipTracking(model, dt=DT)
    g = law.gains()
    reach = 1.0
    assert g['tip_max'] == pytest.approx(0.6e-3 * reach)
    assert g['dq_max'] == pytest.approx(2 * g['tip_max'] / reach)          # tip_tracking's lock-step rule (modal: 8)
    assert g['dq_rate_max'] == pytest.approx(16 * g['tip_rate_max'] / reach)
    assert g['modal_rate_max'] == pytest.approx(0.9 * g['tip_rate_max'])   # (modal: 1)
    gd = TipTracking(model, dt=DT, input_delay=2 * DT).gains()             # delayed designs: the modal law's rule
    assert gd['dq_max'] == pytest.approx(8 * gd['tip_max'] / reach)
    assert gd['modal_rate_max'] == pytest.approx(gd['tip_rate_max'])
    gm = ModalLQR(model, dt=DT).gains()
    assert gm['dq_max'] == pytest.approx(8 * gm['tip_max'] / reach)
    assert gm['modal_rate_max'] == pytest.approx(gm['tip_rate_max'])
    Q, R = law.weights()
    N = model.n_coords
    assert R[0, 0] == pytest.approx(1.0 / (g['rho'] * 2.0) ** 2)
    # the tip-position block is C^T C / tip_max^2 plus the joint allowance
    assert Q[0, 0] >= 1.0 / g['dq_max'] ** 2
    assert Q.shape == (2 * N + 2, 2 * N + 2) and np.allclose(Q[2 * N:, 2 * N:], 0.0)     # no integrator


def test_integral_action_only_with_friction(models):
    model = models['deluca_two_link']
    assert ModalLQR(model, dt=DT).integral is False
    d = arm_to_dict(model.spec)
    d['joints'][0]['friction'] = {'viscous': 0.01, 'coulomb': 0.02}
    rough = load_model(arm_from_dict(d))
    law = ModalLQR(rough, dt=DT)
    assert law.integral is True and law.gains()['integral_time'] == pytest.approx(0.2)
    assert closed_loop_radius(law, rough, np.zeros(2)) < 1.0


def _closed_loop_damping(law, model, q):
    """[(Hz, damping ratio)] of the oscillating modes of the sampled closed loop (the model linearized in static
    equilibrium at q, zero-order hold at the law's period, the command acting after the law's input delay: state
    (x, u_prev)) under the law's gain at q."""
    from flexarm_sim.model import zero_order_hold as _zoh
    from flexarm_sim.model import linearize
    from flexarm_sim.model.equilibrium import static_equilibrium
    K, _, _, _, Ku = law.design_delayed(np.asarray(q, dtype=float))
    z, tau = static_equilibrium(model, q)
    A, B = linearize(model, z, tau).state_space()
    d = law.input_delay
    if d > law.dt:                                       # longer delays: the general formulation (delay_augmented)
        from flexarm_control.laws.lti import delay_augmented, delayed_discretization
        Aa, Ba = delay_augmented(delayed_discretization(A, B, law.dt, d), law.history)
        ev = np.linalg.eigvals(Aa - Ba @ np.hstack([K, Ku]))
        lam = np.log(ev[np.abs(ev) > 1e-12].astype(complex)) / law.dt
        return [(abs(s.imag) / (2 * math.pi), -s.real / abs(s)) for s in lam if s.imag > 1e-9]
    Phi1, G0 = _zoh(A, B, law.dt - d)
    Phi2, Gb = _zoh(A, B, d)
    if Ku.size == 0:                                     # no delay: no previous command in the loop
        Acl = Phi1 @ Phi2 - G0 @ K
    else:
        Acl = np.block([[Phi1 @ Phi2 - G0 @ K, Phi1 @ Gb - G0 @ Ku], [-K, -Ku]])
    ev = np.linalg.eigvals(Acl)
    lam = np.log(ev[np.abs(ev) > 1e-12].astype(complex)) / law.dt      # (a delayed loop has poles at 0)
    return [(abs(s.imag) / (2 * math.pi), -s.real / abs(s)) for s in lam if s.imag > 1e-9]


@pytest.mark.parametrize('arm', FLEXIBLE)
@pytest.mark.parametrize('law_class', [ModalLQR, TipTracking])
@pytest.mark.parametrize('delay', [0.0, DT])
def test_every_closed_loop_mode_is_damped_at_least_the_floor(models, arm, law_class, delay):
    """The per-mode damping floor (laws/modal.py): every oscillating mode of the designed sampled loop decays with a
    damping ratio of at least 1 % (the De Luca arm's 16 Hz mode had 0.02 %: a decay of 0.02 1/s), at the start,
    middle and end of the standard move; lock-step and the real-time design for one period of delay (its floor
    once judged on the undelayed loop, which boosted the wrong weights: the modal law then let the arm drift 0.72
    rad while the plant held it in test_safe_mode's stopped controller)."""
    model = models[arm]
    law = law_class(model, dt=DT, input_delay=delay)
    for q in _configurations(model):
        modes = _closed_loop_damping(law, model, q)
        worst = min(modes, key=lambda m: m[1])
        assert worst[1] >= 0.01, (q, worst, modes)


def test_without_the_floor_the_de_luca_16_hz_mode_is_all_but_undamped(models):
    """What the floor is for (and that the damping check can fail): the Bryson weights alone leave the De Luca
    arm's 16 Hz mode (link 2's second clamped mode, which the joints hardly move) damped below 0.1 %."""
    model = models['deluca_two_link']
    modes = _closed_loop_damping(ModalLQR(model, dt=DT, damping_floor=0.0), model, np.zeros(2))
    f, zeta = min(modes, key=lambda m: m[1])
    assert 15.5 < f < 16.5 and zeta < 1e-3, modes
    floored = dict((round(f), z) for f, z in _closed_loop_damping(ModalLQR(model, dt=DT), model, np.zeros(2)))
    assert floored[16] >= 0.01


@pytest.mark.parametrize('delay_periods', [1.0, 2.0, 2.5])
def test_the_reference_prediction_cancels_on_a_trajectory_of_the_model(models, delay_periods):
    """laws/modal.py "Reference over the delay": for a reference that is a trajectory of the sampled model under the
    feedforwards issued (the defect zero), the predicted terms K_0 x_r(t + m dt) - sum_i K_f,i ff_{k-i} equal K x_r(t):
    the law feeds back exactly the current error. The trajectory is integrated here from the continuous linearization,
    each period split where the delayed commands change (at f = delay - m dt: the exact sampled solution of each
    piece), the input a random sequence - not through the law's delayed_discretization."""
    from flexarm_sim.model import zero_order_hold
    model = models['deluca_two_link']
    delay = delay_periods * DT
    law = ModalLQR(model, dt=DT, input_delay=delay, robust=0.0)
    q = np.asarray(model.spec.nominal_configuration, dtype=float) + 0.3
    (K, _, _, _, _), (A, B) = law._design_at(q)
    K0, Kf = law.reference_prediction(K, A, B)
    m, H, n = law.prediction_periods, law.history, model.n_joints
    assert (m, H) == {1.0: (1, 1), 2.0: (2, 2), 2.5: (2, 3)}[delay_periods]
    f = delay - m * DT
    rng = np.random.default_rng(3)
    u = rng.normal(0.0, 0.3, (60, n))
    x = [rng.normal(0.0, 1e-3, A.shape[0])]
    for k in range(59):
        # over [t_k, t_k + f) the command u_{k-m-1} acts, then u_{k-m} until t_{k+1}
        old = u[k - m - 1] if k - m - 1 >= 0 else np.zeros(n)
        new = u[k - m] if k - m >= 0 else np.zeros(n)
        xk = x[-1]
        if f > 0:
            E, G = zero_order_hold(A, B, f)
            xk = E @ xk + G @ old
        E, G = zero_order_hold(A, B, DT - f)
        x.append(E @ xk + G @ new)
    worst = 0.0
    for k in range(H + 1, 59 - m):
        issued = np.concatenate([u[k - i] for i in range(1, H + 1)])
        predicted = K0 @ x[k + m] - Kf @ issued
        np.testing.assert_allclose(predicted, K @ x[k], rtol=1e-7, atol=1e-9 * np.abs(K @ x[k]).max())
        worst = max(worst, float(np.abs(K @ x[k]).max()))
    assert worst > 1e-3                                    # the check is not of zeros


def test_the_delayed_modal_law_tracks_its_reference_as_the_undelayed_one(models):
    """In process (loop_harness: the plant and controller runtimes), commands stamped to act exactly their design delay
    after their state, as in real time. De Luca arm, 30 deg move, 4 ms: without the reference prediction the delayed
    law tracked 2.2x worse than the undelayed one (tip RMS 34.5 against 16.0 mm); with it 16.4 mm. The slewing beam
    through a 100 Hz loop (20 ms; test/test_estimator_node.py's hardware-in-the-loop rate), 0.5 rad in 2 s: 0.86 mm.
    The delayed design is the robust one (on the slewing beam at 100 Hz with the noise halved: the full size is not
    mean-square stabilizable there); robust without the prediction: 39.3 mm on the De Luca arm, 5.2 mm on the beam.
    The De Luca arm with +20 % payload and -15 % E.I behind the nominal design: 21.1 mm at 11.7 % deflection (the
    certainty-equivalent design with the prediction saturated: 34.6 mm, 16.9 %, outside the model's validity)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from loop_harness import Loop

    def run(model, delay, rate, angle, T, plant_model=None):
        loop = Loop(model, 'modal', rate=rate, controller={'input_delay': delay}, plant_model=plant_model)
        loop.rt.safe_mode_applies = False
        loop.move(0.5, angle=angle, T=T)
        ref = loop.rt.law.references.active
        loop.run(0.5 + T + 1.5, delay=lambda t: delay, stamped=True)
        t, e = loop.tip_errors(ref)
        return float(np.sqrt(np.mean(e[t > 0.5] ** 2))), loop.largest_relative_deflection().max(), loop.rt.law

    deluca = models['deluca_two_link']
    rms0, _, _ = run(deluca, 0.0, 1 / DT, math.radians(30), 2.5)
    rms, deflection, law = run(deluca, 2 * DT, 1 / DT, math.radians(30), 2.5)
    assert law.prediction_periods == 2 and law.robust == 1.0
    assert rms <= 1.25 * rms0 and deflection < 0.1, (rms, rms0, deflection)
    rms, deflection, _ = run(deluca, 2 * DT, 1 / DT, math.radians(30), 2.5, perturbed_model(deluca.spec, 1.2, 0.85))
    assert rms <= 1.5 * rms0 and deflection < 0.13, (rms, rms0, deflection)
    beam = models['slewing_beam']
    rms, _, law = run(beam, 0.02, 100.0, 0.5, 2.0)
    assert law.prediction_periods == 2 and law.robust == 1.0 and rms < 0.0015, rms
