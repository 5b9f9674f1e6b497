"""Analytic Euler-Bernoulli bending modes and uniform-shaft torsion modes of one link.

The link is clamped at x = 0. At x = L it carries a rigid body of mass ``M`` and
rotary inertia ``J`` (about the tip, about the bending axis). This is the
clamped-mass boundary condition of De Luca & Siciliano (1991, IEEE TSMC 21(4)).

Uniform beam, EI w'''' = omega^2 mu w, beta^4 = omega^2 mu / EI. Hamilton's
principle, with T = 1/2 int mu wdot^2 + 1/2 M wdot(L)^2 + 1/2 J wdot'(L)^2 and
V = 1/2 int EI w''^2, gives at x = L

    EI w''(L)  = +omega^2 J w'(L)      (the end moment balances the rotary inertia)
    EI w'''(L) = -omega^2 M w(L)       (the end shear balances the translating mass)

With w = A (cosh bx - cos bx) + B (sinh bx - sin bx) (already clamped at x = 0),
b = beta L, a = M/(mu L) and g = J b^3/(mu L^3), the 2x2 determinant is

    1 + cC + a (C s - c S) - g (s C + c S) + a g (1 - cC) = 0,

with c, s = cosh b, sinh b and C, S = cos b, sin b. M = J = 0 gives 1 + cos b cosh b = 0.

Modes are mass-normalised *including the tip body*:
    int mu w_k w_l dx + M w_k(L) w_l(L) + J w_k'(L) w_l'(L) = delta_kl,
so that int EI w_k'' w_l'' dx = omega_k^2 delta_kl. Sign: w_k(L) > 0, or w_k'(L) > 0
if the tip displacement is (numerically) zero.

Robustness: the tip ratios alpha = M/(mu L), gamma = J/(mu L^3) are refused above
spec.TIP_RATIO_LIMITS["analytic"] (the range test_spec_robustness verifies); every root search is
bounded (one grid scan to (n + 1.5) pi, a bracketed root finder with an iteration cap) and a non-finite intermediate, a missing
root or unordered frequencies raise spec.ModeSolverError instead of hanging or returning garbage.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .spec import TIP_RATIO_LIMITS, ModeSolverError

__all__ = [
    "BendingModes",
    "check_frequencies",
    "clamped_free_beta_l",
    "clamped_mass_modes",
    "torsion_modes",
]

# Gauss-Legendre rule for the normalisation integrals. The shapes are entire
# functions with at most ~(n_modes) half-waves, so 256 points give machine accuracy.
_GL_X, _GL_W = np.polynomial.legendre.leggauss(256)

# Below this b = beta L the (cosh - cos, sinh - sin) basis is used. Above it
# that basis cancels catastrophically, so the exponential basis is used instead.
_B_SWITCH = 6.0


class BendingModes:
    """Modes of one bending plane (or torsion) of one link clamped at x = 0.

    ``w``, ``dw`` and ``d2w`` return arrays of shape (m, len(x)). ``deriv(x, k)``
    returns the k-th x-derivative. The analytic modes support k <= 4, and the
    Hermite finite-element modes support k <= 3 (piecewise).
    """

    def __init__(self, length: float, omega, tip_mass: float, tip_inertia: float,
                 evaluator: Callable[[np.ndarray, int], np.ndarray], max_order: int = 4,
                 kind: str = "bending"):
        self.length = float(length)
        self.omega = np.asarray(omega, dtype=float)
        self.freqs_hz = self.omega / (2.0 * np.pi)
        self.tip_mass = float(tip_mass)
        self.tip_inertia = float(tip_inertia)
        self.kind = kind
        self._evaluator = evaluator
        self._max_order = int(max_order)

    @property
    def n_modes(self) -> int:
        return int(self.omega.size)

    def deriv(self, x, order: int = 0) -> np.ndarray:
        """d^order w_k / dx^order at abscissae x; shape (m, len(x))."""
        if not 0 <= order <= self._max_order:
            raise ValueError(f"derivative order {order} not available (max {self._max_order})")
        x = np.atleast_1d(np.asarray(x, dtype=float))
        return self._evaluator(x, int(order))

    def w(self, x) -> np.ndarray:
        """Mode displacements (bending) or twist angles (torsion)."""
        return self.deriv(x, 0)

    def dw(self, x) -> np.ndarray:
        """Mode slopes dw/dx."""
        return self.deriv(x, 1)

    def d2w(self, x) -> np.ndarray:
        """Mode curvatures d2w/dx2."""
        return self.deriv(x, 2)

    def __repr__(self) -> str:
        return (f"BendingModes(kind={self.kind!r}, L={self.length:g}, "
                f"f_hz={np.array2string(self.freqs_hz, precision=4)}, "
                f"M={self.tip_mass:g}, J={self.tip_inertia:g})")


# --------------------------------------------------------------------------- helpers
def _finite_inputs(**values):
    """ModeSolverError unless every value is a finite float."""
    bad = {k: v for k, v in values.items() if not math.isfinite(float(v))}
    if bad:
        raise ModeSolverError(f"mode solver input not finite: {bad}")


def _check_ratios(solver: str, **ratios):
    """ModeSolverError if a tip ratio exceeds the range the solver is verified for (spec.TIP_RATIO_LIMITS)."""
    for name, value in ratios.items():
        cap = TIP_RATIO_LIMITS[solver][name]
        if not value <= cap:
            what = {"mass": "tip mass / link mass M/(mu L)", "inertia": "tip inertia ratio J/(mu L^3)",
                    "torsion": "tip inertia ratio J/(rho_Ip L)"}[name]
            raise ModeSolverError(f"{what} = {value:.3g} exceeds {cap:g}, the range the {solver} mode solver "
                                  "is verified for (everything outboard at the nominal configuration is the tip "
                                  "body): link too light for its load?")


ROOT_MAX_ITER = 200


def _root(f, lo, hi, what, xtol=1e-15, rtol=4 * np.finfo(float).eps):
    """The root of f in the sign-changing bracket [lo, hi] (Illinois regula falsi, every third step a bisection so
    the bracket always shrinks; ROOT_MAX_ITER iterations at most); failures become ModeSolverError. (Written here
    rather than scipy.optimize.brentq: importing scipy.optimize costs every node 0.4-0.6 s of start-up.)"""
    fa, fb = f(lo), f(hi)
    if not (math.isfinite(fa) and math.isfinite(fb)) or fa * fb > 0:
        raise ModeSolverError(f"{what}: no sign change in [{lo:.6g}, {hi:.6g}] (f = {fa:.3g}, {fb:.3g})")
    if fa == 0.0:
        return lo
    if fb == 0.0:
        return hi
    side = 0
    for it in range(ROOT_MAX_ITER):
        if it % 3 == 2:
            c = 0.5 * (lo + hi)
        else:
            c = (lo * fb - hi * fa) / (fb - fa)
            if not lo < c < hi:
                c = 0.5 * (lo + hi)
        fc = f(c)
        if not math.isfinite(fc):
            raise ModeSolverError(f"{what}: non-finite characteristic function at {c:.17g}")
        if fc == 0.0 or hi - lo <= xtol + rtol * abs(c):
            return c
        if fc * fb > 0:
            hi, fb = c, fc
            if side == -1:
                fa *= 0.5
            side = -1
        else:
            lo, fa = c, fc
            if side == 1:
                fb *= 0.5
            side = 1
    raise ModeSolverError(f"{what}: root in [{lo:.6g}, {hi:.6g}] not converged in {ROOT_MAX_ITER} iterations")


def check_frequencies(omega, what: str) -> np.ndarray:
    """omega finite, > 0 and strictly increasing, else ModeSolverError."""
    omega = np.asarray(omega, dtype=float)
    if not np.all(np.isfinite(omega)) or np.any(omega <= 0.0):
        raise ModeSolverError(f"{what}: frequencies not finite and positive: {omega.tolist()}")
    if np.any(np.diff(omega) <= 0.0):
        raise ModeSolverError(f"{what}: frequencies not strictly increasing: {omega.tolist()}")
    return omega


def _sech(b):
    e = np.exp(-np.abs(b))
    return 2.0 * e / (1.0 + e * e)


def _cosh_minus_cos(y):
    """cosh y - cos y = 2 (sinh^2(y/2) + sin^2(y/2)); no cancellation."""
    return 2.0 * (np.sinh(0.5 * y) ** 2 + np.sin(0.5 * y) ** 2)


def _sinh_minus_sin(y):
    """sinh y - sin y, using the series 2 sum y^(4k+3)/(4k+3)! for |y| < 1."""
    y = np.asarray(y, dtype=float)
    out = np.sinh(y) - np.sin(y)
    small = np.abs(y) < 1.0
    if np.any(small):
        ys = y[small]
        term = ys ** 3 / 6.0
        acc = term.copy()
        for k in range(1, 6):   # terms up to y^23/23!: < 1e-22 for |y| < 1
            n = 4 * k + 3
            term = term * ys ** 4 / ((n - 3) * (n - 2) * (n - 1) * n)
            acc = acc + term
        out = np.array(out, copy=True)
        out[small] = 2.0 * acc
    return out


def _fix_sign(w_tip: float, dw_tip: float, scale: float) -> float:
    """+1 or -1 so that w(L) > 0, or w'(L) > 0 if w(L) is ~ 0 (scale = max |w|)."""
    if abs(w_tip) > 1e-9 * scale:
        return 1.0 if w_tip > 0 else -1.0
    return 1.0 if dw_tip >= 0 else -1.0


# --------------------------------------------------------------------------- clamped-free
def _clamped_free_char(b):
    """(1 + cos b cosh b) / cosh b: O(1) and cancellation-free."""
    return _sech(b) + np.cos(b)


def clamped_free_beta_l(n: int) -> np.ndarray:
    """First n roots b = beta L of 1 + cos b cosh b = 0 (clamped-free Euler-Bernoulli beam).

    f(b) = (1 + cos b cosh b)/cosh b = sech b + cos b has f(0) = 2 and sign(f(k pi)) = (-1)^k, so
    root k is bracketed in ((k-1) pi, k pi) (it lies within sech((k-1/2)pi) of (k-1/2) pi, on
    either side) and refined with _root (bracketed).
    """
    roots = [_root(_clamped_free_char, (k - 1) * np.pi, k * np.pi, "clamped-free root")
             for k in range(1, int(n) + 1)]
    return np.asarray(roots)


# --------------------------------------------------------------------------- clamped-mass
def _clamped_mass_char(b, alpha, gamma):
    """Scaled characteristic function of the clamped beam with tip body.

    det / (2 cosh b (1 + a)(1 + g)) with a = alpha b, g = gamma b^3, alpha = M/(mu L),
    gamma = J/(mu L^3). It is continuous, has no poles and stays O(1) for large b, M and J.
    """
    b = np.asarray(b, dtype=float)
    e, t = _sech(b), np.tanh(b)
    C, S = np.cos(b), np.sin(b)
    a, g = alpha * b, gamma * b ** 3
    f = (e + C) + a * (C * t - S) - g * (t * C + S) + a * g * (e - C)
    return f / ((1.0 + a) * (1.0 + g))


def _clamped_mass_roots(n: int, alpha: float, gamma: float) -> np.ndarray:
    """First n positive roots b of the clamped-mass characteristic equation (grid scan + _root).

    A tip body only lowers the eigenvalues (Rayleigh), so root k lies below the clamped-free root k
    < k pi: one scan to (n + 1.5) pi finds all n (no open-ended search). Roots are separated by
    ~pi above b = 0.5; below, the two tip-body roots differ by a factor >= 1.9 in b (heavy-tip
    2-DOF limit: omega_2^2/omega_1^2 >= 7 + 4 sqrt 3), which the 1.7 % geometric grid resolves.
    """
    f = lambda bb: float(_clamped_mass_char(bb, alpha, gamma))
    # F(0) = 2 exactly; a geometric grid resolves roots pushed towards 0 by a large M or J.
    # (Cancellation in C t - S limits root 1 to ~eps/b^2 relative: 1e-14 at M/(mu L) = 1e4.)
    low = np.concatenate([[0.0], np.geomspace(1e-6, 0.5, 800, endpoint=False)])
    grid = np.concatenate([low, np.arange(0.5, (n + 1.5) * np.pi, 2e-3)])
    with np.errstate(all="ignore"):
        vals = _clamped_mass_char(grid, alpha, gamma)
    if not np.all(np.isfinite(vals)):
        raise ModeSolverError(f"clamped-mass characteristic function not finite (M/(mu L) = {alpha:.3g}, "
                              f"J/(mu L^3) = {gamma:.3g})")
    roots: list[float] = []
    for i in np.nonzero(np.signbit(vals[:-1]) != np.signbit(vals[1:]))[0]:
        if vals[i + 1] == 0.0:
            continue   # exact zero on the grid: taken as the left end of the next interval
        roots.append(grid[i] if vals[i] == 0.0 else _root(f, grid[i], grid[i + 1], "clamped-mass root"))
    if len(roots) < n:
        raise ModeSolverError(f"clamped-mass root scan found {len(roots)} of {n} roots below "
                              f"{(n + 1.5) * np.pi:.4g} (M/(mu L) = {alpha:.3g}, J/(mu L^3) = {gamma:.3g})")
    return np.asarray(roots[:n])


def _eb_shape_coeffs(b: float, alpha: float, gamma: float):
    """Null vector of the boundary-condition matrix at a root b; returns (basis, coeffs)."""
    a, g = alpha * b, gamma * b ** 3
    if b <= _B_SWITCH:
        # w = A P + B Q, P = cosh y - cos y, Q = sinh y - sin y
        c, s, C, S = np.cosh(b), np.sinh(b), np.cos(b), np.sin(b)
        P, Q = _cosh_minus_cos(b), float(_sinh_minus_sin(np.array([b]))[0])
        r1 = np.array([(c + C) - g * (s + S), (s + S) - g * P]) / (1.0 + g)
        r2 = np.array([Q + a * P, (c + C) + a * Q]) / (1.0 + a)
        r = r1 if np.linalg.norm(r1) >= np.linalg.norm(r2) else r2
        coef = np.array([r[1], -r[0]])
        return "hyp", coef / np.linalg.norm(coef)
    # w = a1 cos y + a2 sin y + a3 exp(-y) + a4 exp(y - b), y = beta x
    C, S, E = np.cos(b), np.sin(b), np.exp(-b)
    mat = np.array([
        [1.0, 0.0, 1.0, E],                                         # w(0) = 0
        [0.0, 1.0, -1.0, E],                                        # w'(0) = 0
        np.array([-C + g * S, -S - g * C, E + g * E, 1.0 - g]) / (1.0 + g),   # w'' - g w' = 0
        np.array([S + a * C, -C + a * S, -E + a * E, 1.0 + a]) / (1.0 + a),   # w''' + a w = 0
    ])
    _, _, vt = np.linalg.svd(mat)
    return "exp", vt[-1]


def _eb_shape_eval(basis: str, coef: np.ndarray, beta: float, b: float, x: np.ndarray, k: int):
    """k-th derivative of the un-normalised shape at x."""
    y = beta * x
    if basis == "hyp":
        P, Q = _cosh_minus_cos(y), _sinh_minus_sin(y)
        Sp, Cp = np.sinh(y) + np.sin(y), np.cosh(y) + np.cos(y)
        seqP = (P, Sp, Cp, Q, P)
        seqQ = (Q, P, Sp, Cp, Q)
        val = coef[0] * seqP[k] + coef[1] * seqQ[k]
    else:
        ph = 0.5 * np.pi * k
        val = (coef[0] * np.cos(y + ph) + coef[1] * np.sin(y + ph)
               + coef[2] * (-1.0) ** k * np.exp(-y) + coef[3] * np.exp(y - b))
    return beta ** k * val


def clamped_mass_modes(length: float, EI: float, mu: float, n_modes: int,
                       tip_mass: float = 0.0, tip_inertia: float = 0.0) -> BendingModes:
    """Uniform Euler-Bernoulli link, clamped at x=0 with a tip body (M, J) at x=L.

    Implements the clamped-mass eigenproblem of De Luca & Siciliano (1991). Roots come
    from a grid scan of the scaled determinant (module docstring) refined with _root (bracketed).
    Shapes use a cancellation-free basis, and they are mass-normalised including M and J.
    """
    L, EI, mu = float(length), float(EI), float(mu)
    M, J = float(tip_mass), float(tip_inertia)
    _finite_inputs(length=L, EI=EI, mu=mu, tip_mass=M, tip_inertia=J)
    if L <= 0 or EI <= 0 or mu <= 0 or M < 0 or J < 0 or n_modes < 1:
        raise ModeSolverError("need length, EI, mu > 0, tip_mass, tip_inertia >= 0, n_modes >= 1")
    alpha, gamma = M / (mu * L), J / (mu * L ** 3)
    _check_ratios("analytic", mass=alpha, inertia=gamma)
    bl = _clamped_mass_roots(int(n_modes), alpha, gamma)
    betas = bl / L
    omega = check_frequencies(betas ** 2 * math.sqrt(EI / mu), "clamped-mass modes")

    xq = 0.5 * L * (_GL_X + 1.0)
    wq = 0.5 * L * _GL_W
    shapes = []
    for b, beta in zip(bl, betas):
        basis, coef = _eb_shape_coeffs(b, alpha, gamma)
        wv = _eb_shape_eval(basis, coef, beta, b, xq, 0)
        wL = _eb_shape_eval(basis, coef, beta, b, np.array([L]), 0)[0]
        dwL = _eb_shape_eval(basis, coef, beta, b, np.array([L]), 1)[0]
        norm2 = mu * np.dot(wq, wv * wv) + M * wL ** 2 + J * dwL ** 2
        if not (math.isfinite(norm2) and norm2 > 0.0 and np.all(np.isfinite(wv))):
            raise ModeSolverError(f"clamped-mass mode at beta L = {b:.6g}: shape not finite (modal mass {norm2})")
        scale = _fix_sign(wL, dwL, np.max(np.abs(wv))) / math.sqrt(norm2)
        shapes.append((basis, coef * scale, beta, b))

    def evaluator(x, k):
        return np.stack([_eb_shape_eval(bs, cf, be, bb, x, k) for bs, cf, be, bb in shapes])

    return BendingModes(L, omega, M, J, evaluator, max_order=4, kind="bending")


# --------------------------------------------------------------------------- torsion
def torsion_modes(length: float, GJ: float, rho_Ip: float, n_modes: int,
                  tip_inertia: float = 0.0) -> BendingModes:
    """Torsion modes of a uniform shaft clamped at x=0 with tip inertia J about its axis.

    GJ phi'' = omega^2 (-rho_Ip) phi, phi = sin(beta x), and GJ phi'(L) = omega^2 J phi(L), so
    b tan b = rho_Ip L / J with b = beta L. Root k is bracketed in ((k-1) pi, (k-1/2) pi)
    via J b sin b - rho_Ip L cos b = 0. J = 0 gives b = (2k-1) pi/2. Normalisation is
    int rho_Ip phi_k phi_l + J phi_k(L) phi_l(L) = delta_kl, so int GJ phi_k' phi_l' = omega_k^2 delta_kl.
    ``w`` is the twist angle; ``d2w`` is its true second derivative -beta^2 phi.
    """
    L, GJ, rho_Ip, J = float(length), float(GJ), float(rho_Ip), float(tip_inertia)
    _finite_inputs(length=L, GJ=GJ, rho_Ip=rho_Ip, tip_inertia=J)
    if L <= 0 or GJ <= 0 or rho_Ip <= 0 or J < 0 or n_modes < 1:
        raise ModeSolverError("need length, GJ, rho_Ip > 0, tip_inertia >= 0, n_modes >= 1")
    gamma = J / (rho_Ip * L)
    _check_ratios("analytic", torsion=gamma)
    f = lambda b: gamma * b * math.sin(b) - math.cos(b)
    bl = []
    for k in range(1, int(n_modes) + 1):
        lo, hi = (k - 1) * np.pi, (k - 0.5) * np.pi
        bl.append(hi if gamma == 0.0 else _root(f, lo, hi, "torsion root"))
    bl = np.asarray(bl)
    betas = bl / L
    omega = check_frequencies(betas * math.sqrt(GJ / rho_Ip), "torsion modes")
    # int_0^L sin^2(beta x) dx = L/2 - sin(2b)/(4 beta)
    norm2 = rho_Ip * (0.5 * L - np.sin(2 * bl) / (4 * betas)) + J * np.sin(bl) ** 2
    if not (np.all(np.isfinite(norm2)) and np.all(norm2 > 0.0)):
        raise ModeSolverError(f"torsion modes: modal mass not finite and positive: {norm2.tolist()}")
    amp = np.sign(np.sin(bl)) / np.sqrt(norm2)

    def evaluator(x, k):
        y = np.outer(betas, x)
        return (amp * betas ** k)[:, None] * np.sin(y + 0.5 * np.pi * k)

    return BendingModes(L, omega, 0.0, J, evaluator, max_order=4, kind="torsion")
