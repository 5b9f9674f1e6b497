"""Integrator API: step() with both methods, failure reporting, and RK4's largest stable step."""
import os

import numpy as np
import pytest

from flexarm_sim.model import ArmState, IntegrationError, largest_stable_rk4_step, load_model, simulate, step
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def beam():
    return load_model(os.path.join(ARMS, 'slewing_beam.yaml'))


def _peak_after(model, dt, T, method='rk4'):
    state = ArmState.zeros(model)
    state.z[model.mode_index] = 1e-4
    try:
        for _ in range(int(T / dt)):
            step(model, state, np.zeros(model.n_joints), dt, 1, method)
    except IntegrationError:
        return np.inf
    return np.abs(state.z[model.mode_index]).max()


def test_largest_stable_rk4_step_separates_stable_from_unstable(beam):
    h = largest_stable_rk4_step(beam)
    assert 0 < h < 1
    # small-amplitude free vibration: bounded just below the limit, growing just above it
    assert _peak_after(beam, 0.9 * h, 400 * h) < 2e-4
    assert _peak_after(beam, 1.15 * h, 400 * h) > 1e-2


def test_midpoint_is_stable_beyond_the_rk4_limit(beam):
    h = largest_stable_rk4_step(beam)
    assert _peak_after(beam, 3 * h, 300 * h, 'midpoint') < 2e-4


def test_step_api_and_methods_agree(beam):
    tau = np.array([0.05])
    a = simulate(beam, 0.5, 1e-3, torque=lambda t, z, zd: tau, substeps=2, method='rk4')
    b = simulate(beam, 0.5, 1e-3, torque=lambda t, z, zd: tau, substeps=8, method='midpoint')
    assert a.t[-1] == pytest.approx(0.5)
    assert np.allclose(a.q, b.q, atol=1e-5)
    assert np.max(np.abs(a.delta - b.delta)) < 1e-3 * np.max(np.abs(a.delta))
    with pytest.raises(ValueError):
        step(beam, ArmState.zeros(beam), tau, 1e-3, 1, 'euler')


def test_non_finite_input_raises_integration_error(beam):
    state = ArmState.zeros(beam)
    with pytest.raises(IntegrationError):
        step(beam, state, np.array([np.nan]), 1e-3)
