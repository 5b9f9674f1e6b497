"""Fixed-step integration of the arm: RK4, the implicit midpoint rule and two-stage Gauss-Legendre, and the
sub-step rules.

`step(model, state, tau, dt, substeps, method)` advances an `ArmState` in place. Every method runs entirely inside
numba (kernels.rk4_step / midpoint_step / gauss_step) with the model's workspace.

Which method (issue 27, measured on every shipped arm, free motion without damping or stops, 10 s):
  * rk4 at its stability rule damps the stiff modes numerically (|R(i y)| = 1 - y^6/144: spatial_3r's ~1 kHz modes
    at y ~ 1.2 lose most of their energy in 10 s; the arm 88 % of its energy);
  * midpoint keeps the energy (A-stable, no damping on the imaginary axis) but its frequency error (w h)^2 / 12 needs
    h w <= 0.11 for 0.1 %;
  * gauss (order 4, symmetric, |R(i y)| = 1) keeps the energy too, with a frequency error y^4 / 720: the rule
    GAUSS_STEP_LIMIT (y <= 0.6: <= 1.8e-4) resolves every linearized mode within 0.1 % and its fixed-point
    iteration contracts ~30x per iteration there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .lazy import lazy_module
from .linearize import linearize

kernels = lazy_module(__package__ + '.kernels')   # numba loads at the first step, not at import

METHODS = ('rk4', 'midpoint', 'gauss')        # in the order of the kernels' codes (kernels.RK4, ...)
MIDPOINT_TOL = 1e-12
MIDPOINT_MAX_ITER = 20


@dataclass
class ArmState:
    """Plain state arrays: generalized coordinates z = [q_1, delta_1.., q_2, ...] and their rates."""

    z: np.ndarray
    zd: np.ndarray
    t: float = 0.0
    workspace: object = field(default=None, repr=False)

    @classmethod
    def zeros(cls, model):
        return cls(np.zeros(model.n_coords), np.zeros(model.n_coords), 0.0, model.workspace())

    def copy(self):
        return ArmState(self.z.copy(), self.zd.copy(), self.t, self.workspace)


class IntegrationError(FloatingPointError):
    """The step failed: mass matrix not positive definite, no convergence, or non-finite state."""


def method_code(method: str) -> int:
    """The kernels' code of an integrator name (kernels.call_step); ValueError naming the choices."""
    if method not in METHODS:
        raise ValueError(f'unknown integrator {method!r}; choose one of {METHODS}')
    return METHODS.index(method)


def advance(data, ws, z, zd, tau, dt: float, substeps: int, code: int) -> bool:
    """The kernels' step of the integrator with code `code` (method_code) on raw arrays, in place; False on failure
    (the Python-side dispatch of step() and the plant's servo sub-steps; kernels dispatch with call_step)."""
    if code == kernels.RK4:
        return kernels.rk4_step(data, ws, z, zd, tau, dt, substeps)
    if code == kernels.MIDPOINT:
        return kernels.midpoint_step(data, ws, z, zd, tau, dt, substeps, MIDPOINT_TOL, MIDPOINT_MAX_ITER)
    return kernels.gauss_step(data, ws, z, zd, tau, dt, substeps)


def step(model, state: ArmState, tau, dt: float, substeps: int = 1, method: str = 'rk4') -> ArmState:
    """Advance state by dt (in `substeps` equal sub-steps) with constant joint torques tau."""
    code = method_code(method)                       # ValueError naming the choices
    tau = np.require(tau, float, ('C', 'W'))        # writable: the kernels' one signature (ArmModel._arrays)
    if state.workspace is None:
        state.workspace = model.workspace()
    ok = advance(model.data, state.workspace, state.z, state.zd, tau, dt, substeps, code)
    if not ok or not (np.all(np.isfinite(state.z)) and np.all(np.isfinite(state.zd))):
        raise IntegrationError(f'{method} step failed at t={state.t:.6f}')
    state.t += dt
    return state


# RK4 stability boundary on the imaginary axis: |R(i y)| <= 1 for |y| <= 2*sqrt(2).
RK4_IMAGINARY_LIMIT = 2.0 * np.sqrt(2.0)
# The automatic sub-step rule: RK4 steps of at most AUTO_SUBSTEP_SAFETY x the largest stable step, and never more
# than MAX_AUTO_SUBSTEPS sub-steps per control period (beyond it: SubstepError, use 'midpoint' or a smaller dt).
AUTO_SUBSTEP_SAFETY = 0.5
MAX_AUTO_SUBSTEPS = 1000


# The Gauss-Legendre rule: steps with |lambda| h <= GAUSS_STEP_LIMIT for every linearized eigenvalue lambda. On an
# oscillation the relative frequency error is y^4 / 720 (1.8e-4 at 0.6, within the 0.1 % of issue 27 with room for
# the configuration's changes of the frequencies); the fixed-point iteration contracts like y^2 rho(A)^2 = y^2 / 12
# (0.03 at 0.6). Measured on spatial_3r falling from a bent start (10 s): the energy within 7e-5 at 0.6, 1.1e-4 at
# 0.75 (the order-4 error of the large slow motion, bounded, not a drift).
GAUSS_STEP_LIMIT = 0.6


class SubstepError(ValueError):
    """The sub-step rule would need more than MAX_AUTO_SUBSTEPS sub-steps per period."""


def _rk4_amplification(x):
    return np.abs(1 + x + x ** 2 / 2 + x ** 3 / 6 + x ** 4 / 24)


def linearized_eigenvalues(model, q=None, stops_engaged=False):
    """Eigenvalues of the arm linearized at joint angles q (default: the nominal configuration), deflections and
    rates zero, joints free (zero torque), damping and friction included. stops_engaged: every joint's hard stop
    (stiffness and damping) acting as well, as during a contact."""
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = model.spec.nominal_configuration if q is None else q
    lin = linearize(model, z0, coulomb_slope=True)          # the smoothed Coulomb friction's stiffness is real here
    K, D = lin.stiffness.copy(), lin.damping.copy()
    if stops_engaged:
        stop = model.data.joint_stop
        for j, qj in enumerate(model.q_index):
            K[qj, qj] += stop[j, 2]
            D[qj, qj] += stop[j, 3]
    N = model.n_coords
    Jinv = np.linalg.inv(lin.mass)
    A = np.block([[np.zeros((N, N)), np.eye(N)], [-Jinv @ K, -Jinv @ D]])
    return np.linalg.eigvals(A)


def largest_stable_rk4_step(model, q=None, stops_engaged=False) -> float:
    """Largest RK4 step (s) for the arm linearized at joint angles q (see linearized_eigenvalues).

    Stable or neutral eigenvalues (Re lambda <= 1e-9 |lambda|): |R(lambda h)| <= 1 (the RK4 stability region).
    Unstable ones (the arm falling, a linearization away from equilibrium) have no such step; they are resolved
    like an oscillation of the same magnitude, |lambda| h <= 2 sqrt(2). Zero eigenvalues (free rigid motion)
    impose nothing; inf if nothing does."""
    lam = linearized_eigenvalues(model, q, stops_engaged)
    mag = np.abs(lam)
    scale = max(1.0, float(mag.max(initial=0.0)))
    lam = lam[mag > 1e-9 * scale]
    if lam.size == 0:
        return np.inf
    growing = lam.real > 1e-9 * np.abs(lam)
    h_growing = RK4_IMAGINARY_LIMIT / np.max(np.abs(lam[growing])) if np.any(growing) else np.inf
    lam = lam[~growing]
    if lam.size == 0:
        return h_growing
    hi = 3.0 / np.max(np.abs(lam))      # beyond the boundary for any eigenvalue direction
    lo = 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.all(_rk4_amplification(lam * mid) <= 1.0 + 1e-12):
            lo = mid
        else:
            hi = mid
    return min(lo, h_growing)


def largest_gauss_step(model, q=None, stops_engaged=False) -> float:
    """Largest Gauss-Legendre step (s) of the rule: GAUSS_STEP_LIMIT / max |lambda| over the linearized eigenvalues
    (linearized_eigenvalues); inf if every eigenvalue is zero (free rigid motion)."""
    mag = np.abs(linearized_eigenvalues(model, q, stops_engaged))
    top = float(mag.max(initial=0.0))
    return GAUSS_STEP_LIMIT / top if top > 1e-9 else np.inf


def auto_substeps(model, dt: float, method: str = 'rk4', stops_engaged: bool = False) -> int:
    """Sub-steps per period dt at the nominal configuration (with the hard stops acting if stops_engaged): RK4 steps
    <= AUTO_SUBSTEP_SAFETY x largest_stable_rk4_step; Gauss-Legendre steps <= largest_gauss_step (accuracy: every
    mode's frequency within 1.8e-4); 1 for the implicit midpoint rule. SubstepError beyond MAX_AUTO_SUBSTEPS (the rule
    never returns an unbounded count)."""
    method_code(method)
    if method == 'midpoint':
        return 1
    if method == 'gauss':
        h = largest_gauss_step(model, stops_engaged=stops_engaged)
        return 1 if not np.isfinite(h) else _bounded(model, dt, int(np.ceil(dt / h)), h, stops_engaged, method)
    h = largest_stable_rk4_step(model, stops_engaged=stops_engaged)
    if not h > 0:                       # (cannot happen: the rule above is positive) -- refuse, never hang
        raise SubstepError(f'{model.spec.name}: no stable RK4 step found (h = {h})')
    if not np.isfinite(h):
        return 1
    return _bounded(model, dt, int(np.ceil(dt / (AUTO_SUBSTEP_SAFETY * h))), h, stops_engaged, method)


def _bounded(model, dt, n, h, stops_engaged, method):
    n = max(1, n)
    if n > MAX_AUTO_SUBSTEPS:
        what = 'largest stable step' if method == 'rk4' else 'largest step of its rule'
        raise SubstepError(
            f'{model.spec.name}: {method} would need {n} sub-steps per {dt:g} s period ({what} '
            f'{h:.3g} s{" with the joint stops acting" if stops_engaged else ""}; cap {MAX_AUTO_SUBSTEPS}): '
            f"use the 'midpoint' integrator or a shorter period")
    return n


def has_stops(model) -> bool:
    return bool(np.any(model.data.joint_stop[:, 2] > 0))
