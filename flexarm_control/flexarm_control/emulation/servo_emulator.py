"""Protocol 2.0 X-series servo emulator served over a real pseudo-terminal.

A client (the bridge's serial_link.SerialLink, or the vendor SDK's ``PortHandler`` in the tests) opens a
device path with pyserial, so the emulator creates a pty pair with :func:`os.openpty`, puts the
slave in raw mode and hands out its path as :attr:`ServoEmulator.port_name`.
A background thread serves the master end.

Supported instructions: PING (unicast and broadcast), READ, WRITE, REBOOT,
SYNC_READ, SYNC_WRITE, BULK_READ, BULK_WRITE.  Each emulated servo has a
control table (bytearray) with EEPROM (< 64) and RAM areas; EEPROM writes are
refused with an access error while torque is on; read-only items are refused
with an access error; Goal Current above Current Limit is refused with a data
limit error; Operating Mode values are range checked.

Motion comes from a *plant*: ``plant(dt, goals, torque_enabled) ->
(positions_rad, velocities_rad_s, currents_A)`` (arrays ordered like
``goals.ids``), called before each request is handled with the wall time since
the previous call, and every ``plant_period`` seconds while no request comes:
like a real servo, the emulated one moves in real time whether or not it is
asked, and a request never waits for the integration of a long idle gap
(it used to: 1 s of idle integrated on the next request took ~40 ms, longer
than the SDK's ~35 ms reply timeout, so a bridge that waited ~1 s between
attempts never got an answer in time).  ``goals`` is a :class:`PlantGoals` with the operating mode,
goal current (A), goal position (rad), goal velocity (rad/s) and current limit
(A) of each servo.  The default :class:`MotorInertiaPlant` integrates
``J dw/dt = k_t i - b w`` per servo (with a current-limited PD loop in the
position modes).

Bus Watchdog (98), as the e-Manual describes it (test_dxl_watchdog.py checks each statement): armed with
1..127 (x 20 ms) it stops a servo whose torque is on when no valid instruction addressed to it (its id, a
broadcast, a SYNC/BULK naming it) arrived for that long; the stop is decided at that exact instant (the plant
runs up to it with the old goals): current mode Goal Current 0 (no torque, the joint runs free), position modes
a hold at the present position, velocity/PWM modes 0; 98 then reads -1 and Goal values are refused (Data Range
Error) until 0 is written. ``watchdog_events`` records each expiry; ``on_plant_step`` sees every plant advance.

Fault injection: :meth:`ServoEmulator.set_silent`,
:meth:`ServoEmulator.corrupt_next`, :meth:`ServoEmulator.set_corrupting` (a noisy line: every reply
until cleared), :meth:`ServoEmulator.set_hardware_error`,
:meth:`ServoEmulator.set_latency`, :meth:`ServoEmulator.stall` (late replies),
:meth:`ServoEmulator.close_port` /
:meth:`ServoEmulator.reopen_port` (unplug / replug; with ``link_path`` the
port keeps its path, like a udev ``/dev/serial/by-id`` link).

Run ``python -m flexarm_control.emulation.servo_emulator --ids 1 2`` (or ``dxl_emulator``) to serve a bus
from the command line: it prints the port path on stdout, then serves until SIGINT/SIGTERM (exit
0). ``--arm ARM.yaml --params BRIDGE.yaml`` drives the servos with the flexible-arm model (ids and
joint conventions from the bridge's parameter file). Fault injection from stdin, one command a
line, each acknowledged with ``ok <command>`` on stdout: ``silent 1|0``, ``stall SECONDS``,
``corrupt N crc|truncate|drop|garbage``, ``corrupting crc|truncate|drop|garbage|off``, ``hw ID BITS``,
``close``, ``reopen``; ``state`` answers ``ok state z_1 z_2 ...``, the emulated arm's coordinates (with ``--arm``).
``--record FILE.npz`` (with ``--arm``) writes the arm's motion at exit (plants.ArmRecording: z, zd and the torques
at every plant advance): the tip, which a real arm's hardware path cannot measure (bench/bench_hardware_path.py).
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import math
import os
import select
import sys
import threading
import time
import tty
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from flexarm_sim.common.signals import StopSignals

# Run as a program (python -m ... / the dxl_emulator script): a SIGINT/SIGTERM from here on ends the
# process with exit code 0 (main() checks it), also while numpy loads below.
_PROGRAM_SIGNALS = StopSignals().install(raise_stop=False) \
    if __name__ == "__main__" or os.path.basename(sys.argv[0] or "") == "dxl_emulator" else None

import numpy as np  # noqa: E402

from flexarm_sim.common.scheduler import set_thread_fifo  # noqa: E402

from ..bridge import control_table as ct  # noqa: E402
from ..bridge import protocol as p  # noqa: E402
from .plants import MotorInertiaPlant, PlantFn, PlantGoals  # noqa: E402

CORRUPTIONS = ("crc", "truncate", "drop", "garbage")   # what a corrupted reply can be (see _send)
TABLE_BYTES = 256

class EmulatedServo:
    """Control table of one X-series servo."""

    def __init__(self, servo_id: int, model: ct.ModelUnits):
        self.id = servo_id
        self.model = model
        self.table = bytearray(TABLE_BYTES)
        # monotonic time this servo last received a valid instruction packet addressed to it (Bus Watchdog timer)
        self.last_instruction: Optional[float] = None
        self.last_instruction_after: Optional[float] = None   # ... which arrived after this (see ServoEmulator._advance)
        self.last_received: Optional[float] = None   # last_instruction before the emulator's own pauses were added
        self.factory_reset()

    def factory_reset(self) -> None:
        m = self.model
        t = self.table
        t[:] = bytes(TABLE_BYTES)
        self.set(ct.MODEL_NUMBER, m.model_number)
        self.set(ct.FIRMWARE_VERSION, 46)
        self.set(ct.ID, self.id)
        self.set(ct.BAUD_RATE, 3)  # 1 Mbps
        self.set(ct.RETURN_DELAY_TIME, 250)
        self.set(ct.OPERATING_MODE, ct.MODE_POSITION)
        self.set(ct.PROTOCOL_TYPE, 2)
        self.set(ct.TEMPERATURE_LIMIT, 80)
        self.set(ct.MAX_VOLTAGE_LIMIT, 160)
        self.set(ct.MIN_VOLTAGE_LIMIT, 95)
        self.set(ct.PWM_LIMIT, 885)
        self.set(ct.CURRENT_LIMIT, m.current_limit_max_lsb)
        self.set(ct.VELOCITY_LIMIT, m.velocity_limit_default_lsb)
        self.set(ct.MAX_POSITION_LIMIT, m.position_max_count)
        self.set(ct.MIN_POSITION_LIMIT, m.position_min_count)
        self.set(ct.SHUTDOWN, ct.DEFAULT_SHUTDOWN)
        self.reset_ram()

    def reset_ram(self) -> None:
        """RAM defaults after power-on / REBOOT (present values kept)."""
        self.set(ct.TORQUE_ENABLE, 0)
        self.set(ct.STATUS_RETURN_LEVEL, 2)
        self.set(ct.HARDWARE_ERROR_STATUS, 0)
        self.set(ct.GOAL_CURRENT, 0)
        self.set(ct.GOAL_VELOCITY, 0)
        self.set(ct.POSITION_P_GAIN, 800)
        self.set(ct.BUS_WATCHDOG, 0)
        self.set(ct.PROFILE_ACCELERATION, 0)
        self.set(ct.PROFILE_VELOCITY, 0)
        self.set(ct.PRESENT_INPUT_VOLTAGE, 120)
        self.set(ct.PRESENT_TEMPERATURE, 35)

    def get(self, item: ct.Item) -> int:
        return ct.decode(item, self.table, item.address)

    def set(self, item: ct.Item, value: int) -> None:
        self.table[item.address:item.address + item.size] = ct.encode(item, int(value))

    @property
    def torque_on(self) -> bool:
        return bool(self.table[ct.TORQUE_ENABLE.address])

    @property
    def hardware_error(self) -> int:
        return self.table[ct.HARDWARE_ERROR_STATUS.address]

    def status_error(self, code: int = 0) -> int:
        return code | (p.ERR_ALERT if self.hardware_error else 0)

    # --- Bus Watchdog (98) ------------------------------------------------------------------
    @property
    def bus_watchdog(self) -> int:
        return self.get(ct.BUS_WATCHDOG)

    def watchdog_deadline(self) -> Optional[float]:
        """When the Bus Watchdog stops this servo if no instruction comes first: armed (1..127) and torque on
        (it is not monitored with torque off), else None."""
        units = self.bus_watchdog
        if not self.torque_on or units < 1 or self.last_instruction is None:
            return None
        return self.last_instruction + units * ct.BUS_WATCHDOG_UNIT_S

    def expire_watchdog(self) -> None:
        """The Bus Watchdog fired: the servo stops (e-Manual: Profile Acceleration/Velocity applied as 0;
        98 reads -1; Goal values read-only until 0 is written to 98). Torque stays on. The stop per mode: position
        modes hold the present position; velocity mode Goal Velocity 0; PWM mode Goal PWM 0; current mode Goal
        Current 0 - no torque, the joint runs free (observed on X servos: "current control: free, position /
        velocity control: brake", rt-net/crane_x7_ros#11)."""
        mode = self.get(ct.OPERATING_MODE)
        if mode in (ct.MODE_POSITION, ct.MODE_EXTENDED_POSITION, ct.MODE_CURRENT_BASED_POSITION):
            self.set(ct.GOAL_POSITION, self.get(ct.PRESENT_POSITION))
        elif mode == ct.MODE_VELOCITY:
            self.set(ct.GOAL_VELOCITY, 0)
        elif mode == ct.MODE_PWM:
            self.set(ct.GOAL_PWM, 0)
        else:
            self.set(ct.GOAL_CURRENT, 0)
        self.set(ct.PROFILE_ACCELERATION, 0)
        self.set(ct.PROFILE_VELOCITY, 0)
        self.set(ct.BUS_WATCHDOG, ct.BUS_WATCHDOG_EXPIRED)

    def read(self, address: int, length: int) -> Tuple[int, bytes]:
        if length < 0 or address < 0 or address + length > TABLE_BYTES:
            return p.ERR_ACCESS, b""
        return 0, bytes(self.table[address:address + length])

    def write(self, address: int, data: bytes) -> int:
        """Apply a write; returns the error code (0 = accepted, nothing written otherwise)."""
        n = len(data)
        if n == 0 or address < 0 or address + n > TABLE_BYTES:
            return p.ERR_ACCESS
        end = address + n
        for lo, hi in ct.READ_ONLY_RANGES:
            if address < hi and end > lo:
                return p.ERR_ACCESS
        if address < ct.EEPROM_END and self.torque_on:
            return p.ERR_ACCESS
        expired = self.bus_watchdog == ct.BUS_WATCHDOG_EXPIRED
        if expired and address < ct.GOAL_VALUES[1] and end > ct.GOAL_VALUES[0]:
            return p.ERR_DATA_RANGE          # e-Manual: Goal values are read-only while 98 reads -1
        new = bytearray(self.table)
        new[address:end] = data

        def changed(item):
            return address < item.address + item.size and end > item.address

        def val(item):
            return ct.decode(item, new, item.address)

        if changed(ct.OPERATING_MODE) and val(ct.OPERATING_MODE) not in ct.VALID_MODES:
            return p.ERR_DATA_RANGE
        if changed(ct.TORQUE_ENABLE) and val(ct.TORQUE_ENABLE) not in (0, 1):
            return p.ERR_DATA_RANGE
        if changed(ct.BUS_WATCHDOG):
            # 0 (off, clears the error) or 1..127; -1 is a status, not a value to write. Re-arming an expired
            # watchdog without clearing it first is not described by the e-Manual; refused here, so a client that
            # works against the emulator follows the documented sequence (write 0, then the new value)
            if val(ct.BUS_WATCHDOG) < 0 or (expired and val(ct.BUS_WATCHDOG) != 0):
                return p.ERR_DATA_RANGE
        if changed(ct.CURRENT_LIMIT) and val(ct.CURRENT_LIMIT) > self.model.current_limit_max_lsb:
            return p.ERR_DATA_LIMIT
        if changed(ct.GOAL_CURRENT) and abs(val(ct.GOAL_CURRENT)) > val(ct.CURRENT_LIMIT):
            return p.ERR_DATA_LIMIT
        if changed(ct.TORQUE_ENABLE) and val(ct.TORQUE_ENABLE) == 1 \
                and self.hardware_error & self.get(ct.SHUTDOWN):
            # a shut-down servo refuses torque until it is rebooted
            return p.ERR_RESULT_FAIL
        if changed(ct.GOAL_POSITION) and self.get(ct.OPERATING_MODE) == ct.MODE_POSITION:
            lo_lim, hi_lim = val(ct.MIN_POSITION_LIMIT), val(ct.MAX_POSITION_LIMIT)
            if not lo_lim <= val(ct.GOAL_POSITION) <= hi_lim:
                return p.ERR_DATA_LIMIT
        self.table[:] = new
        return 0


class ServoEmulator:
    """Serve emulated X-series servos on a pty (see module docstring)."""

    def __init__(self, ids: Iterable[int] = (1,), model="XM430-W350",
                 plant: Optional[PlantFn] = None, latency: float = 0.0,
                 link_path: Optional[str] = None, start: bool = True, plant_period: float = 0.01):
        self.model = ct.get_model(model)
        self.ids: Tuple[int, ...] = tuple(int(i) for i in ids)
        if len(set(self.ids)) != len(self.ids) or not all(0 <= i <= p.MAX_ID for i in self.ids):
            raise ValueError("bad servo ids %r" % (self.ids,))
        self.servos: Dict[int, EmulatedServo] = {i: EmulatedServo(i, self.model) for i in self.ids}
        self.plant: PlantFn = plant or MotorInertiaPlant(
            len(self.ids), torque_constant=self.model.torque_constant_nm_per_a)
        self.latency = float(latency)
        if not plant_period > 0:
            raise ValueError("plant_period must be > 0")
        self.plant_period = float(plant_period)
        self._stall = 0.0
        self.link_path = link_path
        self._lock = threading.RLock()
        self._silent = False
        self._corrupt: List[str] = []
        self._corrupting: Optional[str] = None      # every reply, after the queued ones (set_corrupting)
        self._parser = p.PacketParser()
        self._last_plant_t: Optional[float] = None
        self.stats: Dict[str, int] = {
            "packets_received": 0, "packets_served": 0, "bad_packets": 0,
            "crc_errors": 0, "truncated": 0, "ignored_silent": 0,
            "corrupted_sent": 0, "write_refused": 0, "tx_dropped_bytes": 0,
        }
        self.instruction_counts: Dict[str, int] = {}
        # how late the serving thread woke from an idle wait (the process was not scheduled) and the longest
        # time from reading a request to writing its replies, s: evidence when a client sees reply timeouts
        self.timing: Dict[str, float] = {"max_wakeup_late": 0.0, "max_handling": 0.0}
        # Bus Watchdog: every expiry as {id, mode, last_instruction, instruction_after, expired_at, applied_at}
        # (monotonic s: the last instruction arrived in (instruction_after, last_instruction]; the plant runs with
        # the stop from applied_at, normally = expired_at); on_plant_step(t) is called (lock held)
        # after each advance of the plant to wall time t, e.g. to record the arm's state
        self.watchdog_events: List[dict] = []
        self.on_plant_step: Optional[Callable[[float], None]] = None
        self._t_empty: Optional[float] = None    # everything that arrived by then has been read (see _advance)
        self._master: Optional[int] = None
        self._slave: Optional[int] = None
        self._pts_name = ""
        self._want_close = False
        self._close_generation = -1
        self._generation = 0          # of the pty: a close request only closes the pty it was made for
        self._closed_evt = threading.Event()
        self._stop = False
        self._wake_r, self._wake_w = os.pipe()
        self._thread: Optional[threading.Thread] = None
        self._open_pty()
        self._sync_present()
        if start:
            self.start()

    # --- pty management -------------------------------------------------------------
    def _open_pty(self) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)
        fl = fcntl.fcntl(master, fcntl.F_GETFL)
        fcntl.fcntl(master, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        self._pts_name = os.ttyname(slave)
        if self.link_path:
            tmp = self.link_path + ".tmp%d" % os.getpid()
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self._pts_name, tmp)
            os.replace(tmp, self.link_path)
        with self._lock:
            self._parser.reset()
            self._master, self._slave = master, slave
            self._generation += 1

    @property
    def port_name(self) -> str:
        """Path a client opens (the symlink if ``link_path`` was given)."""
        return self.link_path or self._pts_name

    @property
    def pts_name(self) -> str:
        return self._pts_name

    def _close_fds(self) -> None:
        with self._lock:
            for fd in (self._master, self._slave):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._master = self._slave = None

    def close_port(self) -> None:
        """Unplug: close both pty ends (the client side then sees I/O errors). Returns once closed."""
        self._closed_evt.clear()
        with self._lock:
            self._close_generation = self._generation
            self._want_close = True
        self._wake()
        # the serving thread closes it between two reads; if it is gone (or stopped), close here
        while not self._closed_evt.wait(0.05):
            if self._thread is None or not self._thread.is_alive():
                with self._lock:
                    if self._want_close and self._close_generation == self._generation:
                        self._want_close = False
                        self._close_fds()
                break

    def reopen_port(self) -> str:
        """Replug: new pty (same servos/state); returns :attr:`port_name`."""
        if self._master is not None:
            self.close_port()
        self._open_pty()
        self._wake()
        return self.port_name

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # --- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="ServoEmulator", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop = True
        self._wake()
        if self._thread is not None:
            self._thread.join(2.0)
        self._close_fds()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
        if self.link_path and os.path.islink(self.link_path):
            try:
                os.unlink(self.link_path)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- fault injection ------------------------------------------------------------------
    def set_silent(self, silent: bool = True) -> None:
        """Stop (or resume) answering; requests are still received and applied."""
        self._silent = bool(silent)

    def corrupt_next(self, n: int = 1, kind: str = "crc") -> None:
        """Corrupt the next *n* status packets.

        kind: ``'crc'`` (bad CRC), ``'truncate'`` (only the first half is sent),
        ``'drop'`` (not sent at all), ``'garbage'`` (noise bytes before a
        correct packet - a receiver must resync and accept it), ``'none'``
        (sent intact: use it to target a later packet of a sync read).
        """
        if kind not in CORRUPTIONS + ("none",):
            raise ValueError("unknown corruption kind %r" % kind)
        with self._lock:
            self._corrupt.extend([kind] * int(n))

    def set_corrupting(self, kind: Optional[str]) -> None:
        """Corrupt every status packet (after those queued by corrupt_next) until called with None: a noisy line.
        Unlike corrupt_next, what the host does meanwhile (re-sync barriers, extra reads) cannot use the corruption
        up: every reply it gets is bad."""
        if kind is not None and kind not in CORRUPTIONS:
            raise ValueError("unknown corruption kind %r" % kind)
        with self._lock:
            self._corrupting = kind

    def set_hardware_error(self, servo_id: int, bits: int) -> None:
        """Set Hardware Error Status; shutdown bits turn torque off (like a real X)."""
        with self._lock:
            s = self.servos[servo_id]
            s.set(ct.HARDWARE_ERROR_STATUS, bits & 0xFF)
            if bits & s.get(ct.SHUTDOWN):
                s.set(ct.TORQUE_ENABLE, 0)

    def set_latency(self, seconds: float) -> None:
        self.latency = max(0.0, float(seconds))

    def stall(self, seconds: float) -> None:
        """Stop serving for *seconds* before the next request (a descheduled emulator / a servo
        that answers late): requests queue up in the pty and are answered, late, afterwards."""
        self._stall = max(0.0, float(seconds))

    def set_present(self, servo_id: int, voltage_v: Optional[float] = None,
                    temperature_c: Optional[float] = None) -> None:
        with self._lock:
            s = self.servos[servo_id]
            if voltage_v is not None:
                s.set(ct.PRESENT_INPUT_VOLTAGE, round(voltage_v / self.model.voltage_volt_per_lsb))
            if temperature_c is not None:
                s.set(ct.PRESENT_TEMPERATURE, round(temperature_c / self.model.temperature_c_per_lsb))

    def torque_enabled(self, servo_id: int) -> bool:
        return self.servos[servo_id].torque_on

    # --- plant ---------------------------------------------------------------------------------
    def _goals(self) -> Tuple[PlantGoals, np.ndarray]:
        m = self.model
        ss = [self.servos[i] for i in self.ids]
        goals = PlantGoals(
            ids=self.ids,
            modes=np.array([s.get(ct.OPERATING_MODE) for s in ss], dtype=int),
            current_a=np.array([ct.current_raw_to_amp(s.get(ct.GOAL_CURRENT), m) for s in ss]),
            position_rad=np.array([ct.counts_to_rad(s.get(ct.GOAL_POSITION), m) for s in ss]),
            velocity_rad_s=np.array([ct.velocity_raw_to_rad_s(s.get(ct.GOAL_VELOCITY), m) for s in ss]),
            current_limit_a=np.array([ct.current_raw_to_amp(s.get(ct.CURRENT_LIMIT), m) for s in ss]),
        )
        on = np.array([s.torque_on for s in ss], dtype=bool)
        return goals, on

    def step_plant(self, now: Optional[float] = None) -> None:
        """Advance the plant to *now* (wall time) and refresh Present values (Bus Watchdog expiries up to the
        serving thread's last wake-up applied)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._advance(now, now if self._t_empty is None else min(now, self._t_empty))

    def _integrate_to(self, t: float) -> None:
        dt = 0.0 if self._last_plant_t is None else t - self._last_plant_t
        self._last_plant_t = t
        goals, on = self._goals()
        q, w, i = self.plant(dt, goals, on)
        self._write_present(q, w, i)
        if self.on_plant_step is not None:
            self.on_plant_step(t)

    def _advance(self, now: float, certain: float) -> None:
        """Advance the plant to *now*, stopping each servo whose Bus Watchdog expired by *certain* at its expiry
        instant (the plant integrates up to it with the old goals, from it with the stop).

        *certain*: the time up to which no instruction can have arrived unseen: when a select timed out (the
        kernel had nothing for us then), or just before a read that took everything pending. Bytes read later
        arrived after that instant; a real servo would have seen them at arrival, so an expiry after it is not
        decided on them (the emulator's own lateness - a loaded machine - never stops a servo that was fed in
        time) and they count as received when the read returned (the latest instant they can have arrived:
        stop times measured here are upper bounds)."""
        while True:
            due = [(d, s.id) for s in self.servos.values()
                   for d in (s.watchdog_deadline(),) if d is not None and d <= min(now, certain)]
            if not due:
                break
            t_exp, sid = min(due)
            s = self.servos[sid]
            t_apply = t_exp if self._last_plant_t is None else max(t_exp, self._last_plant_t)
            self._integrate_to(t_apply)
            s.expire_watchdog()
            self.watchdog_events.append({"id": sid, "mode": s.get(ct.OPERATING_MODE),
                                         "last_instruction": s.last_instruction, "expired_at": t_exp,
                                         "instruction_after": s.last_instruction_after,
                                         "received": s.last_received, "applied_at": t_apply})
        # an expiry not yet certain (after *certain*, by *now*): the plant waits for the decision at it, so that
        # a stop decided later still starts at its instant (the plant lags by at most the uncertain interval)
        pending = [d for d in (s.watchdog_deadline() for s in self.servos.values()) if d is not None and d <= now]
        self._integrate_to(max(min(pending + [now]), self._last_plant_t or -math.inf))

    def _sync_present(self) -> None:
        with self._lock:
            self._advance(time.monotonic(), time.monotonic())

    def _write_present(self, q, w, i) -> None:
        m = self.model
        for k, sid in enumerate(self.ids):
            s = self.servos[sid]
            s.set(ct.PRESENT_POSITION, max(-2**31, min(2**31 - 1, ct.rad_to_counts(float(q[k]), m))))
            s.set(ct.PRESENT_VELOCITY, max(-2**31, min(2**31 - 1, ct.rad_s_to_velocity_raw(float(w[k]), m))))
            s.set(ct.PRESENT_CURRENT, max(-32768, min(32767, ct.amp_to_current_raw(float(i[k]), m))))
            s.set(ct.MOVING, 1 if abs(w[k]) > m.rad_s_per_lsb else 0)

    # --- serving ------------------------------------------------------------------------------
    def _pause_servo_clocks(self, seconds: float) -> None:
        """A client may have waited *seconds* for this emulator (it answered late: busy, or descheduled with a
        request pending); a real servo answers at once, so the client's next instruction came that much later than
        it would have: the servos' Bus Watchdog timers are held for that time - never a stop caused by the
        emulator's own lateness (a client that is silent by itself is not waiting: no pause)."""
        if seconds <= 0:
            return
        with self._lock:
            for s in self.servos.values():
                if s.last_instruction is not None:
                    s.last_instruction += seconds
            self.timing["servo_clock_paused"] = self.timing.get("servo_clock_paused", 0.0) + seconds

    def _serve(self) -> None:
        t_ready = None                   # when the previous select returned (the thread stopped waiting)
        answered = False                 # the previous iteration sent replies (a client waited for them)
        while not self._stop:
            if self._want_close:
                with self._lock:
                    if self._want_close and self._close_generation == self._generation:
                        self._close_fds()
                    self._want_close = False
                self._closed_evt.set()
            master = self._master
            fds = [self._wake_r] + ([master] if master is not None else [])
            t_wait = time.monotonic()
            try:
                r, _, _ = select.select(fds, [], [], self.plant_period)
            except (OSError, ValueError):
                time.sleep(0.01)
                continue
            t_wake = time.monotonic()
            if self._t_empty is None:
                self._t_empty = t_wait
            # the client waited for us: while we handled its requests until the replies went out and we were back
            # in select (a real servo: no time), and while a request waited for us beyond select's timeout
            pause = (t_wait - t_ready) if answered and t_ready is not None else 0.0
            if master is not None and master in r:
                pause += max(0.0, t_wake - t_wait - self.plant_period)
            self._pause_servo_clocks(pause)
            t_ready, answered = t_wake, False
            if not r:
                late = t_wake - t_wait - self.plant_period
                if late > self.timing["max_wakeup_late"]:
                    self.timing["max_wakeup_late"] = late
            if self._wake_r in r:
                try:
                    os.read(self._wake_r, 64)
                except OSError:
                    pass
                continue
            if master is None or master not in r:
                with self._lock:
                    # idle: the servos keep moving in real time; nothing had arrived when select timed out (or
                    # there is no port): expiries up to then are certain
                    self._t_empty = max(self._t_empty, t_wake if master is None
                                        else min(t_wake, t_wait + self.plant_period))
                    self._advance(t_wake, self._t_empty)
                    # a partial packet that never completed is a truncated request
                    if self._parser.check_timeout(0.1):
                        self.stats["bad_packets"] += 1
                        self.stats["truncated"] += 1
                continue
            if self._stall > 0:
                pause, self._stall = self._stall, 0.0
                time.sleep(pause)
            t_before = time.monotonic()
            try:
                data = os.read(master, 4096)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                time.sleep(0.01)  # EIO: nobody has the slave open
                continue
            if not data:
                continue
            t_read = time.monotonic()
            t_certain = self._t_empty
            if len(data) < 4096:             # the read took everything that had arrived by t_before
                self._t_empty = max(self._t_empty, t_before)
            answered = self._handle_bytes(data, t_read, t_certain)
            took = time.monotonic() - t_read
            if took > self.timing["max_handling"]:
                self.timing["max_handling"] = took

    def _handle_bytes(self, data: bytes, t_arrived: Optional[float] = None,
                      t_certain: Optional[float] = None) -> bool:
        """Serve the packets in *data*, which arrived by *t_arrived* and after *t_certain* (see _advance); True
        if replies were sent."""
        answered = False
        t_arrived = time.monotonic() if t_arrived is None else t_arrived
        t_certain = t_arrived if t_certain is None else t_certain
        with self._lock:
            st = self._parser.stats
            crc0, tr0 = st.crc_errors, st.truncated
            packets = self._parser.feed(data)
            self.stats["crc_errors"] += st.crc_errors - crc0
            self.stats["truncated"] += st.truncated - tr0
            self.stats["bad_packets"] += (st.crc_errors - crc0) + (st.truncated - tr0)
        for pkt in packets:
            if pkt.is_status:
                continue  # our own echo or another master: ignore
            self.stats["packets_received"] += 1
            name = p.INSTRUCTION_NAMES.get(pkt.instruction, hex(pkt.instruction))
            self.instruction_counts[name] = self.instruction_counts.get(name, 0) + 1
            with self._lock:
                self._advance(max(time.monotonic(), t_arrived), t_certain)
                for sid in self._addressed(pkt):
                    s = self.servos[sid]
                    s.last_instruction = s.last_received = t_arrived      # restarts its Bus Watchdog timer
                    s.last_instruction_after = t_certain
                replies = self._dispatch(pkt)
                self._advance(time.monotonic(), t_certain)  # goals may have changed (torque, current)
            if not replies:
                continue
            if self._silent:
                self.stats["ignored_silent"] += len(replies)
                continue
            if self.latency > 0:
                time.sleep(self.latency)
            self._send(replies)
            answered = True
        return answered

    def _send(self, replies: List[bytes]) -> None:
        out = bytearray()
        with self._lock:
            for r in replies:
                kind = self._corrupt.pop(0) if self._corrupt else self._corrupting
                if kind == "none":
                    kind = None
                elif kind is not None:
                    self.stats["corrupted_sent"] += 1
                if kind == "crc":
                    r = r[:-1] + bytes(((r[-1] ^ 0x5A) & 0xFF,))
                elif kind == "truncate":
                    r = r[:max(4, len(r) // 2)]
                elif kind == "drop":
                    r = b""
                elif kind == "garbage":
                    r = b"\x00\xff\x13\xff\xff\x42" + r
                out += r
                self.stats["packets_served"] += 1
            master = self._master
        if master is None:
            return
        view = memoryview(bytes(out))
        deadline = time.monotonic() + 0.05
        while view:
            try:
                n = os.write(master, view)
                view = view[n:]
            except OSError as exc:
                if exc.errno == errno.EAGAIN and time.monotonic() < deadline:
                    time.sleep(0.0005)
                    continue
                self.stats["tx_dropped_bytes"] += len(view)
                return

    def _status(self, s: EmulatedServo, code: int = 0, params: bytes = b"") -> bytes:
        return p.build_status(s.id, s.status_error(code), params)

    def _addressed(self, pkt: p.Packet) -> List[int]:
        """Ids of the emulated servos a valid instruction packet is addressed to: its id, or a broadcast that
        applies to every servo (PING, WRITE, REBOOT, ...) or names it (SYNC/BULK READ/WRITE). Each of them
        restarts its Bus Watchdog timer ("communication: all the Instruction Packets"); a packet for another
        id, or a corrupt one, does not."""
        inst, sid, prm = pkt.instruction, pkt.servo_id, pkt.params
        if sid != p.BROADCAST_ID:
            return [sid] if sid in self.servos else []
        if inst in (p.INST_SYNC_READ, p.INST_FAST_SYNC_READ):
            named = list(prm[4:])
        elif inst == p.INST_SYNC_WRITE:
            n = p.from_le(prm[2:4]) if len(prm) >= 4 else 0
            named = list(prm[4::n + 1]) if n else []
        elif inst in (p.INST_BULK_READ, p.INST_FAST_BULK_READ):
            named = list(prm[0::5])
        elif inst == p.INST_BULK_WRITE:
            named, k = [], 0
            while k + 5 <= len(prm):
                named.append(prm[k])
                k += 5 + p.from_le(prm[k + 3:k + 5])
        elif inst == p.INST_READ:
            named = []                      # not served as a broadcast
        else:
            named = list(self.ids)
        return [i for i in dict.fromkeys(named) if i in self.servos]

    def _dispatch(self, pkt: p.Packet) -> List[bytes]:
        inst, sid, prm = pkt.instruction, pkt.servo_id, pkt.params
        bcast = sid == p.BROADCAST_ID
        target = self.servos.get(sid)
        if not bcast and target is None:
            return []
        if inst == p.INST_PING:
            targets = [self.servos[i] for i in self.ids] if bcast else [target]
            return [self._status(s, 0, ct.encode(ct.MODEL_NUMBER, s.model.model_number)
                                 + bytes((s.get(ct.FIRMWARE_VERSION),))) for s in targets]
        if inst == p.INST_READ:
            if bcast:
                return []
            if len(prm) != 4:
                return [self._status(target, p.ERR_DATA_LENGTH)]
            err, data = target.read(p.from_le(prm[0:2]), p.from_le(prm[2:4]))
            return [self._status(target, err, data)]
        if inst == p.INST_WRITE:
            if len(prm) < 3:
                return [] if bcast else [self._status(target, p.ERR_DATA_LENGTH)]
            addr = p.from_le(prm[0:2])
            targets = [self.servos[i] for i in self.ids] if bcast else [target]
            errs = [s.write(addr, prm[2:]) for s in targets]
            self.stats["write_refused"] += sum(1 for e in errs if e)
            return [] if bcast else [self._status(target, errs[0])]
        if inst == p.INST_REBOOT:
            targets = [self.servos[i] for i in self.ids] if bcast else [target]
            replies = [] if bcast else [self._status(target, 0)]
            for s in targets:
                s.reset_ram()
            return replies
        if inst in (p.INST_SYNC_READ, p.INST_SYNC_WRITE, p.INST_BULK_READ, p.INST_BULK_WRITE):
            if not bcast:
                return [self._status(target, p.ERR_INSTRUCTION)]
            if inst == p.INST_SYNC_READ:
                if len(prm) < 5:
                    return []
                addr, n = p.from_le(prm[0:2]), p.from_le(prm[2:4])
                replies = []
                for i in prm[4:]:
                    s = self.servos.get(i)
                    if s is not None:
                        err, data = s.read(addr, n)
                        replies.append(self._status(s, err, data))
                return replies
            if inst == p.INST_SYNC_WRITE:
                if len(prm) < 4:
                    return []
                addr, n = p.from_le(prm[0:2]), p.from_le(prm[2:4])
                body = prm[4:]
                if n == 0 or len(body) % (n + 1):
                    return []
                for k in range(0, len(body), n + 1):
                    s = self.servos.get(body[k])
                    if s is not None and s.write(addr, body[k + 1:k + 1 + n]):
                        self.stats["write_refused"] += 1
                return []
            if inst == p.INST_BULK_READ:
                replies = []
                for k in range(0, len(prm) - 4, 5):
                    s = self.servos.get(prm[k])
                    if s is not None:
                        err, data = s.read(p.from_le(prm[k + 1:k + 3]), p.from_le(prm[k + 3:k + 5]))
                        replies.append(self._status(s, err, data))
                return replies
            # BULK_WRITE
            k = 0
            while k + 5 <= len(prm):
                i, addr, n = prm[k], p.from_le(prm[k + 1:k + 3]), p.from_le(prm[k + 3:k + 5])
                s = self.servos.get(i)
                if s is not None and s.write(addr, prm[k + 5:k + 5 + n]):
                    self.stats["write_refused"] += 1
                k += 5 + n
            return []
        return [] if bcast else [self._status(target, p.ERR_INSTRUCTION)]


def _model_plant(arm: str, params: Optional[str]):
    """(ids, ModelPlant) for ``--arm`` (a path or a shipped arm's name, flexarm_sim.arms.resolve_arm): joints, ids
    and conventions from the bridge's parameter file. SystemExit naming the option on a bad arm or file."""
    from flexarm_sim.arms import resolve_arm
    from flexarm_sim.common.params import ConfigError
    from flexarm_sim.model import ArmSpecError, load_model

    from ..bridge.config import load_yaml
    from .plants import ModelPlant
    if params is None:
        raise SystemExit("dxl_emulator: --arm needs --params (the bridge's parameter file: ids, directions, gears)")
    import yaml
    try:
        cfg = load_yaml(params)
    except (ConfigError, OSError, ValueError, AttributeError, TypeError, yaml.YAMLError) as exc:
        raise SystemExit(f"dxl_emulator: --params {params}: {exc}") from None
    joints = list(cfg.joints)
    try:
        model = load_model(resolve_arm(arm, '--arm'))
        plant = ModelPlant(model, joints)
    except (ConfigError, ArmSpecError, OSError, ValueError) as exc:
        raise SystemExit(f"dxl_emulator: --arm {arm}: {exc}") from None
    return [j.servo_id for j in joints], cfg['model'], plant


def _control(emu: "ServoEmulator", line: str) -> str:
    """Apply one fault-injection command from stdin (see the module docstring)."""
    words = line.split()
    cmd, args = words[0], words[1:]
    if cmd == "silent" and len(args) == 1:
        emu.set_silent(args[0] not in ("0", "false", "off"))
    elif cmd == "stall" and len(args) == 1:
        emu.stall(float(args[0]))
    elif cmd == "corrupt" and len(args) == 2:
        emu.corrupt_next(int(args[0]), args[1])
    elif cmd == "corrupting" and len(args) == 1:
        emu.set_corrupting(None if args[0] == "off" else args[0])
    elif cmd == "hw" and len(args) == 2:
        emu.set_hardware_error(int(args[0]), int(args[1], 0))
    elif cmd == "close" and not args:
        emu.close_port()
    elif cmd == "reopen" and not args:
        emu.reopen_port()
    elif cmd == "state" and not args:
        # the emulated arm's generalized coordinates z (flexarm_sim layout), for a test's check of the physical arm
        state = getattr(emu.plant, "state", None)
        if state is None:
            raise ValueError("state: the servos are not driven by an arm model (--arm)")
        with emu._lock:
            z = [float(x) for x in state.z]
        return "ok state " + " ".join(repr(x) for x in z)
    else:
        raise ValueError("unknown command %r" % line)
    return "ok " + " ".join(words)


def _read_commands(emu: "ServoEmulator", signals: StopSignals) -> None:
    for line in sys.stdin:
        if signals.stopped:
            return
        if not line.strip():
            continue
        try:
            reply = _control(emu, line)
        except (ValueError, KeyError) as exc:
            reply = "error %s" % exc
        print(reply, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    signals = _PROGRAM_SIGNALS or StopSignals()
    emu = recording = None
    rc = 0
    try:
        if _PROGRAM_SIGNALS is None:
            signals.install()         # SIGINT/SIGTERM from here on: exit 0, no traceback
        signals.raise_stop()          # during start-up a signal interrupts it (Stop)
        ap = argparse.ArgumentParser(description="Serve emulated Dynamixel X-series servos on a pty.")
        ap.add_argument("--ids", type=int, nargs="+", default=[1])
        ap.add_argument("--baud", type=int, default=1000000,
                        help="nominal baud rate (a pty ignores it; printed for the user)")
        ap.add_argument("--model", default="XM430-W350", choices=sorted(ct.MODELS))
        ap.add_argument("--latency", type=float, default=0.0, help="reply latency in seconds")
        ap.add_argument("--link", default=None, help="also expose the pty under this symlink path")
        ap.add_argument("--arm", default=None,
                        help="arm description YAML: drive the servos with the flexible-arm model")
        ap.add_argument("--params", default=None,
                        help="with --arm: the bridge's parameter file (servo ids and joint conventions)")
        ap.add_argument("--realtime", action="store_true",
                        help="serve with SCHED_FIFO priority (needs CAP_SYS_NICE): real servos answer within "
                             "a millisecond whatever the load; an emulator process that a loaded machine "
                             "deschedules for longer than the bridge's reply timeout is an outage to the bridge")
        ap.add_argument("--record", default=None, metavar="NPZ",
                        help="with --arm: record the emulated arm's motion (every plant advance: z, zd, torques) "
                             "into this .npz file at exit")
        args = ap.parse_args(argv)
        if args.record is not None:
            if args.arm is None:
                ap.error("--record needs --arm (the servos are driven by the arm model)")
            folder = os.path.dirname(os.path.abspath(args.record))
            if os.path.isdir(args.record):
                ap.error("--record: %s is a folder (give a file, e.g. %s)"
                         % (args.record, os.path.join(args.record, "arm.npz")))
            if not (os.path.isdir(folder) and os.access(folder, os.W_OK)) or \
                    (os.path.exists(args.record) and not os.access(args.record, os.W_OK)):
                ap.error("--record: cannot write %s" % args.record)
        print("dxl_emulator: starting", file=sys.stderr, flush=True)
        if args.realtime:
            why = set_thread_fifo(10)     # before the serving thread starts: threads inherit the policy
            if why is not None:
                print("dxl_emulator: --realtime not granted (%s); serving at normal priority" % why,
                      file=sys.stderr, flush=True)
        ids, model, plant = list(args.ids), args.model, None
        if args.arm is not None:
            ids, model, plant = _model_plant(args.arm, args.params)
        emu = ServoEmulator(ids, model=model, plant=plant, latency=args.latency, link_path=args.link)
        if args.record is not None:
            from .plants import ArmRecording
            recording = ArmRecording(plant)
            emu.on_plant_step = recording
        signals.started()
        print(emu.port_name, flush=True)
        print("serving ids %s (%s%s) at nominal %d baud on %s; Ctrl-C to stop"
              % (ids, model, ", arm model " + args.arm if args.arm else "", args.baud, emu.port_name),
              file=sys.stderr, flush=True)
        threading.Thread(target=_read_commands, args=(emu, signals), name="commands", daemon=True).start()
        while not signals.wait(0.5):
            pass
    except BaseException:
        if not signals.stopped:        # else: the stop signal's Stop, or what it became inside an import
            raise
    finally:
        signals.started()               # a second signal does not interrupt the clean-up
        if emu is not None:
            emu.close()
            print("stats: %s; max wake-up lateness %.1f ms, max request handling %.1f ms"
                  % (emu.stats, 1e3 * emu.timing["max_wakeup_late"], 1e3 * emu.timing["max_handling"]),
                  file=sys.stderr, flush=True)
        if recording is not None:
            with emu._lock:            # no advance after this (a serving thread close() could not join, `reopen`)
                emu.on_plant_step = None
            try:
                rows = recording.save(args.record)
            except OSError as exc:
                print("dxl_emulator: --record: could not write %s: %s" % (args.record, exc), file=sys.stderr,
                      flush=True)
                rc = 1
            else:
                print("recorded %d plant advances of the arm to %s" % (rows, args.record), file=sys.stderr,
                      flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
