"""Common machinery of the control laws: reference handling, saturation, faults, gain validation.

A law is called as `tau = law(t, z, zd)` (the signature `simulate` expects) with the arm's generalized
coordinates z = [q_1, delta_1.., q_2, ...]; laws that only need the joints read z[model.q_index].

Guarantees of every law:
* the command is always finite: a non-finite state, reference or intermediate result gives zero torque and sets
  `fault` (a string; `n_faults` counts them); the next finite input clears `fault`;
* |tau_j| <= effort limit of joint j (from the arm description unless given); `saturated` says which joints
  were clipped in the last call, and laws with integral action stop integrating in the direction that would
  deepen the saturation (conditional integration, anti-windup);
* gains are set with `set_gains(**kw)`, validated (finite, positive where it matters, right length) and applied
  atomically (nothing changes if any value is invalid).
"""
from __future__ import annotations

import math

import numpy as np

from flexarm_sim.model import joint_hf_inertia  # noqa: F401  (re-exported: the laws' sampling limits)

from .reference import Hold, ReferenceManager
from .shaping import ShapedReference


def rigid_model_of(model):
    """The rigid-body model of the same arm (cached on the model object)."""
    rigid = getattr(model, '_flexarm_control_rigid', None)
    if rigid is None:
        from flexarm_sim.model import load_model, rigid_limit
        rigid = model if model.n_coords == model.n_joints else load_model(rigid_limit(model.spec))
        try:
            model._flexarm_control_rigid = rigid
        except AttributeError:
            pass
    return rigid


# phase budget of the sampled velocity loop (rad): k_v / J_hf (its crossover) times the loop's lag dt/2 + delay
# (zero-order hold + input delay) may use 20 deg, leaving a 70 deg phase margin. With one sample of delay
# this is k_v dt / J_hf = 0.23 (the loop v_{k+1} = v_k - a v_{k-1} then has poles of modulus 0.48); without
# delay 0.70 (v_{k+1} = (1 - a) v_k: pole 0.3, no ringing).
VELOCITY_LOOP_PHASE = math.radians(20.0)


def velocity_gain_cap(model, dt, input_delay=0.0, q=None, phase=VELOCITY_LOOP_PHASE):
    """Largest joint velocity gain k_v,j (N m s/rad: torque per joint rate) that a law sampled every dt (zero-order
    hold) and applied after an input delay (s) can use without its high-frequency velocity loop (the joint inertia
    with the links free, `joint_hf_inertia`) ringing or going unstable:
        k_v,j <= phase J_hf,j / (dt / 2 + input_delay)        (phase: VELOCITY_LOOP_PHASE, 70 deg margin)."""
    lag = 0.5 * float(dt) + max(float(input_delay), 0.0)
    return phase * joint_hf_inertia(model, q) / lag


def as_vector(x, n, name, positive=False, nonnegative=False):
    """x as a float vector of length n (a scalar or a one-element list is broadcast); ValueError if invalid."""
    a = np.asarray(x, dtype=float)
    if a.ndim == 0 or a.size == 1:
        a = np.full(n, float(a.ravel()[0]))
    a = a.ravel()
    if a.size != n:
        raise ValueError(f'{name}: expected {n} values, got {a.size}')
    if not np.all(np.isfinite(a)):
        raise ValueError(f'{name}: non-finite value')
    if positive and np.any(a <= 0):
        raise ValueError(f'{name}: must be > 0')
    if nonnegative and np.any(a < 0):
        raise ValueError(f'{name}: must be >= 0')
    return a.copy()


class ControlLaw:
    """Base class. Subclasses implement `_compute(t, z, zd, q_d, qd_d, qdd_d) -> tau` (unsaturated).

    A law that is also a controller node (controller/kinds.py) declares its node parameters in `GAINS` (name ->
    flexarm_sim.common.params.Param; `runtime=True` ones reach `set_gains`) and builds itself from their
    validated values with `from_params`; `effective_values` gives the values in force of its DERIVED ones."""

    name = 'law'
    GAINS = {}
    # the law's own feedback brings the arm back to its reference from a state off it (controller/safe_mode.py:
    # the safe mode then hands back as soon as the states are on time, the return re-planned from the arm's state);
    # False: the hold law brings the arm back first (pd_servo's soft joint gains would not)
    returns_unaided = False

    @classmethod
    def design_periods(cls, rate: float) -> int:
        """Whole control periods of transport delay the gains are designed for in real time at `rate` Hz when the
        node's input_delay is not set (controller/runtime.py): one (the modal laws: laws/modal.py)."""
        return 1

    @classmethod
    def from_params(cls, model, values, dt, input_delay):
        """The law of a controller node from its validated parameter values (values[name] for every name in GAINS,
        DERIVED where not set), its control period dt and the input delay its gains are designed for."""
        raise NotImplementedError

    def effective_values(self) -> dict:
        """{name: value in force} of the DERIVED parameters of GAINS (for `ros2 param get/dump`)."""
        return {}

    def __init__(self, model, reference=None, effort_limit=None, dt=1e-3, shaper=None):
        self.model = model
        self.n = model.n_joints
        self.qi = np.asarray(model.q_index)
        self.mi = np.asarray(model.mode_index)
        if effort_limit is None:
            lims = [js.effort_limit for js in model.spec.joints]
            effort_limit = [lim if (lim is not None and lim > 0 and math.isfinite(lim)) else np.inf for lim in lims]
        self.effort_limit = np.asarray(effort_limit, dtype=float) * np.ones(self.n)
        if np.any(self.effort_limit <= 0):
            raise ValueError('effort limits must be > 0')
        self.dt = float(dt)
        self.references = reference if isinstance(reference, ReferenceManager) else ReferenceManager(reference)
        self.shaper = shaper
        self.fault = None
        self.n_faults = 0
        self.saturated = np.zeros(self.n, dtype=bool)
        self.last_tau = np.zeros(self.n)
        self.last_error = np.zeros(self.n)
        self._t_last = None

    # ------------------------------------------------------------------ references
    @property
    def reference(self):
        """What the law tracks: the reference manager, behind the shaper when one is set."""
        if self.shaper is None:
            return self.references
        return ShapedReference(self.references, self.shaper)

    def set_reference(self, reference, t_now=-math.inf):
        self.references.set(reference, t_now)

    def set_shaper(self, shaper):
        self.shaper = shaper

    # ------------------------------------------------------------------ gains
    def gains(self) -> dict:
        return {}

    def set_gains(self, **kw):
        raise ValueError(f'{self.name}: no settable gains {sorted(kw)}')

    # ------------------------------------------------------------------ evaluation
    def reset(self):
        """Clear the internal state (integrators, filters)."""
        self._t_last = None

    def _fail(self, why):
        self.fault = why
        self.n_faults += 1
        self.saturated[:] = False
        self.last_tau = np.zeros(self.n)
        return self.last_tau.copy()

    def __call__(self, t, z, zd):
        z = np.asarray(z, dtype=float)
        zd = np.asarray(zd, dtype=float)
        if z.shape != (self.model.n_coords,) or zd.shape != (self.model.n_coords,):
            return self._fail(f'state has the wrong size ({z.shape}, {zd.shape}), expected {self.model.n_coords}')
        if not (math.isfinite(t) and np.all(np.isfinite(z)) and np.all(np.isfinite(zd))):
            return self._fail('non-finite state')
        if self.references.active is None:
            self.references.set(Hold(z[self.qi]))
        try:
            q_d, qd_d, qdd_d = self.reference.sample(t)
        except Exception as e:    # a reference must never take the loop down
            return self._fail(f'reference error: {e}')
        q_d, qd_d, qdd_d = np.asarray(q_d, float), np.asarray(qd_d, float), np.asarray(qdd_d, float)
        if not (np.all(np.isfinite(q_d)) and np.all(np.isfinite(qd_d)) and np.all(np.isfinite(qdd_d))):
            return self._fail('non-finite reference')
        try:
            tau = np.asarray(self._compute(t, z, zd, q_d, qd_d, qdd_d), dtype=float)
        except Exception as e:    # noqa: BLE001 - no input may make a law raise: zero torque and a fault instead
            return self._fail(f'computation failed: {e!r}')
        if tau.shape != (self.n,) or not np.all(np.isfinite(tau)):
            return self._fail('non-finite command')
        sat = np.clip(tau, -self.effort_limit, self.effort_limit)
        self.saturated = sat != tau
        self._after_saturation(tau, sat)
        self.fault = None
        self.last_error = q_d - z[self.qi]
        self.last_tau = sat
        self._t_last = t
        return sat.copy()

    def _elapsed(self, t):
        """Time since the last successful call, clipped to [0, 5 dt] (first call: dt)."""
        if self._t_last is None:
            return self.dt
        return min(max(t - self._t_last, 0.0), 5.0 * self.dt)

    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        raise NotImplementedError

    def _after_saturation(self, tau, sat):
        """Hook for anti-windup."""

    # ------------------------------------------------------------------ linear analysis
    def feedback_matrix(self, q):
        """K (n, 2N) of the law's linear feedback u = -K (dz, dzd) about a rest configuration q (for the
        closed-loop frequencies that input shaping should cancel)."""
        raise NotImplementedError
