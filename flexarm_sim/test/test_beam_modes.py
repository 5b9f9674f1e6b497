"""Tests for flexarm_sim.model.beam_modes (analytic Euler-Bernoulli and torsion modes)."""
import math

import numpy as np
import pytest
from scipy.linalg import eigh

from flexarm_sim.model.beam_modes import (
    BendingModes, clamped_free_beta_l, clamped_mass_modes, torsion_modes)

# Blevins, Formulas for Natural Frequency and Mode Shape, table 8-1 (cantilever).
PUBLISHED_BETA_L = [1.87510407, 4.69409113, 7.85475744, 10.99554073]

# De Luca & Siciliano (1991) two-link arm (anchors.md §E.1).
L_DLS, EI_DLS, MU_DLS = 0.5, 1.0, 0.2
LINK2 = dict(tip_mass=0.1, tip_inertia=0.0005)                                # mp, Jp
LINK1 = dict(tip_mass=1.0 + 0.1 + 0.1,                                        # mh2 + m2 + mp
             tip_inertia=0.0005 + 0.1 + 0.1 * 0.5**2 / 3 + 0.1 * 0.5**2)      # Jp+Jh2+Jo2+mp*l2^2


def _quad(L, n_sub=16, n_pts=24):
    """Composite Gauss-Legendre nodes/weights on [0, L] (independent of the module's rule)."""
    g, w = np.polynomial.legendre.leggauss(n_pts)
    edges = np.linspace(0.0, L, n_sub + 1)
    h = np.diff(edges)
    x = (edges[:-1, None] + 0.5 * h[:, None] * (g[None, :] + 1)).ravel()
    wt = (0.5 * h[:, None] * w[None, :]).ravel()
    return x, wt


# A spread of boundary conditions: none, the two DLS links, mass-dominated, inertia-dominated, both huge.
CASES = [
    dict(length=1.0, EI=1.0, mu=1.0, tip_mass=0.0, tip_inertia=0.0),
    dict(length=L_DLS, EI=EI_DLS, mu=MU_DLS, **LINK2),
    dict(length=L_DLS, EI=EI_DLS, mu=MU_DLS, **LINK1),
    dict(length=2.0, EI=3.0, mu=0.5, tip_mass=50.0, tip_inertia=0.0),
    dict(length=0.7, EI=2.0, mu=0.3, tip_mass=0.0, tip_inertia=5.0),
    dict(length=1.0, EI=1.0, mu=1.0, tip_mass=1e4, tip_inertia=1e3),
]


# ----------------------------------------------------------------------------- clamped-free
def test_clamped_free_roots_match_published():
    b = clamped_free_beta_l(4)
    np.testing.assert_allclose(b, PUBLISHED_BETA_L, rtol=1e-9, atol=0)
    # and they are roots: |1 + cos cosh| / cosh at machine level
    assert np.all(np.abs(1 + np.cos(b) * np.cosh(b)) / np.cosh(b) < 1e-14)


def test_clamped_free_roots_asymptote():
    b = clamped_free_beta_l(12)
    k = np.arange(1, 13)
    # 1 + cos b cosh b = 0 -> b -> (k - 1/2) pi with |b - (k-1/2) pi| ~ 2 exp(-(k-1/2) pi),
    # alternating sides; atol = a few ulps of b
    dev = b - (k - 0.5) * np.pi
    np.testing.assert_allclose(np.abs(dev)[3:], 2 * np.exp(-(k - 0.5) * np.pi)[3:],
                               rtol=1e-3, atol=1e-14)
    assert np.all(np.sign(dev[:6]) == -(-1.0) ** k[:6])


def test_clamped_free_frequencies():
    L, EI, mu = 0.8, 2.5, 0.3
    m = clamped_mass_modes(L, EI, mu, 4)
    f_ref = np.array(PUBLISHED_BETA_L) ** 2 / (2 * np.pi * L**2) * math.sqrt(EI / mu)
    np.testing.assert_allclose(m.freqs_hz, f_ref, rtol=3e-9)
    np.testing.assert_allclose(m.freqs_hz, m.omega / (2 * np.pi), rtol=1e-15)
    assert isinstance(m, BendingModes) and m.length == L
    assert m.tip_mass == 0.0 and m.tip_inertia == 0.0


# ----------------------------------------------------------------------------- De Luca & Siciliano
@pytest.mark.parametrize("bc, published, derived", [
    (LINK2, (2.18, 15.91), (2.178, 15.915)),
    (LINK1, (0.48, 1.80), (0.4797, 1.797)),
])
def test_de_luca_siciliano_frequencies(bc, published, derived):
    m = clamped_mass_modes(L_DLS, EI_DLS, MU_DLS, 2, **bc)
    np.testing.assert_allclose(m.freqs_hz, published, rtol=5e-3)
    # derived values (anchors §E.1) are printed to 4 significant digits: within half a unit
    half_unit = np.array([0.0005, 0.0005]) if derived[0] > 1 else np.array([0.00005, 0.0005])
    assert np.all(np.abs(m.freqs_hz - np.array(derived)) <= half_unit)
    assert m.tip_mass == bc["tip_mass"] and m.tip_inertia == bc["tip_inertia"]


# ----------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("case", CASES)
def test_orthonormality_and_stiffness(case):
    n = 8
    m = clamped_mass_modes(case["length"], case["EI"], case["mu"], n,
                           case["tip_mass"], case["tip_inertia"])
    L = case["length"]
    x, wt = _quad(L)
    W, W2 = m.w(x), m.d2w(x)
    wL, dwL = m.w([L])[:, 0], m.dw([L])[:, 0]
    mass = case["mu"] * (W * wt) @ W.T + case["tip_mass"] * np.outer(wL, wL) \
        + case["tip_inertia"] * np.outer(dwL, dwL)
    np.testing.assert_allclose(mass, np.eye(n), atol=1e-8)
    stiff = case["EI"] * (W2 * wt) @ W2.T
    scale = np.sqrt(np.outer(m.omega**2, m.omega**2))
    np.testing.assert_allclose(stiff / scale, np.eye(n), atol=1e-7)
    assert np.all(np.diff(m.omega) > 0)
    assert np.all(wL > 0)    # sign convention


@pytest.mark.parametrize("case", CASES)
def test_ode_and_boundary_conditions(case):
    L, EI, mu = case["length"], case["EI"], case["mu"]
    M, J = case["tip_mass"], case["tip_inertia"]
    m = clamped_mass_modes(L, EI, mu, 8, M, J)
    om2 = (m.omega**2)[:, None]
    x = np.linspace(0.05, 0.95, 7) * L
    w, w4 = m.w(x), m.deriv(x, 4)
    scale = np.abs(m.w(np.linspace(0, L, 201))).max(axis=1)[:, None]
    # EI w'''' = omega^2 mu w
    np.testing.assert_allclose(EI * w4 / (om2 * mu * scale), w / scale, atol=1e-9)
    # the analytic derivatives agree with central differences of the next-lower one
    beta = (m.omega * math.sqrt(mu / EI)) ** 0.5
    d = 1e-5 * L
    for k in range(1, 5):
        lower_p, lower_m, exact = m.deriv(x + d, k - 1), m.deriv(x - d, k - 1), m.deriv(x, k)
        fd = (lower_p - lower_m) / (2 * d)
        mag = (np.abs(exact).max(axis=1) + np.abs(m.deriv(x, k - 1)).max(axis=1) / L)[:, None]
        np.testing.assert_allclose(fd / mag, exact / mag, atol=1e-7)
    # clamp at x = 0
    assert np.all(np.abs(m.w([0.0])[:, 0]) < 1e-10 * scale[:, 0])
    assert np.all(np.abs(m.dw([0.0])[:, 0]) < 1e-10 * scale[:, 0] * beta)
    # tip body: EI w''(L) = +omega^2 J w'(L), EI w'''(L) = -omega^2 M w(L)
    w_L, w1_L, w2_L, w3_L = (m.deriv([L], k)[:, 0] for k in range(4))
    mom_scale = EI * beta**2 * scale[:, 0] + om2[:, 0] * J * beta * scale[:, 0]
    shr_scale = EI * beta**3 * scale[:, 0] + om2[:, 0] * M * scale[:, 0]
    np.testing.assert_allclose((EI * w2_L - om2[:, 0] * J * w1_L) / mom_scale, 0, atol=1e-9)
    np.testing.assert_allclose((EI * w3_L + om2[:, 0] * M * w_L) / shr_scale, 0, atol=1e-9)


def test_large_tip_mass_limit():
    """Tip mass >> beam mass: omega_1 -> sqrt(3 EI / ((M + 33/140 mu L) L^3)) (Rayleigh, static shape)."""
    L, EI, mu, M = 1.3, 2.0, 0.4, 400.0
    m = clamped_mass_modes(L, EI, mu, 3, tip_mass=M)
    w_rayleigh = math.sqrt(3 * EI / ((M + 33 / 140 * mu * L) * L**3))
    assert m.omega[0] <= w_rayleigh * (1 + 1e-12)          # Rayleigh quotient is an upper bound
    assert m.omega[0] == pytest.approx(w_rayleigh, rel=1e-6)


def test_roots_continuous_in_tip_mass():
    """Frequencies fall monotonically as M grows (Rayleigh), and no root is skipped or duplicated."""
    prev = None
    for M in [0.0, 1e-3, 0.1, 1.0, 10.0, 1e3, 1e5]:
        m = clamped_mass_modes(1.0, 1.0, 1.0, 8, tip_mass=M, tip_inertia=0.01)
        assert m.omega.size == 8 and np.all(np.diff(m.omega) > 0)
        if prev is not None:
            assert np.all(m.omega <= prev * (1 + 1e-12))
            # interlacing: adding mass lowers mode k at most to the old mode k-1
            assert np.all(m.omega[1:] >= prev[:-1] * (1 - 1e-12))
        prev = m.omega


def test_scalar_and_array_inputs():
    m = clamped_mass_modes(0.5, 1.0, 0.2, 3, **LINK2)
    assert m.w(0.25).shape == (3, 1)
    assert m.dw([0.1, 0.2]).shape == (3, 2)
    assert m.n_modes == 3
    with pytest.raises(ValueError):
        m.deriv([0.1], 5)
    with pytest.raises(ValueError):
        clamped_mass_modes(0.5, -1.0, 0.2, 3)


# ----------------------------------------------------------------------------- torsion
def test_torsion_clamped_free():
    L, GJ, rIp = 0.6, 4.0, 0.02
    t = torsion_modes(L, GJ, rIp, 5)
    k = np.arange(1, 6)
    np.testing.assert_allclose(t.omega, (2 * k - 1) * np.pi / (2 * L) * math.sqrt(GJ / rIp), rtol=1e-14)
    x, wt = _quad(L)
    W, W1 = t.w(x), t.dw(x)
    np.testing.assert_allclose(rIp * (W * wt) @ W.T, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(GJ * (W1 * wt) @ W1.T / np.sqrt(np.outer(t.omega**2, t.omega**2)),
                               np.eye(5), atol=1e-12)


def _torsion_fe_omega(L, GJ, rIp, J, n_el, n):
    """Linear-element torsion FE (consistent mass), clamped at 0, tip inertia J: lowest n omegas."""
    h = L / n_el
    k = GJ / h * np.array([[1, -1], [-1, 1]])
    me = rIp * h / 6 * np.array([[2, 1], [1, 2]])
    K = np.zeros((n_el + 1, n_el + 1))
    Mm = np.zeros_like(K)
    for e in range(n_el):
        K[e:e + 2, e:e + 2] += k
        Mm[e:e + 2, e:e + 2] += me
    Mm[-1, -1] += J
    lam = eigh(K[1:, 1:], Mm[1:, 1:], eigvals_only=True, subset_by_index=[0, n - 1])
    return np.sqrt(lam)


def test_torsion_tip_inertia_against_fe_and_bcs():
    L, GJ, rIp, J = 0.6, 4.0, 0.02, 0.01
    t = torsion_modes(L, GJ, rIp, 3, tip_inertia=J)
    # independent: linear FE, Richardson-extrapolated (error ~ h^2)
    w1 = _torsion_fe_omega(L, GJ, rIp, J, 200, 3)
    w2 = _torsion_fe_omega(L, GJ, rIp, J, 400, 3)
    np.testing.assert_allclose(t.omega, (4 * w2 - w1) / 3, rtol=1e-7)
    # boundary condition GJ phi'(L) = omega^2 J phi(L), normalisation with the tip term
    np.testing.assert_allclose(GJ * t.dw([L])[:, 0], t.omega**2 * J * t.w([L])[:, 0], rtol=1e-10)
    x, wt = _quad(L)
    W = t.w(x)
    mass = rIp * (W * wt) @ W.T + J * np.outer(t.w([L])[:, 0], t.w([L])[:, 0])
    np.testing.assert_allclose(mass, np.eye(3), atol=1e-12)
    assert np.all(t.w([L])[:, 0] > 0)
    assert t.tip_inertia == J and t.kind == "torsion"


def test_torsion_lumped_limit():
    """J >> rho_Ip L: omega_1 -> sqrt(GJ / (L (J + rho_Ip L / 3))) (Rayleigh with a linear twist)."""
    L, GJ, rIp, J = 1.0, 1.0, 1.0, 1e4
    w_r = math.sqrt(GJ / (L * (J + rIp * L / 3)))
    w1 = torsion_modes(L, GJ, rIp, 1, tip_inertia=J).omega[0]
    assert w1 <= w_r * (1 + 1e-14)
    assert w1 == pytest.approx(w_r, rel=1e-8)
