"""The one zero-order-hold discretization (model.linearize.zero_order_hold) against closed forms."""
import math

import numpy as np

from flexarm_sim.model import zero_order_hold


def test_a_double_integrator_held_over_dt():
    """x'' = u: Phi = [[1, dt], [0, 1]], Gamma = [dt^2 / 2, dt]."""
    dt = 0.002
    Phi, G = zero_order_hold([[0.0, 1.0], [0.0, 0.0]], [[0.0], [1.0]], dt)
    np.testing.assert_allclose(Phi, [[1.0, dt], [0.0, 1.0]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(G, [[dt * dt / 2], [dt]], rtol=1e-12)


def test_an_undamped_oscillator_held_over_dt():
    """x'' = -w^2 x + u: Phi = [[cos, sin / w], [-w sin, cos]] (w dt), Gamma = [(1 - cos) / w^2, sin / w]."""
    w, dt = 2 * math.pi * 16.1, 0.004
    c, s = math.cos(w * dt), math.sin(w * dt)
    Phi, G = zero_order_hold([[0.0, 1.0], [-w * w, 0.0]], [[0.0], [1.0]], dt)
    np.testing.assert_allclose(Phi, [[c, s / w], [-w * s, c]], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(G[:, 0], [(1 - c) / (w * w), s / w], rtol=1e-10)
