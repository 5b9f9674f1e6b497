"""whole_arm_modes tells unstable, unrestrained and elastic directions apart and says whether the pose is an
equilibrium; with_more_modes / mode_convergence mark truncated frequencies.

Independent references: the rigid pendulum (lambda^2 = m g c / I_O, holding torque m g c cos q), the
eigenvalues of the forward dynamics linearized here by central differences of `model.accelerations` (a second
formulation: the state matrix A, not the K/J pencil), the gravity torque as the gradient of the potential energy
(`model.energies`, its own kernel), Cauchy interlacing of Rayleigh-Ritz eigenvalues, and the whole-arm FE value
of test_whole_arm_fe (22.1257 Hz for the De Luca arm's 4th free-joint mode, 40 elements per link).
"""
import math
import os

import numpy as np
import pytest

from flexarm_sim.model import ArmSpecError, arm_from_dict, load_arm, load_model, whole_arm_modes
from flexarm_sim.model.linearize import mode_convergence, with_more_modes
from flexarm_sim.model.spec import arm_to_dict
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()
G = 9.81
M, C, IC = 2.0, 0.3, 0.05          # rigid pendulum: mass, COM distance from the joint axis, inertia about the COM


def pendulum(gravity=(0.0, -G, 0.0), flexible=False):
    """One joint about z, link along x; gravity in the plane of motion (or along the axis)."""
    link = {'length': 0.6, 'extra_mass': {'mass': M, 'com': [C, 0.0, 0.0], 'inertia': [0.01, IC, IC]}}
    if flexible:
        link = {'length': 0.6, 'linear_density': 0.5, 'EI_z': 4.0, 'modes': {'in_plane': 3},
                'boundary': 'clamped_mass', 'damping_ratio': 0.0}
    d = {'name': 'pendulum', 'planar': True, 'gravity': list(gravity),
         'joints': [{'name': 'j', 'link': link}]}
    if flexible:
        d['payload'] = {'mass': 0.4, 'inertia': 1e-4}
    return load_model(arm_from_dict(d))


def state_matrix_eigs(model, q, tau=None, eps=1e-6):
    """Eigenvalues of A = d(z, zd)'/d(z, zd) at rest, by central differences of the forward dynamics."""
    N = model.n_coords
    z0 = np.zeros(N)
    z0[model.q_index] = q
    A = np.zeros((2 * N, 2 * N))
    A[:N, N:] = np.eye(N)
    for k in range(2 * N):
        e = np.zeros(2 * N)
        e[k] = eps
        xp, xm = np.concatenate([z0, np.zeros(N)]) + e, np.concatenate([z0, np.zeros(N)]) - e
        A[N:, k] = (model.accelerations(xp[:N], xp[N:], tau) - model.accelerations(xm[:N], xm[N:], tau)) / (2 * eps)
    return np.linalg.eigvals(A)


def test_upright_rigid_pendulum_is_unstable_at_the_analytic_rate():
    lam = math.sqrt(M * G * C / (IC + M * C ** 2))
    am = whole_arm_modes(pendulum(), [math.pi / 2])
    assert am.equilibrium and am.n_unstable == 1 and am.n_rigid == 0
    assert am.frequencies_hz.size == 0 and am.kinds == ('unstable',)
    assert am.unstable_rates[0] == pytest.approx(lam, rel=1e-8)
    assert abs(am.holding_torque[0]) < 1e-12
    # hanging: the same rate as a frequency, nothing unstable
    hang = whole_arm_modes(pendulum(), [-math.pi / 2])
    assert hang.equilibrium and hang.n_unstable == 0 and hang.n_rigid == 0
    assert 2 * math.pi * hang.elastic_frequencies_hz[0] == pytest.approx(lam, rel=1e-8)


def test_horizontal_pendulum_is_not_an_equilibrium_and_is_neutral_when_held():
    am = whole_arm_modes(pendulum(), [0.0])
    assert not am.equilibrium
    assert am.holding_torque[0] == pytest.approx(M * G * C, rel=1e-12)     # d/dq (m g c sin q) at q = 0
    # held by a constant torque at the top of the torque curve: no restoring stiffness -> unrestrained
    assert am.n_rigid == 1 and am.n_unstable == 0 and am.elastic_frequencies_hz.size == 0
    assert am.frequencies_hz.tolist() == [0.0] and am.kinds == ('rigid',)
    # 30 deg below the horizontal the held pendulum is restrained: w^2 = m g c sin(-q) / I_O
    q = -math.pi / 6
    am = whole_arm_modes(pendulum(), [q])
    assert not am.equilibrium and am.holding_torque[0] == pytest.approx(M * G * C * math.cos(q), rel=1e-12)
    w = 2 * math.pi * am.elastic_frequencies_hz[0]
    assert w ** 2 == pytest.approx(M * G * C * math.sin(-q) / (IC + M * C ** 2), rel=1e-7)


def test_free_joint_with_gravity_along_its_axis_is_unrestrained():
    am = whole_arm_modes(pendulum(gravity=(0.0, 0.0, -G)), [0.4])
    assert am.equilibrium and am.n_rigid == 1 and am.n_unstable == 0
    assert am.frequencies_hz.tolist() == [0.0] and am.elastic_frequencies_hz.size == 0
    # flexible slewing beam, free hub: the unrestrained direction is the undeformed beam turning about the hub
    model = load_model(os.path.join(ARMS, 'slewing_beam.yaml'))
    am = whole_arm_modes(model, [0.0])
    assert am.n_rigid == 1 and am.n_unstable == 0 and am.equilibrium
    v = am.shapes[:, 0]
    assert np.max(np.abs(v[model.mode_index])) < 1e-9 * abs(v[model.q_index[0]])
    assert np.all(am.elastic_frequencies_hz > 1.0)


def test_upright_flexible_link_matches_the_linearized_forward_dynamics():
    """Unstable rate and elastic frequencies of a flexible inverted pendulum against eig(A) of the forward
    dynamics linearized in this test."""
    model = pendulum(flexible=True)
    am = whole_arm_modes(model, [math.pi / 2])
    assert am.equilibrium and am.n_unstable == 1 and am.n_rigid == 0
    ev = state_matrix_eigs(model, [math.pi / 2])
    real = np.sort(ev[np.abs(ev.imag) < 1e-6 * np.abs(ev)].real)
    assert real[-1] == pytest.approx(am.unstable_rates[0], rel=1e-6)
    assert real[0] == pytest.approx(-am.unstable_rates[0], rel=1e-6)
    w = np.sort(ev.imag[ev.imag > 1e-6 * np.abs(ev)])
    np.testing.assert_allclose(w, 2 * math.pi * am.elastic_frequencies_hz, rtol=1e-6)
    assert am.elastic_frequencies_hz.size == 3


def test_rigid_puma3_nominal_reports_the_unstable_direction_and_the_holding_torque():
    model = load_model(os.path.join(ARMS, 'rigid_puma3.yaml'))
    q = model.spec.nominal_configuration
    am = whole_arm_modes(model, q)
    assert not am.equilibrium
    assert am.n_unstable == 1 and am.n_rigid == 1          # waist about the vertical: unrestrained
    assert 0.0 not in am.elastic_frequencies_hz.tolist() and am.elastic_frequencies_hz.size == 1
    # holding torque = gradient of the gravitational potential energy (a different kernel), ~70 N m at the shoulder
    h = 1e-6
    grad = []
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        grad.append((model.energies(q + e, np.zeros(3))['gravity'] - model.energies(q - e, np.zeros(3))['gravity'])
                    / (2 * h))
    np.testing.assert_allclose(am.holding_torque, grad, atol=1e-6 * np.max(np.abs(grad)))
    assert 70.0 < am.holding_torque[1] < 71.0
    # the arm held by that constant torque: eig(A) of its forward dynamics linearized here
    ev = state_matrix_eigs(model, q, tau=am.holding_torque)
    real = ev[np.abs(ev.imag) < 1e-6].real
    assert np.max(real) == pytest.approx(am.unstable_rates[0], rel=1e-6)
    assert np.max(ev.imag) == pytest.approx(2 * math.pi * am.elastic_frequencies_hz[0], rel=1e-6)


# ------------------------------------------------------------------------------------------ convergence
def test_deluca_fourth_free_joint_frequency_is_flagged_unconverged():
    spec = load_arm(os.path.join(ARMS, 'deluca_two_link.yaml'))
    fine_spec = with_more_modes(spec)
    assert [j.link.n_in_plane for j in fine_spec.joints] == [3, 3]
    coarse = whole_arm_modes(load_model(spec), [0.0, 0.0])
    fine = whole_arm_modes(load_model(fine_spec), [0.0, 0.0])
    conv = mode_convergence(coarse, fine, rtol=0.02)
    el = np.array([k == 'elastic' for k in conv.kinds])
    rc, ok = conv.relative_change[el], conv.converged[el]
    print(f'\nDe Luca free joints: {coarse.elastic_frequencies_hz} Hz, change vs 3 modes/link {rc * 100} %')
    assert coarse.elastic_frequencies_hz[3] == pytest.approx(29.29, abs=0.01)
    assert ok.tolist() == [True, True, True, False]
    assert 0.30 < rc[3] < 0.34 and np.all(np.abs(rc[:3]) < 2e-4)
    # the refined value is the converged one of the independent whole-arm FE model (test_whole_arm_fe)
    assert fine.elastic_frequencies_hz[3] == pytest.approx(22.1257, rel=3e-3)


@pytest.mark.parametrize('arm,q', [('deluca_two_link', [0.0, 0.0]), ('deluca_two_link', [0.0, 1.0]),
                                   ('spatial_3r', [0.3, math.pi / 2, 0.0]), ('spatial_3r', [0.3, 0.7, -0.4])])
def test_refined_model_interlaces(arm, q):
    """Rayleigh-Ritz: the model with one more mode per plane contains the present one, so every w^2 can only
    fall, index by index (fails if with_more_modes changed the existing modes or their tip bodies)."""
    spec = load_arm(os.path.join(ARMS, arm + '.yaml'))
    for free in (True, False):
        c = whole_arm_modes(load_model(spec), q, free_joints=free)
        f = whole_arm_modes(load_model(with_more_modes(spec)), q, free_joints=free)
        n = c.omega2.size
        assert f.omega2.size > n
        slack = 1e-9 * np.abs(c.omega2) + c.rigid_tol
        assert np.all(f.omega2[:n] <= c.omega2 + slack)
        assert f.kinds[:n] == c.kinds


def test_spatial_3r_upright_has_two_unstable_directions_converged():
    spec = load_arm(os.path.join(ARMS, 'spatial_3r.yaml'))
    q = [0.3, math.pi / 2, 0.0]
    c = whole_arm_modes(load_model(spec), q)
    f = whole_arm_modes(load_model(with_more_modes(spec)), q)
    assert c.equilibrium and c.n_unstable == 2 and c.n_rigid == 1
    conv = mode_convergence(c, f)
    assert conv.kinds[:3] == ('unstable', 'unstable', 'rigid') and np.all(conv.converged[:3])
    assert np.all(np.diff(c.unstable_rates) < 0)          # fastest first


def test_with_more_modes_extends_every_plane_a_link_models():
    spec = load_arm(os.path.join(ARMS, 'spatial_3r.yaml'))
    fine = with_more_modes(spec, 2)
    for js, jf in zip(spec.joints, fine.joints):
        a, b = js.link, jf.link
        assert (b.n_in_plane, b.n_out_of_plane, b.n_torsion) == tuple(c + 2 if c else 0 for c in (
            a.n_in_plane, a.n_out_of_plane, a.n_torsion))
        assert b.damping_ratio.size == b.n_modes and np.all(b.damping_ratio == (a.damping_ratio[0] if a.n_modes
                                                                                else 0.0))
    assert fine.joints[0].link.n_modes == 0                 # the rigid column stays rigid
    rigid = load_arm(os.path.join(ARMS, 'rigid_puma3.yaml'))
    assert with_more_modes(rigid) == rigid
    with pytest.raises(ArmSpecError, match='modes.in_plane'):
        with_more_modes(spec, 7)                             # 9 modes: outside the schema's range


def test_with_more_modes_keeps_the_damping_of_each_plane_and_fem_elements():
    d = arm_to_dict(load_arm(os.path.join(ARMS, 'spatial_3r.yaml')))
    link = d['joints'][1]['link']
    link['damping_ratio'] = [0.01, 0.02, 0.03, 0.04]        # in-plane 1, 2; out-of-plane 1, 2
    link['mode_solver'], link['fem_elements'] = 'fem', 1
    fine = with_more_modes(arm_from_dict(d), 1)
    b = fine.joints[1].link
    assert b.damping_ratio.tolist() == [0.01, 0.02, 0.02, 0.03, 0.04, 0.04]
    assert b.fem_elements == 2
