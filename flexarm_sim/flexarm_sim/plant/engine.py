"""The plant's numerical core (no ROS): state, one fixed step, divergence guard, reset, limit counters.

`PlantCore.advance(tau)` integrates one loop period dt (in `substeps` sub-steps) by calling the numba
kernel directly on preallocated arrays (no per-step allocation). Divergence guard: if the kernel
fails (mass matrix not positive definite, no convergence) or the new state is non-finite or beyond
the bounds |z| <= max_abs_position, |dz/dt| <= max_abs_velocity, the step is undone — the last good
state is kept — and the core is marked `diverged` (with a reason) until `reset`.

Sub-steps (substeps=0: the rule of model.integrators.auto_substeps, never more than MAX_AUTO_SUBSTEPS, a
SubstepError beyond): `substeps` while no joint can reach its hard stop within the step, `substeps_contact`
(the rule with the stops' stiffness and damping acting) while one can.

One kernel call per step (`plant_step`: the sub-step choice, the integrator through its address, the divergence
bounds and the counters below), so the loop pays for one Python -> numba transition.

Counters for diagnostics, updated after every step:
  velocity_limit_violations  (per joint) steps that ended with |qdot| above the joint's velocity limit
  stop_contact_steps         (per joint) steps that ended with the joint beyond a position limit (in its stop)
  stop_penetration           (per joint) current penetration beyond the position limits, rad
  relative_deflection        current largest tip deflection / link length over the flexible links
  validity_exceeded_steps    steps that ended with relative_deflection > validity_limit (the model's range,
                             model.simulation.validity_limit)
"""
from __future__ import annotations

import math

import numpy as np

from ..model import kernels
from ..model.integrators import (AUTO_SUBSTEP_SAFETY, MAX_AUTO_SUBSTEPS, MIDPOINT_MAX_ITER,  # noqa: F401
                                 MIDPOINT_TOL, SubstepError, advance, auto_substeps, has_stops,
                                 method_code)
from ..model.kernels import limit_checks, stops_within_reach  # noqa: F401 (plant_step)
from ..model.simulation import validity_limit

STEP_OK, STEP_FAILED, STEP_OUT_OF_BOUNDS = 0, 1, 2


@kernels.kernel(**kernels.KERNEL_NO_NRT)
def state_ok(z, zd, zmax, zdmax):
    """True if every entry is finite and within the bounds (NaN fails every comparison)."""
    for i in range(z.shape[0]):
        if not (abs(z[i]) <= zmax) or not (abs(zd[i]) <= zdmax):
            return False
    return True


@kernels.kernel(**kernels.KERNEL_NO_NRT)
def plant_step(d, ws, z, zd, tau, dt, n_free, n_contact, method, integrate, zmax, zdmax, velocity_limit,
               velocity_count, contact_count, penetration):
    """One plant period: (integrate) the step with the sub-steps of the plant's rule (n_contact while a joint can
    reach its stop), through the integrator's address in ws.step_addr; then the divergence bounds and, if within
    them, the limit counters (kernels.limit_checks). Returns (STEP_OK / STEP_FAILED / STEP_OUT_OF_BOUNDS, largest
    tip deflection / link length)."""
    if integrate:
        n_sub = n_contact if stops_within_reach(d, z, zd, dt) else n_free
        if not kernels.call_step(d, ws, z, zd, tau, dt, n_sub, method, MIDPOINT_TOL, MIDPOINT_MAX_ITER):
            return STEP_FAILED, 0.0
    for i in range(z.shape[0]):
        if not (abs(z[i]) <= zmax) or not (abs(zd[i]) <= zdmax):      # NaN fails every comparison
            return STEP_OUT_OF_BOUNDS, 0.0
    return STEP_OK, limit_checks(d, z, zd, velocity_limit, velocity_count, contact_count, penetration)


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
        self.method_code = method_code(method)       # ValueError naming the choices
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
        kernels.step_addresses(self.data, self.ws, (method,))

    def _step(self, tau, dt, integrate, count=True):
        if count:
            vc, cc = self.velocity_limit_violations, self.stop_contact_steps
        else:
            vc, cc = np.zeros_like(self.velocity_limit_violations), np.zeros_like(self.stop_contact_steps)
        return plant_step(self.data, self.ws, self.z if count else self.z.copy(), self.zd if count else self.zd.copy(),
                          tau, dt, self.substeps, self.substeps_contact, self.method_code, integrate,
                          self.max_abs_position, self.max_abs_velocity, self.velocity_limit, vc, cc,
                          self.stop_penetration if count else np.zeros(self.model.n_joints))

    def warm_up(self):
        """Run the kernels once on scratch copies (loads / compiles numba code before the loop starts)."""
        self._step(np.zeros(self.model.n_joints), self.dt, True, count=False)

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
        code, rel = STEP_FAILED, 0.0
        try:
            if self.servo is not None:
                n_sub = self.substeps
                if self._has_stops and self._near_stop():
                    n_sub = self.substeps_contact
                ok = self._advance_servo(tau, n_sub)
                code, rel = self._step(self.tau, self.dt, False) if ok else (STEP_FAILED, 0.0)
            else:
                code, rel = self._step(self.tau, self.dt, True)
            reason = '' if code != STEP_FAILED else f'{self.method} step failed (mass matrix / convergence)'
        except (FloatingPointError, ZeroDivisionError, ValueError) as e:   # defensive; kernels return False
            reason = f'{self.method} step raised {e}'
        if not reason and code == STEP_OUT_OF_BOUNDS:
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
        self.relative_deflection = rel
        if rel > self.validity_limit:
            self.validity_exceeded_steps += 1
        return True

    def _near_stop(self) -> bool:
        """(numpy) kernels.stops_within_reach for the servo path, which steps from Python."""
        stop = self.data.joint_stop
        qi = self.model.q_index
        q, qd = self.z[qi], self.zd[qi]
        reach = 2.0 * np.abs(qd) * self.dt + 0.02
        return bool(np.any((stop[:, 2] > 0) & ((q + reach >= stop[:, 1]) | (q - reach <= stop[:, 0]))))

    def validity(self):
        """(within, message) for diagnostics: whether the last step's largest tip deflection / link length is within
        the model's validity (validity_limit, simulation.py), with the figures and the steps beyond it since the
        last reset of the counters."""
        within = self.relative_deflection <= self.validity_limit
        msg = (f'largest tip deflection {100 * self.relative_deflection:.1f} % of the link length '
               f'(model valid up to {100 * self.validity_limit:.0f} %)')
        if not within:
            msg = 'OUTSIDE the model\'s validity: ' + msg
        if self.validity_exceeded_steps:
            msg += f'; {self.validity_exceeded_steps} steps beyond it'
        return within, msg

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
        inner = max(1, int(math.ceil(n_sub / k)))     # still within the integrator's own step
        self._tau_sum[:] = 0.0
        z, zd = self.z, self.zd
        for _ in range(k):
            t = sv.torque(z, zd, tau_ff)
            self._tau_sum += t
            if not advance(self.data, self.ws, z, zd, t, h, inner, self.method_code):
                return False
        self.tau[:] = self._tau_sum / k
        return True
