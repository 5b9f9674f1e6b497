"""Identification (issue 26) on recordings the tests make: a simulated arm whose parameters the fit does not know,
run in this process through the experiment flexarm excite designs (pd_servo on the exact joint state, as on the
simulated plant; encoders at 4096 counts per turn; the commanded torques: a drive's torque reading and its noise
are not what the fit replays)."""
import copy
import math

import numpy as np
import pytest

from flexarm_control.identification import (ClosedLoopRecord, Excitation, ExcitationError, FitError, ParameterSet,
                                            RecordError, check_excitation, design_excitation, identifiability,
                                            identify, predict, run_offline)
from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import load_model, whole_arm_modes
from flexarm_sim.model.spec import arm_from_dict, arm_to_dict
from flexarm_sim.sensors import preset_values

DT = 2e-3
DURATION = 20.0


def _nominal_dict():
    d = arm_to_dict(load_model(resolve_arm('deluca_two_link')).spec)
    for j in d['joints']:
        j['link']['damping_ratio'] = 0.01
    return d


def _model(d):
    return load_model(arm_from_dict(d))


def _hidden_a():
    """The issue's set: E I -15 %, payload +20 %, damping x3, joint friction present."""
    d = _nominal_dict()
    for j in d['joints']:
        j['link']['EI_z'] *= 0.85
        j['link']['damping_ratio'] = 0.03
        j['friction'] = {'viscous': 0.01, 'coulomb': 0.01}
    d['payload']['mass'] *= 1.2
    return d


def _hidden_b():
    """Another: the links' stiffness off in opposite senses, a lighter payload, a heavier shoulder hub."""
    d = _nominal_dict()
    d['joints'][0]['link']['EI_z'] *= 1.1
    d['joints'][1]['link']['EI_z'] *= 0.95
    d['joints'][0]['hub']['inertia'] = (np.asarray(d['joints'][0]['hub']['inertia']) * 1.08).tolist()
    for j in d['joints']:
        j['link']['damping_ratio'] = 0.02
    d['payload']['mass'] *= 0.9
    return d


def _hidden_c():
    """Stiffer links, a heavier payload with more inertia, little damping."""
    d = _nominal_dict()
    d['joints'][0]['link']['EI_z'] *= 1.2
    d['joints'][1]['link']['EI_z'] *= 1.15
    d['payload']['mass'] *= 1.4
    d['payload']['inertia'] = (np.asarray(d['payload']['inertia']) * 1.5).tolist()
    for j in d['joints']:
        j['link']['damping_ratio'] = 0.005
    return d


def _truth(d, name):
    """The value of a fitted parameter in the arm dict d."""
    who, _, kind = name.partition('.')
    if who == 'payload':
        return d['payload']['mass'] if kind == 'mass' else np.asarray(d['payload']['inertia'])[2, 2]
    j = next(x for x in d['joints'] if x['name'] == who)
    if kind == 'hub_inertia':
        return np.asarray(j['hub']['inertia'])[2, 2]
    if kind in ('viscous', 'coulomb'):
        return j.get('friction', {}).get(kind, 0.0)
    v = j['link'][kind]
    return float(np.ravel(v)[0])


def _frequencies(model):
    return whole_arm_modes(model, model.spec.nominal_configuration).elastic_frequencies_hz[:3]


@pytest.fixture(scope='module')
def experiment():
    nominal = _model(_nominal_dict())
    exc, kp, kv, figures = design_excitation(nominal, duration=DURATION, dt=DT)
    return nominal, exc, kp, kv, figures


def _records(experiment, hidden, seeds=(1, 2), effort_noise=0.0, gauges=(), accelerometer=False):
    nominal, exc, kp, kv, _ = experiment
    true = _model(hidden)
    out = []
    for s in seeds:
        e = Excitation(exc.q0, exc.amplitude, exc.frequencies, exc.duration, exc.ramp, seed=s, slope=exc.slope)
        out.append(run_offline(true, e, kp, kv, DT, law_model=nominal, effort_noise=effort_noise, seed=s,
                               source=f'seed {s}', gauges=gauges, strain_bias=[3e-5, -2e-5],
                               accelerometer=accelerometer))
    return true, out


# ------------------------------------------------------------------------------------------------ the experiment
def test_excitation_starts_and_ends_at_rest_and_its_derivatives_hold(experiment):
    _, exc, _, _, _ = experiment
    for t in (0.0, exc.duration):
        q, qd, qdd = exc.sample(t)
        assert np.array_equal(q, np.asarray(exc.q0)) and not qd.any() and not qdd.any()
    h = 1e-5
    for t in (0.3, 0.9, 7.7, exc.duration - 0.4):          # in the fades and between them
        q, qd, qdd = exc.sample(t)
        qp, qdp, _ = exc.sample(t + h)
        qm, qdm, _ = exc.sample(t - h)
        assert np.allclose((qp - qm) / (2 * h), qd, rtol=1e-6, atol=1e-8)
        assert np.allclose((qdp - qdm) / (2 * h), qdd, rtol=1e-5, atol=1e-6)


def test_design_keeps_the_limits_and_spans_the_modes(experiment):
    nominal, exc, _, _, figures = experiment
    for j, js in enumerate(nominal.spec.joints):
        assert figures['peak_torque'][j] <= 0.6 * js.effort_limit
        assert figures['peak_velocity'][j] <= 0.6 * js.velocity_limit
    assert figures['peak_deflection'] <= 0.5 * 0.15
    f = _frequencies(nominal)
    assert exc.frequencies[0] < f[0] and exc.frequencies[-1] > f[2]
    # the amplitude is the largest the limits allow: some limit is within 20 % of its bound
    use = max(max(figures['peak_torque'][j] / (0.6 * js.effort_limit),
                  figures['peak_velocity'][j] / (0.6 * js.velocity_limit)) for j, js in enumerate(nominal.spec.joints))
    assert use > 0.8 or figures['peak_deflection'] > 0.8 * 0.075


def test_an_experiment_beyond_the_limits_is_refused_naming_the_limit(experiment):
    nominal, exc, kp, kv, _ = experiment
    big = Excitation(exc.q0, tuple(10 * a for a in exc.amplitude), exc.frequencies, exc.duration, exc.ramp)
    with pytest.raises(ExcitationError, match='effort limit|velocity limit|deflects'):
        check_excitation(nominal, big, kp, kv, DT)
    with pytest.raises(ExcitationError, match='band'):
        design_excitation(nominal, duration=5.0, dt=DT, band=(1.0, 400.0))


# ------------------------------------------------------------------------------------------------ accuracy
def _check(result, hidden, names, tol):
    for i, name in enumerate(names):
        true = _truth(hidden, name)
        est = result.estimate[result.names.index(name)]
        kind = name.partition('.')[2]
        rel, absolute = tol[kind]
        assert abs(est - true) <= max(rel * abs(true), absolute), (name, est, true)


TOLERANCES = {'EI_z': (0.02, 0.0), 'mass': (0.03, 0.0), 'damping_ratio': (0.20, 0.002), 'viscous': (0.15, 0.0),
              'coulomb': (0.15, 0.0), 'hub_inertia': (0.02, 0.0)}


@pytest.mark.slow
def test_identifies_the_issues_hidden_set_with_friction(experiment):
    nominal = experiment[0]
    hidden = _hidden_a()
    true, (rec, held) = _records(experiment, hidden)
    fit = ['shoulder.EI_z', 'elbow.EI_z', 'payload.mass', 'shoulder.damping_ratio', 'elbow.damping_ratio',
           'shoulder.viscous', 'elbow.viscous', 'shoulder.coulomb', 'elbow.coulomb']
    lines = []
    result = identify(nominal.spec, [rec], fit, progress=lines.append)
    assert result.converged, result.message
    assert all(result.identifiable), result.why_not
    _check(result, hidden, fit, TOLERANCES)
    assert np.all(np.abs(_frequencies(load_model(result.spec)) / _frequencies(true) - 1) < 0.005)
    _, err = predict(result.spec, held)
    assert np.all(err < 0.05), err
    _, err_nominal = predict(nominal.spec, held)
    assert np.any(err_nominal > 0.05)                     # the nominal arm file does not predict it
    its = [ln for ln in lines if ln.startswith('iteration ')]
    assert its[0].startswith('iteration 0') and len(its) == result.iterations + 1       # a line per iteration
    assert any(ln.startswith('fitting the first 3 s') for ln in lines)               # the continuation said
    assert result.cost < 1.5 and not result.misfit        # the residuals are the encoders' quantization
    assert np.all(np.isfinite(result.std_error)) and np.all(result.std_error > 0)
    _closing_the_loop(nominal, load_model(result.spec), true)


def _closing_the_loop(nominal, identified, true):
    """Issue 26 item 4: controllers designed on the calibrated arm file perform on the arm as those designed on
    its true parameters; designed on the nominal file they do not. (The modal LQR tracks the rigid joint reference:
    its tip RMS is the move's own deflection, alike for every design (37.7 / 38.2 / 38.2 mm); its end-of-move tip
    error is what the model changes. tip_tracking plans on the model: a 3 s move, as 2.5 s bends the true arm
    beyond the model's validity, which its planner refuses.)"""
    from flexarm_control.laws import ModalLQR
    from flexarm_control.laws.tip_tracking import TipTracking
    from flexarm_control.moves import run_move, standard_move
    fig = {}
    for name, m in (('nominal', nominal), ('identified', identified), ('true', true)):
        fig['modal', name] = run_move(ModalLQR(m, dt=DT), plant=true, reference=standard_move(m))[1]
        fig['tip', name] = run_move(TipTracking(m, dt=DT), plant=true, reference=standard_move(m, move_time=3.0))[1]
    for law, key in (('modal', 'tip_rms_error_m'), ('modal', 'end_of_move_tip_error_m'), ('tip', 'tip_rms_error_m'),
                     ('tip', 'end_of_move_tip_error_m')):
        assert abs(fig[law, 'identified'][key] / fig[law, 'true'][key] - 1) < 0.2, (law, key, fig)
    assert fig['modal', 'nominal']['end_of_move_tip_error_m'] > 1.2 * fig['modal', 'true']['end_of_move_tip_error_m']
    assert fig['tip', 'nominal']['tip_rms_error_m'] > 1.2 * fig['tip', 'true']['tip_rms_error_m']


@pytest.mark.slow
def test_identifies_a_second_hidden_set_with_hub_inertia(experiment):
    nominal = experiment[0]
    hidden = _hidden_b()
    true, (rec,) = _records(experiment, hidden, seeds=(3,))
    fit = ['*.EI_z', 'payload.mass', 'shoulder.hub_inertia', '*.damping_ratio']
    result = identify(nominal.spec, [rec], fit)
    assert result.converged, result.message
    names = ['shoulder.EI_z', 'elbow.EI_z', 'payload.mass', 'shoulder.hub_inertia', 'shoulder.damping_ratio',
             'elbow.damping_ratio']
    assert result.names == names
    _check(result, hidden, names, TOLERANCES)
    assert np.all(np.abs(_frequencies(load_model(result.spec)) / _frequencies(true) - 1) < 0.005)


@pytest.mark.slow
def test_strain_gauges_determine_what_the_encoders_hardly_do(experiment):
    """A gauge near each link's root (the `strain` sensor set: noise, an unknown bias, the amplifier's low-pass, as
    the plant's sensor model makes them) measures the links' bending itself; the joints see it only through its
    reaction. At the truth, the standard errors the two sets of signals give; then the fit with the gauges."""
    nominal = experiment[0]
    hidden = _hidden_c()
    gauges = preset_values(nominal.spec, 'strain')['sensors.strain.gauges']
    true, (rec, held) = _records(experiment, hidden, gauges=gauges)
    assert rec.channels == ('shoulder', 'elbow', 'shoulder@0.025:in_plane:c=0.001', 'elbow@0.025:in_plane:c=0.001')
    fit = ['*.EI_z', '*.damping_ratio', 'payload.mass', 'payload.inertia']
    joints = identifiability(true.spec, [rec.without_strain()], fit)
    both = identifiability(true.spec, [rec], fit)
    assert not any(why for _, why in both.values())
    for name, gain in (('payload.inertia', 10), ('elbow.damping_ratio', 5), ('elbow.EI_z', 5)):
        assert joints[name][0] > gain * both[name][0], (name, joints[name], both[name])
    result = identify(nominal.spec, [rec], fit)
    assert result.converged and all(result.identifiable), (result.message, result.why_not)
    tol = {'EI_z': (0.005, 0.0), 'mass': (0.005, 0.0), 'inertia': (0.01, 0.0), 'damping_ratio': (0.05, 0.0)}
    _check(result, hidden, result.names, tol)
    assert result.cost < 1.5 and not result.misfit        # the gauges' bias and filter are what the model says
    _, err = predict(result.spec, held)
    assert err.shape == (4,) and np.all(err[:3] < 0.05) and err[3] < 0.3, err   # (elbow gauge: signal ~10x noise)


def test_the_accelerometer_prediction_is_the_sensor_model_along_the_replay(experiment):
    """accel_of against an independent formulation: flexarm_sim.model.sensing.tip_specific_force (Python, the
    plant's sensor model without its noise) at each sample of the true arm's replay, with the torque that acted up
    to the sample, through the same first-order low-pass written here as a loop."""
    from flexarm_control.identification.output_error import accel_of, replay_record
    from flexarm_sim.model.sensing import tip_specific_force
    true, (rec,) = _records(experiment, _hidden_b(), seeds=(1,), accelerometer=True)
    _, Z, ZD, TAU = replay_record(true, rec, samples=400)
    got = accel_of(true, rec, Z, ZD, TAU)
    u = np.array([tip_specific_force(true, Z[k], ZD[k], TAU[max(k - 1, 0)]) for k in range(Z.shape[0])])
    want = np.empty_like(u)
    want[0] = u[0]
    for k in range(1, u.shape[0]):
        want[k] = want[k - 1] + rec.accel_alpha * (u[k] - want[k - 1])
    assert np.max(np.abs(got - want)) < 1e-9 * max(1.0, np.max(np.abs(want)))
    # and the recording itself: its readings are that model plus the sensor's noise (std accel_noise after the
    # filter, as the record says)
    resid = rec.accel[:400] - got
    assert 0.5 < np.std(resid) / rec.accel_noise[0] < 2.0, (np.std(resid), rec.accel_noise)


@pytest.mark.slow
def test_a_tip_accelerometer_is_a_fitted_output(experiment):
    """The tip accelerometer (the `strain_accel` set's: noise, the low-pass, as the plant's sensor model makes them)
    as a fitted output beside the joints: it sees the tip's motion, which the joints see only through its reaction.
    At the truth, the standard errors of the joints alone and with the accelerometer; then the fit with it."""
    nominal = experiment[0]
    hidden = _hidden_c()
    true, (rec, held) = _records(experiment, hidden, accelerometer=True)
    assert rec.channels == ('shoulder', 'elbow', 'accel.x', 'accel.y', 'accel.z')
    fit = ['*.EI_z', '*.damping_ratio', 'payload.mass', 'payload.inertia']
    joints = identifiability(true.spec, [rec.without_accel()], fit)
    both = identifiability(true.spec, [rec], fit)
    assert not any(why for _, why in both.values())
    assert all(both[name][0] < joints[name][0] for name in both), (joints, both)
    gains = {name: joints[name][0] / both[name][0] for name in both}
    assert max(gains.values()) > 3, gains
    result = identify(nominal.spec, [rec], fit)
    assert result.converged and all(result.identifiable), (result.message, result.why_not)
    tol = {'EI_z': (0.005, 0.0), 'mass': (0.005, 0.0), 'inertia': (0.01, 0.0), 'damping_ratio': (0.05, 0.0)}
    _check(result, hidden, result.names, tol)
    assert result.cost < 1.5 and not result.misfit
    _, err = predict(result.spec, held)
    assert err.shape == (5,) and np.all(err[:2] < 0.05), err
    print('accelerometer: standard error gain over the joints alone', {k: round(v, 1) for k, v in gains.items()},
          'held-out NRMSE', np.round(err, 4))


@pytest.mark.slow
def test_a_real_time_loops_timing_is_replayed(experiment):
    """Hardware timing: the law acts on the readings (encoder counts, the drives' velocity steps) and each command is
    written a varying part of a period after its readings, 15 % of them a period late (a bridge's prompt writes and
    its misses). With the instants recorded (applied_at) the fit is as good as in lock-step; replayed as if each
    command acted over its own period, the true arm itself does not explain the recording."""
    from flexarm_control.identification.output_error import simulate_record
    from flexarm_sim.sensors import DEFAULTS
    nominal, exc, kp, kv, _ = experiment
    hidden = _hidden_b()
    true = _model(hidden)
    K = int(round(exc.duration / DT)) + 1
    rng = np.random.default_rng(3)
    lat = DT * rng.uniform(0.15, 0.9, K)
    lat[rng.random(K) < 0.15] += DT
    rec = run_offline(true, exc, kp, kv, DT, law_model=nominal, seed=1, law_reads='readings',
                      velocity_resolution=DEFAULTS['encoders.velocity_resolution'], latency=lat)
    naive = ClosedLoopRecord(rec.dt, rec.joint_names, rec.torque, rec.position, rec.velocity, rec.kp, rec.kd,
                             rec.position_noise, law_position=rec.law_position, law_velocity=rec.law_velocity)

    def rms(r):                                    # the true arm's replay residual, in encoder noise units
        return float(np.sqrt(np.mean(((simulate_record(true, r)[0] - r.position) / r.position_noise) ** 2)))

    assert rms(rec) < 1.5 < 3 * 1.5 < rms(naive), (rms(rec), rms(naive))
    fit = ['*.EI_z', 'payload.mass', 'shoulder.hub_inertia', '*.damping_ratio']
    result = identify(nominal.spec, [rec], fit)
    assert result.converged and all(result.identifiable), (result.message, result.why_not)
    tol = {'EI_z': (0.01, 0.0), 'mass': (0.01, 0.0), 'hub_inertia': (0.015, 0.0), 'damping_ratio': (0.05, 0.0)}
    _check(result, hidden, result.names, tol)             # measured: <= 0.35 %, hub +0.97 %, damping -1.8 %
    assert result.cost < 2.0 and not result.misfit        # (1.64: the law's quantized velocity, replayed exact)


@pytest.mark.slow
def test_loop_delay_finds_what_the_record_does_not_say(experiment):
    """A bus's transfer and sampling times: every command acted 1.5 ms later than the record says (the bridge stamps
    its write before the bytes reach the servo, its reading after the reply). Fitted, loop.delay finds it and the
    arm's parameters come out as with the true instants; a lock-step record has no such delay to fit."""
    nominal, exc, kp, kv, _ = experiment
    hidden = _hidden_b()
    true = _model(hidden)
    K = int(round(exc.duration / DT)) + 1
    rng = np.random.default_rng(11)
    lat = DT * rng.uniform(0.9, 1.6, K)                 # acting 0.9-1.6 periods after the reading ...
    rec = run_offline(true, exc, kp, kv, DT, law_model=nominal, seed=1, latency=lat)
    rec.applied_at = rec.applied_at - 0.75 * DT         # ... recorded 1.5 ms earlier (still after the reading)
    fit = ['*.EI_z', 'payload.mass', 'shoulder.hub_inertia', '*.damping_ratio', 'loop.delay']
    result = identify(nominal.spec, [rec], fit)
    assert result.converged and all(result.identifiable), (result.message, result.why_not)
    assert result.delay == pytest.approx(0.75 * DT, abs=0.05 * DT)
    _check(result, hidden, [n for n in fit if n != 'loop.delay' and not n.startswith('*')] +
           ['shoulder.EI_z', 'elbow.EI_z', 'shoulder.damping_ratio', 'elbow.damping_ratio'],
           {'EI_z': (0.01, 0.0), 'mass': (0.01, 0.0), 'hub_inertia': (0.01, 0.0), 'damping_ratio': (0.05, 0.0)})
    assert result.cost < 1.5
    lockstep = _records(experiment, hidden, seeds=(1,))[1][0]
    with pytest.raises(FitError, match="loop.delay: seed 1 is not a real-time loop's record"):
        identify(nominal.spec, [lockstep], fit)


@pytest.mark.slow
def test_what_the_readings_cannot_determine_is_said_and_kept_nominal(experiment):
    """A horizontal planar arm turned as a whole moves no reading: the shoulder encoder's offset is invisible."""
    nominal = experiment[0]
    hidden = _hidden_b()
    _, (rec,) = _records(experiment, hidden, seeds=(3,))
    fit = ['shoulder.encoder_offset', '*.EI_z', 'payload.mass', 'shoulder.hub_inertia', '*.damping_ratio']
    result = identify(nominal.spec, [rec], fit)
    i = result.names.index('shoulder.encoder_offset')
    assert not result.identifiable[i] and result.estimate[i] == 0.0 and math.isnan(result.std_error[i])
    assert 'do not change' in result.why_not['shoulder.encoder_offset']
    assert sum(result.identifiable) == len(result.names) - 1 and result.converged
    _check(result, hidden, [n for n in result.names if n != 'shoulder.encoder_offset'], TOLERANCES)
    assert 'NOT identifiable' in result.table()


@pytest.mark.slow
def test_a_fit_that_stops_early_says_so_and_keeps_its_best_estimate(experiment):
    nominal = experiment[0]
    _, (rec,) = _records(experiment, _hidden_a(), seeds=(4,))
    result = identify(nominal.spec, [rec], ['*.EI_z', 'payload.mass'], max_iter=2)
    assert not result.converged and 'did not converge within 2 iterations' in result.message
    assert result.cost < result.cost_nominal
    assert result.misfit and 'friction is not fitted' in result.misfit     # unmodelled friction: said


# ------------------------------------------------------------------------------------------------ bad input
def _small_record(**change):
    n = 2
    args = dict(dt=DT, joint_names=('shoulder', 'elbow'), torque=np.zeros((10, n)), position=np.zeros((10, n)),
                velocity=np.zeros((10, n)), kp=[1.0, 0.1], kd=[1.0, 0.1], position_noise=1e-4, source='rec.mcap')
    args.update(change)
    return ClosedLoopRecord(**args)


def test_bad_records_are_refused_naming_the_field():
    bad = np.zeros((10, 2))
    bad[4, 1] = np.nan
    with pytest.raises(RecordError, match=r'rec.mcap: position\[elbow\] is not finite at sample 4'):
        _small_record(position=bad)
    with pytest.raises(RecordError, match='velocity: expected'):
        _small_record(velocity=np.zeros((10, 3)))
    with pytest.raises(RecordError, match='kp'):
        _small_record(kp=[1.0, -1.0])
    with pytest.raises(RecordError, match='delay'):
        _small_record(delay=-1)
    with pytest.raises(RecordError, match=r'kd: expected one value or one per joint \(2\)'):
        _small_record(kd=[1.0, 2.0, 3.0])
    with pytest.raises(RecordError, match='gauges: a list'):
        _small_record(gauges='shoulder@0.02')
    with pytest.raises(RecordError, match='no command took effect'):
        _small_record(applied_at=np.full(10, np.nan))
    with pytest.raises(RecordError, match='sample_times without applied_at'):
        _small_record(sample_times=np.arange(10) * DT)
    with pytest.raises(RecordError, match=r'rec.mcap: applied_at\[3\] = 0 s: before its own reading'):
        _small_record(applied_at=np.where(np.arange(10) == 3, 0.0, np.arange(10) * DT))
    with pytest.raises(RecordError, match='delay must be 0 with applied_at'):
        _small_record(applied_at=np.arange(10) * DT, delay=1)
    spec = load_model(resolve_arm('spatial_3r')).spec
    with pytest.raises(RecordError, match="another arm's recording"):
        identify(spec, [_small_record()], ['payload.mass'])
    strain = np.zeros((10, 1))
    with pytest.raises(RecordError, match='gauges shoulder@0.02 without strain readings'):
        _small_record(gauges=('shoulder@0.02',))
    with pytest.raises(RecordError, match=r'strain: expected \(10, 2\)'):
        _small_record(strain=strain, gauges=('shoulder@0.02', 'elbow@0.02'), strain_noise=1e-6)
    with pytest.raises(RecordError, match='strain_noise must be > 0'):
        _small_record(strain=strain, gauges=('shoulder@0.02',))
    with pytest.raises(RecordError, match='strain_alpha'):
        _small_record(strain=strain, gauges=('shoulder@0.02',), strain_noise=1e-6, strain_alpha=0.0)
    strain[3, 0] = np.inf
    with pytest.raises(RecordError, match=r'strain\[shoulder@0.02\] is not finite at sample 3'):
        _small_record(strain=strain, gauges=('shoulder@0.02',), strain_noise=1e-6)
    rec = _small_record(strain=np.zeros((10, 1)), gauges=('wrist@0.02',), strain_noise=1e-6)
    with pytest.raises(RecordError, match="rec.mcap: strain gauge 'wrist@0.02'"):
        identify(_model(_nominal_dict()).spec, [rec], ['payload.mass'])
    accel = np.zeros((10, 3))
    with pytest.raises(RecordError, match=r'accel: expected \(10, 3\) readings'):
        _small_record(accel=np.zeros((10, 2)), accel_noise=1e-3)
    with pytest.raises(RecordError, match='accel_noise must be > 0 per axis'):
        _small_record(accel=accel)
    with pytest.raises(RecordError, match='accel_alpha'):
        _small_record(accel=accel, accel_noise=1e-3, accel_alpha=1.5)
    accel[4, 1] = np.nan
    with pytest.raises(RecordError, match=r'accel\[accel.y\] is not finite at sample 4'):
        _small_record(accel=accel, accel_noise=1e-3)
    rec = _small_record(accel=np.zeros((10, 3)), accel_noise=1e-3)
    assert rec.channels[-3:] == ('accel.x', 'accel.y', 'accel.z')
    assert rec.without_accel().channels == ('shoulder', 'elbow')


def test_bad_parameter_lists_are_refused():
    spec = _model(_nominal_dict()).spec
    for fit, match in (('', 'no parameter'), ('wrist.EI_z', "no joint 'wrist'"), ('shoulder.stiffness', 'parameters are'),
                       ('shoulder.EI_z,shoulder.EI_z', 'twice'), ('shoulder.EI_y', 'nothing bends in that plane'),
                       ('payload.volume', 'payload parameters'), ('EI_z', 'expected')):
        with pytest.raises(FitError, match=match):
            ParameterSet(spec, fit)
    ps = ParameterSet(spec, '*.EI_z,payload.mass,*.coulomb')
    assert ps.names == ['shoulder.EI_z', 'elbow.EI_z', 'payload.mass', 'shoulder.coulomb', 'elbow.coulomb']
    # every theta in range gives a valid arm; out of range is clipped to it
    theta = ps.clip(np.array([50.0, -50.0, 0.1, -3.0, 1e9]))
    arm_from_dict(ps.arm_dict(theta))
    assert ps.values(theta)[3] == 0.0


def test_calibrated_arm_dict_round_trips(experiment):
    nominal = experiment[0]
    ps = ParameterSet(nominal.spec, 'shoulder.EI_z,payload.mass,elbow.damping_ratio,elbow.hub_inertia')
    theta = ps.theta0() + np.array([math.log(0.9), math.log(1.25), 2.0, math.log(1.1)])
    d = ps.arm_dict(theta)
    spec = arm_from_dict(copy.deepcopy(d))
    assert spec.joints[0].link.EI_z == pytest.approx(0.9)
    assert spec.payload.mass == pytest.approx(0.125)
    assert float(np.ravel(spec.joints[1].link.damping_ratio)[0]) == pytest.approx(0.03)   # (1 + 2) x 0.01
    assert np.asarray(d['joints'][1]['hub']['inertia'])[2, 2] == pytest.approx(0.11)
