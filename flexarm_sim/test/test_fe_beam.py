"""Tests for flexarm_sim.model.fe_beam (Hermite FE modal solver, Naganathan Timoshenko element)."""
import math

import numpy as np
import pytest
from scipy.linalg import eigh

from flexarm_sim.model.beam_modes import clamped_mass_modes
from flexarm_sim.model.fe_beam import (
    fe_bending_modes, timoshenko_ss_analytic, timoshenko_ss_frequency_parameter)

L_DLS, EI_DLS, MU_DLS = 0.5, 1.0, 0.2
LINK2 = dict(tip_mass=0.1, tip_inertia=0.0005)
LINK1 = dict(tip_mass=1.2, tip_inertia=0.0005 + 0.1 + 0.1 * 0.5**2 / 3 + 0.1 * 0.5**2)
UNIFORM_CASES = {
    "clamped-free": (1.0, 1.0, 1.0, {}),
    "DLS link 2": (L_DLS, EI_DLS, MU_DLS, LINK2),
    "DLS link 1": (L_DLS, EI_DLS, MU_DLS, LINK1),
}


def _order(n_el, err):
    """Least-squares slope of log(err) against log(h)."""
    return np.polyfit(np.log(1.0 / np.asarray(n_el, float)), np.log(np.asarray(err)), 1)[0]


def _element_quad(L, n_el, n_pts=8):
    """Gauss points per element (d2w is discontinuous across nodes)."""
    g, w = np.polynomial.legendre.leggauss(n_pts)
    h = L / n_el
    x = ((np.arange(n_el)[:, None] + 0.5 * (g[None, :] + 1)) * h).ravel()
    return x, np.tile(0.5 * h * w, n_el)


# ----------------------------------------------------------------------------- uniform links
@pytest.mark.parametrize("name", list(UNIFORM_CASES))
def test_fe_converges_to_analytic_at_h4(name):
    L, EI, mu, bc = UNIFORM_CASES[name]
    exact = clamped_mass_modes(L, EI, mu, 4, **bc).omega
    n_el = [2, 4, 8, 16]
    err = np.array([fe_bending_modes(L, n, EI, mu, 4, **bc).omega / exact - 1 for n in n_el])
    assert np.all(err > -1e-12)                     # conforming FE: upper bounds
    assert np.all(np.diff(err, axis=0) < 0)         # monotone convergence
    for mode in (0, 1):
        # clamped-free mode 2 is pre-asymptotic at 2 elements; use 4..32 there
        ne = n_el if err[0, mode] < 3e-3 else [4, 8, 16, 32]
        e = [fe_bending_modes(L, n, EI, mu, 2, **bc).omega[mode] / exact[mode] - 1 for n in ne]
        p = _order(ne, e)
        assert 3.5 < p < 4.5, (name, mode, p, e)
    fine = fe_bending_modes(L, 32, EI, mu, 4, **bc).omega
    np.testing.assert_allclose(fine, exact, rtol=2e-5)


@pytest.mark.parametrize("name", list(UNIFORM_CASES))
def test_fe_mode_shapes_match_analytic(name):
    L, EI, mu, bc = UNIFORM_CASES[name]
    a = clamped_mass_modes(L, EI, mu, 3, **bc)
    f = fe_bending_modes(L, 32, EI, mu, 3, **bc)
    x = np.linspace(0, L, 257)
    wa, wf = a.w(x), f.w(x)
    sign = np.sign(np.sum(wa * wf, axis=1))[:, None]     # alignment (should already be +1)
    assert np.all(sign == 1)
    scale = np.abs(wa).max(axis=1, keepdims=True)
    np.testing.assert_allclose(sign * wf / scale, wa / scale, atol=1e-4)
    dscale = np.abs(a.dw(x)).max(axis=1, keepdims=True)
    np.testing.assert_allclose((sign * f.dw(x) / dscale)[:2], (a.dw(x) / dscale)[:2], atol=1e-4)
    c2 = np.abs(a.d2w(x)).max(axis=1, keepdims=True)
    np.testing.assert_allclose(sign * f.d2w(x) / c2, a.d2w(x) / c2, atol=1e-2)   # w'' is O(h^2)


def test_fe_orthonormality_with_tip_body():
    L, EI, mu, bc = UNIFORM_CASES["DLS link 1"]
    n_el, n = 12, 6
    f = fe_bending_modes(L, n_el, EI, mu, n, **bc)
    x, wt = _element_quad(L, n_el)
    W, W2 = f.w(x), f.d2w(x)
    wL, dwL = f.w([L])[:, 0], f.dw([L])[:, 0]
    mass = mu * (W * wt) @ W.T + bc["tip_mass"] * np.outer(wL, wL) + bc["tip_inertia"] * np.outer(dwL, dwL)
    np.testing.assert_allclose(mass, np.eye(n), atol=1e-10)
    stiff = EI * (W2 * wt) @ W2.T / np.sqrt(np.outer(f.omega**2, f.omega**2))
    np.testing.assert_allclose(stiff, np.eye(n), atol=1e-10)
    assert np.all(wL > 0) and np.all(np.diff(f.omega) > 0)
    np.testing.assert_allclose(f.freqs_hz, f.omega / (2 * np.pi))
    # clamp
    assert np.all(f.w([0.0]) == 0) and np.all(f.dw([0.0]) == 0)


# ----------------------------------------------------------------------------- tapered link
L_T = 0.8
EI_T = lambda x: 2.0 * (1 - 0.5 * x / L_T) ** 3      # linearly tapered depth: EI ~ h^3
MU_T = lambda x: 0.3 * (1 - 0.5 * x / L_T)           # mu ~ h


def _ritz_legendre(L, EI, mu, n_terms, n_modes, M=0.0, J=0.0):
    """Independent Rayleigh-Ritz: basis x^2 P_k(2x/L - 1), spectral for smooth EI, mu."""
    g, w = np.polynomial.legendre.leggauss(60)
    x, wt = 0.5 * L * (g + 1), 0.5 * L * w
    s = 2 * x / L - 1
    phi, phi2 = [], []
    for k in range(n_terms):
        P = np.polynomial.legendre.Legendre.basis(k)
        p, p1, p2 = P(s), P.deriv(1)(s) * 2 / L, P.deriv(2)(s) * 4 / L**2
        phi.append(x**2 * p)
        phi2.append(2 * p + 4 * x * p1 + x**2 * p2)
    phi, phi2 = np.array(phi), np.array(phi2)
    K = (phi2 * EI(x) * wt) @ phi2.T
    Mm = (phi * mu(x) * wt) @ phi.T
    # tip values: P_k(1) = 1, P_k'(1) = k(k+1)/2, so phi_k(L) = L^2 and phi_k'(L) = 2L + L k(k+1)
    k = np.arange(n_terms)
    PL, dPL = np.full(n_terms, L**2), 2 * L + L * k * (k + 1)
    Mm += M * np.outer(PL, PL) + J * np.outer(dPL, dPL)
    return np.sqrt(eigh(K, Mm, eigvals_only=True, subset_by_index=[0, n_modes - 1]))


@pytest.mark.parametrize("tip", [{}, dict(tip_mass=0.05, tip_inertia=0.002)])
def test_tapered_link_against_ritz(tip):
    ref = _ritz_legendre(L_T, EI_T, MU_T, 16, 3, tip.get("tip_mass", 0.0), tip.get("tip_inertia", 0.0))
    ref_lo = _ritz_legendre(L_T, EI_T, MU_T, 12, 3, tip.get("tip_mass", 0.0), tip.get("tip_inertia", 0.0))
    np.testing.assert_allclose(ref_lo, ref, rtol=1e-8)         # Ritz reference has converged
    n_el = [4, 8, 16, 32]
    err = np.array([fe_bending_modes(L_T, n, EI_T, MU_T, 3, **tip).omega / ref - 1 for n in n_el])
    assert np.all(err > -1e-12)
    for mode in (0, 1):
        assert 3.5 < _order(n_el, err[:, mode]) < 4.5
    np.testing.assert_allclose(fe_bending_modes(L_T, 64, EI_T, MU_T, 3, **tip).omega, ref, rtol=1e-6)


def test_tapered_is_stiffer_per_mass_than_uniform_root_section():
    """Sanity: the taper removes tip mass faster than root stiffness, so omega_1 rises vs uniform."""
    f_t = fe_bending_modes(L_T, 16, EI_T, MU_T, 1).omega[0]
    f_u = fe_bending_modes(L_T, 16, EI_T(0.0), MU_T(0.0), 1).omega[0]
    assert f_t > f_u


def test_profiles_float_callable_and_scalar_only_callable_agree():
    a = fe_bending_modes(0.5, 6, 1.0, 0.2, 3, **LINK2)
    b = fe_bending_modes(0.5, 6, lambda x: 1.0, lambda x: 0.2 + 0 * x, 3, **LINK2)
    c = fe_bending_modes(0.5, 6, lambda x: math.sqrt(1.0 + 0 * x), 0.2, 3, **LINK2)   # math -> scalar only
    np.testing.assert_allclose(b.omega, a.omega, rtol=1e-14)
    np.testing.assert_allclose(c.omega, a.omega, rtol=1e-14)
    with pytest.raises(ValueError):
        fe_bending_modes(0.5, 2, 1.0, 0.2, 5)
    with pytest.raises(ValueError):
        fe_bending_modes(0.5, 4, lambda x: -1.0 + 0 * x, 0.2, 2)


# ----------------------------------------------------------------------------- Naganathan Table I
RATIOS = [0.02, 0.04, 0.06, 0.08, 0.10]
TABLE_I = {   # Naganathan (1986) Table I, p.56 (notes §3.1); row "1" is a 2-element full-span model
    (False, 2): [51.517, 27.055, 19.245, 15.446, 13.164],
    (False, 5): [19.830, 12.936, 10.957, 9.919, 9.173],
    (False, 10): [12.913, 10.479, 9.692, 9.131, 8.623],
    (False, 20): [10.650, 9.810, 9.367, 8.932, 8.486],
    (True, 2): [13.686, 13.218, 12.553, 11.793, 11.017],
    (True, 5): [10.291, 10.052, 9.694, 9.262, 8.795],
    (True, 10): [9.915, 9.695, 9.364, 8.963, 8.527],
    (True, 20): [None, 9.608, 9.284, 8.891, 8.462],    # 0.02 printed 9.844: misprint, see below
}
ANALYTIC_ROW = [None, 9.580, 9.258, 8.866, 8.441]       # 0.02 printed 9.839: misprint, see below


@pytest.mark.parametrize("reduced, n_el", list(TABLE_I))
def test_naganathan_table_I(reduced, n_el):
    for ratio, printed in zip(RATIOS, TABLE_I[(reduced, n_el)]):
        if printed is None:
            continue
        lam = timoshenko_ss_frequency_parameter(n_el, ratio, reduced=reduced)
        assert lam == pytest.approx(printed, abs=2e-3), (reduced, n_el, ratio, lam)


def test_naganathan_analytic_row():
    for ratio, printed in zip(RATIOS, ANALYTIC_ROW):
        if printed is not None:
            # printed 8.866 at 0.08 is a rounding of 8.8665..; tolerance is the brief's +-0.002
            assert timoshenko_ss_analytic(ratio) == pytest.approx(printed, abs=2e-3)
    # Euler-Bernoulli limit and n-th mode limit
    assert timoshenko_ss_analytic(1e-6) == pytest.approx(math.pi**2, rel=1e-9)
    assert timoshenko_ss_analytic(1e-6, n=3) == pytest.approx(9 * math.pi**2, rel=1e-8)


def test_naganathan_misprints_0p02():
    """The two 0.02 entries that do not reproduce are checked against independent data instead.

    * Analytic 0.02 (printed 9.839): the frequency equation must agree with the reduced-integration
      FE extrapolated to h -> 0 (error ~ h^2, Richardson 80/160 elements). That limit is 9.794.
    * Reduced/20/0.02 (printed 9.844): the printed 5- and 10-element entries (10.291, 9.915) fall
      like h^2 towards the limit (error ratio 4.1). h^2 then predicts 20 elements at
      lim + (9.915 - lim)/4 = 9.824, not 9.844, which would be non-monotone in the h^2 law.
    """
    r = 0.02
    f80, f160 = (timoshenko_ss_frequency_parameter(n, r) for n in (80, 160))
    lim = (4 * f160 - f80) / 3
    assert timoshenko_ss_analytic(r) == pytest.approx(lim, abs=2e-4)
    assert abs(timoshenko_ss_analytic(r) - 9.839) > 0.03               # the printed value is off
    predicted_20 = lim + (TABLE_I[(True, 10)][0] - lim) / 4
    assert timoshenko_ss_frequency_parameter(20, r) == pytest.approx(predicted_20, abs=2e-3)


def test_timoshenko_reduced_converges_from_above_at_h2():
    ref = timoshenko_ss_analytic(0.06)
    n_el = [10, 20, 40, 80]
    err = [timoshenko_ss_frequency_parameter(n, 0.06) - ref for n in n_el]
    assert all(e > 0 for e in err)
    assert 1.8 < _order(n_el, err) < 2.2
