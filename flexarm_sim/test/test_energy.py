"""Energy: an undamped, unforced arm conserves kinetic + elastic + gravity energy (a check of the whole
equation set together with the integrator); with damping, energy never increases; with torque, the
energy change equals the work done by the joint torques."""
import os

import numpy as np
import pytest

from flexarm_sim.model import arm_from_dict, load_arm, load_model
from flexarm_sim.model import kernels
from flexarm_sim.model.spec import arm_to_dict
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


def _random_ic(model, seed, deflection=0.005):
    """Random joint angles/rates and modal coordinates of the given size (m)."""
    rng = np.random.default_rng(seed)
    z = np.zeros(model.n_coords)
    zd = np.zeros(model.n_coords)
    z[model.q_index] = rng.uniform(-1, 1, model.n_joints)
    zd[model.q_index] = rng.normal(size=model.n_joints) * 0.5
    z[model.mode_index] = rng.normal(size=model.mode_index.size) * deflection
    return z, zd


def max_energy_drift(model, dt, T, method='rk4', seed=0, sample=0.1, deflection=0.005):
    """max |E(t) - E(0)| / |E(0)| over [0, T], energy sampled every `sample` seconds."""
    z, zd = _random_ic(model, seed, deflection)
    ws = model.workspace()
    tau = np.zeros(model.n_joints)
    E0 = model.energies(z, zd)['total']
    chunk = int(round(sample / dt))
    worst = 0.0
    for _ in range(int(round(T / sample))):
        if method == 'rk4':
            ok = kernels.rk4_step(model.data, ws, z, zd, tau, dt * chunk, chunk)
        else:
            ok = kernels.midpoint_step(model.data, ws, z, zd, tau, dt * chunk, chunk, 1e-12, 20)
        assert ok
        worst = max(worst, abs(model.energies(z, zd)['total'] - E0))
    return worst / abs(E0)


def deluca_without_stops():
    """The De Luca arm without position limits: the joints turn freely (its hard stops at +-pi would dissipate
    energy at contact; test_joint_stops checks them), so the runs test the equations and the integrator."""
    d = arm_to_dict(load_arm(os.path.join(ARMS, 'deluca_two_link.yaml')))
    for j in d['joints']:
        j['limits'].pop('position')
    return load_model(arm_from_dict(d))


def undamped_spatial_3r():
    d = arm_to_dict(load_arm(os.path.join(ARMS, 'spatial_3r.yaml')))
    for j in d['joints']:
        j['link']['damping_ratio'] = 0.0
        j.pop('friction', None)
    return load_model(arm_from_dict(d))


def test_deluca_rk4_conserves_energy_over_10s():
    model = deluca_without_stops()
    # drift vs step (measured): 2 ms 1.2e-3, 1 ms 3.8e-5, 0.5 ms 1.2e-6, 0.25 ms 3.7e-8 (order 5)
    assert max_energy_drift(model, 2.5e-4, 10.0) <= 1e-6


def test_rk4_energy_error_converges_at_high_order():
    model = deluca_without_stops()
    e1 = max_energy_drift(model, 2e-3, 2.0)
    e2 = max_energy_drift(model, 1e-3, 2.0)
    order = np.log2(e1 / e2)
    assert 3.5 < order < 6.0, order


def test_deluca_midpoint_energy_error_is_bounded_second_order():
    model = deluca_without_stops()
    e1 = max_energy_drift(model, 2e-3, 4.0, 'midpoint')
    e2 = max_energy_drift(model, 1e-3, 4.0, 'midpoint')
    assert e2 < 1e-5
    assert 1.6 < np.log2(e1 / e2) < 2.4


def test_spatial_arm_with_gravity_conserves_energy():
    # The steel-tube links are stiff (25-484 Hz): start undeformed so that RK4's (tiny) numerical
    # dissipation of the 484 Hz modes does not dominate; gravity deforms the links during the run.
    model = undamped_spatial_3r()
    assert max_energy_drift(model, 1e-4, 2.0, seed=3, deflection=0.0) <= 1e-6


def test_damping_dissipates_and_torque_work_balances_energy():
    model = load_model(os.path.join(ARMS, 'spatial_3r.yaml'))      # 5 % modal damping, gravity
    z, zd = _random_ic(model, 4)
    ws = model.workspace()
    dt = 1e-4
    E = [model.energies(z, zd)['total']]
    for _ in range(100):
        assert kernels.rk4_step(model.data, ws, z, zd, np.zeros(model.n_joints), 10 * dt, 10)
        E.append(model.energies(z, zd)['total'])
    assert np.all(np.diff(E) <= 1e-9 * abs(E[0]))
    assert E[-1] < E[0]
    # work-energy with a constant torque on an undamped arm: dE = sum_j tau_j (q_j(T) - q_j(0))
    model = undamped_spatial_3r()
    z, zd = _random_ic(model, 5, deflection=0.0)
    tau = np.array([1.0, -2.0, 0.5])
    q0 = z[model.q_index].copy()
    E0 = model.energies(z, zd)['total']
    assert kernels.rk4_step(model.data, model.workspace(), z, zd, tau, 0.5, 5000)
    work = tau @ (z[model.q_index] - q0)
    assert model.energies(z, zd)['total'] - E0 == pytest.approx(work, rel=1e-6, abs=1e-8)
