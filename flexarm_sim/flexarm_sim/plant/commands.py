"""Torque command validation, limits, watchdog and the lock-step inbox (no ROS).

Policies (documented here, reported on /diagnostics):

* Validation: a command must have exactly one finite value per joint (arm order). Otherwise it is
  rejected (counted in `rejected`; the node logs a throttled warning) and the previous valid command
  stays in force until the watchdog timeout.
* Limits: values beyond a joint's torque limit |tau_j| <= limit_j are clamped to the limit (each
  clamped command counted once in `clamped`).
* Watchdog: when no valid command has arrived for `timeout` seconds of plant time (simulated time;
  equals wall time in realtime mode, does not advance while paused), the applied torque is zero
  (motor off, the arm coasts — not a brake). State `waiting` before the first command (zero torque,
  not a fault), `ok` while commands are fresh, `timeout` after a lapse (each lapse counted in
  `timeouts`). The next valid command restores normal operation immediately.
"""
from __future__ import annotations

import math
import threading

import numpy as np

WAITING, OK, TIMEOUT = 'waiting', 'ok', 'timeout'


def check_effort(values, limits):
    """(effort array | None, reason, clamped?) for raw command values against per-joint limits."""
    n = len(limits)
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        return None, 'not numeric', False
    if arr.ndim != 1 or arr.shape[0] != n:
        return None, f'expected {n} values, got {arr.size}', False
    if not np.all(np.isfinite(arr)):
        return None, 'non-finite value', False
    clipped = np.clip(arr, -limits, limits)
    return clipped, '', bool(np.any(clipped != arr))


class Throttle:
    """Allow an action at most once per `period` (of whatever clock the caller passes)."""

    def __init__(self, period: float):
        self.period = period
        self._last = -math.inf
        self.suppressed = 0

    def __call__(self, now: float) -> bool:
        if now - self._last >= self.period:
            self._last = now
            return True
        self.suppressed += 1
        return False


class CommandGate:
    """Latest valid command + watchdog. `submit` from any thread, `torque` from the loop thread."""

    def __init__(self, limits, timeout: float):
        self._lock = threading.Lock()
        self.limits = np.asarray(limits, dtype=float).copy()
        self.n = self.limits.size
        self.timeout = float(timeout)
        self._cmd = np.zeros(self.n)
        self._t_cmd = None
        self.state = WAITING
        self.accepted = 0
        self.rejected = 0
        self.clamped = 0
        self.timeouts = 0
        self.last_reject_reason = ''

    def set_limits(self, limits):
        limits = np.asarray(limits, dtype=float)
        if limits.shape != (self.n,) or np.any(~(limits > 0)):
            raise ValueError('limits must be positive, one per joint')
        with self._lock:
            self.limits = limits.copy()
            self._cmd = np.clip(self._cmd, -limits, limits)

    def set_timeout(self, timeout: float):
        with self._lock:
            self.timeout = float(timeout)

    def submit(self, values, now: float):
        """Offer a command received at plant time `now`. Returns (accepted, reason)."""
        with self._lock:
            eff, reason, clamped = check_effort(values, self.limits)
            if eff is None:
                self.rejected += 1
                self.last_reject_reason = reason
                return False, reason
            self.accepted += 1
            self.clamped += clamped
            self._cmd = eff
            self._t_cmd = now
            self.state = OK
            return True, 'clamped' if clamped else ''

    def torque(self, now: float, out: np.ndarray) -> str:
        """Write the torque to apply at plant time `now` into out; returns the watchdog state."""
        with self._lock:
            if self._t_cmd is None:
                out[:] = 0.0
                return self.state
            if now - self._t_cmd > self.timeout:
                if self.state != TIMEOUT:
                    self.state = TIMEOUT
                    self.timeouts += 1
                out[:] = 0.0
            else:
                out[:] = self._cmd
            return self.state

    def clear(self):
        """Forget the held command (after a reset): zero torque, state `waiting`."""
        with self._lock:
            self._cmd[:] = 0.0
            self._t_cmd = None
            self.state = WAITING


class LockstepInbox:
    """Stamped commands for lock-step mode: the plant takes the one for its next step.

    A command for step k is accepted when k is the step the plant is waiting for or a later one
    (buffered); a command for an already integrated step is stale (counted, dropped). If the command
    carries a non-zero stamp it must equal the stamp of the state it was computed from (state k-1),
    which keeps commands computed before a reset from being applied after it.
    Invalid values are rejected as in CommandGate; values beyond the limits are clamped.
    """

    MAX_BUFFERED = 1000

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
        self.accepted = 0
        self.last_reject_reason = ''

    def set_limits(self, limits):
        with self.cond:
            self.limits = np.asarray(limits, dtype=float).copy()

    def submit(self, step: int, stamp_ns: int, values):
        with self.cond:
            eff, reason, clamped = check_effort(values, self.limits)
            if eff is None:
                self.rejected += 1
                self.last_reject_reason = reason
                return False, reason
            if step < self.expected or len(self._buf) >= self.MAX_BUFFERED:
                self.stale += 1
                return False, f'stale: step {step}, waiting for {self.expected}'
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
