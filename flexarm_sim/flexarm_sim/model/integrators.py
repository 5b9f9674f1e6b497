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
    tau = np.ascontiguousarray(tau, dtype=float)
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
def _rk4_amplification(x):
    return np.abs(1 + x + x ** 2 / 2 + x ** 3 / 6 + x ** 4 / 24)


def largest_stable_rk4_step(model, q=None) -> float:
    """Largest RK4 step (s) for which every eigenvalue lambda of the arm linearized at joint angles q
    (deflections and rates zero) satisfies |R(lambda dt)| <= 1. Joints free, damping included."""
    z0 = np.zeros(model.n_coords)
    if q is not None:
        z0[model.q_index] = q
    A, _ = linearize(model, z0).state_space()
    lam = np.linalg.eigvals(A)
    lam = lam[np.abs(lam) > 1e-9]
    if lam.size == 0:
        return np.inf
    hi = 3.0 / np.max(np.abs(lam))      # beyond the boundary for any eigenvalue direction
    lo = 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.all(_rk4_amplification(lam * mid) <= 1.0 + 1e-12):
            lo = mid
        else:
            hi = mid
    return lo
