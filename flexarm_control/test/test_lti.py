"""laws/lti.py, the one owner of the Riccati designs, against what is known without it: the scalar Riccati equations
solved in closed form, and the filter's covariance recursion iterated to its fixed point."""
import math

import numpy as np
import pytest

from flexarm_control.laws.lti import dlqe, dlqr, lqr


@pytest.mark.parametrize('a,b,q,r', [(0.0, 1.0, 1.0, 1.0), (2.0, 0.5, 3.0, 0.2), (-1.0, 2.0, 0.1, 5.0)])
def test_lqr_scalar(a, b, q, r):
    """x' = a x + b u, cost q x^2 + r u^2: 2 a p - p^2 b^2 / r + q = 0, p > 0, so k = b p / r = (a + sqrt(a^2 +
    b^2 q / r)) / b and the loop's pole is -sqrt(a^2 + b^2 q / r)."""
    K, P = lqr(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]))
    p = r * (a + math.sqrt(a * a + b * b * q / r)) / (b * b)
    assert P[0, 0] == pytest.approx(p, rel=1e-10)
    assert K[0, 0] == pytest.approx(b * p / r, rel=1e-10)
    assert a - b * K[0, 0] == pytest.approx(-math.sqrt(a * a + b * b * q / r), rel=1e-10)


@pytest.mark.parametrize('a,b,q,r', [(0.5, 1.0, 1.0, 1.0), (1.2, 0.3, 2.0, 0.1), (-2.0, 1.0, 0.5, 3.0)])
def test_dlqr_scalar(a, b, q, r):
    """x+ = a x + b u: p = q + a^2 p r / (r + b^2 p), the positive root of b^2 p^2 + (r (1 - a^2) - q b^2) p - q r,
    and k = a b p / (r + b^2 p)."""
    K, P = dlqr(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]))
    c1 = r * (1 - a * a) - q * b * b
    p = (-c1 + math.sqrt(c1 * c1 + 4 * b * b * q * r)) / (2 * b * b)
    assert P[0, 0] == pytest.approx(p, rel=1e-10)
    assert K[0, 0] == pytest.approx(a * b * p / (r + b * b * p), rel=1e-10)
    assert abs(a - b * K[0, 0]) < 1.0


def test_dlqe_is_the_fixed_point_of_the_filter_recursion():
    """A lightly damped oscillator sampled at 2 ms with a position sensor: predict (P <- A P A' + Q) and update
    (Joseph form) from a wide prior until nothing changes; dlqe's a-priori P, a-posteriori P and gain are that
    fixed point's."""
    w, zeta, dt = 2 * math.pi * 3.0, 0.02, 2e-3
    Ac = np.array([[0.0, 1.0], [-w * w, -2 * zeta * w]])
    A = np.eye(2) + Ac * dt + Ac @ Ac * dt * dt / 2 + Ac @ Ac @ Ac * dt ** 3 / 6
    C = np.array([[1.0, 0.0]])
    Q = np.diag([1e-10, 1e-6])
    R = np.array([[1e-6]])
    L, P, P_post = dlqe(A, C, Q, R)
    Pk = np.eye(2)
    for _ in range(200000):
        Pp = A @ Pk @ A.T + Q
        G = Pp @ C.T @ np.linalg.inv(C @ Pp @ C.T + R)
        I_GC = np.eye(2) - G @ C
        Pn = I_GC @ Pp @ I_GC.T + G @ R @ G.T
        if np.max(np.abs(Pn - Pk)) <= 1e-15 * np.max(np.abs(Pn)):
            break
        Pk = Pn
    assert np.allclose(P, Pp, rtol=1e-6, atol=0)
    assert np.allclose(P_post, Pn, rtol=1e-6, atol=0)
    assert np.allclose(L, G, rtol=1e-6, atol=0)
    assert np.all(np.abs(np.linalg.eigvals(A - A @ L @ C)) < 1.0)      # the predictor's error decays
