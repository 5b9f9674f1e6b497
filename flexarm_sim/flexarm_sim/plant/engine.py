"""The plant's numerical core (no ROS): state, one fixed step, divergence guard, reset, limit counters.

`PlantCore.advance(tau)` integrates one loop period dt (in `substeps` sub-steps) by calling the numba
kernel directly on preallocated arrays (no per-step allocation). Divergence guard: if the kernel
fails (mass matrix not positive definite, no convergence) or the new state is non-finite or beyond
the bounds |z| <= max_abs_position, |dz/dt| <= max_abs_velocity, the step is undone — the last good
state is kept — and the core is marked `diverged` (with a reason) until `reset`.

Sub-steps (substeps=0: the rule of model.integrators.auto_substeps, never more than MAX_AUTO_SUBSTEPS, a
SubstepError beyond): `substeps` while no joint can reach its hard stop within the step, `substeps_contact`
(the rule with the stops' stiffness and damping acting) while one can.

Counters for diagnostics, updated after every step (one small kernel, `limit_checks`):
  velocity_limit_violations  (per joint) steps that ended with |qdot| above the joint's velocity limit
  stop_contact_steps         (per joint) steps that ended with the joint beyond a position limit (in its stop)
  stop_penetration           (per joint) current penetration beyond the position limits, rad
  relative_deflection        current largest tip deflection / link length over the flexible links
  validity_exceeded_steps    steps that ended with relative_deflection > validity_limit (the model's range,
                             model.simulate.validity_limit)
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..model import kernels
from ..model.integrators import (AUTO_SUBSTEP_SAFETY, MAX_AUTO_SUBSTEPS, MIDPOINT_MAX_ITER,  # noqa: F401
                                 MIDPOINT_TOL, SubstepError, auto_substeps, has_stops)
from ..model.kernels import limit_checks
from ..model.simulate import validity_limit


@njit(cache=True)
def state_ok(z, zd, zmax, zdmax):
    """True if every entry is finite and within the bounds (NaN fails every comparison)."""
    for i in range(z.shape[0]):
        if not (abs(z[i]) <= zmax) or not (abs(zd[i]) <= zdmax):
            return False
    return True


def initial_state(model, position=(), velocity=(), modal_position=(), modal_velocity=()):
    """(z, zd) from joint and modal arrays (empty = zeros); ValueError naming the bad array."""
    z = np.zeros(model.n_coords)
    zd = np.zeros(model.n_coords)
    nm = model.mode_index.size
    for name, arr, idx, target in (('position', position, model.q_index, z),
                                   ('velocity', velocity, model.q_index, zd),
                                   ('modal_position', modal_position, model.mode_index, z),
                                   ('modal_velocity', modal_velocity, model.mode_index, zd)):
        a = np.asarray(arr, dtype=float).ravel()
        if a.size == 0:
            continue
        n = model.n_joints if idx is model.q_index else nm
        if a.size != n:
            raise ValueError(f'{name}: expected {n} values (or none), got {a.size}')
        if not np.all(np.isfinite(a)):
            raise ValueError(f'{name}: non-finite value')
        target[idx] = a
    return z, zd


class PlantCore:
    def __init__(self, model, dt: float, substeps: int = 0, method: str = 'rk4',
                 max_abs_position: float = 1e4, max_abs_velocity: float = 1e5):
        if method not in ('rk4', 'midpoint'):
            raise ValueError(f'unknown integrator {method!r}')
        self.model = model
        self.data = model.data
        self.ws = model.workspace()
        self.dt = float(dt)
        self.method = method
        self.substeps = int(substeps) if substeps else auto_substeps(model, dt, method)
        self.substeps_contact = self.substeps
        if has_stops(model):
            self.substeps_contact = max(self.substeps, auto_substeps(model, dt, method, stops_engaged=True))
        self.max_abs_position = float(max_abs_position)
        self.max_abs_velocity = float(max_abs_velocity)
        N = model.n_coords
        self.z = np.zeros(N)
        self.zd = np.zeros(N)
        self._z_good = np.zeros(N)
        self._zd_good = np.zeros(N)
        self.tau = np.zeros(model.n_joints)      # torque applied during the last step
        self.step_index = 0                      # steps since the last reset
        self.t = 0.0                             # simulated time since the last reset
        self.diverged = ''                       # reason, or '' when healthy
        self.divergences = 0
        self.z0 = np.zeros(N)
        self.zd0 = np.zeros(N)
        self.servo = None                        # plant-side joint servo (servo.py): tau is then its feed-forward
        self._tau_sum = np.zeros(model.n_joints)
        n = model.n_joints
        self.velocity_limit = np.array([js.velocity_limit for js in model.spec.joints])
        self.validity_limit = validity_limit(model)
        self.velocity_limit_violations = np.zeros(n, dtype=np.int64)
        self.stop_contact_steps = np.zeros(n, dtype=np.int64)
        self.stop_penetration = np.zeros(n)
        self.relative_deflection = 0.0
        self.validity_exceeded_steps = 0
        self._has_stops = has_stops(model)

    def warm_up(self):
        """Run the kernels once on scratch copies (loads / compiles numba code before the loop starts)."""
        z, zd = self.z0.copy(), self.zd0.copy()
        state_ok(z, zd, self.max_abs_position, self.max_abs_velocity)
        kernels.stops_within_reach(self.data, z, zd, self.dt)
        limit_checks(self.data, z, zd, self.velocity_limit, np.zeros_like(self.velocity_limit_violations),
                     np.zeros_like(self.stop_contact_steps), np.zeros(self.model.n_joints))
        tau = np.zeros(self.model.n_joints)
        if self.method == 'rk4':
            kernels.rk4_step(self.data, self.ws, z, zd, tau, self.dt, self.substeps)
        else:
            kernels.midpoint_step(self.data, self.ws, z, zd, tau, self.dt, self.substeps, MIDPOINT_TOL,
                                  MIDPOINT_MAX_ITER)

    def set_initial(self, z, zd):
        self.z0[:] = z
        self.zd0[:] = zd

    def reset(self, z=None, zd=None):
        self.z[:] = self.z0 if z is None else z
        self.zd[:] = self.zd0 if zd is None else zd
        self.tau[:] = 0.0
        self.step_index = 0
        self.t = 0.0
        self.diverged = ''

    def advance(self, tau) -> bool:
        """One loop step with constant torque tau. False (and state unchanged) if it diverged."""
        if self.diverged:
            return False
        z, zd = self.z, self.zd
        self._z_good[:] = z
        self._zd_good[:] = zd
        self.tau[:] = tau
        n_sub = self.substeps
        if self._has_stops and kernels.stops_within_reach(self.data, z, zd, self.dt):
            n_sub = self.substeps_contact
        try:
            if self.servo is not None:
                ok = self._advance_servo(tau, n_sub)
            elif self.method == 'rk4':
                ok = kernels.rk4_step(self.data, self.ws, z, zd, self.tau, self.dt, n_sub)
            else:
                ok = kernels.midpoint_step(self.data, self.ws, z, zd, self.tau, self.dt, n_sub,
                                           MIDPOINT_TOL, MIDPOINT_MAX_ITER)
            reason = '' if ok else f'{self.method} step failed (mass matrix / convergence)'
        except (FloatingPointError, ZeroDivisionError, ValueError) as e:   # defensive; kernels return False
            reason = f'{self.method} step raised {e}'
        if not reason and not state_ok(z, zd, self.max_abs_position, self.max_abs_velocity):
            reason = ('non-finite state' if not (np.all(np.isfinite(z)) and np.all(np.isfinite(zd)))
                      else f'state beyond bounds (|z| <= {self.max_abs_position:g}, '
                           f'|dz/dt| <= {self.max_abs_velocity:g})')
        if reason:
            z[:] = self._z_good
            zd[:] = self._zd_good
            self.diverged = f'diverged at step {self.step_index + 1} (t={self.t + self.dt:.6f} s): {reason}'
            self.divergences += 1
            return False
        self.step_index += 1
        self.t = self.step_index * self.dt
        rel = limit_checks(self.data, z, zd, self.velocity_limit, self.velocity_limit_violations,
                           self.stop_contact_steps, self.stop_penetration)
        self.relative_deflection = rel
        if rel > self.validity_limit:
            self.validity_exceeded_steps += 1
        return True

    def reset_counters(self):
        """Zero the limit and validity counters (the state is untouched)."""
        self.velocity_limit_violations[:] = 0
        self.stop_contact_steps[:] = 0
        self.validity_exceeded_steps = 0

    def _advance_servo(self, tau_ff, n_sub) -> bool:
        """The step in the servo's sub-steps, its torque re-evaluated at each; self.tau = their mean."""
        sv = self.servo
        k = sv.substeps
        h = self.dt / k
        inner = max(1, int(math.ceil(n_sub / k)))     # still within RK4's (or midpoint's) own step
        self._tau_sum[:] = 0.0
        z, zd = self.z, self.zd
        for _ in range(k):
            t = sv.torque(z, zd, tau_ff)
            self._tau_sum += t
            if self.method == 'rk4':
                ok = kernels.rk4_step(self.data, self.ws, z, zd, t, h, inner)
            else:
                ok = kernels.midpoint_step(self.data, self.ws, z, zd, t, h, inner, MIDPOINT_TOL, MIDPOINT_MAX_ITER)
            if not ok:
                return False
        self.tau[:] = self._tau_sum / k
        return True
