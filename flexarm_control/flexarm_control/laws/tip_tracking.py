"""Tip tracking: the planned torque of a move plus modal state feedback about the planned states.

    tau = tau*(t + d) - K(q*) [z - z*(t); zd - zd*(t)]          (d: the input delay the gains are designed for)

(z*, zd*, tau*) is a `flexarm_control.planning.Plan`: the trajectory of the nonlinear model whose deformed tip
follows the desired tip path, found by inverting the model (planning/tip.py). K is the modal LQR's gain
(laws/modal.py, its Bryson weights), scheduled on the planned joint angles q*; the deviations from the plan are
small, so one linear design per configuration holds. Between moves (no plan in force) the law holds the reference's
joint angles in static equilibrium with the same feedback.

A reference set with `set_reference` is planned at once, from rest in static equilibrium at its start
(in-process use: `simulate(model, T, dt, law)` after `law.set_reference(PointToPoint(...))`). A controller
node plans it from the state it is in (`plan_with` in a planning process, then `install_plan`). A reference that cannot be
planned (`PlanError`: effort, position or velocity limits, the model's validity) raises; the previous plan stays.
"""
from __future__ import annotations

import math

import numpy as np

from flexarm_sim.common.params import DERIVED, Param, float_range

from .modal import LOCKSTEP_ROBUST_ERRORS, TIP_MAX_PER_REACH, WEIGHT_NAMES, ModalLQR

PLAN_PARAMS = ('pre_actuation', 'post_actuation')


def plan_with(model, dt, options, reference, t_now=None, z=None, zd=None):
    """The plan (planning.plan_move) of a joint reference on the control grid dt, from (z, zd) at t_now when given."""
    from ..planning import plan_move
    return plan_move(model, reference, dt, t_start=t_now, z0=z, zd0=zd, **options)


class TipTracking(ModalLQR):
    name = 'tip_tracking'
    tip_max_per_reach = TIP_MAX_PER_REACH
    predicts_reference = False         # the plan is a trajectory of the model: no defect to predict
    # lock-step: designed for the spread of arms it is to hold, joints held tighter than the modal law's rule, the
    # links' rates a little more (laws/modal.py, "Robust lock-step design")
    lockstep_robust_errors = LOCKSTEP_ROBUST_ERRORS
    lockstep_joint_factor = 2.0
    lockstep_modal_rate_factor = 0.9
    GAINS = dict({k: v for k, v in ModalLQR.GAINS.items() if k != 'feedforward'},
                 tip_max=Param(DERIVED, ModalLQR.GAINS['tip_max'].check, 'm, allowed tip error (Bryson weight); not '
                               'set = 0.6 mm per metre of reach', runtime=True),
                 modal_rate_max=Param(DERIVED, ModalLQR.GAINS['modal_rate_max'].check, 'm/s, allowed vibration '
                                      'velocity (the links\' vibration kinetic energy against the moving mass at this '
                                      'speed); not set = 0.9 tip_rate_max in lock-step, tip_rate_max in real time',
                                      runtime=True),
                 dq_max=Param(DERIVED, ModalLQR.GAINS['dq_max'].check, 'rad, allowed joint error; not set = '
                              '2 tip_max / reach in lock-step, 8 tip_max / reach in real time', runtime=True),
                 pre_actuation=Param(0.5, float_range(lo=0.0, hi=5.0),
                                     's of torque before the move (the stable inverse of the tip output is not causal)'),
                 post_actuation=Param(0.5, float_range(lo=0.0, hi=5.0), 's of torque after the move (to rest)'))

    @classmethod
    def from_params(cls, model, values, dt, input_delay):
        kw = {k: (None if values[k] is DERIVED else values[k]) for k in WEIGHT_NAMES}
        law = cls(model, dt=dt, input_delay=input_delay,
                  integral=None if values['integral'] is DERIVED else values['integral'],
                  plan_options={'pre': values['pre_actuation'], 'post': values['post_actuation']}, **kw)
        law.design_on_demand = values['lockstep']
        return law

    def __init__(self, model, plan_options=None, **kw):
        kw.setdefault('integral', False)
        kw['feedforward'] = False
        kw.setdefault('schedule_on', 'reference')
        super().__init__(model, **kw)
        self.plan = None
        self.plan_options = dict(plan_options or {})
        self.plans_made = 0
        self.last_plan_info = {}

    # ------------------------------------------------------------------ plans
    def plan_for(self, reference, t_now=None, z=None, zd=None):
        """The plan of a joint reference (pure: the law does not change). From (z, zd) at t_now when given,
        else from rest in static equilibrium at the reference's start."""
        return plan_with(self.model, self.dt, self.plan_options, reference, t_now, z, zd)

    def plan_job(self):
        """(arm spec, dt, options): what `plan_with` needs besides the move - all a planning process needs to plan
        exactly as `plan_for` (controller/plan_worker.py)."""
        return self.model.spec, self.dt, dict(self.plan_options)

    def install_plan(self, plan, reference=None, t_now=-math.inf):
        """Put a plan in force (with its joint reference, which the law holds after the plan)."""
        if reference is not None:
            self.references.set(reference, t_now)
        self.plan = plan
        self.plans_made += 1
        self.last_plan_info = dict(plan.info)
        if not self.design_on_demand:
            return
        self.prefetch(plan.z[::max(1, int(0.05 / plan.dt)), self.qi])

    def desired_state(self, t):
        """(z*, zd*) the law steers to at plant time t: the plan's, or the held reference in static equilibrium."""
        plan = self.plan
        if plan is not None and t >= plan.t0 - 0.5 * plan.dt:
            zs, zds, _ = plan.sample(t)
            return zs.copy(), zds.copy()
        q_d = np.asarray(self.references.sample(t)[0], dtype=float) if self.references.active is not None else \
            np.asarray(self.model.spec.nominal_configuration, dtype=float)
        z = self._gain_for(q_d)[2].copy()
        z[self.qi] = q_d
        return z, np.zeros_like(z)

    def set_reference(self, reference, t_now=-math.inf):
        """Plan the reference now (from rest at its start) and put it in force."""
        if getattr(reference, 'end_time', -math.inf) == -math.inf:       # a hold: nothing to plan
            self.references.set(reference, t_now)
            self.plan = None
            return
        self.install_plan(self.plan_for(reference), reference, t_now)

    # ------------------------------------------------------------------ law
    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        plan = self.plan
        if plan is not None and t >= plan.t0 - 0.5 * plan.dt:
            zs, zds, tau_s = plan.sample(t)
            if self.input_delay > 0:
                tau_s = plan.sample(t + self.input_delay)[2]
            K, _, _, _, Ku = self._gain_for(zs[self.qi])[:5]
            dev = np.concatenate([z - zs, zd - zds])
        else:
            K, _, z_eq, tau_s, Ku = self._gain_for(q_d)[:5]
            zs = z_eq.copy()
            zs[self.qi] = q_d
            zds = np.zeros_like(zd)
            zds[self.qi] = qd_d
            dev = np.concatenate([z - zs, zd - zds])
        tau = -K @ dev
        if self.history:
            tau = tau - Ku @ self._u_hist.ravel()
        self._u_nominal = tau_s
        self._xi_prev = self.xi.copy()
        return tau + tau_s
