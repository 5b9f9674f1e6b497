"""Measurement equations (model/sensing.py) and observability (model/observability.py) against independent
references: the cantilever's curvature under its own weight and the textbook clamped-free mode shape (strain gauges),
the finite difference of the simulated tip velocity plus gravity (accelerometer), the Kalman observability matrix,
the additivity of Fisher information and the invisibility of rigid rotations about the gravity axis (Gramian)."""
import math
import os

import numpy as np
import pytest

from flexarm_sim.model import ArmState, arm_from_dict, load_model, step, whole_arm_modes
from flexarm_sim.model.equilibrium import static_equilibrium
from flexarm_sim.model.observability import discrete_model, observability
from flexarm_sim.model.sensing import (SensorSet, SensorSpecError, gauge_spec, parse_gauge, strain_gauge, strain_matrix,
                                       tip_specific_force)
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()
G = 9.81


def cantilever(n_modes, EI=50.0, mu=0.5, L=1.0, gravity_y=-G, geometric_nonlinearity=True):
    """One clamped-free link along x, bending in the plane, gravity along -y (across the link)."""
    return load_model(arm_from_dict({
        'name': 'cantilever', 'planar': True, 'gravity': [0.0, gravity_y, 0.0],
        'geometric_nonlinearity': geometric_nonlinearity,
        'joints': [{'name': 'root', 'limits': {'effort': 100.0}, 'hub': {'inertia': 0.1},
                    'link': {'length': L, 'linear_density': mu, 'EI_z': EI, 'modes': {'in_plane': n_modes},
                             'boundary': 'clamped_free'}}]}))


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


def test_strain_is_c_times_the_curvature_of_the_gravity_sag():
    """A cantilever held horizontal sags under its weight mu g: EI w'' = -mu g (L - x)^2 / 2 (statics), so a gauge
    at distance c reads c w''. The modal expansion converges to it as modes are added (the curvature converges
    slowest at the root, where the distributed load's moment is largest). Linear statics: the model without the
    geometric nonlinearity (with it, the sag's foreshortening shortens the weight's lever by 6e-5 here)."""
    EI, mu, L, c = 50.0, 0.5, 1.0, 1e-3
    xs = np.array([0.0, 0.05, 0.25, 0.5, 0.75])
    ref = c * (-mu * G * (L - xs) ** 2 / (2 * EI))
    root_err = []
    for n in (1, 2, 4, 8):
        m = cantilever(n, EI, mu, L, geometric_nonlinearity=False)
        z, tau = static_equilibrium(m, [0.0])
        assert tau[0] == pytest.approx(mu * G * L ** 2 / 2, rel=1e-9)          # the holding torque: the weight's moment
        eps = strain_matrix(m, [strain_gauge(m, 'root', x, c=c) for x in xs]) @ z
        err = (eps - ref) / np.abs(ref).max()
        root_err.append(abs(err[0]))
    assert np.all(np.diff(root_err) < 0), root_err                              # converges
    assert np.max(np.abs(err)) < 3e-3                                           # 8 modes: within 0.3 % of the peak
    assert np.all(np.sign(eps[:-1]) == -1)                                      # bent towards -y: w'' < 0


def test_strain_of_one_mode_is_the_textbook_mode_curvature():
    """delta_1 = a alone: the deflection is a W(x) with the clamped-free shape W = cosh bx - cos bx - s (sinh bx -
    sin bx), bL = 1.87510407, s = (cosh bL + cos bL)/(sinh bL + sin bL), scaled to a mean square of 1 over the length
    (which W has: int_0^L W^2 = L), so the gauge reads c a W''(x) = c a b^2 (cosh bx + cos bx - s (sinh bx + sin bx))
    (sign: the tip moves by a W(L) = 2a)."""
    L, a, c = 1.0, 0.01, 2e-3
    m = cantilever(3, L=L, gravity_y=0.0)
    b = 1.87510407 / L
    s = (math.cosh(b * L) + math.cos(b * L)) / (math.sinh(b * L) + math.sin(b * L))
    z = np.zeros(m.n_coords)
    z[1] = a
    tip = m.tip_pose(z)[1][1]
    assert abs(tip) == pytest.approx(2 * a, rel=1e-3)        # W(L) = 2 (small-deflection tip displacement)
    sign = math.copysign(1.0, tip)
    for x in (0.0, 0.1, 0.4, 0.7, 1.0):
        d2 = b * b * (math.cosh(b * x) + math.cos(b * x) - s * (math.sinh(b * x) + math.sin(b * x)))
        eps = strain_matrix(m, [strain_gauge(m, 0, x, c=c)]) @ z
        assert eps[0] == pytest.approx(sign * c * a * d2, abs=1e-6 * c * a * b * b)


def test_accelerometer_reads_the_tip_acceleration_minus_gravity_in_the_tip_frame():
    """Spatial 3R arm (gravity, links bending in two planes), constant torques from a deflected, moving start:
    the tip's acceleration by finite differences of its simulated velocity (dt = 5 us, O(dt^2)), minus gravity,
    in the tip frame, equals what tip_specific_force reads from the state."""
    m = load_model(os.path.join(ARMS, 'spatial_3r.yaml'))
    st = ArmState.zeros(m)
    st.z[m.q_index] = [0.3, 0.4, -0.6]
    st.zd[m.q_index] = [0.5, -0.8, 1.2]
    st.z[m.mode_index] = 1e-4 * np.sin(np.arange(m.mode_index.size) + 1.0)
    tau = np.array([20.0, -150.0, 40.0])
    dt = 5e-6
    P, Rs, Z, ZD = [], [], [], []
    for _ in range(7):
        R, p = m.tip_pose(st.z)
        P.append(p)
        Rs.append(R)
        Z.append(st.z.copy())
        ZD.append(st.zd.copy())
        step(m, st, tau, dt, 1)
    g = np.array(m.data.gravity)
    for k in (2, 3, 4):
        v_plus = (P[k + 1] - P[k]) / dt
        v_minus = (P[k] - P[k - 1]) / dt
        a = (v_plus - v_minus) / dt
        ref = Rs[k].T @ (a - g)
        got = tip_specific_force(m, Z[k], ZD[k], tau)
        assert np.linalg.norm(got - ref) < 1e-3 * max(1.0, np.linalg.norm(ref)), (got, ref)
    # at rest with the holding torque the accelerometer reads -g in the tip frame: 1 g, pointing up
    z_eq, tau_eq = static_equilibrium(m, [0.3, 0.4, -0.6])
    f = tip_specific_force(m, z_eq, np.zeros(m.n_coords), tau_eq)
    R, _ = m.tip_pose(z_eq)
    assert np.allclose(R @ f, -g, atol=1e-4)      # the equilibrium is solved to ~1e-4 m/s^2 of modal acceleration


def test_sensor_descriptions_are_checked_against_the_arm(deluca):
    g = parse_gauge(deluca, 'elbow_link@0.1:c=0.002')
    assert (g.link, g.x, g.plane, g.c) == (1, 0.1, 0, 0.002)
    x, c = 0.1 / 3.0, np.float64(1.7e-3) / 7.0          # written without rounding, numpy scalars as numbers
    back = parse_gauge(deluca, gauge_spec('shoulder', x, 'in_plane', c))
    assert (back.link, back.x, back.plane, back.c) == (0, x, 0, float(c))
    for bad, words in (('wrist@0.1', 'no link'), ('shoulder@0.6', 'outside'), ('shoulder@x', 'not a number'),
                       ('shoulder@0.1:out_of_plane', 'no out_of_plane'), ('shoulder@0.1:c=5', 'neutral axis'),
                       ('shoulder', 'expected')):
        with pytest.raises(SensorSpecError) as e:
            parse_gauge(deluca, bad)
        assert words in str(e.value), str(e.value)
    with pytest.raises(SensorSpecError, match='unknown sensor'):
        SensorSet.parse(deluca, 'encoders,gyro')
    s = SensorSet.parse(deluca, 'encoders:2048,strain:shoulder@0.05,accel')
    assert s.labels(deluca) == ['shoulder', 'elbow', 'shoulder_link@0.05', 'accel_x', 'accel_y', 'accel_z']
    assert s.encoder_counts == 2048


def test_linearized_readings_are_the_derivatives_of_the_readings(deluca):
    """SensorSet.jacobians (the accelerometer's from the linear model and the tip Jacobians) against central
    differences of the nonlinear readings about a static equilibrium."""
    from flexarm_sim.model import linearize
    s = SensorSet.parse(deluca, 'encoders,strain:shoulder@0.05,strain:elbow@0.05,accel')
    z_eq, tau_eq = static_equilibrium(deluca, [0.3, -0.4])
    C, D = s.jacobians(deluca, linearize(deluca, z_eq, tau_eq))
    N = deluca.n_coords
    x0 = np.concatenate([z_eq, np.zeros(N)])
    h = 1e-5
    for k in range(2 * N):
        e = np.zeros(2 * N)
        e[k] = h
        num = (s.measure(deluca, *np.split(x0 + e, 2), tau_eq)
               - s.measure(deluca, *np.split(x0 - e, 2), tau_eq)) / (2 * h)
        assert np.allclose(C[:, k], num, rtol=1e-4, atol=2e-3), k
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        num = (s.measure(deluca, z_eq, np.zeros(N), tau_eq + e)
               - s.measure(deluca, z_eq, np.zeros(N), tau_eq - e)) / (2 * h)
        assert np.allclose(D[:, j], num, rtol=1e-4, atol=2e-3)


def test_gramian_rank_is_the_observability_matrix_rank(deluca):
    """rank W (Jacobi-scaled) = rank of the Kalman observability matrix [C; C Phi; ...; C Phi^(2N-1)] (SVD),
    for sensor sets that see everything and ones that do not."""
    N = deluca.n_coords
    Phi, _, lin = discrete_model(deluca, [0.0, 0.0], 2e-3)
    for spec in ('encoders', 'accel', 'strain:shoulder@0.05', 'strain:elbow@0.05,accel'):
        s = SensorSet.parse(deluca, spec)
        C, _ = s.jacobians(deluca, lin)
        O = np.vstack([C @ np.linalg.matrix_power(Phi, k) for k in range(2 * N)])
        O = O / np.linalg.norm(O, axis=0).clip(1e-300)              # column scaling: units do not matter
        sv = np.linalg.svd(O, compute_uv=False)
        rank_O = int(np.sum(sv > 1e-8 * sv[0]))
        assert observability(deluca, s).rank == rank_O, spec


def test_a_tip_accelerometer_cannot_see_rotations_about_gravity(deluca):
    """The De Luca arm moves in the horizontal plane, gravity along the joint axes: turning the arm rigidly (either
    rigid-body mode of the free joints) changes nothing in the tip frame, and a rigid rotation rate shows only in
    second order (centripetal). The unobservable subspace from the accelerometer alone is exactly the rigid modes'
    positions and rates; every elastic mode is seen, and the joint encoders see everything."""
    s = SensorSet.parse(deluca, 'accel')
    rep = observability(deluca, s)
    N = deluca.n_coords
    modes = whole_arm_modes(deluca, [0.0, 0.0])
    assert modes.n_rigid == 2
    assert rep.rank == 2 * N - 4
    rigid = np.zeros((2 * N, 4))
    for i in range(2):
        rigid[:N, i] = modes.shapes[:, i]
        rigid[N:, 2 + i] = modes.shapes[:, i]
    # same subspace: projecting either basis on the other loses nothing
    Q1, _ = np.linalg.qr(rep.unobservable)
    Q2, _ = np.linalg.qr(rigid)
    assert np.linalg.svd(Q1.T @ Q2, compute_uv=False).min() > 1 - 1e-6
    assert [m.observable for m in rep.modes] == [False, False] + [True] * (N - 2)
    assert observability(deluca, SensorSet.parse(deluca, 'encoders')).rank == 2 * N


def test_more_sensors_never_observe_less(deluca):
    """Independent readings add their information: W(A + B) = W(A) + W(B), hence every mode's bound with more sensors
    is at most the bound with fewer; a strain gauge on each link sharpens the elastic modes' bounds from the
    encoders' by a large factor (what the estimator gains from them)."""
    enc = SensorSet.parse(deluca, 'encoders')
    gauges = SensorSet.parse(deluca, 'strain:shoulder@0.05,strain:elbow@0.05')
    both = SensorSet.parse(deluca, 'encoders,strain:shoulder@0.05,strain:elbow@0.05')
    Wa, Wb, Wab = (observability(deluca, s).gramian for s in (enc, gauges, both))
    assert np.allclose(Wab, Wa + Wb, rtol=1e-9, atol=1e-9 * np.abs(Wab).max())
    ra, rab = observability(deluca, enc), observability(deluca, both)
    for ma, mab in zip(ra.modes, rab.modes):
        assert mab.std <= ma.std * (1 + 1e-9)
    elastic = [ma.std / mab.std for ma, mab in zip(ra.modes, rab.modes) if not ma.rigid]
    assert max(elastic) > 10.0, elastic
