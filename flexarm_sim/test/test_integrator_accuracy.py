"""An integrator that keeps what physics keeps (issue 27 item 2): the two-stage Gauss-Legendre method ('gauss') at
its sub-step rule, on every shipped arm without damping, friction or stops.

  * energy: released from a bent start, 10 s of free motion (gravity on), |E(t) - E(0)| <= 1e-4 E(0);
  * each whole-arm mode, excited alone at small amplitude about the nominal configuration (gravity off, so that it
    is an equilibrium), from a free-decay run at the rule's step: the numerical damping ratio from the energy's decay,
    zeta = -ln(E(T)/E(0)) / (2 omega T), within 1e-4, and the frequency from the modal coordinate's zero crossings
    within 0.1 % of the linearized one (the generalized eigenproblem K phi = omega^2 M phi of `linearize`, solved
    here with scipy);
  * order 4 against an independent solution (RK4 at a 40x finer step).

The same measures refute RK4 at its stability rule (today's default): spatial_3r's ~1 kHz modes are damped at
zeta ~1e-2 and the arm loses most of its energy in 10 s.
"""
import numpy as np
import pytest
import scipy.linalg

from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import auto_substeps, linearize, load_model, simulate, step
from flexarm_sim.model.integrators import GAUSS_STEP_LIMIT, ArmState, linearized_eigenvalues
from flexarm_sim.plant.config import INTEGRATORS
from flexarm_sim.plant.engine import PlantCore
from free_motion_cases import bent_start, free_arm, relative_energy_error

SHIPPED = ('deluca_two_link', 'slewing_beam', 'rigid_puma3', 'spatial_3r')
DT = 1e-3


@pytest.mark.parametrize('name', SHIPPED)
def test_gauss_keeps_the_energy_of_free_motion_for_10_s(name):
    model = free_arm(name)
    res = simulate(model, 10.0, DT, z0=bent_start(model), method='gauss')
    assert res.valid, res.validity_message                  # a run within the model's domain
    if model.mode_index.size:
        assert res.max_relative_deflection.max() > 0.02      # and a deflected one
    assert relative_energy_error(res).max() <= 1e-4


@pytest.mark.parametrize('name', ['slewing_beam', 'spatial_3r'])
def test_rk4_at_its_stability_rule_loses_the_energy_the_test_measures(name):
    model = free_arm(name)
    res = simulate(model, 10.0, DT, z0=bent_start(model), method='rk4')
    assert relative_energy_error(res)[-1] > 1e-2


def whole_arm_modes_at_rest(model):
    """(omega (m,), shapes (N, m)) of the flexible modes at the nominal configuration (rigid-body modes dropped)."""
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = model.spec.nominal_configuration
    lin = linearize(model, z0)
    w2, phi = scipy.linalg.eigh(lin.stiffness, lin.mass)
    keep = w2 > 1e-6 * max(1.0, w2.max())
    return z0, lin.mass, np.sqrt(w2[keep]), phi[:, keep]


def crossing_frequency(t, y):
    """Hz from the first and the last upward zero crossing of y (linear interpolation between samples)."""
    i = np.nonzero((y[:-1] < 0) & (y[1:] >= 0))[0]
    tc = t[i] - y[i] * (t[i + 1] - t[i]) / (y[i + 1] - y[i])
    return (tc.size - 1) / (tc[-1] - tc[0])


def modal_free_decay(model, method, substeps, cycles=40):
    """Per flexible mode: (linearized Hz, measured Hz, numerical damping ratio) of a free-decay run at the step
    dt / substeps of `method`'s rule, the mode alone excited at small amplitude."""
    z0, M, omega, phi = whole_arm_modes_at_rest(model)
    h = DT / substeps
    rows = []
    for k in range(omega.size):
        shape = phi[:, k] / np.abs(phi[:, k]).max()
        T = cycles * 2 * np.pi / omega[k]
        res = simulate(model, np.ceil(T / h) * h, h, z0=z0 + 1e-5 * shape, substeps=1, method=method)
        eta = (res.z - z0) @ (M @ shape)
        E = res.energy
        zeta = -np.log(E[-1] / E[0]) / (2 * omega[k] * res.t[-1])
        rows.append((omega[k] / (2 * np.pi), crossing_frequency(res.t, eta), zeta))
    return np.array(rows)


@pytest.mark.parametrize('name', ['deluca_two_link', 'slewing_beam', 'spatial_3r'])
def test_gauss_neither_damps_nor_detunes_any_whole_arm_mode(name):
    model = free_arm(name, gravity=False)
    rows = modal_free_decay(model, 'gauss', auto_substeps(model, DT, 'gauss'))
    f_lin, f_num, zeta = rows.T
    assert np.all(np.abs(zeta) <= 1e-4), zeta
    assert np.all(np.abs(f_num / f_lin - 1) <= 1e-3), (f_lin, f_num)


def test_rk4_at_its_stability_rule_damps_the_stiff_modes_the_test_measures():
    model = free_arm('spatial_3r', gravity=False)
    rows = modal_free_decay(model, 'rk4', auto_substeps(model, DT, 'rk4'), cycles=10)
    assert rows[:, 2].max() > 1e-3


def test_gauss_rule_resolves_every_linearized_eigenvalue():
    for name in SHIPPED:
        model = free_arm(name)
        n = auto_substeps(model, DT, 'gauss')
        top = np.abs(linearized_eigenvalues(model)).max()
        assert top * DT / n <= GAUSS_STEP_LIMIT
        assert n == 1 or top * DT / (n - 1) > GAUSS_STEP_LIMIT      # and takes no more sub-steps than that
    assert INTEGRATORS == ('rk4', 'midpoint', 'gauss')


def test_gauss_converges_at_fourth_order_to_an_independent_fine_solution():
    """De Luca arm, a torque step from a bent, moving start, 1 s: against RK4 at 1/80 of the step (itself within
    1e-11 of RK4 at 1/160); halving gauss's step divides its error by 2^4 (measured 3.99: 6.1e-5 -> 3.8e-6)."""
    model = load_model(resolve_arm('deluca_two_link'))
    z0 = bent_start(model, 0.03)
    zd0 = np.zeros(model.n_coords)
    zd0[model.q_index] = [1.0, -2.0]
    tau = np.array([0.3, -0.1])
    T, h = 1.0, 2e-3
    ref = simulate(model, T, h, torque=tau, z0=z0, zd0=zd0, substeps=80, method='rk4').z[-1]
    err = [np.abs(simulate(model, T, h, torque=tau, z0=z0, zd0=zd0, substeps=s, method='gauss').z[-1] - ref).max()
           for s in (1, 2)]
    assert err[1] < 1e-5
    assert 3.7 < np.log2(err[0] / err[1]) < 4.3, err


def test_plant_core_and_step_api_integrate_like_simulate():
    model = free_arm('deluca_two_link')
    z0 = bent_start(model)
    tau = np.array([0.2, -0.1])
    res = simulate(model, 0.05, DT, torque=tau, z0=z0, method='gauss')
    core = PlantCore(model, DT, 0, 'gauss')
    core.z[:] = z0
    state = ArmState(z0.copy(), np.zeros(model.n_coords))
    for _ in range(50):
        core._step(tau, DT, True)
        step(model, state, tau, DT, core.substeps, 'gauss')
    np.testing.assert_allclose(core.z, res.z[-1], rtol=0, atol=1e-14)
    np.testing.assert_allclose(state.z, res.z[-1], rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="choose one of \\('rk4', 'midpoint', 'gauss'\\)"):
        PlantCore(model, DT, 0, 'gauss4')
