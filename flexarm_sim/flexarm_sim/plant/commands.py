"""The plant's torque commands: watchdog and the lock-step inbox (no ROS). Validation and clamping are
common/commands.py's one rule (one finite value per joint, clamped to +-limit; a rejected command keeps the
previous valid one).

Watchdog: when no valid command has arrived for `timeout` seconds of plant time (simulated time; equals wall time
in realtime mode, does not advance while paused), the command is void: `torque` gives zero, and the plant applies its
`watchdog.action` instead (servo.WatchdogHold: by default the drives hold the joints where they are). State `waiting`
before the first command (zero torque, not a fault), `ok` while commands are fresh, `timeout` after a lapse (each
lapse counted in `timeouts`). The next valid command restores normal operation.

Real time and sim time: a stamped command (flexarm_msgs/JointEffortCommand) acts at the plant step it names, as in
lock-step (:class:`DueCommands`), so a controller that names its state's step + 1 + its designed delay in steps gets
exactly the delay its gains were designed for whenever the transport is faster than that delay.
"""
from __future__ import annotations

import threading

import numpy as np

from ..common.commands import LatestCommand, check_command, rejection_order

WAITING, OK, TIMEOUT = 'waiting', 'ok', 'timeout'


class CommandGate(LatestCommand):
    """Latest valid torque command within +-limits + the watchdog. `submit` from any thread, `torque` from the
    loop thread."""

    def __init__(self, limits, timeout: float):
        limits = np.asarray(limits, dtype=float)
        super().__init__(-limits, limits)
        self.timeout = float(timeout)
        self.state = WAITING
        self.timeouts = 0

    @property
    def limits(self):
        return self.hi

    def set_limits(self, limits):
        limits = np.asarray(limits, dtype=float)
        if limits.shape != (self.n,) or np.any(~(limits > 0)):
            raise ValueError('limits must be positive, one per joint')
        self.set_bounds(-limits, limits)

    def set_timeout(self, timeout: float):
        self.timeout = float(timeout)

    def submit(self, values, now: float):
        ok, reason = super().submit(values, now)
        if ok:
            self.state = OK
        return ok, reason

    def torque(self, now: float, out: np.ndarray) -> str:
        """Write the torque to apply at plant time `now` into out; returns the watchdog state."""
        value, t, seq = self.get()
        if seq == 0 or t == -np.inf:
            out[:] = 0.0
            return self.state
        if now - t > self.timeout:
            if self.state != TIMEOUT:
                self.state = TIMEOUT
                self.timeouts += 1
            out[:] = 0.0
        else:
            out[:] = value
        return self.state

    def clear(self):
        """Forget the held command (after a reset): zero torque, state `waiting`."""
        super().clear()
        self.state = WAITING


class _CheckedCommands:
    """The one rule (common/commands.check_command, against +-limits) with its counts, for the stamped inboxes:
    `accepted`, `rejected` (and the last reason), `clamped`. Subclasses hold `self.guard` while checking."""

    def _init_checked(self, limits, guard):
        self.guard = guard
        self.limits = np.asarray(limits, dtype=float).copy()
        self.accepted = self.rejected = self.clamped = 0
        self.last_reject_reason = ''
        self.last_reject_order = 0

    def set_limits(self, limits):
        with self.guard:
            self.limits = np.asarray(limits, dtype=float).copy()

    def _check(self, values):
        """(effort or None, reason, clamped); a rejection counted (caller holds self.guard)."""
        eff, reason, clamped = check_command(values, -self.limits, self.limits)
        if eff is None:
            self.rejected += 1
            self.last_reject_reason, self.last_reject_order = reason, rejection_order()
        return eff, reason, clamped

    def _accept(self, clamped):
        self.accepted += 1
        self.clamped += clamped


class LockstepInbox(_CheckedCommands):
    """Stamped commands for lock-step mode: the plant takes the one for its next control step.

    A command for step k is accepted when k is the step the plant is waiting for or one of the next MAX_AHEAD - 1
    (buffered: a controller may answer a state before the plant has moved on to wait for it); a command for an
    already integrated step is stale, one for a step MAX_AHEAD or more ahead is far (both counted, dropped: a
    sender of far-future steps — 1,100 commands for steps 1e9... — can never fill the inbox and so never keeps the
    command the plant waits for out). If the command carries a non-zero stamp it must equal the stamp of the state
    it was computed from, which keeps commands computed before a reset from being applied after it. Values: the one
    rule (clamped to +-limits)."""

    MAX_AHEAD = 16

    def __init__(self, limits):
        self.cond = threading.Condition()
        self._init_checked(limits, self.cond)
        self._buf = {}
        self.expected = 1
        self.expected_stamp = 0
        self.generation = 0
        self.stale = 0
        self.far = 0

    def submit(self, step: int, stamp_ns: int, values):
        with self.cond:
            eff, reason, clamped = self._check(values)
            if eff is None:
                return False, reason
            if step < self.expected:
                self.stale += 1
                return False, f'stale: step {step}, waiting for {self.expected}'
            if step >= self.expected + self.MAX_AHEAD:
                self.far += 1
                return False, (f'far ahead: step {step}, waiting for {self.expected} (at most {self.MAX_AHEAD - 1} '
                               'ahead are kept)')
            self._accept(clamped)
            self._buf[step] = (stamp_ns, eff)
            self.cond.notify_all()
            return True, ''

    def expect(self, step: int, stamp_ns: int):
        """The plant now waits for the command of `step`, computed from a state stamped `stamp_ns`."""
        with self.cond:
            self.expected = step
            self.expected_stamp = stamp_ns
            for k in [k for k in self._buf if k < step]:
                del self._buf[k]

    def take(self, out: np.ndarray) -> bool:
        """Pop the command for the expected step into out (caller holds self.cond). False if none."""
        item = self._buf.pop(self.expected, None)
        if item is None:
            return False
        stamp, eff = item
        if stamp != 0 and stamp != self.expected_stamp:
            self.stale += 1
            return False
        out[:] = eff
        return True

    def reset(self):
        with self.cond:
            self._buf.clear()
            self.generation += 1
            self.cond.notify_all()

    def wake(self):
        with self.cond:
            self.cond.notify_all()


class DueCommands(_CheckedCommands):
    """Stamped commands outside lock-step, each acting at the step it names (`step` L: the command acts over the
    integration L-1 -> L, as in lock-step; L = the state's step + 1 + the controller's delay in plant steps).

    `submit(step, stamp_ns, values, next_step)`, `next_step` the step the plant integrates next: L > next_step is
    queued until it is due (`take`); L <= next_step is late: it is to act at once (returned as such, counted, its
    lateness in steps kept) - the transport took longer than the delay the controller designed for - unless it is
    more than `max_late` steps late (refused, counted `too_late`: computed from a state older than any law is designed
    for, it would act as if fresh; the watchdog holds the arm instead). Bounded: L more than `max_ahead` steps ahead
    is refused (counted `far`); `reset(not_before_ns)` forgets the queue and refuses a
    command computed from a state stamped before the reset (`stale`: its step counts from before the reset).
    Values: the one rule (clamped to +-limits). Any thread."""

    def __init__(self, limits, max_ahead: int, max_late: int = 10 ** 9):
        self.lock = threading.Lock()
        self._init_checked(limits, self.lock)
        self.max_ahead = int(max_ahead)
        self.max_late = int(max_late)
        self.too_late = 0
        self._buf = {}
        self.not_before_ns = 0
        self.on_time = 0
        self.late = 0
        self.max_late_steps = 0
        self.far = 0
        self.stale = 0

    def submit(self, step: int, stamp_ns: int, values, next_step: int, at_once: bool = False):
        """(status, effort or reason): status 'queued', 'late' (act now: the effort), 'now' (`at_once`: act now,
        not counted late - a plant waiting for its first command) or 'refused' (the reason)."""
        with self.lock:
            eff, reason, clamped = self._check(values)
            if eff is None:
                return 'refused', reason
            if stamp_ns < self.not_before_ns:
                self.stale += 1
                return 'refused', 'stale: computed from a state before the last reset'
            if step > next_step + self.max_ahead:
                self.far += 1
                return 'refused', (f'far ahead: step {step}, the plant integrates step {next_step} next (at most '
                                   f'{self.max_ahead} steps ahead are kept)')
            if not at_once and next_step - step > self.max_late:
                self.too_late += 1
                return 'refused', (f'too late: for step {step}, the plant integrates step {next_step} next (at most '
                                   f'{self.max_late} steps late are applied)')
            self._accept(clamped)
            if at_once:
                return 'now', eff
            if step <= next_step:
                self.late += 1
                self.max_late_steps = max(self.max_late_steps, next_step - step)
                return 'late', eff
            self._buf[step] = eff
            return 'queued', eff

    def take(self, next_step: int):
        """The newest command due for the integration towards `next_step` (None: none due), the older ones dropped."""
        with self.lock:
            if not self._buf:
                return None
            due = [k for k in self._buf if k <= next_step]
            if not due:
                return None
            self.on_time += len(due)
            newest = max(due)
            eff = self._buf[newest]
            for k in due:
                del self._buf[k]
            return eff

    def reset(self, not_before_ns: int):
        with self.lock:
            self._buf.clear()
            self.not_before_ns = int(not_before_ns)

    def counts(self) -> dict:
        with self.lock:
            return {'stamped_on_time': self.on_time, 'stamped_late': self.late,
                    'stamped_max_late_steps': self.max_late_steps, 'stamped_too_late': self.too_late,
                    'stamped_far_ahead': self.far,
                    'stamped_stale': self.stale}
