"""References: point-to-point profiles, trajectory interpolation, preemption, bang-bang."""
import math

import numpy as np
import pytest

from flexarm_control.laws import (BangBang, PointToPoint, ReferenceManager, TrajectoryReference, cycloidal,
                                  quintic)


@pytest.mark.parametrize('profile', ['cycloidal', 'quintic'])
def test_profile_boundary_conditions(profile):
    q0, q1, T = np.array([0.1, -0.2]), np.array([1.1, 0.5]), 2.5
    ref = PointToPoint(q0, q1, T, t0=0.3, profile=profile)
    for t in (0.0, 0.3):
        q, v, a = ref.sample(t)
        assert np.allclose(q, q0) and np.allclose(v, 0) and np.allclose(a, 0, atol=1e-12)
    for t in (2.8, 5.0):
        q, v, a = ref.sample(t)
        assert np.allclose(q, q1) and np.allclose(v, 0) and np.allclose(a, 0, atol=1e-12)
    # symmetric: half way at mid time
    assert np.allclose(ref.sample(0.3 + T / 2)[0], 0.5 * (q0 + q1))


def test_cycloid_peaks_match_naganathan_case1():
    Theta, T = math.pi / 3, 2.5
    ref = PointToPoint([0.0], [Theta], T)
    t = np.linspace(0, T, 20001)
    v = np.array([ref.sample(x)[1][0] for x in t])
    a = np.array([ref.sample(x)[2][0] for x in t])
    assert v.max() == pytest.approx(2 * Theta / T, rel=1e-6)          # 0.838 rad/s (thesis: 0.84)
    assert a.max() == pytest.approx(2 * math.pi * Theta / T ** 2, rel=1e-6)   # 1.053 rad/s^2 (thesis: 1.05)
    # the derivatives are consistent with the position (finite differences)
    q = np.array([ref.sample(x)[0][0] for x in t])
    assert np.allclose(np.gradient(q, t), v, atol=1e-6)
    assert np.allclose(np.gradient(v, t), a, atol=2e-4)


def test_quintic_peaks():
    T = 2.0
    t = np.linspace(0, 1, 10001)
    s = np.array([quintic(x) for x in t])
    assert s[:, 1].max() == pytest.approx(15 / 8, rel=1e-6)
    assert s[:, 2].max() == pytest.approx(10 / math.sqrt(3), rel=1e-5)
    c = np.array([cycloidal(x) for x in t])
    assert c[-1, 0] == pytest.approx(1.0) and c[:, 1].max() == pytest.approx(2.0)
    del T


def test_trajectory_interpolation_hits_points_and_holds():
    times = [0.5, 1.0, 2.0]
    P = [[0.2, 0.0], [0.5, 0.1], [0.4, 0.3]]
    V = [[0.5, 0.1], [0.0, 0.3], [0.0, 0.0]]
    A = [[0.0, 0.0], [-1.0, 0.0], [0.0, 0.0]]
    for vel, acc in ((None, None), (V, None), (V, A)):
        ref = TrajectoryReference(times, P, vel, acc, t0=10.0, start=(np.zeros(2), np.zeros(2), np.zeros(2)))
        for tk, pk in zip(times, P):
            assert np.allclose(ref.sample(10.0 + tk)[0], pk, atol=1e-12)
        if vel is not None:
            for tk, vk in zip(times, V):
                assert np.allclose(ref.sample(10.0 + tk)[1], vk, atol=1e-9)
        if acc is not None:
            assert np.allclose(ref.sample(11.0)[2], A[1], atol=1e-9)
        q, v, a = ref.sample(50.0)
        assert np.allclose(q, P[-1]) and np.allclose(v, 0) and np.allclose(a, 0)
        # C1: velocity continuous across a knot
        e = 1e-7
        assert np.allclose(ref.sample(11.0 - e)[1], ref.sample(11.0 + e)[1], atol=1e-5)


def test_trajectory_rejects_bad_input():
    with pytest.raises(ValueError):
        TrajectoryReference([1.0, 0.5], [[0.0], [1.0]])
    with pytest.raises(ValueError):
        TrajectoryReference([1.0], [[np.nan]])


def test_preemption_is_smooth():
    mgr = ReferenceManager(PointToPoint([0.0, 0.0], [1.0, -1.0], 2.0))
    t_now = 0.7
    before = mgr.sample(t_now)
    mgr.preempt([1.5], [[0.2, 0.2]], t_now=t_now)
    after = mgr.sample(t_now)
    for x, y in zip(before, after):
        assert np.allclose(x, y, atol=1e-12)     # position, velocity and acceleration continuous
    assert np.allclose(mgr.sample(t_now + 1.5)[0], [0.2, 0.2])
    # history: a past time still returns the old reference (shapers look back)
    assert np.allclose(mgr.sample(0.3)[0], PointToPoint([0.0, 0.0], [1.0, -1.0], 2.0).sample(0.3)[0])
    # move_to from a moving state keeps continuity as well
    t2 = t_now + 0.4
    s0 = mgr.sample(t2)
    mgr.move_to([0.0, 0.0], 1.0, t2)
    assert all(np.allclose(x, y, atol=1e-12) for x, y in zip(s0, mgr.sample(t2)))


def test_bang_bang():
    bb = BangBang([0.2, 0.2], 2.0)
    assert np.allclose(bb(0.5), 0.2) and np.allclose(bb(1.5), -0.2) and np.allclose(bb(2.5), 0.0)


def test_a_reference_is_the_same_whenever_it_starts():
    """Stamps are whole nanoseconds carried as float seconds; the time since a reference's start must not depend on
    the start (a lock-step run starts its move at the plant time the runner happened to pause at). Without
    rounding, t - t0 at the end of a 2.5 s move differed from 2.5 for 41 of these 200 starts, and the modal law's
    integrator (on once the reference rests) started one control step early or late."""
    rng = np.random.default_rng(7)
    T_ns = 2_500_000_000
    for start_ns in rng.integers(0, 20_000_000_000, 200):
        t0 = int(start_ns) * 1e-9
        for ref in (PointToPoint([0.0], [1.0], T_ns * 1e-9, t0),
                    TrajectoryReference([1.0, 2.5], [[0.5], [1.0]], t0=t0, start=([0.0], [0.0], [0.0]))):
            for rel_ns in (0, 1_000_000_000, T_ns - 2_000_000, T_ns, T_ns + 2_000_000):
                q, qd, qdd = ref.sample((int(start_ns) + rel_ns) * 1e-9)
                q_ref, qd_ref, qdd_ref = (PointToPoint([0.0], [1.0], 2.5, 0.0) if isinstance(ref, PointToPoint)
                                          else TrajectoryReference([1.0, 2.5], [[0.5], [1.0]], t0=0.0,
                                                                   start=([0.0], [0.0], [0.0]))).sample(rel_ns / 1e9)
                assert list(q) == list(q_ref) and list(qd) == list(qd_ref) and list(qdd) == list(qdd_ref)
        assert list(PointToPoint([0.0], [1.0], 2.5, t0).sample(t0 + 2.5)[1]) == [0.0]     # at rest at its end


@pytest.mark.parametrize('accelerations', [False, True])
@pytest.mark.parametrize('start', [False, True])
@pytest.mark.parametrize('t0', [0.25, 1.7962896e9])
def test_sampling_many_instants_at_once_is_sampling_each(accelerations, start, t0):
    """TrajectoryReference.sample_many (what ReferenceLimits checks a new reference with) against sample() at every
    instant: cubic and quintic segments, a given start state (its quintic first segment), before the start, on the
    knots, between them, after the end, at plant time and at wall-clock (epoch) stamps."""
    rng = np.random.default_rng(7)
    times = np.round(np.cumsum(rng.uniform(0.05, 0.4, 9)), 3)      # on the ms grid: instants fall on the knots
    P = np.cumsum(rng.normal(0, 0.2, (9, 2)), axis=0)
    V = rng.normal(0, 0.5, (9, 2))
    A = rng.normal(0, 2.0, (9, 2)) if accelerations else None
    st = (np.array([0.1, -0.3]), np.array([0.4, 0.2]), np.array([-1.0, 3.0])) if start else None
    ref = TrajectoryReference(times, P, None if accelerations else V, A, t0=t0, start=st)
    ts = np.concatenate([t0 + np.linspace(-0.5, times[-1] + 0.5, 397), t0 + ref.times, [t0, ref.end_time]])
    Q, QD, QDD = ref.sample_many(ts)
    assert Q.shape == QD.shape == QDD.shape == (ts.size, 2)
    for k, t in enumerate(ts):
        q, qd, qdd = ref.sample(t)
        np.testing.assert_allclose(Q[k], q, rtol=0, atol=1e-12, err_msg=f'position at t - t0 = {t - t0}')
        np.testing.assert_allclose(QD[k], qd, rtol=0, atol=1e-10, err_msg=f'velocity at t - t0 = {t - t0}')
        np.testing.assert_allclose(QDD[k], qdd, rtol=1e-12, atol=1e-8, err_msg=f'acceleration at t - t0 = {t - t0}')
