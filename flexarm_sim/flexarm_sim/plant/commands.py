"""The plant's torque commands: watchdog and the lock-step inbox (no ROS). Validation and clamping are
common/commands.py's one rule (one finite value per joint, clamped to +-limit; a rejected command keeps the
previous valid one).

Watchdog: when no valid command has arrived for `timeout` seconds of plant time (simulated time; equals wall time
in realtime mode, does not advance while paused), the applied torque is zero (motor off, the arm coasts — not a
brake). State `waiting` before the first command (zero torque, not a fault), `ok` while commands are fresh,
`timeout` after a lapse (each lapse counted in `timeouts`). The next valid command restores normal operation.
"""
from __future__ import annotations

import threading

import numpy as np

from ..common.commands import LatestCommand, check_command

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


class LockstepInbox:
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
        self.limits = np.asarray(limits, dtype=float).copy()
        self._buf = {}
        self.expected = 1
        self.expected_stamp = 0
        self.generation = 0
        self.rejected = 0
        self.clamped = 0
        self.stale = 0
        self.far = 0
        self.accepted = 0
        self.last_reject_reason = ''

    def set_limits(self, limits):
        with self.cond:
            self.limits = np.asarray(limits, dtype=float).copy()

    def submit(self, step: int, stamp_ns: int, values):
        with self.cond:
            eff, reason, clamped = check_command(values, -self.limits, self.limits)
            if eff is None:
                self.rejected += 1
                self.last_reject_reason = reason
                return False, reason
            if step < self.expected:
                self.stale += 1
                return False, f'stale: step {step}, waiting for {self.expected}'
            if step >= self.expected + self.MAX_AHEAD:
                self.far += 1
                return False, (f'far ahead: step {step}, waiting for {self.expected} (at most {self.MAX_AHEAD - 1} '
                               'ahead are kept)')
            self.accepted += 1
            self.clamped += clamped
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
