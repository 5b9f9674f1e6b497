"""ROS-free core of the hardware bridge: state machine, command gate, watchdog, limits, back-off.

The ROS node (ros_node.py) is a thin adapter: it feeds commands in (:meth:`BridgeCore.submit_effort`,
:meth:`BridgeCore.submit_position`, from the executor thread), posts service requests
(:meth:`BridgeCore.request`) and calls :meth:`BridgeCore.cycle` from its own fixed-rate thread; every
bus access happens inside ``cycle`` (one thread owns the serial port).

States::

    RECONNECTING --(port open, all servos ping, no hardware error, configured, one good read)--> DISABLED
    DISABLED --~/enable--> ENABLED --~/disable or watchdog (torque_off)--> DISABLED
    any --(read-error policy below; lost port; hardware error bit; failed write)--> FAULT
    FAULT: torque off on every servo that answers, then after the back-off delay --> RECONNECTING

Read-error policy: one failed read (reply timeout, bad CRC, truncated or stale reply) is not a fault.
The cycle publishes nothing and writes nothing (the servos keep the previous goal for that cycle),
the error is counted (``read_failures``/``crc_errors``, ``read_errors_tolerated`` in /diagnostics),
and the next read starts with a bus re-synchronisation (servo_bus.py). A FAULT follows when either

* ``fault_after_errors`` reads fail in a row (default 3: at 250 Hz and the ~35 ms reply
  timeout, about 0.1-0.2 s without a valid reading), or
* ``fault_window.errors`` reads fail within any ``fault_window.period`` seconds (default 10 in 1 s:
  a bus that keeps losing replies, even if never three in a row).

* The bridge starts in RECONNECTING (first attempt at once) and ends every recovery in DISABLED:
  torque is never switched on except by ``~/enable``.
* Reconnect attempts are spaced ``initial_delay * multiplier**k`` (capped at ``max_delay``, default
  1 s, so the bridge reconnects within about 1 s of the servos answering again) after the k-th
  consecutive failure. A servo with a Hardware Error Status makes the attempt fail until
  it is rebooted (``~/reboot`` service / power cycle); the firmware keeps its torque off meanwhile.
* Readings: only complete, CRC-checked readings (``JointReading.ok``) are returned for publication,
  each exactly once; a failed cycle returns nothing (the joint state simply pauses).

Commands (same rules as the plant): an array with one finite value per joint is accepted; anything
else is rejected (counted) and the previous valid command stays in force until the watchdog.
Values beyond a joint's limit are clamped (counted once per command). Effort limit: the joint's
``effort_limit`` (never above current_limit x torque_constant x gear_ratio). Position commands
(``current_position`` joints) are clamped to ``position_limits``.

Soft limits for ``current`` joints (applied every cycle, counted in ``limit_interventions``): torque
pushing a joint further beyond its position limit, or accelerating it beyond its velocity limit,
is set to zero.

Bus Watchdog (the servos' own fail-safe, ``bus_watchdog`` s, control table item 98): armed on every servo at
``~/enable`` (servo_bus.enable), so that a servo whose torque is on stops by itself when no instruction reaches it
for that long - whatever stopped the bridge (cable cut, adapter unplugged, bridge killed, host hung). Every cycle
addresses every servo (the sync read; the sync write), so the servos never notice a working bridge. A servo
whose watchdog expired reads -1 and refuses Goal values (its Goal Current/Position stay what the stop set): the
bridge checks item 98 after any failed read (its instructions may not have arrived), when it was itself silent
for more than half the watchdog time, and every ``hardware_status_period`` cycles; an expired servo is a FAULT.
Every (re)connect clears the error (servo_bus.configure) and reports which servos had been stopped by it.
Torque off at a fault is confirmed per servo; a servo that does not confirm it is reported by id (``torque_off``
in its diagnostics) - with its watchdog armed it stops by itself ``bus_watchdog`` s after the last instruction.

Watchdog (ENABLED only): the clock starts at enable with a zero command. When no valid command
(of every command topic the joint modes need) has arrived for ``command_timeout``:

* ``torque_off``: torque off on all servos, state DISABLED (latched: a stopped controller does not
  re-arm the arm when it comes back; call ``~/enable``).
* ``hold_position``: the joints hold the position measured when the watchdog fired (bridge-side PD
  ``hold_gains`` for current joints, Goal Position for current_position joints) until the next valid
  command, which resumes normal operation.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

from flexarm_sim.common.commands import LatestCommand

from . import control_table as ct
from .config import BridgeConfig
from .servo_bus import BusError, JointReading

DISABLED, ENABLED, FAULT, RECONNECTING = 'disabled', 'enabled', 'fault', 'reconnecting'
WD_IDLE, WD_WAITING, WD_OK, WD_TIMEOUT = 'idle', 'waiting', 'ok', 'timeout'


def confirm_enable(given: str, arm_id: str) -> Optional[str]:
    """None if *given* confirms switching the torque on for the arm *arm_id*, else why not (``~/enable`` takes the
    arm_id of the arm to move, so that a process calling the service by mistake cannot enable the servos)."""
    if not arm_id:
        return 'this bridge has no arm_id (set its arm parameter)'
    if not given:
        return 'confirmation missing: give the arm_id of the arm to move (the bridge\'s /diagnostics: arm_id)'
    if given != arm_id:
        return f'arm_id {given!r} is not the arm of this bridge (its /diagnostics: arm_id)'
    return None


class Backoff:
    """Exponential back-off: delay(k) = min(max_delay, initial * multiplier**k), k = failures so far."""

    def __init__(self, initial: float, maximum: float, multiplier: float):
        self.initial, self.maximum, self.multiplier = float(initial), float(maximum), float(multiplier)

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return self.initial
        # avoid overflow for large k
        k = min(failures, 200)
        return min(self.maximum, self.initial * self.multiplier ** k)

    def schedule(self, n: int) -> List[float]:
        return [self.delay(k) for k in range(n)]


@dataclass
class Request:
    kind: str
    done: threading.Event = field(default_factory=threading.Event)
    success: bool = False
    message: str = ''


class CycleStats:
    """Timing of each completed cycle: I/O (read + write) wall time, CPU time, achieved rate."""

    def __init__(self):
        self.cycles = 0
        self.io_sum = self.io_max = self.cpu_sum = self.cpu_max = 0.0
        self.window_start = None
        self.window_cycles = 0
        self.rate_hz = 0.0
        self.overruns = 0
        self._io0 = self._cpu0 = 0.0
        self._c0 = 0

    def record(self, now: float, io_s: float, cpu_s: float):
        self.cycles += 1
        self.io_sum += io_s
        self.io_max = max(self.io_max, io_s)
        self.cpu_sum += cpu_s
        self.cpu_max = max(self.cpu_max, cpu_s)
        self.window_cycles += 1
        if self.window_start is None:
            self.window_start, self.window_cycles = now, 0
        elif now - self.window_start >= 1.0:
            self.rate_hz = self.window_cycles / (now - self.window_start)
            self.window_start, self.window_cycles = now, 0

    def take_window(self):
        """(mean io, max io, mean cpu, max cpu) since the last call; resets the maxima."""
        n = max(1, self.cycles - self._c0)
        out = (self.io_sum - self._io0) / n, self.io_max, (self.cpu_sum - self._cpu0) / n, self.cpu_max
        self._io0, self._cpu0, self._c0 = self.io_sum, self.cpu_sum, self.cycles
        self.io_max = self.cpu_max = 0.0
        return out


class BridgeCore:
    """See the module docstring. ``bus`` is a :class:`servo_bus.ServoBus` (or a test double)."""

    def __init__(self, config: BridgeConfig, bus, clock: Callable[[], float] = time.monotonic,
                 log: Optional[Callable[[str, str], None]] = None):
        self.cfg = config
        self.bus = bus
        self.clock = clock
        self.log = log or (lambda level, msg: None)
        self.joints = config.joints
        self.n = len(self.joints)
        self.names = config.names
        self.current_mask = np.array([j.mode == 'current' for j in self.joints])
        self.position_mask = ~self.current_mask
        self.effort_limit = np.array([j.effort_limit for j in self.joints])
        self.pos_lo = np.array([j.position_limits[0] for j in self.joints])
        self.pos_hi = np.array([j.position_limits[1] for j in self.joints])
        self.vel_limit = np.array([j.velocity_limit for j in self.joints])
        # Goal Current written to current_position joints: their bound, in joint torque (+ after direction)
        self._position_bound = np.array([j.direction * j.effort_limit * (1 - 1e-9) for j in self.joints])
        self._arrived = threading.Condition()
        self.effort_gate = LatestCommand(-self.effort_limit, self.effort_limit, self._arrived)
        self.position_gate = LatestCommand(self.pos_lo, self.pos_hi, self._arrived)
        self.backoff = Backoff(config['reconnect.initial_delay'], config['reconnect.max_delay'],
                               config['reconnect.multiplier'])
        self.timeout = config['command_timeout']
        self.action = config['watchdog_action']
        self.kp, self.kd = config['hold_gains.kp'], config['hold_gains.kd']
        self.fault_after = config['fault_after_errors']
        self.window_errors = config['fault_window.errors']
        self.window_period = config['fault_window.period']
        self._error_times: deque = deque()
        self.read_errors_tolerated = 0
        self.max_attempts = config['reconnect.max_attempts']
        self.wd_units = config.bus_watchdog_units
        self.wd_period = self.wd_units * ct.BUS_WATCHDOG_UNIT_S
        self.arm_id = ''                  # the arm's identity (BridgeConfig.arm_identity; set by the node)
        self._wd_suspect = False          # the servos may have missed instructions: check item 98
        self._wd_counted = set()          # ids whose expiry was counted since the last (re)connect
        self.watchdog_trips = {i: 0 for i in bus.ids}    # Bus Watchdog expiries found, per servo
        self.gap_max = 0.0                # longest silence towards the servos while enabled (s, this window)
        self.gap_max_total = 0.0
        self.torque_off_status = {i: 'confirmed' for i in bus.ids}

        self.state = RECONNECTING
        self.watchdog = WD_IDLE
        self.watchdog_timeouts = 0
        self.t_enabled = -math.inf
        self.hold_q: Optional[np.ndarray] = None
        self.last_fault = ''
        self.fault_count = 0
        self.fault_time = -math.inf
        self.torque_off_failed: Dict[int, str] = {}
        self.failed_attempts = 0          # since the last fault / success (drives the back-off)
        self.failed_attempts_total = 0
        self.next_attempt = -math.inf     # first attempt at once
        self.last_attempt_error = ''
        self.gave_up = False
        self.connected_once = False
        self.reconnects = 0
        self.consecutive_errors = 0
        self.skipped_reads = 0
        self.limit_interventions = 0
        self.readings_published = 0
        self.prompt_writes = 0
        self._latency = [0.0, 0, 0.0]     # sum, count, max of the reading age at command arrival (window)
        self.last_reading: Optional[JointReading] = None
        self.last_stamp = -math.inf
        self.last_command = np.zeros(self.n)
        self.stats = CycleStats()
        self._requests: 'queue.Queue[Request]' = queue.Queue()
        self._shut_down = False
        self._seq_seen = (0, 0)
        self._effort_tag = 0
        self._applied: deque = deque(maxlen=64)   # (time, efforts told, tag) of each effort write, for take_applied

    # ------------------------------------------------------------------ inputs (any thread)
    def submit_effort(self, values, now: Optional[float] = None, tag: int = 0):
        """Efforts in N m, one per joint; `tag` the stamp (ns) of the readings a stamped command answered, reported
        with each write of it (:meth:`take_applied`)."""
        return self._submit(self.effort_gate, values, now, tag)

    def submit_position(self, values, now: Optional[float] = None):
        """Set-points in rad, one per joint (current_position joints), optionally followed by one rate per joint
        (what flexarm's pd_servo sends with command_interface position: the rates are for a plant-side servo; the
        servos' own position loop has no rate input, so they are ignored here)."""
        n = self.position_gate.n
        try:
            if len(values) == 2 * n:
                values = values[:n]
        except TypeError:
            pass
        return self._submit(self.position_gate, values, now)

    def _submit(self, gate, values, now, tag=0):
        t = self.clock() if now is None else now
        ok, reason = gate.submit(values, t, tag)
        r = self.last_reading
        if ok and now is None and r is not None:
            age = time.monotonic() - r.stamp   # age of the newest reading when its answer arrives
            lat = self._latency
            lat[0] += age
            lat[1] += 1
            lat[2] = max(lat[2], age)
        return ok, reason

    def command_seq(self):
        """Counts of valid commands so far (effort, position); see :meth:`wait_for_command`."""
        return self.effort_gate.seq, self.position_gate.seq

    def wait_for_command(self, seq, timeout: float) -> bool:
        """Wait until a valid command newer than *seq* (from :meth:`command_seq`) arrived, at most *timeout* s."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.command_seq() != seq, timeout)

    def write_now(self, now: Optional[float] = None) -> bool:
        """Write the newest command at once, against the last reading (ENABLED only; loop thread).
        With prompt writes a command reaches the servos when it arrives, not one cycle later."""
        now = self.clock() if now is None else now
        if self.state != ENABLED or self.last_reading is None:
            return False
        try:
            ok = self._write(self.last_reading, now)
        except BusError as e:
            self._fault(f'port lost during write: {e}', now)
            return False
        if not ok:
            self._fault('sync write failed', now)
            return False
        if self.state != ENABLED:       # the Bus Watchdog check faulted
            return False
        self.prompt_writes += 1
        return True

    def request(self, kind: str, timeout: float = 5.0) -> Request:
        """Post 'enable' | 'disable' | 'reboot' to the cycle thread and wait for the outcome
        (refused at once once :meth:`shutdown` has run)."""
        req = Request(kind)
        if self._shut_down:
            req.success, req.message = False, f'{kind}: the bridge is shutting down'
            return req
        self._requests.put(req)
        deadline = time.monotonic() + timeout
        while not req.done.wait(0.05):
            if self._shut_down or time.monotonic() >= deadline:
                req.success, req.message = False, (f'{kind}: the bridge is shutting down' if self._shut_down else
                                                   f'{kind}: no answer from the bridge loop within {timeout:g} s')
                break
        return req

    def take_applied(self):
        """[(time, efforts N m (NaN for position-mode joints), tag)] of the effort writes since the last call: when
        each command reached the servos, what they were told (their current resolution) and the tag it came with."""
        out = []
        while self._applied:
            out.append(self._applied.popleft())
        return out

    @property
    def commands_rejected(self):
        return self.effort_gate.rejected + self.position_gate.rejected

    @property
    def commands_clamped(self):
        return self.effort_gate.clamped + self.position_gate.clamped

    # ------------------------------------------------------------------ the cycle (loop thread)
    def cycle(self, now: Optional[float] = None) -> Optional[JointReading]:
        """One bridge cycle. Returns a fresh valid reading to publish, or None."""
        now = self.clock() if now is None else now
        c0 = time.process_time()
        self._serve_requests(now)
        if self.state in (FAULT, RECONNECTING):
            if not self.gave_up and now >= self.next_attempt:
                self._attempt_reconnect(now)
            return None
        t0 = time.perf_counter()
        try:
            reading = self.bus.read_state()
        except BusError as e:
            self._fault(f'port lost: {e}', now)
            return None
        if not reading.ok:
            self._read_error(reading, now)
            return None
        self.consecutive_errors = 0
        if reading.alert:
            bits = {i: b for i, b in reading.hardware_error.items() if b}
            self._fault('hardware error: ' + ', '.join(
                f'servo {i}: {ct.describe_hw_error(b)} (0x{b:02X})' for i, b in sorted(bits.items()))
                if bits else 'hardware error: alert bit in status of servo(s) %s' % reading.faulted_ids, now)
            return self._fresh(reading)
        if not (np.all(np.isfinite(reading.position)) and np.all(np.isfinite(reading.velocity))):
            self._fault('read returned non-finite values', now)
            return None
        if self.state != ENABLED:
            self._take_silence()          # unarmed servos: a silence now says nothing about the next enable
        else:
            try:
                ok = self._write(reading, now)
            except BusError as e:
                self._fault(f'port lost during write: {e}', now)
                return self._fresh(reading)
            if not ok:
                self._fault('sync write failed', now)
        self.stats.record(now, time.perf_counter() - t0, time.process_time() - c0)
        return self._fresh(reading)

    def _take_silence(self) -> float:
        """The longest a servo went without an instruction from the bridge since the last call, up to now (what its
        Bus Watchdog measures: a host stall anywhere in a cycle shows here, whatever it interrupted)."""
        take = getattr(self.bus, 'take_silence', None)
        return take() if take is not None else -math.inf

    def _bus_watchdog_expired(self, reading: JointReading, gap: float, now: float) -> bool:
        """Before each goal write while enabled: did a servo's Bus Watchdog stop it? Checked (one READ of item 98
        per servo) when the servos may have gone without instructions for long - a failed read before, a silence
        (*gap*) longer than half the watchdog time - or the periodic poll saw -1. An expired servo: FAULT."""
        if math.isfinite(gap):
            self.gap_max = max(self.gap_max, gap)
            self.gap_max_total = max(self.gap_max_total, gap)
        polled = any(v == ct.BUS_WATCHDOG_EXPIRED for v in reading.bus_watchdog.values())
        if not (self._wd_suspect or polled or gap > 0.5 * self.wd_period):
            return False
        try:
            values = self.bus.read_bus_watchdog()
        except BusError as e:
            self._fault(f'port lost: {e}', now)
            return True
        expired = sorted(i for i, v in values.items() if v == ct.BUS_WATCHDOG_EXPIRED)
        self._wd_suspect = any(v is None for v in values.values())
        if not expired:
            return False
        for i in expired:
            if i not in self._wd_counted:
                self._wd_counted.add(i)
                self.watchdog_trips[i] += 1
        cause = (f'the bridge sent a servo nothing for {gap:.3f} s' if gap > self.wd_period
                 else 'instructions lost or held up on the link')
        self._fault(f'Bus Watchdog stopped servo(s) {expired}: no instruction reached them for more than '
                    f'{self.wd_period:g} s ({cause}); they refuse goals until it is cleared (reconnect)', now)
        return True

    def _read_error(self, reading: JointReading, now: float):
        """Apply the read-error policy (module docstring) to one failed read."""
        self._wd_suspect = True           # the servos may not have received this cycle's instructions
        self.consecutive_errors += 1
        self.skipped_reads += 1
        self._error_times.append(now)
        times = self._errors_within_window(now)
        if self.consecutive_errors >= self.fault_after:
            self._fault(f'read failed {self.consecutive_errors} time(s) in a row: {reading.error}'
                        if self.fault_after > 1 else f'read failed: {reading.error}', now)
        elif self.window_errors and len(times) >= self.window_errors:
            self._fault(f'{len(times)} failed reads within {self.window_period:g} s (last: {reading.error})', now)
        else:
            self.read_errors_tolerated += 1

    def _errors_within_window(self, now: float) -> deque:
        times = self._error_times
        while times and times[0] <= now - self.window_period:
            times.popleft()
        return times

    def _fresh(self, reading: JointReading) -> Optional[JointReading]:
        """Each reading is handed out once, with a strictly increasing stamp."""
        if reading.stamp <= self.last_stamp:
            return None
        self.last_stamp = reading.stamp
        self.last_reading = reading
        self.readings_published += 1
        return reading

    # ------------------------------------------------------------------ command computation
    def command(self, reading: JointReading, now: float):
        """(efforts N m, positions rad) to write this cycle, after the watchdog and the soft limits."""
        eff, t_e, seq_e, tag = self.effort_gate.get_tagged()
        pos, t_p, seq_p = self.position_gate.get()
        self._effort_tag = tag
        times = []
        if self.current_mask.any():
            times.append(t_e)
        if self.position_mask.any():
            times.append(t_p)
        t_last = max(min(times), self.t_enabled)
        fresh_since_enable = min(times) > self.t_enabled
        if now - t_last > self.timeout:
            if self.watchdog != WD_TIMEOUT:
                self.watchdog = WD_TIMEOUT
                self.watchdog_timeouts += 1
                self.hold_q = reading.position.copy()
                self.log('warn', f'command watchdog: no valid command for {self.timeout:g} s -> {self.action}')
        elif fresh_since_enable:
            if self.watchdog == WD_TIMEOUT:
                self.log('info', 'commands resumed')
            self.watchdog = WD_OK
            self.hold_q = None
        else:
            self.watchdog = WD_WAITING
            if self.hold_q is None:
                self.hold_q = reading.position.copy()
        if self.watchdog == WD_TIMEOUT:
            eff = np.clip(self.kp * (self.hold_q - reading.position) - self.kd * reading.velocity,
                          -self.effort_limit, self.effort_limit)
            pos = self.hold_q.copy()
            self._effort_tag = 0
        elif self.watchdog == WD_WAITING:
            eff = np.zeros(self.n)
            pos = self.hold_q.copy()
            self._effort_tag = 0
        pos = np.where(np.isfinite(pos), pos, reading.position)
        # soft limits, current joints
        q, qd = reading.position, reading.velocity
        block = ((q >= self.pos_hi) & (eff > 0)) | ((q <= self.pos_lo) & (eff < 0)) \
            | ((np.abs(qd) >= self.vel_limit) & (eff * qd > 0))
        block &= self.current_mask
        if block.any():
            self.limit_interventions += int(block.sum())
            eff = np.where(block, 0.0, eff)
            self._effort_tag = 0          # not the command any more
        return eff, pos

    def _write(self, reading: JointReading, now: float) -> bool:
        """Compute and write this cycle's goals (or the command watchdog's torque off). First, whether the servos'
        Bus Watchdog stopped them while the bridge was silent: then FAULT (state leaves ENABLED) and nothing is
        written - goals would be refused, and the watchdog's torque off would clear the expiry unreported."""
        eff, pos = self.command(reading, now)
        if self.wd_units and self._bus_watchdog_expired(reading, self._take_silence(), now):
            return True
        if self.watchdog == WD_TIMEOUT and self.action == 'torque_off':
            failed = self.bus.disable()
            self.state = DISABLED
            self.hold_q = None
            self.last_command[:] = 0.0
            if failed:
                self.torque_off_failed = dict(failed)
                self._fault('watchdog torque-off not confirmed by servo(s) %s' % sorted(failed), now)
            return True
        ok = True
        if self.current_mask.any():
            tau = np.where(self.current_mask, eff, self._position_bound)
            t_write = self.clock()
            ok = self.bus.write_efforts(tau) and ok
            if ok:
                told = getattr(self.bus, 'last_efforts', None)
                told = np.asarray(told(), dtype=float) if told is not None else np.asarray(tau, dtype=float)
                self._applied.append((t_write, np.where(self.current_mask, told, np.nan), self._effort_tag))
        if self.position_mask.any():
            ok = self.bus.write_positions(pos) and ok
        self.last_command = np.where(self.current_mask, eff, pos)
        return ok

    # ------------------------------------------------------------------ faults and recovery
    def _fault(self, reason: str, now: float):
        was = self.state
        self.fault_count += 1
        self.last_fault = reason
        self.fault_time = now
        self.state = FAULT
        self.watchdog = WD_IDLE
        self.hold_q = None
        self.last_command[:] = 0.0
        failed = {}
        try:
            failed = self.bus.disable()
        except BusError as e:  # pragma: no cover - disable() does not raise for single servos
            failed = {i: str(e) for i in self.bus.ids}
        self.torque_off_failed = dict(failed)
        self.failed_attempts = 0
        self.gave_up = False
        self.next_attempt = now + self.backoff.delay(0)
        self.log('error', f'FAULT ({was}): {reason}; {self._torque_off_report(failed, was == ENABLED)}; '
                 f'reconnecting in {self.backoff.delay(0):g} s')

    def _torque_off_report(self, failed: Dict[int, str], torque_was_on: bool) -> str:
        """Per servo: torque off confirmed, or not (and why, and what stops it); sets ``torque_off_status``."""
        off = [i for i in self.bus.ids if i not in failed]
        for i in off:
            self.torque_off_status[i] = 'confirmed'
        parts = [f'torque off confirmed by servo(s) {off}'] if off else []
        by_reason: Dict[str, List[int]] = {}
        for i in sorted(failed):
            by_reason.setdefault(failed[i], []).append(i)
        backstop = ''
        if torque_was_on:
            backstop = (f'its Bus Watchdog stops it {self.wd_period:g} s after the last instruction it received'
                        if self.wd_units else 'no Bus Watchdog configured: it keeps its last goal until power-off')
        for why, ids in by_reason.items():
            parts.append(f'torque off NOT confirmed by servo(s) {ids} ({why})' + (f' - {backstop}' if backstop else ''))
            for i in ids:
                self.torque_off_status[i] = f'NOT confirmed: {why}' + (f'; {backstop}' if backstop else '')
        return '; '.join(parts)

    def _attempt_reconnect(self, now: float):
        self.state = RECONNECTING
        bus = self.bus
        try:
            bus.reconnect()
            found = bus.ping_all(require=True)
            want = bus.model.model_number
            wrong = {i: m for i, m in found.items() if m != want}
            if wrong:
                raise BusError('servo model mismatch (configured %s = %d): %s'
                               % (bus.model.name, want, wrong))
            hw = bus.read_hardware_errors()
            bad = {i: b for i, b in hw.items() if b}
            if bad:
                raise BusError('hardware error ' + ', '.join(
                    f'servo {i}: {ct.describe_hw_error(b)} (0x{b:02X})' for i, b in sorted(bad.items()))
                    + ' - reboot the servo (~/reboot) or power-cycle it')
            bus.configure()
            r = bus.read_state()
            if not r.ok:
                raise BusError('first read failed: ' + r.error)
            if r.alert:
                raise BusError('hardware alert in first read')
        except BusError as e:
            self.failed_attempts += 1
            self.failed_attempts_total += 1
            self.last_attempt_error = str(e)
            try:
                bus.close()
            except Exception:  # noqa: BLE001
                pass
            if self.max_attempts and self.failed_attempts >= self.max_attempts:
                self.gave_up = True
                self.log('error', f'reconnect: giving up after {self.failed_attempts} attempts: {e}')
                return False
            delay = self.backoff.delay(self.failed_attempts)
            self.next_attempt = self.clock() + delay
            self.log('warn', f'reconnect attempt {self.failed_attempts} failed: {e}; next in {delay:g} s')
            return False
        self.state = DISABLED
        if self.connected_once:
            self.reconnects += 1
        self.connected_once = True
        self.failed_attempts = 0
        self.consecutive_errors = 0
        self._error_times.clear()
        self.last_attempt_error = ''
        self.last_stamp = max(self.last_stamp, r.stamp)   # the probe read is not published
        cleared = list(getattr(bus, 'watchdog_cleared', []))
        for i in cleared:
            if i not in self._wd_counted:
                self.watchdog_trips[i] += 1
        self._wd_counted = set()
        self._wd_suspect = False
        unconfirmed = sorted(self.torque_off_failed)
        self.torque_off_failed = {}
        for i in bus.ids:          # configure() wrote Torque Enable 0 to each servo and had its status back
            self.torque_off_status[i] = 'confirmed' + (' (on reconnect)' if i in unconfirmed else '')
        msg = f'connected to {len(bus.ids)} servo(s) on {bus.config.port}; torque off confirmed by every servo'
        if unconfirmed:
            msg += f' (servo(s) {unconfirmed} had not confirmed it at the fault)'
        if cleared:
            msg += (f'; servo(s) {cleared} had been stopped by their Bus Watchdog (no instruction reached them within '
                    'its time' + (f', {self.wd_period:g} s' if self.wd_units else '') + '): cleared')
        self.log('warn' if cleared or unconfirmed else 'info', msg + '; call ~/enable')
        return True

    # ------------------------------------------------------------------ service requests
    def _serve_requests(self, now: float):
        while True:
            try:
                req = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                req.success, req.message = getattr(self, '_do_' + req.kind)(now)
            except BusError as e:
                detail = getattr(e, 'failed', None)
                req.success, req.message = False, f'{req.kind} failed: {e}' + (f' {detail}' if detail else '')
                self._fault(f'{req.kind} failed: {e}', now)
            except Exception as e:  # noqa: BLE001 - never let a request kill the loop
                req.success, req.message = False, f'{req.kind} failed: {e!r}'
            req.done.set()

    def _do_enable(self, now):
        if self.state == ENABLED:
            return True, 'already enabled'
        if self.state != DISABLED:
            why = self.last_fault or self.last_attempt_error or 'not connected yet'
            return False, f'cannot enable in state {self.state}: {why}'
        self.bus.enable()          # ServoCommError (a BusError) -> fault, all servos disabled again
        self.state = ENABLED
        self.t_enabled = now
        self.watchdog = WD_WAITING
        self.hold_q = None
        self.log('info', 'torque enabled')
        return True, (f'torque enabled on {len(self.bus.ids)} servo(s); command watchdog {self.timeout:g} s; '
                      + (f'Bus Watchdog {self.wd_period:g} s armed' if self.wd_units else 'no Bus Watchdog'))

    def _do_disable(self, now):
        was = self.state
        if self.state in (ENABLED, DISABLED):
            failed = self.bus.disable()
            self.state = DISABLED
            self.watchdog = WD_IDLE
            self.hold_q = None
            if failed:
                self.torque_off_failed = dict(failed)
                self._fault('torque off not confirmed by servo(s) %s' % sorted(failed), now)
                return False, 'torque off not confirmed by servo(s) %s' % sorted(failed)
            return True, 'torque disabled' if was == ENABLED else 'already disabled'
        return True, f'state {self.state}: torque was already switched off at the fault'

    def _do_reboot(self, now):
        if self.state == ENABLED:
            return False, 'disable first (reboot switches torque off)'
        bus = self.bus
        if not bus.is_open:
            bus.reconnect()
        hw = bus.read_hardware_errors()
        bad = [i for i, b in hw.items() if b]
        if not bad:
            return True, 'no servo reports a hardware error'
        failed = {}
        for i in bad:
            err = bus.reboot(i)
            if err:
                failed[i] = err
        if self.state in (FAULT, RECONNECTING):
            self.next_attempt = now + 0.5   # servos need a moment after REBOOT
            self.failed_attempts = 0
            self.gave_up = False
        if failed:
            return False, f'reboot failed for {failed}'
        return True, f'rebooted servo(s) {bad}'

    # ------------------------------------------------------------------ reporting
    def diagnostics(self) -> dict:
        """Bridge-level values for /diagnostics (plain types)."""
        c = self.bus.counters
        io_mean, io_max, cpu_mean, cpu_max = self.stats.take_window()
        lat, self._latency = self._latency, [0.0, 0, 0.0]
        now = self.clock()
        gap_max, self.gap_max = self.gap_max, 0.0
        v = {
            'state': self.state,
            'arm_id': self.arm_id,
            'bus_watchdog_s': self.wd_period,
            'bus_watchdog_trips': sum(self.watchdog_trips.values()),
            'instruction_gap_max_ms': round(1e3 * gap_max, 3),
            'instruction_gap_max_total_ms': round(1e3 * self.gap_max_total, 3),
            'watchdog': self.watchdog,
            'watchdog_action': self.action,
            'watchdog_timeouts': self.watchdog_timeouts,
            'loop_rate_hz': 1.0 / self.cfg_period if self.cfg_period else 0.0,
            'achieved_rate_hz': round(self.stats.rate_hz, 1),
            'cycle_io_mean_ms': round(1e3 * io_mean, 3),
            'cycle_io_max_ms': round(1e3 * io_max, 3),
            'cycle_cpu_mean_ms': round(1e3 * cpu_mean, 3),
            'cycle_cpu_max_ms': round(1e3 * cpu_max, 3),
            'overruns': self.stats.overruns,
            'reads_ok': c.reads_ok,
            'read_failures': c.read_failures,
            'crc_errors': c.crc_errors,
            'write_failures': c.write_failures,
            'port_errors': c.port_errors,
            'hardware_alerts': c.hw_alerts,
            'stale_replies': c.stale_replies,
            'bus_resyncs': c.resyncs,
            'skipped_reads': self.skipped_reads,
            'read_errors_tolerated': self.read_errors_tolerated,
            'consecutive_read_errors': self.consecutive_errors,
            'read_errors_in_window': sum(1 for t in list(self._error_times) if t > now - self.window_period),
            'readings_published': self.readings_published,
            'prompt_writes': self.prompt_writes,
            'command_latency_mean_ms': round(1e3 * lat[0] / lat[1], 3) if lat[1] else -1.0,
            'command_latency_max_ms': round(1e3 * lat[2], 3) if lat[1] else -1.0,
            'commands_accepted': self.effort_gate.accepted + self.position_gate.accepted,
            'commands_rejected': self.commands_rejected,
            'commands_clamped': self.commands_clamped,
            'bus_clamped': c.clamped,
            'limit_interventions': self.limit_interventions,
            'last_reject_reason': max(self.effort_gate, self.position_gate,
                                      key=lambda g: g.last_reject_order).last_reject_reason,
            'faults': self.fault_count,
            'last_fault': self.last_fault,
            'last_fault_age_s': round(now - self.fault_time, 3) if self.fault_count else -1.0,
            'torque_off_unconfirmed': ' '.join(map(str, sorted(self.torque_off_failed))),
            'reconnects': self.reconnects,
            'reconnect_failed_attempts': self.failed_attempts,
            'reconnect_failed_attempts_total': self.failed_attempts_total,
            'reconnect_last_error': self.last_attempt_error,
            'reconnect_next_in_s': round(max(0.0, self.next_attempt - now), 3)
            if self.state in (FAULT, RECONNECTING) and not self.gave_up else -1.0,
        }
        return v

    cfg_period = 0.0   # set by the loop owner (1 / loop_rate) for reporting

    def level(self):
        """(level 'ok'|'warn'|'error', message) summarising the bridge."""
        if self.state in (FAULT, RECONNECTING):
            if not self.connected_once and not self.fault_count:
                return 'error' if self.failed_attempts else 'warn', \
                    'connecting: ' + (self.last_attempt_error or 'first attempt') \
                    + (' (gave up)' if self.gave_up else '')
            return 'error', f'{self.state}: {self.last_fault or self.last_attempt_error}' \
                + (' (gave up)' if self.gave_up else '')
        if self.state == ENABLED and self.watchdog == WD_TIMEOUT:
            return 'warn', 'enabled, command watchdog: holding position'
        if self.state == DISABLED and self.watchdog == WD_TIMEOUT:
            return 'warn', 'command watchdog fired: torque off (call ~/enable)'
        if self.state == ENABLED:
            return 'ok', 'enabled' + (' (waiting for the first command)' if self.watchdog == WD_WAITING else '')
        return 'ok', 'torque disabled' + (f' (recovered from: {self.last_fault})' if self.fault_count else '')

    def servo_status(self) -> List[dict]:
        """Per-servo values from the latest valid reading (NaN if none yet)."""
        r = self.last_reading
        out = []
        for k, j in enumerate(self.joints):
            bits = self.bus.hardware_error.get(j.servo_id, 0) if hasattr(self.bus, 'hardware_error') else 0
            out.append({
                'joint': j.name, 'servo_id': j.servo_id, 'mode': j.mode,
                'temperature_c': float(r.temperature[k]) if r is not None else float('nan'),
                'voltage_v': float(r.voltage[k]) if r is not None else float('nan'),
                'hardware_error': int(bits),
                'hardware_error_text': ct.describe_hw_error(bits),
                'position_rad': float(r.position[k]) if r is not None else float('nan'),
                'command': float(self.last_command[k]),
                'torque_off_unconfirmed': j.servo_id in self.torque_off_failed,
                'torque_off': self.torque_off_status.get(j.servo_id, ''),
                'bus_watchdog': int(getattr(self.bus, 'bus_watchdog', {}).get(j.servo_id, 0)),
                'bus_watchdog_trips': self.watchdog_trips.get(j.servo_id, 0),
            })
        return out

    def shutdown(self):
        """Torque off and close the port; refuse further requests. From the thread that runs cycle()
        (or after it ended); a second call does nothing."""
        if self._shut_down:
            return
        self._shut_down = True
        try:
            if self.bus.is_open:
                self.bus.disable()
        except BusError:
            pass
        finally:
            self.bus.close()
        self.state = DISABLED
        while True:                       # requests nobody will serve any more
            try:
                req = self._requests.get_nowait()
            except queue.Empty:
                break
            req.success, req.message = False, f'{req.kind}: the bridge is shutting down'
            req.done.set()
