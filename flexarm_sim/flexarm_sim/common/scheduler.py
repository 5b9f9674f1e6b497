"""Fixed-rate scheduling on absolute monotonic deadlines, and its timing statistics (no ROS).

Deadlines are absolute: tick k is due at t0 + k*T on the monotonic clock, so sleep errors never
accumulate into drift. Overrun policy (bounded catch-up, then skip and re-anchor):

* A tick that starts late but less than one period late is a normal tick (its lateness is recorded).
* A tick that starts one period or more after its deadline is an *overrun* (counted). The loop then
  runs the missed ticks back to back, without sleeping, so simulated time catches up with the wall
  clock — up to `max_catchup` periods behind.
* If it is more than `max_catchup` periods behind, the excess periods are *skipped*: the schedule is
  re-anchored (deadline moved forward by whole periods), `skipped` counts the dropped periods and
  `lag_s` the simulated time the plant now trails the wall clock by. Nothing is dropped silently.

`period == 0` means "as fast as possible" (no sleeping; used by simtime with real_time_factor 0).
"""
from __future__ import annotations

import ctypes
import os
import re
import time

import numpy as np


def _set_policy(policy, priority: int):
    """sched_setscheduler of the calling thread (Linux: pid 0 is this thread only): None when done, else why not."""
    try:
        os.sched_setscheduler(0, policy, os.sched_param(int(priority)))
        return None
    except (OSError, AttributeError, TypeError) as e:     # TypeError: no such policy here (None)
        return str(e) or type(e).__name__


def freeze_start_up_objects():
    """Collect once, then take every object alive now out of the cyclic collector (gc.freeze): a full (generation 2)
    collection walks them all holding the interpreter lock - 70-160 ms in a test process after its numerics tests,
    50 ms in a plant - and every real-time thread of the process (the plant's loop, the controller's state thread,
    the bridge's loop) waits that long. Objects made later are collected as before. Call it once start-up is done."""
    import gc
    gc.collect()
    gc.freeze()


def set_thread_fifo(priority: int):
    """Make the calling thread SCHED_FIFO at `priority`. None when done, else why it was refused (no CAP_SYS_NICE nor
    rtprio limit, or no such policy here); priority 0: nothing to do."""
    if priority <= 0:
        return None
    return _set_policy(getattr(os, 'SCHED_FIFO', None), priority)


def set_thread_normal():
    """Return the calling thread to normal scheduling (SCHED_OTHER; lowering a policy needs no privilege). None when
    done, else why it was refused."""
    return _set_policy(getattr(os, 'SCHED_OTHER', None), 0)


def fifo_report(thread: str, param: str, priority: int, refused):
    """(level, message) of a SCHED_FIFO request (set_thread_fifo's result `refused`), None when none was made."""
    if priority <= 0:
        return None
    if refused is None:
        return 'info', f'{thread}: SCHED_FIFO priority {priority}'
    return 'warn', (f'{param} {priority} refused ({refused}): {thread} at normal scheduling (grant CAP_SYS_NICE or '
                    'an rtprio limit: a loaded machine then delays it less)')


#: Fast DDS's reception threads, by the names its threading model gives them ("dds.udp.<port>", "dds.shm.<port>",
#: "dds.tcp.<port>"; not "dds.shm.wdog", its shared-memory watchdog)
RECEIVE_THREAD_NAME = re.compile(r'dds\.(udp|shm|tcp)\.\d+')


class ReceiveThreads:
    """The middleware's reception threads of this process, at SCHED_FIFO `priority` beside a node's FIFO hot thread.

    A FIFO thread waiting for a message gains nothing while the thread that delivers it runs at normal scheduling:
    under two CPU hogs the controller's states came 20-350 ms after their sample instants (state thread at FIFO 40,
    Fast DDS's receive threads not), with them at FIFO 0.3-1.0 ms at the 99th percentile. Threads are found by name
    in /proc (`task_dir`); `raise_new()` takes the ones created since its last call (a node calls it at start and
    with its diagnostics). priority 0: nothing is done."""

    def __init__(self, priority: int, task_dir: str = '/proc/self/task'):
        self.priority = int(priority)
        self.task_dir = task_dir
        self.raised = 0               # threads put at SCHED_FIFO
        self.refused = None           # why the last refused one was refused (None: none refused)
        self._seen = set()

    @classmethod
    def beside(cls, priority: int, refused) -> 'ReceiveThreads':
        """The receive threads one priority below a thread that asked for SCHED_FIFO `priority` (set_thread_fifo's
        result `refused`), raised now; none when that thread was not granted it."""
        rt = cls(max(1, priority - 1) if priority > 0 and refused is None else 0)
        rt.raise_new()
        return rt

    def raise_new(self) -> int:
        """Put the reception threads not seen before at SCHED_FIFO; returns how many were raised by this call. Only
        reception threads are remembered, so one that names itself after a call is raised by the next."""
        if self.priority <= 0:
            return 0
        try:
            tids = os.listdir(self.task_dir)
        except OSError as e:
            self.refused = str(e)
            return 0
        n = 0
        for tid in tids:
            if tid in self._seen:
                continue
            try:
                with open(os.path.join(self.task_dir, tid, 'comm')) as f:
                    name = f.read().strip()
            except OSError:           # the thread ended meanwhile
                continue
            if not RECEIVE_THREAD_NAME.fullmatch(name):
                continue              # not remembered: a new thread may not have its name yet (it names itself)
            self._seen.add(tid)
            try:
                os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(self.priority))
            except (OSError, AttributeError, ValueError) as e:
                self.refused = str(e) or type(e).__name__
                continue
            n += 1
        self.raised += n
        return n

    def update(self) -> int:
        """raise_new(), then the number of threads raised so far (for /diagnostics)."""
        self.raise_new()
        return self.raised


def set_timer_slack(ns: int = 1000) -> bool:
    """Best effort: lower this thread's timer slack (Linux prctl PR_SET_TIMERSLACK) for tighter sleeps."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(29, ctypes.c_ulong(ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class TimingStats:
    """Ring-buffer window of per-tick timing, plus running totals."""

    def __init__(self, window: int = 8192):
        self.window = window
        self.lateness = np.zeros(window)      # s, start of tick - its deadline
        self.interval = np.zeros(window)      # s, start of tick - start of previous tick
        self.compute = np.zeros(window)       # s, work done in the tick
        self._i = 0
        self._n = 0
        self._ci = 0
        self._cn = 0
        self._last_start = None
        self.ticks = 0
        self.overruns = 0
        self.skipped = 0
        self.compute_max = 0.0
        self.compute_sum = 0.0

    def record_tick(self, start_s: float, lateness_s: float):
        i = self._i
        self.lateness[i] = lateness_s
        self.interval[i] = start_s - self._last_start if self._last_start is not None else np.nan
        self._last_start = start_s
        self._i = (i + 1) % self.window
        self._n = min(self._n + 1, self.window)
        self.ticks += 1

    def record_compute(self, seconds: float):
        self.compute[self._ci] = seconds
        self._ci = (self._ci + 1) % self.window
        self._cn = min(self._cn + 1, self.window)
        self.compute_sum += seconds
        if seconds > self.compute_max:
            self.compute_max = seconds

    def restart_intervals(self):
        """Next tick starts a new interval series (after a pause or a period change)."""
        self._last_start = None

    def summary(self, period_s: float) -> dict:
        """Statistics over the window: achieved rate, |interval - period| and lateness percentiles."""
        n, cn = self._n, self._cn
        out = {'ticks': self.ticks, 'overruns': self.overruns, 'skipped_periods': self.skipped,
               'compute_mean_s': self.compute_sum / max(1, self.ticks), 'compute_max_s': self.compute_max}
        iv = self.interval[:n] if n < self.window else self.interval
        iv = iv[np.isfinite(iv)]
        if iv.size:
            out['rate_hz'] = 1.0 / float(np.mean(iv)) if np.mean(iv) > 0 else float('inf')
            err = np.abs(iv - period_s)
            out['period_err_p50_s'], out['period_err_p99_s'] = (float(x) for x in np.percentile(err, [50, 99]))
            out['period_err_max_s'] = float(err.max())
        late = self.lateness[:n] if n < self.window else self.lateness
        if late.size:
            out['lateness_p50_s'], out['lateness_p99_s'] = (float(x) for x in np.percentile(late, [50, 99]))
            out['lateness_max_s'] = float(late.max())
        c = self.compute[:cn] if cn < self.window else self.compute
        if c.size:
            out['compute_p99_s'] = float(np.percentile(c, 99))
        return out


class FixedRateScheduler:
    """Absolute-deadline ticking with bounded catch-up (see module docstring)."""

    SPIN_FLOOR_S = 20e-6
    OVERSLEEP_DECAY = 0.999           # per tick: the oversleep estimate forgets a spike over ~1000 ticks

    def __init__(self, period_s: float, max_catchup: int = 5, clock=time.monotonic, sleep=time.sleep,
                 stats: TimingStats | None = None, spin_s: float = 0.0):
        self.clock = clock
        # sleep to deadline - spin, then busy-wait the rest (the sleep's wake-up jitter). spin adapts to the
        # measured oversleep (a decaying maximum, x1.25 + 10 us, at least SPIN_FLOOR_S), at most spin_s: with a
        # real-time thread the wake-ups are punctual and most of the busy-wait's CPU is saved
        self.spin_s = float(spin_s)
        self.spin = float(spin_s)
        self._oversleep = 0.0
        self.sleep = sleep
        self.period = float(period_s)
        self.max_catchup = int(max_catchup)
        self.stats = stats or TimingStats()
        self.next_deadline = None
        self.tick_deadline = 0.0      # deadline of the tick wait() last started (its sample instant)
        self.lag_s = 0.0          # simulated time dropped by skipping (plant behind the wall clock)

    def start(self, now: float | None = None):
        """Anchor the schedule: the first tick is due one period from now."""
        now = self.clock() if now is None else now
        self.next_deadline = now + self.period
        self.stats.restart_intervals()

    def wait(self) -> float:
        """Block until the next tick is due; returns its start time (clock seconds)."""
        if self.next_deadline is None:
            self.start()
        now = self.clock()
        period = self.period
        if period <= 0.0:
            self.stats.record_tick(now, 0.0)
            self.tick_deadline = now
            return now
        deadline = self.next_deadline
        if now < deadline:
            if self.spin_s > 0.0:
                spin = self.spin
                if deadline - now > spin:
                    target = deadline - spin
                    self.sleep(target - now)
                    now = self.clock()
                    self._oversleep = max(now - target, self._oversleep * self.OVERSLEEP_DECAY)
                    self.spin = min(self.spin_s, max(self.SPIN_FLOOR_S, 1.25 * self._oversleep + 10e-6))
                now = self.clock()
                while now < deadline:
                    now = self.clock()
            else:
                self.sleep(deadline - now)
                now = self.clock()
        late = now - deadline
        self.tick_deadline = deadline
        self.stats.record_tick(now, late)
        if late >= period:
            self.stats.overruns += 1
            behind = int(late // period)
            if behind > self.max_catchup:
                skip = behind - self.max_catchup
                deadline += skip * period
                self.stats.skipped += skip
                self.lag_s += skip * period
                self.tick_deadline = deadline
        self.next_deadline = deadline + period
        return now
