"""A controller without ROS: one control law (laws/), its references, the overload safe mode, the gain designer.

The node (nodes/controller_node.py) decodes each /flexarm/state and hands it to `on_state`, which returns the
torque to publish (or None: not commanding); references, gains and diagnostics go through here too.

Sampling (not lock-step): the law answers every state (event-driven), so its period is the plant's state period;
`rate` must equal the plant's publish_rates.state — the laws are designed for 1/rate (PD and computed torque cap
their velocity gains by it, the modal LQR is discretized at it) and the runtime warns once when the states arrive
at another rate. `input_delay` (default one period; the modal laws: 4 ms in whole periods, `design_periods`) is the
transport delay the gains are designed for.

Safe mode (not in lock-step, nor with pd_servo's command_interface position, whose loop closes in the plant):
controller/safe_mode.py. The plant stamps every state with its sample instant, so the age of a state when it is acted
on is known; late states (older than `safe_mode.max_state_age`, default input_delay + 4 ms, or state periods
skipped), implausible ones (not acted on) or missing ones switch to a hold law designed for the degraded loop
(`safe_mode.design_period`, `safe_mode.design_delay`), and `safe_mode.recover_time` of states on time back to the
normal law; each switch returns to the reference from the current state (no jump). Reported in /diagnostics (WARN).
"""
from __future__ import annotations

import math
import time

import numpy as np

from flexarm_sim.common.commands import clip
from flexarm_sim.common.params import DERIVED, ConfigError

from ..laws import PointToPoint, make_shaper, model_modes
from ..laws.pd import gain_vector
from ..laws.reference import ReferenceLimits, move_target
from . import config
from .designer import WORKER_READY_WAIT_S, DesignWorker, GainDesigner
from .kinds import law_class
from .planner import ReferencePlanner
from .safe_mode import BlendedReferences, Envelope, SafeHoldLaw, SafeMode

RATE_CHECK_STATES = 50             # states before the received state rate is compared with `rate`
RATE_TOLERANCE = 0.05


def input_delay_of(kind, values):
    """s of transport delay the law of `kind` is designed for: the parameter, or its law's default."""
    delay = values['input_delay']
    return config.derived_input_delay(values, law_class(kind).design_periods(values['rate'])) if delay is DERIVED \
        else delay


def make_law(kind, model, values):
    """The control law of a controller node from its (validated) parameter values (its law's `from_params`)."""
    return law_class(kind).from_params(model, values, 1.0 / values['rate'], input_delay_of(kind, values))


def fallback_law(model, values):
    """The safe mode's hold law (safe_mode.SafeHoldLaw) for the envelope of the controller's parameters."""
    env = Envelope(1.0 / values['rate'], max(1.0 / values['rate'], values['safe_mode.design_period']),
                   values['safe_mode.design_delay'])
    return SafeHoldLaw(model, env)


class ControllerRuntime:
    def __init__(self, kind, model, values: dict, log=None):
        config.check(values, model.n_joints)
        self.kind = kind
        self.model = model
        self.values = dict(values)
        self.log = log or (lambda level, msg: None)
        self.rate = values['rate']
        self.lockstep = values['lockstep']
        self.law = make_law(kind, model, values)
        self.input_delay = input_delay_of(kind, values)
        age = values['safe_mode.max_state_age']
        self.max_state_age = self.input_delay + config.STATE_AGE_MARGIN_S if age is DERIVED else age
        self.law.references = BlendedReferences.adopt(self.law.references)   # + the offset of a return
        self.limits = ReferenceLimits(model, 1.0 / self.rate)
        # real time: the scheduled laws' cells designed ahead, in a process of their own (designer.py)
        self.design_worker = None if self.lockstep else DesignWorker(model.spec)
        self.designer = (GainDesigner(self.law, self.log, self.design_worker)
                         if (hasattr(self.law, 'design_cell') and not self.lockstep) else None)
        if self.designer is not None:
            self.law.prefetch([model.spec.nominal_configuration])  # the first cells, before any state
        # laws that plan their references (tip_tracking): the planner (lock-step at once, real time in a thread)
        self.planner = ReferencePlanner(self.law, self.lockstep, self.log) if hasattr(self.law, 'plan_for') else None
        # no safe mode in lock-step (no delay) nor when the plant's joint servo closes the loop (set-points only)
        self.safe_mode_applies = not self.lockstep and not getattr(self.law, 'servo_in_plant', False)
        self.fallback = self.safe = self.hold_designer = None
        if self.safe_mode_applies:
            self.fallback = fallback_law(model, values)
            self.fallback.references = self.law.references        # the same reference, held or moving
            self.fallback.design_on_demand = False                 # designed ahead by its own designer
            if self.planner is not None:                           # within a plan the hold law follows it
                self.fallback.plan_law = self.law
                self.fallback.ff_lead = self.input_delay
            self.hold_designer = GainDesigner(self.fallback, self.log, self.design_worker)
            self.safe = SafeMode(self.law, self.fallback, self.law.references, values, self.max_state_age, self.log)
            self.safe.on_switch = lambda mode, t: self._design_ahead(self.law.references.blend)
        self.states_skipped = 0
        self.states_rejected = 0
        self.references_rejected = 0
        self.references_accepted = 0
        self.last_reject_reason = ''
        self.n_commands = 0
        self._last_t = None
        self._intervals = []
        self._rate_checked = False
        self.measured_rate = float('nan')
        self._started_move = False
        self._loop_times = []
        self.last_update = None                                   # monotonic time of the last answered state

    # ------------------------------------------------------------------ lifecycle
    def start(self):
        designers = [d for d in (self.designer, self.hold_designer) if d is not None]
        if designers and not self.design_worker.wait_ready(WORKER_READY_WAIT_S):   # before the loop (worker.py)
            self.log('warn', f'the gain design process was not ready after {WORKER_READY_WAIT_S:g} s: the loop '
                             'starts beside its start-up')
        for d in designers + [self.planner]:
            if d is not None:
                d.start()

    def stop(self):
        """End the designers and the planner at once (a design or plan in progress is abandoned)."""
        designers = [d for d in (self.designer, self.hold_designer) if d is not None]
        for d in designers:
            d.stop(join=False)
        if self.design_worker is not None:
            self.design_worker.close()
        for d in designers:
            d.join()
        if self.planner is not None:
            self.planner.stop()

    @property
    def safe_mode(self) -> bool:
        return self.safe is not None and self.safe.active

    @property
    def safe_mode_entries(self) -> int:
        return 0 if self.safe is None else self.safe.entries

    @property
    def late_states(self) -> int:
        return 0 if self.safe is None else self.safe.late_states

    def effective_values(self) -> dict:
        """The values in force of the DERIVED parameters (for `ros2 param get/dump`)."""
        return dict(self.law.effective_values(), input_delay=self.input_delay,
                    **{'safe_mode.max_state_age': self.max_state_age})

    # ------------------------------------------------------------------ parameters at run time
    def apply(self, new: dict, changed):
        """Validated run-time changes: gains to the law (atomic: a refused value changes nothing), shaping."""
        config.check(new, self.model.n_joints)
        gains = {k: new[k] for k in changed if k in config.GAINS[self.kind]}
        if gains:
            n = self.model.n_joints
            kw = {k: (gain_vector(v, n) if isinstance(v, list) else (None if v is DERIVED else v))
                  for k, v in gains.items()}
            try:
                self.law.set_gains(**kw)
            except (ValueError, TypeError) as e:
                raise ConfigError(sorted(gains)[0], str(e)) from e
        self.values = dict(new)

    # ------------------------------------------------------------------ states
    def on_state(self, z, zd, t, age_s=0.0):
        """The torque answering the state (z, zd) sampled at plant time t, acted on age_s after its sample instant;
        None if the runtime must not command (never in normal operation)."""
        period = 1.0 / self.rate
        skipped = 0
        next_period = False                # this state came one period after the previous one
        if self._last_t is not None:
            dt = t - self._last_t
            next_period = dt < 1.5 * period
            if dt > 1.5 * period:
                skipped = int(round(dt * self.rate)) - 1
                self.states_skipped += skipped
            if dt > 0 and not self._rate_checked:
                self._intervals.append(dt)
                if len(self._intervals) >= RATE_CHECK_STATES:
                    self._check_rate()
        self._last_t = t
        if self.values['default_move'] and not self._started_move:
            self._start_default_move(z, t)
        law = self.law
        if self.planner is not None and not self.lockstep:
            finished, ok, why = self.planner.poll(t)
            if finished and ok:
                self.references_accepted += 1
                self._design_ahead(self.law.references.active)
            elif finished:
                self._refuse(why)
                self.log('warn', f'rejected reference: {why} (previous motion kept)')
        if self.safe_mode_applies:
            law = self.safe.on_state(t, z, zd, age_s, skipped, next_period)
            if law is None:                # implausible, or too old for any designed law: not acted on
                return None
        t0 = time.perf_counter()
        tau = law(t, z, zd)
        if self.safe is not None:              # bumpless transfer after a switch of law (safe_mode.py)
            tau = self.safe.bumpless(t, z, zd, tau)
        self._loop_times.append(time.perf_counter() - t0)
        if len(self._loop_times) > 5000:
            del self._loop_times[:2500]
        self.n_commands += 1
        self.last_update = time.monotonic()
        return tau

    def _check_rate(self):
        self._rate_checked = True
        self.measured_rate = 1.0 / float(np.median(self._intervals))
        if abs(self.measured_rate * (1.0 / self.rate) - 1.0) > RATE_TOLERANCE:
            self.log('warn', f'states arrive at {self.measured_rate:.4g} Hz but this controller\'s rate is '
                             f'{self.rate:g} Hz (its gains are designed for 1/rate): set rate to the plant\'s '
                             'publish_rates.state (sim.launch.py: control_rate:=)')

    def _start_default_move(self, z, t):
        self._started_move = True
        q0 = z[self.model.q_index]
        q1 = move_target(q0, self.values['move_angle'], self.limits.lo, self.limits.hi)
        if self.planner is not None:        # a planned move starts after its pre-actuation
            pre = float(self.values.get('pre_actuation', 0.5))
            ok, why = self.planner.submit(PointToPoint(q0, q1, self.values['move_time'], t + pre), t)
            if not ok:
                self.log('warn', f'default move: {why}')
                return
        else:
            self.law.references.set(PointToPoint(q0, q1, self.values['move_time'], t), t)
            self._apply_shaping(q1)
        self._design_ahead(self.law.references.active)
        self.log('info', f'default move: {self.values["move_angle"]:.3f} rad of every joint in '
                         f'{self.values["move_time"]} s')

    # ------------------------------------------------------------------ references
    def on_reference(self, msg, t_now):
        """A trajectory_msgs/JointTrajectory: (accepted, reason or a warning). A refused one leaves the current
        reference. The node runs the two halves itself: prepare_reference outside its lock (a large reference takes
        a while to check), install_reference inside."""
        ref, why = self.prepare_reference(msg, t_now, self.reference_start(t_now))
        return self.install_reference(ref, t_now, why)

    def reference_start(self, t_now):
        """The current reference state (q, qd, qdd) at t_now; None before the first state."""
        refs = self.law.references
        return None if refs.active is None else refs.sample(t_now)

    def prepare_reference(self, msg, t_now, start):
        """(the reference of msg, '') or (None, why refused): built from `start` (reference_start) and checked
        against the arm (ReferenceLimits); touches no state of the runtime."""
        if start is None:
            return None, 'reference before the first state'
        try:
            ref = self.law.references.from_msg(msg, list(self.model.spec.joint_names), t_now, start)
        except (ValueError, TypeError, OverflowError) as e:
            return None, clip(str(e))
        why = self.limits.violation(ref, t_now, start)
        return (None, why) if why else (ref, '')

    def install_reference(self, ref, t_now, why=''):
        """Make a prepared reference the active one (or count the refusal): (accepted, reason or a warning)."""
        if ref is None:
            return self._refuse(why)
        late = getattr(ref, 'retimed_s', 0.0)
        note = f'its stamp was {1e3 * late:.1f} ms in the past: re-timed to start now' if late > 0 else ''
        if self.planner is not None:        # the move is planned (at once in lock-step, else by the planning process)
            ok, why = self.planner.submit(ref, t_now)
            if not ok:
                return self._refuse(why)
            if self.lockstep:
                self.references_accepted += 1
            return True, note
        self.law.references.set(ref, t_now)
        self._apply_shaping(ref.sample(ref.end_time)[0])
        self._design_ahead(ref)
        self.references_accepted += 1
        return True, note

    def hold(self, z, t):
        """Hold the measured joint angles (before any reference)."""
        if self.law.references.active is None:
            self.law.references.hold(z[self.model.q_index], t)

    def _refuse(self, why):
        self.references_rejected += 1
        self.last_reject_reason = why
        return False, why

    def _apply_shaping(self, q_target):
        kind = self.values['shaping']
        if kind == 'none':
            self.law.set_shaper(None)
            if self.fallback is not None:
                self.fallback.set_shaper(None)
            return
        f, zeta = model_modes(self.model, q_target, 'closed_loop', K=self.law.feedback_matrix(q_target))
        sel = (zeta < 0.6) & (f < 0.25 * self.rate)
        k = self.values['shaping_modes']
        self.law.set_shaper(make_shaper(kind, f[sel][:k], zeta[sel][:k]) if np.any(sel) else None)
        if self.fallback is not None:
            self.fallback.set_shaper(self.law.shaper)

    def _design_ahead(self, ref):
        """Queue the gain-schedule cells a reference (or a return's offset) visits (real time: the modal law's and
        the hold law's designers)."""
        if ref is None:
            return
        t0, t1 = getattr(ref, 't0', None), getattr(ref, 'end_time', None)
        if t0 is None or t1 is None or not (math.isfinite(t0) and math.isfinite(t1)):
            return
        qs = [self.law.references.sample(t)[0] for t in np.linspace(t0, t1, 50)]
        for d in (self.designer, self.hold_designer):
            if d is not None:
                d.request_configurations(qs)

    def command_end(self):
        """Plant time at which the current command ends: the reference's end, delayed by input shaping, or the end
        of a plan's post-actuation (None before any finite reference)."""
        law = self.law
        plan = getattr(law, 'plan', None)
        if plan is not None:
            return float(plan.t_end)
        end = law.references.end_time
        if not math.isfinite(end):
            return None
        shaper = getattr(law, 'shaper', None)
        return float(end + (shaper.duration if shaper is not None else 0.0))

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self, stale: bool):
        lt = np.array(self._loop_times[-1000:]) * 1e6 if self._loop_times else np.zeros(1)
        law = self.law
        v = {'law': law.name, 'rate_hz': self.rate, 'measured_state_rate_hz': self.measured_rate,
             'loop_time_mean_us': float(lt.mean()), 'loop_time_max_us': float(lt.max()),
             'published': self.n_commands, 'states_rejected': self.states_rejected,
             'references_accepted': self.references_accepted, 'references_rejected': self.references_rejected, 'last_reject_reason': self.last_reject_reason,
             'states_skipped': self.states_skipped, 'state_age_limit_ms': 1e3 * self.max_state_age,
             'faults': law.n_faults, 'saturated': ','.join(str(int(x)) for x in law.saturated),
             'stale': stale, 'lockstep': self.lockstep}
        if self.designer is not None:
            v.update(gain_cells_designed=self.designer.designed, gain_design_failures=self.designer.failures)
        if self.hold_designer is not None:
            v.update(hold_cells_designed=self.hold_designer.designed, hold_design_failures=self.hold_designer.failures)
        if self.designer is not None or self.hold_designer is not None:
            v['gain_cells_pending'] = sum(d.pending() for d in (self.designer, self.hold_designer) if d is not None)
        if self.design_worker is not None and (self.designer or self.hold_designer):
            v.update(gain_design_process_starts=self.design_worker.starts,
                     gain_cells_from_disk_cache=self.design_worker.cache_hits)
        v.update(self.safe.diagnostics() if self.safe is not None else {'safe_mode': 'off', 'safe_mode_entries': 0})
        end = self.command_end()
        if end is not None:
            v['command_end_s'] = end
        if self.planner is not None:
            pl = self.planner
            v.update(plans=pl.plans, plan_failures=pl.failures, planning=pl.planning,
                     last_plan_time_s=pl.last_plan_time_s, moves_retimed=pl.moves_retimed,
                     last_retime_s=pl.last_retime_s)
        if law.fault:
            return 'error', f'fault: {law.fault}', v
        if stale:
            return 'warn', 'no fresh state: not commanding', v
        if self.safe_mode:
            return 'warn', f'safe mode ({self.safe.reason}): holding the arm with the hold law', v
        return 'ok', 'running', v
