"""model.replay (the closed-loop replay identification fits with) against a second formulation written here: the
joint feedback law closed around the model by `simulate`, the law's feed-forward known to the test only."""
import math

import numpy as np
import pytest

from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import load_model, replay, simulate
from flexarm_sim.model.spec import arm_from_dict, arm_to_dict

DT = 2e-3
KP = np.array([1.2, 0.15])
KD = np.array([1.5, 0.06])


def _arm(ei=1.0, payload=0.1, zeta=0.01):
    d = arm_to_dict(load_model(resolve_arm('deluca_two_link')).spec)
    for j in d['joints']:
        j['link']['EI_z'] = ei
        j['link']['damping_ratio'] = zeta
        j['friction'] = {'viscous': 0.004, 'coulomb': 0.003}
    d['payload']['mass'] = payload
    return load_model(arm_from_dict(d))


def _feedforward(t):
    return np.array([0.3 * math.sin(2.1 * t) + 0.05 * math.sin(19.0 * t),
                     0.06 * math.sin(3.3 * t + 1.0) + 0.02 * math.sin(31.0 * t)])


def _closed_loop(model, T, delay=0):
    """The law u_k = f(t_k) - kp q_m - kd qd_m (m = k - delay) closed around `model` by simulate."""
    past = []

    def law(t, z, zd):
        past.append((z[model.q_index].copy(), zd[model.q_index].copy()))
        if len(past) > delay:
            q, qd = past[-1 - delay]
            return _feedforward(t) - KP * q - KD * qd
        return _feedforward(t)

    return simulate(model, T, DT, torque=law, record_energy=False)


def test_replay_without_feedback_reproduces_the_run_exactly():
    model = _arm()
    res = simulate(model, 2.0, DT, torque=np.array([[0.2, -0.05]] * 500 + [[-0.1, 0.02]] * 501),
                   record_energy=False)
    Z, ZD, TAU = replay(model, DT, res.tau, res.q, res.qd, 0.0, 0.0)
    assert np.array_equal(Z, res.z) and np.array_equal(ZD, res.zd) and np.array_equal(TAU, res.tau)


@pytest.mark.parametrize('delay', [0, 1, 3])
def test_replay_closes_the_recorded_law_around_another_model(delay):
    """Recorded on arm A, replayed on arm B: the replay is the law closed around B (simulated here directly)."""
    a, b = _arm(), _arm(ei=0.8, payload=0.13, zeta=0.03)
    rec = _closed_loop(a, 3.0, delay)
    direct = _closed_loop(b, 3.0, delay)
    Z, ZD, TAU = replay(b, DT, rec.tau, rec.q, rec.qd, KP, KD, delay=delay)
    assert np.max(np.abs(rec.q - direct.q)) > 1e-3                # the arms differ visibly ...
    assert np.max(np.abs(Z - direct.z)) < 1e-11                   # ... and the replay is B's closed loop
    assert np.max(np.abs(TAU - direct.tau)) < 1e-10


def test_replay_scale_and_offset():
    """An encoder offset o: the law acted on readings q + o; a torque scale s: the arm got s times the law."""
    a = _arm()
    o, sc = np.array([0.01, -0.02]), np.array([1.1, 0.9])

    def law(t, z, zd):                     # the drives: readings off by o, torque s times the command
        return sc * (_feedforward(t) - KP * (z[a.q_index] + o) - KD * zd[a.q_index])

    truth = simulate(a, 1.5, DT, torque=law, record_energy=False)
    commands = truth.tau / sc
    Z, _, TAU = replay(a, DT, commands, truth.q + o, truth.qd, KP, KD, offset=o, scale=sc)
    assert np.max(np.abs(Z - truth.z)) < 1e-12 and np.max(np.abs(TAU - truth.tau)) < 1e-12


@pytest.mark.parametrize('change, field', [
    (dict(torque=np.zeros((5, 3))), 'torque'),
    (dict(q_meas=np.zeros((4, 2))), 'q_meas'),
    (dict(qd_meas=np.full((5, 2), np.nan)), 'qd_meas'),
    (dict(kp=[1.0, np.inf]), 'kp'),
    (dict(delay=5), 'delay'),
])
def test_replay_bad_input_names_the_field(change, field):
    model = _arm()
    args = dict(torque=np.zeros((5, 2)), q_meas=np.zeros((5, 2)), qd_meas=np.zeros((5, 2)), kp=0.0, kd=0.0)
    args.update(change)
    with pytest.raises(ValueError, match=field):
        replay(model, DT, **args)


M = 8                                   # fine steps per control period in the real-time reference below


def _realtime_loop(model, T, lat, jitter=None):
    """A real-time loop, written here with simulate at dt/M: reading m at fine step r_m = m M + jitter[m] (default
    0), its command u_m = f(t_m) - kp q_m - kd qd_m written lat[m] after it (a multiple of dt/M; from then until a
    newer command is written); zero torque before the first. Returns (fine result, commands u (K, n), r)."""
    K = int(round(T / DT)) + 1
    h = DT / M
    r = np.arange(K) * M + (np.zeros(K, int) if jitter is None else np.asarray(jitter))
    due = {}                                    # fine step -> command index written then
    for m in range(K):
        due.setdefault(r[m] + int(round(lat[m] / h)), []).append(m)
    reading = {int(j): m for m, j in enumerate(r)}
    u = np.zeros((K, model.n_joints))
    state = {'cur': -1, 'j': 0}

    def law(t, z, zd):
        j = state['j']
        state['j'] += 1
        if j in reading:
            m = reading[j]
            u[m] = _feedforward(m * DT) - KP * z[model.q_index] - KD * zd[model.q_index]
        for m in due.get(j, ()):
            state['cur'] = max(state['cur'], m)       # an older command written late is superseded
        c = state['cur']
        return np.zeros(model.n_joints) if c < 0 else u[c]

    return simulate(model, T + DT, h, torque=law, record_energy=False, substeps=1), u, r


def test_replay_with_the_instants_a_real_time_loop_wrote_its_commands():
    """Commands acting a varying part of a period after their readings, some a period late, one overtaken by the
    next: the replay on another arm is that arm's real-time loop (simulated at the fine step here)."""
    a, b = _arm(), _arm(ei=0.8, payload=0.13, zeta=0.03)
    T = 2.0
    K = int(round(T / DT)) + 1
    rng = np.random.default_rng(4)
    lat = DT / M * rng.integers(1, M, K)             # 1..7 eighths of a period after the reading ...
    lat[rng.choice(K, 40, replace=False)] += DT      # ... or a period later
    lat[100], lat[101] = 2 * DT, 0.25 * DT           # command 100 arrives after command 101: never acts
    rec, u, r = _realtime_loop(a, T, lat)
    direct, _, _ = _realtime_loop(b, T, lat)
    q_a, qd_a = rec.q[r], rec.qd[r]
    applied = np.arange(K) * DT + lat
    # every piece of a period with M sub-steps (the reference: steps of dt / M): equal to the integrators'
    # truncation (3e-7 of the modal coordinates, 1e-8 rad at the joints), far below an encoder count (1.5e-3 rad)
    Z, ZD, TAU = replay(b, DT, u, q_a, qd_a, KP, KD, applied_at=applied, substeps=M)
    assert np.max(np.abs(rec.q - direct.q)) > 1e-3
    assert np.max(np.abs(Z - direct.z[r])) < 1e-6, np.max(np.abs(Z - direct.z[r]))
    assert np.max(np.abs(TAU - direct.tau[r])) < 1e-5
    # the timing matters: the same commands as if written at their readings is another run
    Z0, _, _ = replay(b, DT, u, q_a, qd_a, KP, KD, applied_at=np.arange(K) * DT, substeps=M)
    assert np.max(np.abs(Z0[:, b.q_index] - direct.z[r][:, b.q_index])) > 1e-4    # rad: 1/4 of an encoder count
    # the default sub-steps (pieces of any length) agree with the reference to far below an encoder count
    Zd, _, _ = replay(b, DT, u, q_a, qd_a, KP, KD, applied_at=applied)
    assert np.max(np.abs(Zd[:, b.q_index] - direct.z[r][:, b.q_index])) < 1e-5


def test_replay_with_readings_taken_off_the_period():
    """The readings themselves a little early or late (a bridge's cycle jitter: 0..2 eighths of a period): with
    their instants (sample_times) the replay is still the other arm's loop."""
    a, b = _arm(), _arm(ei=0.8, payload=0.13, zeta=0.03)
    T = 1.0
    K = int(round(T / DT)) + 1
    rng = np.random.default_rng(5)
    jitter = rng.integers(0, 3, K)
    lat = DT / M * rng.integers(1, M, K)
    rec, u, r = _realtime_loop(a, T, lat, jitter)
    direct, _, _ = _realtime_loop(b, T, lat, jitter)
    h = DT / M
    Z, _, _ = replay(b, DT, u, rec.q[r], rec.qd[r], KP, KD, applied_at=r * h + lat, sample_times=r * h, substeps=M)
    assert np.max(np.abs(Z - direct.z[r])) < 1e-6, np.max(np.abs(Z - direct.z[r]))
    Zg, _, _ = replay(b, DT, u, rec.q[r], rec.qd[r], KP, KD, applied_at=np.arange(K) * DT + lat, substeps=M)
    assert np.max(np.abs(Zg[:, b.q_index] - direct.z[r][:, b.q_index])) > 1e-4     # as if on the period: off


def test_applied_at_bad_input_is_refused():
    model = _arm()
    z = np.zeros((5, 2))
    with pytest.raises(ValueError, match=r'applied_at\[2\] = 0.001 s: before its own reading'):
        replay(model, DT, z, z, z, KP, KD, applied_at=[0, DT, 1e-3, 3 * DT, np.nan])
    with pytest.raises(ValueError, match=r'applied_at: expected \(5,\)'):
        replay(model, DT, z, z, z, KP, KD, applied_at=[0.0])
    with pytest.raises(ValueError, match='delay: 0 with applied_at'):
        replay(model, DT, z, z, z, KP, KD, delay=1, applied_at=np.arange(5) * DT)
    with pytest.raises(ValueError, match='sample_times: expected'):
        replay(model, DT, z, z, z, KP, KD, applied_at=np.arange(5) * DT, sample_times=[0, 1, 1, 2, 3])
    with pytest.raises(ValueError, match='sample_times: only with applied_at'):
        replay(model, DT, z, z, z, KP, KD, sample_times=np.arange(5) * DT)
    for dt in (-DT, 0.0, math.nan):
        with pytest.raises(ValueError, match='dt must be > 0'):
            replay(model, dt, z, z, z, KP, KD)
    with pytest.raises(ValueError, match=r'z0: expected shape \(6,\)'):
        replay(model, DT, z, z, z, KP, KD, z0=np.zeros(2))
    # a command never written (NaN) acts as one superseded: the one before it stays
    lat = np.arange(5) * DT + 0.5 * DT
    never = lat.copy()
    never[2] = np.nan
    u = np.array([[0.1, 0.0], [0.2, 0.01], [5.0, 1.0], [0.3, 0.02], [0.1, 0.0]])
    _, _, tau = replay(model, DT, u, z, z, 0.0, 0.0, applied_at=never)
    assert np.allclose(tau[3], u[1]) and np.allclose(tau[4], u[3])
