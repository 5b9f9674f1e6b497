"""Fixed-step integration of the arm: RK4 and the implicit midpoint rule, and RK4's stable step.

`step(model, state, tau, dt, substeps, method)` advances an `ArmState` in place. Both methods run
entirely inside numba (kernels.rk4_step / kernels.midpoint_step) with the model's workspace.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import kernels
from .linearize import linearize

METHODS = ('rk4', 'midpoint')
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


def step(model, state: ArmState, tau, dt: float, substeps: int = 1, method: str = 'rk4') -> ArmState:
    """Advance state by dt (in `substeps` equal sub-steps) with constant joint torques tau."""
    tau = np.require(tau, float, ('C', 'W'))        # writable: the kernels' one signature (ArmModel._arrays)
    if state.workspace is None:
        state.workspace = model.workspace()
    if method == 'rk4':
        ok = kernels.rk4_step(model.data, state.workspace, state.z, state.zd, tau, dt, substeps)
    elif method == 'midpoint':
        ok = kernels.midpoint_step(model.data, state.workspace, state.z, state.zd, tau, dt, substeps,
                                   MIDPOINT_TOL, MIDPOINT_MAX_ITER)
    else:
        raise ValueError(f'unknown integrator {method!r}; choose one of {METHODS}')
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


def auto_substeps(model, dt: float, method: str = 'rk4', stops_engaged: bool = False) -> int:
    """Sub-steps per period dt: RK4 steps <= AUTO_SUBSTEP_SAFETY x largest_stable_rk4_step at the nominal
    configuration (with the hard stops acting if stops_engaged); 1 for the implicit midpoint rule.
    SubstepError beyond MAX_AUTO_SUBSTEPS (the rule never returns an unbounded count)."""
    if method != 'rk4':
        return 1
    h = largest_stable_rk4_step(model, stops_engaged=stops_engaged)
    if not h > 0:                       # (cannot happen: the rule above is positive) -- refuse, never hang
        raise SubstepError(f'{model.spec.name}: no stable RK4 step found (h = {h})')
    if not np.isfinite(h):
        return 1
    n = max(1, int(np.ceil(dt / (AUTO_SUBSTEP_SAFETY * h))))
    if n > MAX_AUTO_SUBSTEPS:
        raise SubstepError(
            f'{model.spec.name}: RK4 would need {n} sub-steps per {dt:g} s period (largest stable step '
            f'{h:.3g} s{" with the joint stops acting" if stops_engaged else ""}; cap {MAX_AUTO_SUBSTEPS}): '
            f"use the 'midpoint' integrator or a shorter period")
    return n


def has_stops(model) -> bool:
    return bool(np.any(model.data.joint_stop[:, 2] > 0))
