"""Finite-element beam models.

* ``fe_bending_modes``: Euler-Bernoulli modal solver for non-uniform links. It uses
  Hermite-cubic elements (DOFs w, w' per node), consistent mass, a clamp at node 0, and
  the tip body (M on w, J on w') lumped at the last node. K phi = omega^2 M phi is solved
  with scipy.linalg.eigh, and phi^T M phi = I includes the tip terms.
* Naganathan (1986, PhD thesis, eqs. 2.13-2.22 and App. A): a 2-node Timoshenko element
  with linear shape functions for u_x and theta_y, consistent mass including rotary
  inertia, and 1-point (reduced) shear integration.
  ``timoshenko_ss_frequency_parameter`` rebuilds his Table I (simply supported span), and
  ``timoshenko_ss_analytic`` is his frequency equation (3.1), with the missing square restored.

Robustness: ``fe_bending_modes`` refuses tip ratios above spec.TIP_RATIO_LIMITS["fem"] (beyond them
the inverse eigenproblem loses the higher modes to rounding: measured 2e-4 relative at J/(mu L^3) = 1e9),
non-finite or non-positive section data, and turns eigen-solver failures and non-finite, unordered
results into spec.ModeSolverError.
"""
from __future__ import annotations

import math
from typing import Callable, Union

import numpy as np
from scipy.linalg import LinAlgError, eigh

from .beam_modes import BendingModes, _check_ratios, _finite_inputs, _fix_sign, check_frequencies
from .spec import ModeSolverError

__all__ = [
    "fe_bending_modes",
    "timoshenko_ss_frequency_parameter",
    "timoshenko_ss_analytic",
]

Profile = Union[float, Callable[[np.ndarray], np.ndarray]]

# 5-point Gauss-Legendre on [0, 1]: exact to degree 9. That covers the mass integrand
# (N N^T is degree 6) times a cubic mu(x), and the stiffness integrand (degree 2) times a cubic EI(x).
_GP, _GW = np.polynomial.legendre.leggauss(5)
_GP = 0.5 * (_GP + 1.0)
_GW = 0.5 * _GW


def _hermite(xi: np.ndarray, h: float, k: int) -> np.ndarray:
    """k-th x-derivative of the 4 Hermite-cubic shape functions (w1, w1', w2, w2'); shape (4, n)."""
    xi = np.asarray(xi, dtype=float)
    one, z = np.ones_like(xi), np.zeros_like(xi)
    if k == 0:
        n = [1 - 3 * xi**2 + 2 * xi**3, h * (xi - 2 * xi**2 + xi**3),
             3 * xi**2 - 2 * xi**3, h * (-xi**2 + xi**3)]
    elif k == 1:
        n = [(-6 * xi + 6 * xi**2) / h, 1 - 4 * xi + 3 * xi**2,
             (6 * xi - 6 * xi**2) / h, -2 * xi + 3 * xi**2]
    elif k == 2:
        n = [(-6 + 12 * xi) / h**2, (-4 + 6 * xi) / h,
             (6 - 12 * xi) / h**2, (-2 + 6 * xi) / h]
    elif k == 3:
        n = [12 / h**3 * one, 6 / h**2 * one, -12 / h**3 * one, 6 / h**2 * one]
    elif k == 4:
        n = [z, z, z, z]
    else:
        raise ValueError("Hermite derivative order must be 0..4")
    return np.array(n)


def _profile_values(p: Profile, x: np.ndarray) -> np.ndarray:
    """Evaluate a float or callable section property at points x (array-in or scalar-only callables)."""
    if callable(p):
        try:
            v = np.asarray(p(x), dtype=float)
        except (TypeError, ValueError):
            v = np.array([float(p(xx)) for xx in x.ravel()]).reshape(x.shape)
        return np.broadcast_to(v, x.shape).astype(float)
    return np.full(x.shape, float(p))


def fe_bending_modes(length: float, n_elements: int, EI: Profile, mu: Profile, n_modes: int,
                     tip_mass: float = 0.0, tip_inertia: float = 0.0) -> BendingModes:
    """Hermite-cubic FE modes of a (possibly non-uniform) clamped link with a tip body.

    EI and mu are floats or callables f(x). Element matrices are
    K_e = int EI N''N''^T dx and M_e = int mu N N^T dx (5-point Gauss-Legendre).
    The returned modes are mass-normalised including M and J, with w(L) > 0, and are
    evaluated by Hermite interpolation (w, w' continuous; w'' piecewise linear, w''' piecewise constant).
    """
    L, ne = float(length), int(n_elements)
    M_tip, J_tip = float(tip_mass), float(tip_inertia)
    ndof = 2 * (ne + 1)
    _finite_inputs(length=L, tip_mass=M_tip, tip_inertia=J_tip)
    if L <= 0 or ne < 1 or M_tip < 0 or J_tip < 0:
        raise ModeSolverError("need length > 0, n_elements >= 1, tip_mass, tip_inertia >= 0")
    if not 1 <= n_modes <= ndof - 2:
        raise ModeSolverError(f"n_modes must be in 1..{ndof - 2} for {ne} elements")
    h = L / ne
    N0, N2 = _hermite(_GP, h, 0), _hermite(_GP, h, 2)              # (4, ng)
    xg = (np.arange(ne)[:, None] + _GP[None, :]) * h                # (ne, ng)
    EIg, mug = _profile_values(EI, xg), _profile_values(mu, xg)
    if not (np.all(np.isfinite(EIg)) and np.all(np.isfinite(mug))) or np.any(EIg <= 0) or np.any(mug <= 0):
        raise ModeSolverError("EI and mu must be finite and positive on [0, L]")
    mu_L = float(np.sum(mug * _GW) * h)                              # link mass
    _check_ratios("fem", mass=M_tip / mu_L, inertia=J_tip / (mu_L * L ** 2))
    # element matrices: (ne, 4, 4)
    Ke = np.einsum("eg,ig,jg->eij", EIg * _GW * h, N2, N2)
    Me = np.einsum("eg,ig,jg->eij", mug * _GW * h, N0, N0)
    K = np.zeros((ndof, ndof))
    M = np.zeros((ndof, ndof))
    for e in range(ne):
        s = slice(2 * e, 2 * e + 4)
        K[s, s] += Ke[e]
        M[s, s] += Me[e]
    M[-2, -2] += M_tip
    M[-1, -1] += J_tip
    # Solve the inverse problem M phi = (1/omega^2) K phi for its largest eigenvalues: the
    # error is then ~eps relative to the low modes. The error of eigh(K, M) is ~eps*omega_max^2
    # absolute, about 1e-8 relative for mode 1 at 32 elements.
    Kf, Mf = K[2:, 2:], M[2:, 2:]
    nf = ndof - 2
    try:
        inv_lam, vec = eigh(Mf, Kf, subset_by_index=[nf - n_modes, nf - 1])
    except (LinAlgError, ValueError) as e:
        raise ModeSolverError(f"FE eigen-solve failed ({e})") from None
    inv_lam, vec = inv_lam[::-1], vec[:, ::-1]
    if not (np.all(np.isfinite(inv_lam)) and np.all(inv_lam > 0.0)):
        raise ModeSolverError(f"FE eigenvalues 1/omega^2 not finite and positive: {inv_lam.tolist()}")
    vec = vec / np.sqrt(np.einsum("im,ij,jm->m", vec, Mf, vec))     # phi^T M phi = 1
    omega = check_frequencies(1.0 / np.sqrt(inv_lam), "FE bending modes")
    if not np.all(np.isfinite(vec)):
        raise ModeSolverError("FE mode shapes not finite")
    q = np.zeros((n_modes, ndof))
    q[:, 2:] = vec.T
    for k in range(n_modes):
        q[k] *= _fix_sign(q[k, -2], q[k, -1], np.max(np.abs(q[k, 0::2])))

    def evaluator(x, k):
        e = np.clip(np.floor(x / h).astype(int), 0, ne - 1)
        xi = x / h - e
        Nk = _hermite(xi, h, k)                                      # (4, nx)
        idx = 2 * e[None, :] + np.arange(4)[:, None]                 # (4, nx)
        return np.einsum("mjx,jx->mx", q[:, idx], Nk)

    modes = BendingModes(L, omega, M_tip, J_tip, evaluator, max_order=3, kind="bending")
    modes.nodal_dofs = q        # (m, 2(ne+1)) [w0, w0', w1, w1', ...], useful for diagnostics
    return modes


# --------------------------------------------------------------------------- Naganathan Timoshenko element
def _timoshenko_element(l: float, EI: float, kAG: float, rhoA: float, rhoI: float, reduced: bool):
    """Naganathan's linear Timoshenko element on (u_x1, theta_1, u_x2, theta_2) (notes §1.4).

    Bending: EI/l [[1,-1],[-1,1]] on theta. Shear strain gamma = u_x' - theta = B q, with
    B(s) = [-1/l, -N1, 1/l, -N2]. Reduced: one point at mid-element, k_t A G l b b^T,
    b = [-1/l, -1/2, 1/l, -1/2]. Exact: 2-point Gauss. Mass: consistent, rhoA m_ij on u_x and
    rhoI m_ij on theta, with m_ij = l/3 (i = j) or l/6.
    """
    K = np.zeros((4, 4))
    th = [1, 3]
    K[np.ix_(th, th)] += EI / l * np.array([[1.0, -1.0], [-1.0, 1.0]])
    if reduced:
        pts, wts = np.array([0.5]), np.array([1.0])
    else:
        g = 0.5 / math.sqrt(3.0)
        pts, wts = np.array([0.5 - g, 0.5 + g]), np.array([0.5, 0.5])
    for s, wt in zip(pts, wts):
        b = np.array([-1.0 / l, -(1.0 - s), 1.0 / l, -s])
        K += kAG * l * wt * np.outer(b, b)
    m = l * np.array([[1 / 3, 1 / 6], [1 / 6, 1 / 3]])
    Mm = np.zeros((4, 4))
    ux = [0, 2]
    Mm[np.ix_(ux, ux)] = rhoA * m
    Mm[np.ix_(th, th)] = rhoI * m
    return K, Mm


def timoshenko_ss_frequency_parameter(n_elements: int, aspect_ratio: float, reduced: bool = True,
                                      E_over_kG: float = 2.6 / 0.8864) -> float:
    """First-mode lambda = L^2 omega sqrt(rho A / E I) of a simply supported Timoshenko beam.

    Uses ``n_elements`` of Naganathan's elements over the full span, with u_x = 0 at both ends
    (theta free). aspect_ratio = r/L with r = sqrt(I/A). This reproduces Table I (p.56) of
    Naganathan (1986): ``reduced`` is 1-point shear integration, otherwise 2-point Gauss ("exact").
    """
    ne = int(n_elements)
    r2 = float(aspect_ratio) ** 2
    # nondimensional: L = 1, EI = 1, rhoA = 1 -> rhoI = r^2, kAG = (kG/E) EA = 1/(r^2 E/kG)
    EI, rhoA, rhoI, kAG = 1.0, 1.0, r2, 1.0 / (r2 * float(E_over_kG))
    l = 1.0 / ne
    Ke, Me = _timoshenko_element(l, EI, kAG, rhoA, rhoI, bool(reduced))
    ndof = 2 * (ne + 1)
    K = np.zeros((ndof, ndof))
    M = np.zeros((ndof, ndof))
    for e in range(ne):
        s = slice(2 * e, 2 * e + 4)
        K[s, s] += Ke
        M[s, s] += Me
    free = [i for i in range(ndof) if i not in (0, ndof - 2)]       # u_x = 0 at both supports
    lam = eigh(K[np.ix_(free, free)], M[np.ix_(free, free)], eigvals_only=True,
               subset_by_index=[0, 0])
    return float(math.sqrt(lam[0]))


def timoshenko_ss_analytic(aspect_ratio: float, E_over_kG: float = 2.6 / 0.8864, n: int = 1) -> float:
    """lambda_n of a simply supported Timoshenko beam (Naganathan eq. 3.1, with the square restored).

    (rho^2/(kEG)) w^4 - [(rho/E)(1 + E/kG)(n pi/L)^2 + rho A/EI] w^2 + (n pi/L)^4 = 0.
    Nondimensional (L = 1, rhoA/EI = 1): r^4 e lam^4 - [r^2 (1+e) k^2 + 1] lam^2 + k^4 = 0 with
    e = E/kG and k = n pi. Returns the smaller (bending) root.
    """
    r2, e, k2 = float(aspect_ratio) ** 2, float(E_over_kG), (n * math.pi) ** 2
    a, b, c = r2 * r2 * e, r2 * (1.0 + e) * k2 + 1.0, k2 * k2
    lam2 = 2.0 * c / (b + math.sqrt(b * b - 4.0 * a * c))          # cancellation-free small root
    return math.sqrt(lam2)
