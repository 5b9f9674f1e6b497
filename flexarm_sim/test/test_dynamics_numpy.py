"""The plain-numpy dynamics (model/dynamics_numpy.py) equals the numba kernels' J and R to 1e-12 relative
on every example arm at random states, and its forward dynamics / RK4 step agree with the kernel's."""
import os

import numpy as np
import pytest

from flexarm_sim.model import ArmState, load_model, step
from flexarm_sim.model import dynamics_numpy as dn
from flexarm_sim.model import kernels
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()
NAMES = ('deluca_two_link', 'spatial_3r', 'slewing_beam', 'rigid_puma3')


@pytest.fixture(scope='module', params=NAMES)
def model(request):
    return load_model(os.path.join(ARMS, request.param + '.yaml'))


def random_state(model, rng, deflection=0.02):
    z = np.zeros(model.n_coords)
    zd = np.zeros(model.n_coords)
    z[model.q_index] = rng.uniform(-np.pi, np.pi, model.n_joints)
    zd[model.q_index] = rng.normal(size=model.n_joints)
    z[model.mode_index] = rng.normal(size=model.mode_index.size) * deflection
    zd[model.mode_index] = rng.normal(size=model.mode_index.size) * 0.5
    tau = rng.normal(size=model.n_joints)
    return z, zd, tau


def test_mass_matrix_and_rhs_match_kernel(model):
    rng = np.random.default_rng(1234)
    ws = model.workspace()
    N = model.n_coords
    for _ in range(20):
        z, zd, tau = random_state(model, rng)
        Jk, Rk = np.zeros((N, N)), np.zeros(N)
        kernels.dynamics_terms(model.data, ws, z, zd, tau, Jk, Rk, True)
        J, R = dn.mass_matrix_and_rhs(model.data, z, zd, tau)
        assert np.max(np.abs(J - Jk)) <= 1e-12 * np.max(np.abs(Jk))
        assert np.max(np.abs(R - Rk)) <= 1e-12 * max(np.max(np.abs(Rk)), 1e-300)
        # the velocity/gravity part alone (no torque) is the harder check: no tau to dominate it
        R0 = dn.mass_matrix_and_rhs(model.data, z, zd, 0 * tau, want_mass=False)[1]
        kernels.dynamics_terms(model.data, ws, z, zd, 0 * tau, Jk, Rk, False)
        assert np.max(np.abs(R0 - Rk)) <= 1e-12 * np.max(np.abs(Rk))
        # velocity-dependent part separately (stiff links make K delta dominate R)
        Rs = dn.mass_matrix_and_rhs(model.data, z, 0 * zd, 0 * tau, want_mass=False)[1]
        Rks = np.zeros(N)
        kernels.dynamics_terms(model.data, ws, z, 0 * zd, 0 * tau, Jk, Rks, False)
        Rv, Rkv = R0 - Rs, Rk - Rks
        assert np.max(np.abs(Rv - Rkv)) <= 1e-12 * np.max(np.abs(Rkv))


def test_forward_dynamics_and_rk4_match_kernel(model):
    rng = np.random.default_rng(7)
    ws = model.workspace()
    z, zd, tau = random_state(model, rng)
    zdd = np.zeros(model.n_coords)
    assert kernels.forward_dynamics(model.data, ws, z, zd, tau, zdd)
    assert np.allclose(dn.forward_dynamics(model.data, z, zd, tau), zdd, rtol=1e-9, atol=1e-9 * np.abs(zdd).max())
    s = ArmState(z.copy(), zd.copy(), 0.0, ws)
    step(model, s, tau, 1e-3, 2)
    z1, zd1 = dn.rk4_step(model.data, z, zd, tau, 1e-3, 2)
    assert np.allclose(z1, s.z, rtol=0, atol=1e-12 * (1 + np.abs(s.z).max()))
    assert np.allclose(zd1, s.zd, rtol=0, atol=1e-10 * (1 + np.abs(s.zd).max()))
