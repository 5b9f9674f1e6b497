"""Planning references for a controller node (no ROS): in a process of its own in real time, at once in lock-step.

A law that plans (laws.tip_tracking.TipTracking: `plan_for`, `install_plan`, `desired_state`) gets every accepted joint
reference planned from the arm's desired state at the plan's start (the current plan's, or the held equilibrium),
on the control grid of the states (t_now + k dt):
  * lock-step: at once, inside the reference callback (the plant waits for the next command meanwhile, so the
    plant time does not move and the run stays reproducible);
  * real time: by a planning process (plan_worker.py: niced, so that planning never starves the control loop), waited
    for by a thread; the control loop keeps answering states with the law in force meanwhile. If the
    plan is ready after its start (a reference stamped too early for the planning time plus the pre-actuation),
    the move is re-timed: the whole plan shifted to start at the next control instant, with a warning
    (`moves_retimed`, `last_retime_s` in /diagnostics). A reference that cannot be planned is refused with
    the planner's reason (limits, validity), the previous motion continues.
"""
from __future__ import annotations

import copy
import math
import threading

from ..planning import PlanError
from .plan_worker import PlanningProcessError, PlanWorker


def shifted_reference(ref, offset):
    """A copy of a joint reference starting `offset` s later."""
    out = copy.copy(ref)
    for name in ('t0', 'end_time'):
        if hasattr(out, name):
            setattr(out, name, getattr(out, name) + offset)
    return out


class ReferencePlanner:
    def __init__(self, law, lockstep, log=None):
        self.law = law
        self.lockstep = lockstep
        self.log = log or (lambda level, msg: None)
        self._cv = threading.Condition()
        self._job = None             # (reference, t_now, z0, zd0)
        self._done = None            # (plan or None, reference, error)
        self._thread = None
        self._running = False
        self.planning = False
        self.plans = 0
        self.failures = 0
        self.moves_retimed = 0
        self.last_retime_s = 0.0
        self.last_plan_time_s = float('nan')
        self.worker = None           # real time: the planning process (plan_worker.py), for laws with plan_job

    # ------------------------------------------------------------------ lifecycle (real time)
    def start(self):
        if self.lockstep or self._thread is not None:
            return
        if hasattr(self.law, 'plan_job'):
            self.worker = PlanWorker(self.law.plan_job())
            self.worker.start()      # importing and building the model meanwhile: ready by the first reference
        self._running = True
        self._thread = threading.Thread(target=self._loop, name='reference-planner', daemon=True)
        self._thread.start()

    def stop(self):
        self._running = False
        with self._cv:
            self._cv.notify_all()
        if self.worker is not None:
            self.worker.close()      # a plan in progress is abandoned; the thread cannot start another process
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    # ------------------------------------------------------------------ requests
    def submit(self, reference, t_now):
        """Plan `reference` from the law's desired state (lock-step: now; returns (accepted, reason)); real time:
        queued (a newer reference replaces one not started yet); returns (True, '') once queued."""
        z0, zd0 = self.law.desired_state(t_now)
        if self.lockstep:
            try:
                plan = self.law.plan_for(reference, t_now, z0, zd0)
            except PlanError as e:
                self.failures += 1
                return False, f'cannot plan the move: {e}'
            self._install(plan, reference, t_now)
            return True, ''
        with self._cv:
            self._job = (reference, t_now, z0, zd0)
            self.planning = True
            self._cv.notify()
        return True, ''

    def poll(self, t_now):
        """Real time, from the control thread: install a finished plan (re-timed if late); returns
        (finished: bool, accepted: bool, reason)."""
        with self._cv:
            done, self._done = self._done, None
        if done is None:
            return False, False, ''
        plan, reference, error = done
        if plan is None:
            self.failures += 1
            return True, False, error
        late = t_now - plan.t0
        if late > -1e-9:
            steps = math.floor(late / plan.dt + 1e-9) + 1
            offset = steps * plan.dt
            plan = plan.shifted(offset)
            reference = shifted_reference(reference, offset)
            self.moves_retimed += 1
            self.last_retime_s = offset
            self.log('warn', f'the move was planned {plan.info.get("plan_time_s", float("nan")):.2f} s after it '
                             f'arrived: re-timed {offset:.3f} s later (stamp references at least the planning time '
                             'plus the pre-actuation ahead)')
        self._install(plan, reference, t_now)
        return True, True, ''

    def _install(self, plan, reference, t_now):
        self.law.install_plan(plan, reference, t_now)
        self.plans += 1
        self.last_plan_time_s = float(plan.info.get('plan_time_s', float('nan')))

    def _loop(self):
        while self._running:
            with self._cv:
                while self._running and self._job is None:
                    self._cv.wait(0.1)
                if not self._running:
                    return
                job, self._job = self._job, None
            reference, t_now, z0, zd0 = job
            try:
                if self.worker is not None:
                    plan, error = self.worker.plan(reference, t_now, z0, zd0), ''
                else:
                    plan, error = self.law.plan_for(reference, t_now, z0, zd0), ''
            except PlanError as e:
                plan, error = None, f'cannot plan the move: {e}'
            except PlanningProcessError as e:
                plan, error = None, f'planning failed: {e}'
            except Exception as e:  # noqa: BLE001 - a planner bug must not kill the controller: refused, reported
                plan, error = None, f'planning failed: {e!r}'
            with self._cv:
                self._done = (plan, reference, error)
                self.planning = self._job is not None
