"""Commands from outside (no ROS): the one validation rule, the latest valid command of a topic, a log throttle.

Every command array the plant and the hardware bridge take (torques, position set-points) obeys one rule
(`check_command`): exactly one finite number per joint, else rejected (counted; the previous valid command stays in
force); values beyond a joint's bounds are clamped (counted once per command).
"""
from __future__ import annotations

import itertools
import math
import threading

import numpy as np


MAX_REASON = 300          # characters of a reason kept in /diagnostics and logs (an input's size never sets theirs)
rejection_order = itertools.count(1).__next__     # orders rejections across a process's command inboxes


def clip(text, limit: int = MAX_REASON) -> str:
    """text cut to `limit` characters, saying how long it was (a refused message's reason may quote the input: a
    reference with 10^6 joint names once gave a 10.9 MB reason in /diagnostics)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f'{text[:limit]}... ({len(text)} characters)'


class Unreadable:
    """What a command reader hands the rule for bytes that are no such message: refused, counted like any refused
    command, `why` the reason (a garbage Float64MultiArray made rclpy raise in the plant's and the bridge's
    subscription callbacks)."""
    __slots__ = ('why',)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self):
        return f'Unreadable({self.why!r})'


def check_command(values, lo, hi):
    """(array | None, reason, clamped?) of raw command values against per-joint bounds [lo, hi]."""
    if isinstance(values, Unreadable):
        return None, values.why, False
    n = len(lo)
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        return None, 'not numeric', False
    if arr.ndim != 1 or arr.shape[0] != n:
        return None, f'expected {n} values, got {arr.size}', False
    if not np.all(np.isfinite(arr)):
        return None, 'non-finite value', False
    clipped = np.minimum(np.maximum(arr, lo), hi)
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


class LatestCommand:
    """The latest valid command of one topic, within [lo, hi] (thread-safe; `submit` from any thread).

    `seq` counts valid commands, `t` is the time of the latest (the caller's clock); `arrived` (optional) is a
    Condition notified on every valid command (a loop waiting for the answer to what it published)."""

    def __init__(self, lo, hi, arrived: threading.Condition | None = None):
        self._lock = threading.Lock()
        self._arrived = arrived
        self.lo = np.asarray(lo, dtype=float).copy()
        self.hi = np.asarray(hi, dtype=float).copy()
        self.n = self.lo.size
        self.value = np.zeros(self.n)
        self.t = -math.inf
        self.seq = 0
        self.tag = 0                   # what the sender said of the latest (a stamped command's stamp; 0: nothing)
        self.accepted = self.rejected = self.clamped = 0
        self.last_reject_reason = ''
        self.last_reject_order = 0        # rejection_order() of the last rejection (0: none)

    def set_bounds(self, lo, hi):
        lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        if lo.shape != (self.n,) or hi.shape != (self.n,) or np.any(~(lo <= hi)):
            raise ValueError('bounds must be one [lo, hi] per joint with lo <= hi')
        with self._lock:
            self.lo, self.hi = lo.copy(), hi.copy()
            self.value = np.minimum(np.maximum(self.value, lo), hi)

    def submit(self, values, now: float, tag: int = 0):
        """Offer a command received at time `now` (`tag` kept with it): (accepted, reason) — reason 'clamped' if it
        was."""
        with self._lock:
            arr, reason, clamped = check_command(values, self.lo, self.hi)
            if arr is None:
                self.rejected += 1
                self.last_reject_reason, self.last_reject_order = reason, rejection_order()
                return False, reason
            self.value = arr
            self.t = now
            self.tag = tag
            self.seq += 1
            self.accepted += 1
            self.clamped += clamped
        if self._arrived is not None:
            with self._arrived:
                self._arrived.notify_all()
        return True, 'clamped' if clamped else ''

    def get(self):
        """(value, time, seq) of the latest valid command."""
        return self.get_tagged()[:3]

    def get_tagged(self):
        """(value, time, seq, tag) of the latest valid command."""
        with self._lock:
            return self.value.copy(), self.t, self.seq, self.tag

    def clear(self):
        """Forget the held command (zero value, no time)."""
        with self._lock:
            self.value[:] = 0.0
            self.t = -math.inf
            self.tag = 0
