"""Servo bus for Dynamixel X-series servos (Protocol 2.0): protocol.py frames the requests and parses the replies,
serial_link.py (pyserial) carries them.

Pure Python (no ROS).  The ROS ``hardware_bridge`` node wraps :class:`ServoBus`:

* :meth:`ServoBus.open` / :meth:`ServoBus.close` / :meth:`ServoBus.reconnect`
* :meth:`ServoBus.ping_all`, :meth:`ServoBus.configure`, :meth:`ServoBus.enable`,
  :meth:`ServoBus.disable`
* :meth:`ServoBus.read_state` -> :class:`JointReading` (one SYNC_READ of the
  contiguous block 126..146: current, velocity, position, voltage, temperature)
* :meth:`ServoBus.write_efforts` (one SYNC_WRITE of Goal Current) and
  :meth:`ServoBus.write_positions` (Goal Position, current-based position mode)

Joint-side conventions (per :class:`JointServoConfig`)::

    q      = direction * theta_servo / gear_ratio + zero_offset
    qdot   = direction * omega_servo / gear_ratio
    tau    = direction * i_motor * torque_constant * gear_ratio
    i_cmd  = direction * tau / (torque_constant * gear_ratio)   (clamped to current_limit)

``theta_servo`` / ``omega_servo`` / ``i_motor`` are the servo's own output-shaft
readings; ``gear_ratio`` is an *external* reduction between horn and joint
(1.0 if the horn drives the link directly); ``zero_offset`` is the joint angle
when the servo reports position 0.

Communication failures never produce valid-looking data: a reading is either
complete (every servo answered with a good CRC) and ``ok``, or ``ok=False``
with all numeric fields NaN.  A lost port (unplugged adapter, closed pty)
raises :class:`PortLostError`; :meth:`ServoBus.reconnect` re-opens it.

Reply matching (a late reply is never the answer to a later request).  The link
flushes the receive buffer before each request, but a reply that comes after
its request timed out can arrive after that flush, i.e. while a *later*
request waits, and a status packet from the right ID is not enough (this
is how a sync-read reply was once read as a ping answer, when the vendor SDK read the replies: "model mismatch
{1: 3233}").  So every exchange here is strict, and the stream is
re-synchronised after any failure:

* a reply is accepted only from the addressed servo and with exactly the
  parameter count of the request (PING 3, READ n, WRITE/REBOOT 0); anything
  else is a stale reply, counted (``stale_replies``) and skipped;
* after any failed exchange (timeout, corrupt reply) and on every (re)open,
  the next exchange is preceded by a *barrier*: a READ of the model-number
  area whose length (5..16 bytes, rotating) no other request uses, and all
  bytes up to its reply are discarded.  Replies come back in request order,
  so once the barrier's reply is in, nothing older can follow.  Until a
  barrier is answered every exchange fails (``resyncs`` counts the answered
  ones).

Replies are read here, not by the vendor SDK's ``rxPacket`` (the SDK is not used at all: protocol.py builds,
stuffs and CRCs every request, serial_link.py sends it): waiting blocks in ``select`` until a
byte arrives or the deadline, where the SDK busy-polls a ``timeout=0`` port
(a core busy while the servos - or the emulator process, on a 2-core
machine - need it to answer); and the deadline is judged *before* each read,
so whatever arrived by then is read even when this thread ran late.  The SDK
checks it *after* a read that found nothing: a thread that waited for the
GIL (the node's executor thread) or for the CPU across the deadline declared
a timeout with the reply already in the buffer - ~0.7 false timeouts per
second at 250 Hz in the ROS node on a loaded 2-core machine, none without
the executor thread.
"""
from __future__ import annotations

import collections
import errno
import math
import os
import select
import termios
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import control_table as ct
from .joint import JointServoConfig  # noqa: F401  (the bus's joint shape; re-exported)
from . import protocol as p
from .serial_link import BAUD_RATES, COMM_RX_CORRUPT, COMM_RX_TIMEOUT, COMM_SUCCESS, SerialLink, result_text


_STATUS_OVERHEAD = 11             # header(4) id len(2) inst err crc(2)
INST_PING, INST_READ, INST_WRITE, INST_REBOOT = 0x01, 0x02, 0x03, 0x08
BROADCAST_ID = 0xFE

# barrier READ lengths: never the reply length of another request (0, 1, 2, 3 = PING, 4, 21 = state block)
BARRIER_LENGTHS = tuple(range(5, 17))
LATENCY_TIMER_MS = 16.0           # a USB adapter's latency timer (the vendor SDK's figure; its timeout: 2x + 2 ms)

# Exceptions that mean "the serial device is gone" (pyserial raises
# SerialException(OSError); tcflush raises termios.error).
_PORT_EXC = (OSError, termios.error)


class BusError(Exception):
    """Base class of servo bus errors."""


class PortLostError(BusError):
    """The serial port failed (device unplugged / pty closed)."""


class PortNotOpenError(BusError):
    """An operation needed an open port."""


class ServoCommError(BusError):
    """One or more servos did not answer / refused a command."""

    def __init__(self, message: str, failed: Optional[Dict[int, str]] = None):
        super().__init__(message)
        self.failed: Dict[int, str] = dict(failed or {})


@dataclass
class ServoBusConfig:
    port: str
    baudrate: int = 1000000
    joints: List[JointServoConfig] = field(default_factory=list)
    model: object = "XM430-W350"          # name, model number or control_table.ModelUnits
    read_timeout: Optional[float] = None  # s; None = wire time + 2 USB latency timers + 2 ms (~34 ms)
    hw_status_period: int = ct.HARDWARE_STATUS_PERIOD   # sync-read Hardware Error Status + Bus Watchdog every N
    #                                                     reads (0 = only a servo's alert bit makes a read)
    bus_watchdog: int = 0                 # Bus Watchdog (98) armed at enable, x 20 ms (0 = not used); see enable()

    def __post_init__(self):
        if self.baudrate not in BAUD_RATES:
            raise ValueError("unsupported baud rate %r (one of %s)"
                             % (self.baudrate, ", ".join(map(str, BAUD_RATES))))
        ids = [j.servo_id for j in self.joints]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate servo ids: %r" % ids)
        if not 0 <= self.bus_watchdog <= ct.BUS_WATCHDOG_MAX:
            raise ValueError("bus_watchdog must be 0..%d (x 20 ms)" % ct.BUS_WATCHDOG_MAX)
        names = [j.name for j in self.joints]
        if len(set(names)) != len(names):
            raise ValueError("duplicate joint names: %r" % names)
        self.model = ct.get_model(self.model)

    @classmethod
    def from_dict(cls, d: dict) -> "ServoBusConfig":
        """Build from plain data (e.g. a YAML/ROS parameter dict); joints are dicts."""
        d = dict(d)
        js = []
        for j in d.pop("joints", []):
            j = dict(j)
            if "position_limits" in j:
                j["position_limits"] = tuple(float(x) for x in j["position_limits"])
            js.append(JointServoConfig(**j))
        return cls(joints=js, **d)


@dataclass
class JointReading:
    """One state sample. If ``ok`` is False every numeric field is NaN."""
    names: List[str]
    position: np.ndarray          # rad (joint side)
    velocity: np.ndarray          # rad/s
    effort: np.ndarray            # N*m
    current: np.ndarray           # A (motor side, signed as reported)
    voltage: np.ndarray           # V per servo
    temperature: np.ndarray       # degC per servo
    stamp: float                  # time.monotonic() when the last reply byte was read
    ok: bool
    error: str = ""
    comm_result: int = 0          # COMM_* code of the failure (serial_link; 0 on success)
    failed_ids: List[int] = field(default_factory=list)
    status_errors: Dict[int, int] = field(default_factory=dict)   # status packet error byte per id
    hardware_error: Dict[int, int] = field(default_factory=dict)  # Hardware Error Status (70) per id
    duration: float = 0.0         # request -> last reply (s)
    bus_watchdog: Dict[int, int] = field(default_factory=dict)    # Bus Watchdog (98) per id, as last polled

    @property
    def alert(self) -> bool:
        """Any servo raised the status alert bit or reports a hardware error."""
        return any(e & 0x80 for e in self.status_errors.values()) or \
            any(self.hardware_error.values())

    @property
    def faulted_ids(self) -> List[int]:
        ids = {i for i, e in self.status_errors.items() if e & 0x80}
        ids |= {i for i, b in self.hardware_error.items() if b}
        return sorted(ids)


@dataclass
class BusCounters:
    reads_ok: int = 0
    read_failures: int = 0      # timeouts / missing replies
    crc_errors: int = 0         # corrupt replies (bad CRC, truncated, malformed)
    write_failures: int = 0
    clamped: int = 0            # per-joint clamping events (effort or position)
    nonfinite: int = 0          # NaN/inf commands replaced by a safe value
    hw_alerts: int = 0          # readings with the alert bit set
    port_errors: int = 0
    reconnects: int = 0
    stale_replies: int = 0      # status packets that answered an earlier request (skipped)
    resyncs: int = 0            # barriers answered after a failure or a (re)open


def _per_servo(failed: Dict[int, str]) -> str:
    """'servo(s) [1, 2]: reason; servo(s) [3]: other reason' (servos with the same reason together)."""
    by_reason: Dict[str, List[int]] = {}
    for sid in sorted(failed):
        by_reason.setdefault(failed[sid], []).append(sid)
    return "; ".join("servo(s) %s: %s" % (ids, why) for why, ids in by_reason.items())


# --- pure unit conversions -----------------------------------------------------------
def servo_counts_to_joint_position(counts, j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL):
    return j.direction * np.asarray(counts, float) * m.rad_per_count / j.gear_ratio + j.zero_offset


def joint_position_to_servo_counts(q, j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL) -> int:
    return int(round(j.direction * (q - j.zero_offset) * j.gear_ratio / m.rad_per_count))


def servo_velocity_to_joint(raw, j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL):
    return j.direction * np.asarray(raw, float) * m.rad_s_per_lsb / j.gear_ratio


def joint_velocity_to_servo_raw(qd, j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL) -> int:
    return int(round(j.direction * qd * j.gear_ratio / m.rad_s_per_lsb))


def current_to_effort(current_a, j: JointServoConfig):
    return j.direction * np.asarray(current_a, float) * j.torque_constant * j.gear_ratio


def effort_to_current(tau, j: JointServoConfig):
    return j.direction * np.asarray(tau, float) / (j.torque_constant * j.gear_ratio)


def current_limit_raw(j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL) -> int:
    """Current limit in LSB, never above the model's maximum, rounded down."""
    return min(int(math.floor(j.current_limit / m.current_amp_per_lsb + 1e-9)), m.current_limit_max_lsb)


def clamp_current_raw(tau: float, j: JointServoConfig, m: ct.ModelUnits = ct.DEFAULT_MODEL) -> Tuple[int, bool]:
    """Joint torque -> Goal Current LSB, clamped to the joint's current limit."""
    lim = current_limit_raw(j, m)
    raw = float(effort_to_current(tau, j)) / m.current_amp_per_lsb
    if raw > lim:
        return lim, True
    if raw < -lim:
        return -lim, True
    return int(round(raw)), False


# --- the bus -----------------------------------------------------------------------------------
class ServoBus:
    def __init__(self, config: ServoBusConfig):
        if not config.joints:
            raise ValueError("ServoBusConfig.joints is empty")
        self.config = config
        self.model: ct.ModelUnits = config.model
        self.joints = list(config.joints)
        self.ids = [j.servo_id for j in self.joints]
        self.names = [j.name for j in self.joints]
        self.counters = BusCounters()
        self.hardware_error: Dict[int, int] = {i: 0 for i in self.ids}
        self.firmware: Dict[int, Optional[int]] = {i: None for i in self.ids}      # from the PING replies
        self.bus_watchdog: Dict[int, int] = {}       # Bus Watchdog (98) per id as last read (-1: it had expired)
        self.watchdog_cleared: List[int] = []        # ids found expired (-1) by the last configure(), then cleared
        self.last_tx: Dict[int, float] = {i: -math.inf for i in self.ids}   # last instruction sent to each servo
        self._silence = 0.0                          # longest silence that ended since take_silence()
        self.last_command_current = np.zeros(len(self.joints))
        self.port: Optional[SerialLink] = None
        ids = bytes(self.ids)
        self._sync_read_state = p.read_params(ct.STATE_BLOCK_START, ct.STATE_BLOCK_LEN) + ids     # SYNC_READ params
        self._sync_hw = p.read_params(ct.SAFETY_BLOCK_START, ct.SAFETY_BLOCK_LEN) + ids
        self._reads_since_hw_poll = 0
        self._lost = False
        self._desync = True          # a barrier precedes the first exchange after open and after any failure
        self._barrier_k = 0
        self._parser = p.PacketParser()
        self._ready: collections.deque = collections.deque()   # parsed replies (or errors) not yet taken
        self._deadline = 0.0

    # -- port handling ---------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.port is not None and self.port.is_open and not self._lost

    def open(self) -> None:
        try:
            port = SerialLink(self.config.port, self.config.baudrate)
        except (ValueError, *_PORT_EXC) as exc:
            self.counters.port_errors += 1
            raise PortLostError("cannot open %s: %s" % (self.config.port, exc)) from exc
        self.port = port
        self._lost = False
        self._desync = True

    def close(self) -> None:
        port, self.port = self.port, None
        if port is not None:
            try:
                port.close()
            except Exception:  # noqa: BLE001 - a dead port may fail to close
                pass

    def reconnect(self, port: Optional[str] = None) -> None:
        """Close and re-open the port (optionally a new path). Raises PortLostError."""
        self.close()
        if port is not None:
            self.config.port = port
        self.open()
        self.counters.reconnects += 1

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()

    def _require_open(self):
        if self.port is None:
            raise PortNotOpenError("port %s is not open" % self.config.port)
        if self._lost:
            raise PortLostError("port %s was lost; call reconnect()" % self.config.port)

    def _port_failed(self, exc: BaseException, what: str):
        self.counters.port_errors += 1
        self._lost = True
        raise PortLostError("%s on %s failed: %s" % (what, self.config.port, exc)) from exc

    # -- exchanges (strict reply matching, barrier after failures; see the module docstring) --------
    def _set_reply_timeout(self, reply_bytes: int) -> None:
        """Deadline for the replies of the request just sent: read_timeout, or the vendor SDK's rule (wire time
        of the replies + 2 latency timers + 2 ms)."""
        if self.config.read_timeout is not None:
            timeout = self.config.read_timeout
        else:
            timeout = 1e-3 * (self.port.byte_ms * reply_bytes + 2.0 * LATENCY_TIMER_MS + 2.0)
        self._deadline = time.monotonic() + timeout

    def _tx(self, packet: bytes) -> int:
        """Send one request (the link flushes the receive buffer first); forget parsed bytes."""
        res = self.port.send(packet)
        self._parser.reset()
        self._ready.clear()
        return res

    def _send(self, sid: int, instruction: int, params: Sequence[int] = ()) -> int:
        res = self._tx(p.build_instruction(sid, instruction, bytes(params)))
        if res == COMM_SUCCESS:
            self._sent(self.ids if sid == BROADCAST_ID else (sid,))
        return res

    def _sent(self, ids) -> None:
        """Instructions to *ids* just went out (each servo's Bus Watchdog restarts when it gets one); the silence
        that ended is kept for :meth:`take_silence`."""
        now = time.monotonic()
        for sid in ids:
            if sid in self.last_tx:
                if math.isfinite(self.last_tx[sid]):
                    self._silence = max(self._silence, now - self.last_tx[sid])
                self.last_tx[sid] = now

    def take_silence(self) -> float:
        """The longest a servo went without an instruction since the last call: the intervals that ended, and
        the one still running (what its Bus Watchdog measures; a host stall anywhere in a cycle shows here)."""
        now = time.monotonic()
        s = max(self._silence, now - self.last_tx_all)
        self._silence = 0.0
        return s

    @property
    def last_tx_all(self) -> float:
        """When the servo that was addressed longest ago got its last instruction (time.monotonic())."""
        return min(self.last_tx.values())

    def _next_status(self):
        """The next status packet that arrived by the deadline: (Packet, COMM_SUCCESS), (None,
        COMM_RX_CORRUPT) for a bad one (CRC, truncated, or cut off by the deadline), (None, COMM_RX_TIMEOUT).

        The deadline is judged before each read: bytes that arrived by then are read even if this
        thread was late (GIL, scheduler) - the SDK's rxPacket declares a timeout in that case.
        """
        fd = self.port.fileno()
        while True:
            while self._ready:
                item = self._ready.popleft()
                if isinstance(item, p.ProtocolError):
                    return None, COMM_RX_CORRUPT
                if item.is_status:
                    return item, COMM_SUCCESS
            remaining = self._deadline - time.monotonic()
            readable, _, _ = select.select([fd], [], [], max(remaining, 0.0))
            if readable:
                data = os.read(fd, 4096)
                if not data:
                    raise OSError(errno.EIO, "device disconnected (end of file)")
                self._ready.extend(self._parser.feed_items(data))
            elif remaining <= 0.0:
                return None, COMM_RX_CORRUPT if self._parser.pending else COMM_RX_TIMEOUT

    def _receive(self, sid: int, n_params: int):
        """Next status packet from *sid* with *n_params* parameters before the deadline.

        Returns (packet, COMM result). Packets from other ids or with another length answer an
        earlier request: skipped and counted. An error status (no data) of the addressed servo is
        accepted as its answer.
        """
        while True:
            pkt, res = self._next_status()
            if res != COMM_SUCCESS:
                return None, res
            n = len(pkt.params)
            if pkt.servo_id == sid and (n == n_params or (n == 0 and pkt.error & 0x7F)):
                return pkt, res
            self.counters.stale_replies += 1

    def _resync(self) -> int:
        """Barrier: a READ whose reply length nothing else uses; everything before its reply is dropped.

        Tried on each servo in turn (a missing servo must not hide the others). Returns COMM_SUCCESS,
        or the failure of the last try (COMM_RX_TIMEOUT: nobody answered; COMM_RX_CORRUPT: bad replies).
        """
        res = COMM_RX_TIMEOUT
        for sid in self.ids:
            n = BARRIER_LENGTHS[self._barrier_k % len(BARRIER_LENGTHS)]
            self._barrier_k += 1
            res = self._send(sid, INST_READ, (ct.MODEL_NUMBER.address & 0xFF, ct.MODEL_NUMBER.address >> 8,
                                              n, 0))
            if res != COMM_SUCCESS:
                continue
            self._set_reply_timeout(_STATUS_OVERHEAD + n)
            while True:
                pkt, res = self._next_status()
                if res != COMM_SUCCESS:
                    break
                if pkt.servo_id == sid and len(pkt.params) == n:
                    self._desync = False
                    self.counters.resyncs += 1
                    return COMM_SUCCESS
                self.counters.stale_replies += 1
        return res

    def _exchange(self, sid: int, instruction: int, params: Sequence[int], n_params: int, what: str):
        """One request -> status exchange: (reply parameters or None, COMM result, status error byte)."""
        try:
            if self._desync:
                res = self._resync()
                if res != COMM_SUCCESS:
                    return None, res, 0
            res = self._send(sid, instruction, params)
            if res != COMM_SUCCESS:
                self._desync = True
                return None, res, 0
            self._set_reply_timeout(_STATUS_OVERHEAD + n_params)
            pkt, res = self._receive(sid, n_params)
        except _PORT_EXC as exc:
            self._port_failed(exc, what)
        if res != COMM_SUCCESS:
            self._desync = True
            return None, res, 0
        if pkt.error & 0x7F:
            self._desync = True      # an error status may answer an earlier request: re-sync before the next
        return pkt.params, COMM_SUCCESS, pkt.error

    def _result_text(self, res: int) -> str:
        return result_text(res)

    # -- single-servo helpers -------------------------------------------------------
    def _write(self, sid: int, item: ct.Item, value: int) -> Optional[str]:
        """Write with status; returns None on success or an error text."""
        data = list(ct.encode(item, value))
        _, res, err = self._exchange(sid, INST_WRITE, [item.address & 0xFF, item.address >> 8] + data, 0,
                                     "write")
        if res != COMM_SUCCESS:
            return self._result_text(res)
        if err & 0x7F:
            return p.describe_error(err & 0x7F)
        if err & 0x80:
            self.counters.hw_alerts += 1
        return None

    def _read(self, sid: int, item: ct.Item) -> Tuple[Optional[int], str]:
        data, res, err = self._exchange(sid, INST_READ, [item.address & 0xFF, item.address >> 8,
                                                         item.size & 0xFF, item.size >> 8], item.size, "read")
        if res != COMM_SUCCESS:
            return None, self._result_text(res)
        if err & 0x7F or len(data) != item.size:
            return None, p.describe_error(err & 0x7F) if err & 0x7F else "short reply"
        return ct.decode(item, bytes(data)), ""

    # -- setup ----------------------------------------------------------------------------
    def ping_all(self, require: bool = False) -> Dict[int, Optional[int]]:
        """Ping every servo: {id: model number or None if no answer}."""
        self._require_open()
        out: Dict[int, Optional[int]] = {}
        for sid in self.ids:
            data, res, err = self._exchange(sid, INST_PING, (), 3, "ping")
            ok = res == COMM_SUCCESS and not err & 0x7F
            out[sid] = data[0] | (data[1] << 8) if ok else None
            if ok:
                self.firmware[sid] = data[2]
        missing = [i for i, m in out.items() if m is None]
        if require and missing:
            raise ServoCommError("servos %s did not answer a ping" % missing,
                                 {i: "no answer" for i in missing})
        return out

    def _has_bus_watchdog(self, sid: int) -> bool:
        fw = self.firmware.get(sid)
        return fw is None or fw >= ct.BUS_WATCHDOG_MIN_FIRMWARE

    def configure(self) -> None:
        """Torque off, Bus Watchdog cleared, operating mode, Current Limit (and goal current) on every servo.

        A servo whose Bus Watchdog had expired (98 = -1: it stopped itself because no instruction came) refuses
        Goal writes until 0 is written to 98 (e-Manual): it is listed in ``watchdog_cleared`` and cleared here.
        With ``bus_watchdog`` configured, a servo whose firmware predates the Bus Watchdog (< v38) fails.
        Raises ServoCommError naming the servos that failed (after trying all).
        """
        self._require_open()
        m = self.model
        failed: Dict[int, str] = {}
        self.watchdog_cleared = []
        for j in self.joints:
            sid = j.servo_id
            if not self._has_bus_watchdog(sid):
                if self.config.bus_watchdog:
                    failed[sid] = ("firmware v%d has no Bus Watchdog (98, firmware v%d and later): update it "
                                   "(DYNAMIXEL Wizard 2.0) or set bus_watchdog: 0.0"
                                   % (self.firmware[sid], ct.BUS_WATCHDOG_MIN_FIRMWARE))
                continue
            err = self._write(sid, ct.TORQUE_ENABLE, 0)
            value, rerr = self._read(sid, ct.BUS_WATCHDOG) if not err else (None, err)
            if value is None:
                failed[sid] = "%s: %s" % (ct.BUS_WATCHDOG if not err else ct.TORQUE_ENABLE, rerr)
                continue
            if value == ct.BUS_WATCHDOG_EXPIRED:
                self.watchdog_cleared.append(sid)
            err = self._write(sid, ct.BUS_WATCHDOG, 0)          # clears an expiry; armed again by enable()
            if err:
                failed[sid] = "%s <- 0: %s" % (ct.BUS_WATCHDOG, err)
                continue
            self.bus_watchdog[sid] = 0
        for j in self.joints:
            if j.servo_id in failed:
                continue
            lim = current_limit_raw(j, m)
            steps = [
                (ct.TORQUE_ENABLE, 0),
                (ct.OPERATING_MODE, j.mode_value),
                (ct.CURRENT_LIMIT, lim),
                (ct.VELOCITY_LIMIT, min(abs(joint_velocity_to_servo_raw(j.velocity_limit, j, m)), 32767)),
                # current mode: start from zero torque; current-based position: Goal Current is the limit
                (ct.GOAL_CURRENT, 0 if j.mode == "current" else lim),
            ]
            for item, value in steps:
                err = self._write(j.servo_id, item, value)
                if err:
                    failed[j.servo_id] = "%s <- %d: %s" % (item, value, err)
                    break
        if failed:
            raise ServoCommError("configure failed: " + _per_servo(failed), failed)

    def enable(self) -> None:
        """Torque on for all servos, each with its Bus Watchdog armed; on any failure all servos are disabled again.

        In three passes over the servos (e-Manual, Bus Watchdog(98): Goal values are refused while it reads -1,
        and it is monitored only with torque on): (1) 98 <- 0 (clears an expiry) and a safe goal - zero current,
        or the present position for current_position joints; (2) 98 <- ``bus_watchdog`` (armed; not yet monitored);
        (3) torque on. From then on every servo stops by itself when no instruction reaches it for
        ``bus_watchdog`` x 20 ms (the cyclic sync read/write addresses every servo each cycle).
        """
        self._require_open()
        failed: Dict[int, str] = {}
        units = self.config.bus_watchdog
        for j in self.joints:
            sid = j.servo_id
            if units or self.bus_watchdog.get(sid):
                err = self._write(sid, ct.BUS_WATCHDOG, 0)
                if err:
                    failed[sid] = "bus watchdog <- 0: " + err
                    continue
                self.bus_watchdog[sid] = 0
            if j.mode == "current_position":
                # hold the present position instead of jumping to a stale goal
                counts, err = self._read(sid, ct.PRESENT_POSITION)
                if counts is None:
                    failed[sid] = "read present position: " + err
                    continue
                err = self._write(sid, ct.GOAL_POSITION, counts)
                if err:
                    failed[sid] = "goal position: " + err
                    continue
            else:
                err = self._write(sid, ct.GOAL_CURRENT, 0)
                if err:
                    failed[sid] = "goal current: " + err
                    continue
        for j in self.joints:
            if units and j.servo_id not in failed:
                err = self._write(j.servo_id, ct.BUS_WATCHDOG, units)
                if err:
                    failed[j.servo_id] = "bus watchdog <- %d: %s" % (units, err)
                else:
                    self.bus_watchdog[j.servo_id] = units
        for j in self.joints:
            if failed:
                break
            err = self._write(j.servo_id, ct.TORQUE_ENABLE, 1)
            if err:
                failed[j.servo_id] = "torque enable: " + err
        if failed:
            try:
                self.disable()
            except BusError:
                pass
            raise ServoCommError("enable failed: " + _per_servo(failed), failed)

    def disable(self) -> Dict[int, str]:
        """Torque off on every servo: one broadcast WRITE (no reply, so it goes out even while the
        stream is out of sync or a servo is silent), then a confirming WRITE to each servo.

        Returns {servo_id: error text} for the servos that did not confirm
        (empty dict = all off). Never raises for a single servo; a lost port
        is reported for every servo as well.
        """
        if self.port is None or self._lost:
            return {i: "port not open" for i in self.ids}
        a = ct.TORQUE_ENABLE.address
        try:
            self._send(BROADCAST_ID, INST_WRITE, (a & 0xFF, a >> 8, 0))
            if self._desync and self._resync() != COMM_SUCCESS:
                return {i: "no answer (broadcast torque off sent, not confirmed)" for i in self.ids}
        except _PORT_EXC as exc:
            self.counters.port_errors += 1
            self._lost = True
            return {i: "torque off on %s failed: %s" % (self.config.port, exc) for i in self.ids}
        failed: Dict[int, str] = {}
        port_lost = False
        for sid in self.ids:
            try:
                err = self._write(sid, ct.TORQUE_ENABLE, 0)
            except PortLostError as exc:
                port_lost = True
                self._lost = False  # keep trying the remaining servos
                failed[sid] = str(exc)
                continue
            if err:
                failed[sid] = err
        if port_lost:
            self._lost = True
        return failed

    def reboot(self, servo_id: int) -> Optional[str]:
        """REBOOT one servo (clears Hardware Error Status; torque comes back off)."""
        self._require_open()
        _, res, err = self._exchange(servo_id, INST_REBOOT, (), 0, "reboot")
        if res != COMM_SUCCESS:
            return self._result_text(res)
        if err & 0x7F:
            return p.describe_error(err & 0x7F)
        self.hardware_error[servo_id] = 0
        return None

    # -- cyclic I/O -------------------------------------------------------------------------
    def _invalid(self, t0: float, error: str, result: int, failed_ids: List[int],
                 status_errors: Dict[int, int]) -> JointReading:
        n = len(self.ids)
        nan = np.full(n, np.nan)
        now = time.monotonic()
        return JointReading(list(self.names), nan.copy(), nan.copy(), nan.copy(), nan.copy(),
                            nan.copy(), nan.copy(), now, False, error, result, failed_ids,
                            status_errors, dict(self.hardware_error), now - t0)

    def _sync_read(self, group, length: int, what: str):
        """One SYNC_READ of *length* bytes from every servo (strict matching, see _receive).

        Returns (blocks {id: bytes}, status errors {id: byte}, None) or, on the first servo that fails,
        ({...}, {...}, (servo id, COMM result, reason)).
        """
        blocks: Dict[int, bytes] = {}
        status_errors: Dict[int, int] = {}
        try:
            if self._desync:
                res = self._resync()
                if res != COMM_SUCCESS:
                    return blocks, status_errors, (self.ids[0], res, "no valid reply to the re-sync read: " + (
                        "corrupt reply (CRC/truncated)" if res == COMM_RX_CORRUPT else "timeout"))
            res = self._tx(p.build_instruction(BROADCAST_ID, p.INST_SYNC_READ, group))
            if res != COMM_SUCCESS:
                self._desync = True
                return blocks, status_errors, (self.ids[0], res, "sync read tx: " + self._result_text(res))
            self._sent(self.ids)
            self._set_reply_timeout((_STATUS_OVERHEAD + length) * len(self.ids))
            for sid in self.ids:
                pkt, res = self._receive(sid, length)
                if res != COMM_SUCCESS or pkt.error & 0x7F:
                    self._desync = True
                    if res == COMM_RX_TIMEOUT:
                        why = "timeout"
                    elif res == COMM_RX_CORRUPT:
                        why = "corrupt reply (CRC/truncated)"
                    elif res != COMM_SUCCESS:
                        why = self._result_text(res)
                    else:
                        status_errors[sid] = pkt.error
                        why = "error status 0x%02X (%d data bytes)" % (pkt.error, len(pkt.params))
                        res = COMM_RX_CORRUPT
                    return blocks, status_errors, (sid, res, why)
                status_errors[sid] = pkt.error
                blocks[sid] = bytes(pkt.params)
        except _PORT_EXC as exc:
            self._port_failed(exc, what)
        return blocks, status_errors, None

    def read_state(self) -> JointReading:
        """One SYNC_READ of the state block; see the module docstring for validity rules."""
        self._require_open()
        t0 = time.monotonic()
        blocks, status_errors, failure = self._sync_read(self._sync_read_state, ct.STATE_BLOCK_LEN, "sync read")
        if failure is not None:
            sid, res, why = failure
            if res == COMM_RX_CORRUPT:
                self.counters.crc_errors += 1
            else:
                self.counters.read_failures += 1
            failed = [i for i in self.ids if i not in blocks]
            return self._invalid(t0, "servo %d: %s" % (sid, why), res, failed, status_errors)
        stamp = time.monotonic()

        n = len(self.ids)
        pos = np.empty(n)
        vel = np.empty(n)
        cur = np.empty(n)
        volt = np.empty(n)
        temp = np.empty(n)
        m = self.model
        for k, j in enumerate(self.joints):
            b = ct.decode_state_block(blocks[j.servo_id])
            pos[k] = servo_counts_to_joint_position(b.position, j, m)
            vel[k] = servo_velocity_to_joint(b.velocity, j, m)
            cur[k] = ct.current_raw_to_amp(b.current, m)
            volt[k] = ct.voltage_raw_to_volt(b.voltage, m)
            temp[k] = ct.temperature_raw_to_c(b.temperature, m)
        eff = np.array([float(current_to_effort(cur[k], j)) for k, j in enumerate(self.joints)])
        self.counters.reads_ok += 1

        alert_ids = [i for i, e in status_errors.items() if e & 0x80]
        self._reads_since_hw_poll += 1
        period = self.config.hw_status_period
        if alert_ids:
            self.counters.hw_alerts += 1
            self._poll_hw_errors(alert_ids)
        elif period and self._reads_since_hw_poll >= period:
            self._poll_hw_errors(None)
        return JointReading(list(self.names), pos, vel, eff, cur, volt, temp, stamp, True, "", 0, [],
                            status_errors, dict(self.hardware_error), stamp - t0, dict(self.bus_watchdog))

    def _poll_hw_errors(self, ids: Optional[List[int]]) -> None:
        """Refresh Hardware Error Status (70): given ids by READ, or all by one sync read."""
        self._reads_since_hw_poll = 0
        if ids is not None:
            for sid in ids:
                val, _ = self._read(sid, ct.HARDWARE_ERROR_STATUS)
                if val is not None:
                    self.hardware_error[sid] = val
                else:
                    self.hardware_error[sid] = self.hardware_error.get(sid) or 0x80  # unknown but alerted
            return
        blocks, _, failure = self._sync_read(self._sync_hw, ct.SAFETY_BLOCK_LEN, "hardware status read")
        if failure is None:
            wd = ct.BUS_WATCHDOG.address - ct.SAFETY_BLOCK_START
            for sid in self.ids:
                self.hardware_error[sid] = blocks[sid][0]
                self.bus_watchdog[sid] = ct.decode(ct.BUS_WATCHDOG, blocks[sid], wd)

    def read_hardware_errors(self) -> Dict[int, int]:
        """Read Hardware Error Status of every servo now."""
        self._require_open()
        self._poll_hw_errors(list(self.ids))
        return dict(self.hardware_error)

    def read_bus_watchdog(self) -> Dict[int, Optional[int]]:
        """Bus Watchdog (98) of every servo now (None: no valid answer); -1 = it expired and stopped the servo."""
        self._require_open()
        out: Dict[int, Optional[int]] = {}
        for sid in self.ids:
            out[sid], _ = self._read(sid, ct.BUS_WATCHDOG)
            if out[sid] is not None:
                self.bus_watchdog[sid] = out[sid]
        return out

    def _send_sync(self, item: ct.Item, values: Dict[int, bytes]) -> bool:
        """One SYNC_WRITE of *item* to the servos of *values* ({id: its bytes}); no reply."""
        packet = p.build_instruction(BROADCAST_ID, p.INST_SYNC_WRITE, p.sync_write_params(item.address, item.size,
                                                                                          values))
        try:
            res = self._tx(packet)
        except _PORT_EXC as exc:
            self._port_failed(exc, "sync write")
        if res != COMM_SUCCESS:
            self.counters.write_failures += 1
            return False
        self._sent(values)
        return True

    def write_efforts(self, tau: Sequence[float]) -> bool:
        """One SYNC_WRITE of Goal Current for all joints (N*m, joint order).

        Non-finite entries become 0 A (counted in ``nonfinite``); values
        beyond ``current_limit`` are clamped (counted in ``clamped``).  In
        current-based position mode Goal Current acts as the current bound of
        the position loop.  Returns False if the packet could not be sent.
        """
        self._require_open()
        tau = np.asarray(tau, float).reshape(-1)
        if tau.shape[0] != len(self.joints):
            raise ValueError("expected %d efforts, got %d" % (len(self.joints), tau.shape[0]))
        values: Dict[int, bytes] = {}
        for k, j in enumerate(self.joints):
            t = tau[k]
            if not math.isfinite(t):
                self.counters.nonfinite += 1
                t = 0.0
            raw, clamped = clamp_current_raw(t, j, self.model)
            if clamped:
                self.counters.clamped += 1
            self.last_command_current[k] = raw * self.model.current_amp_per_lsb
            values[j.servo_id] = ct.encode(ct.GOAL_CURRENT, raw)
        return self._send_sync(ct.GOAL_CURRENT, values)

    def last_efforts(self) -> np.ndarray:
        """N*m per joint: the torque the last Goal Current written stands for (the servos' current resolution)."""
        return np.array([float(current_to_effort(self.last_command_current[k], j))
                         for k, j in enumerate(self.joints)])

    def write_positions(self, q: Sequence[float]) -> bool:
        """One SYNC_WRITE of Goal Position for the 'current_position' joints.

        *q* has one entry per joint (rad, joint side); entries of 'current'
        joints are ignored. Targets are clamped to ``position_limits``;
        non-finite targets are skipped (the servo keeps its previous goal).
        """
        self._require_open()
        q = np.asarray(q, float).reshape(-1)
        if q.shape[0] != len(self.joints):
            raise ValueError("expected %d positions, got %d" % (len(self.joints), q.shape[0]))
        values: Dict[int, bytes] = {}
        for k, j in enumerate(self.joints):
            if j.mode != "current_position":
                continue
            t = q[k]
            if not math.isfinite(t):
                self.counters.nonfinite += 1
                continue
            lo, hi = j.position_limits
            if t < lo or t > hi:
                self.counters.clamped += 1
                t = min(max(t, lo), hi)
            values[j.servo_id] = ct.encode(ct.GOAL_POSITION, joint_position_to_servo_counts(t, j, self.model))
        if not values:
            return True
        return self._send_sync(ct.GOAL_POSITION, values)
