"""The emulator's Bus Watchdog (98) against what the ROBOTIS e-Manual states (X series, "Bus Watchdog(98)",
firmware v38+), statement by statement, with raw Protocol 2.0 packets over the emulator's pty:

* values: 0 = off and clears the error, 1..127 = armed in units of 20 ms, -1 = "Bus Watchdog Error" status;
  a RAM item (0 after power-on / REBOOT);
* it monitors the interval between instruction packets *while Torque Enable is 1*; when the interval exceeds
  the set value the servo stops (Profile Acceleration / Velocity applied as 0) and 98 reads -1;
* while it reads -1 the Goal values (Goal PWM 100, Goal Current 102, Goal Velocity 104, Goal Position 116) are
  read-only: a write is answered with a Data Range Error; writing 0 to 98 clears the error and the Goal values
  are accepted again (the e-Manual's 8-step example, run literally below).

Modelling choices where the e-Manual is silent (tested so they stay deliberate): the timer restarts on every
valid instruction addressed to the servo (its id, a broadcast, a SYNC/BULK naming it), not on packets for other
ids or corrupt ones; re-arming an expired watchdog without writing 0 first is refused; the stop in current
mode is Goal Current 0 (no torque), in the position modes a hold at the present position.

Times: the emulator decides an expiry exactly at (last instruction + value x 20 ms) on its own clock; a
"no expiry" case feeds the servo far more often than its watchdog time, so a loaded machine cannot fail it.
"""
import math
import os
import time
import tty

import pytest

from flexarm_control.bridge import control_table as ct
from flexarm_control.bridge import protocol as p
from flexarm_control.emulation.servo_emulator import ServoEmulator

pytestmark = pytest.mark.timeout(60)

UNIT = ct.BUS_WATCHDOG_UNIT_S


class Raw:
    """A Protocol 2.0 client written from the packet format (no SDK): what goes on the wire is explicit."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        tty.setraw(self.fd)
        self.parser = p.PacketParser()
        self.pending = []                 # status packets parsed and not yet taken, in arrival order

    def close(self):
        os.close(self.fd)

    def send(self, sid, inst, params=b'', corrupt=False):
        pkt = bytearray(p.build_instruction(sid, inst, params))
        if corrupt:
            pkt[-1] ^= 0x5A
        t = time.monotonic()
        os.write(self.fd, bytes(pkt))
        return t

    def status(self, sid, timeout=10.0):
        """The next status packet from *sid* (in arrival order)."""
        deadline = time.monotonic() + timeout
        while True:
            for k, pkt in enumerate(self.pending):
                if pkt.servo_id == sid:
                    return self.pending.pop(k)
            if time.monotonic() > deadline:
                raise AssertionError(f'no status from servo {sid}')
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                time.sleep(0.0005)
                continue
            self.pending += [pkt for pkt in self.parser.feed(data) if pkt.is_status]

    def write(self, sid, item, value):
        """Status error byte of a WRITE (0 = accepted)."""
        self.send(sid, p.INST_WRITE, p.write_params(item.address, ct.encode(item, value)))
        return self.status(sid).error & 0x7F

    def read(self, sid, item):
        self.send(sid, p.INST_READ, p.read_params(item.address, item.size))
        pkt = self.status(sid)
        assert pkt.error & 0x7F == 0, pkt.error
        return ct.decode(item, pkt.params)

    def ping(self, sid):
        self.send(sid, p.INST_PING)
        return self.status(sid)


@pytest.fixture
def emu():
    e = ServoEmulator([1, 2])
    yield e
    e.close()


@pytest.fixture
def raw(emu):
    r = Raw(emu.port_name)
    yield r
    r.close()


def wait_until(pred, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


def arm(raw, sid, units, mode=ct.MODE_CURRENT):
    assert raw.write(sid, ct.OPERATING_MODE, mode) == 0
    assert raw.write(sid, ct.BUS_WATCHDOG, units) == 0
    assert raw.write(sid, ct.TORQUE_ENABLE, 1) == 0


def events(emu, sid):
    return [e for e in emu.watchdog_events if e['id'] == sid]


def test_off_after_power_on_and_reboot_ram_item(emu, raw):
    assert raw.read(1, ct.BUS_WATCHDOG) == 0
    assert raw.write(1, ct.BUS_WATCHDOG, 5) == 0
    assert raw.read(1, ct.BUS_WATCHDOG) == 5
    raw.send(1, p.INST_REBOOT)
    raw.status(1)
    assert raw.read(1, ct.BUS_WATCHDOG) == 0


def test_written_values_in_range_only(emu, raw):
    assert raw.write(1, ct.BUS_WATCHDOG, 127) == 0
    for bad in (-1, 128, 200):                 # -1 is a status; 128.. are negative as a signed byte
        assert raw.write(1, ct.BUS_WATCHDOG, bad) == p.ERR_DATA_RANGE
    assert raw.read(1, ct.BUS_WATCHDOG) == 127


def test_expires_value_x_20ms_after_the_last_instruction_torque_on_only(emu, raw):
    # torque off: armed but not monitored
    assert raw.write(1, ct.BUS_WATCHDOG, 2) == 0
    time.sleep(6 * 2 * UNIT)
    assert raw.read(1, ct.BUS_WATCHDOG) == 2 and not events(emu, 1)
    # torque on: the interval after the last instruction is monitored
    t_sent = raw.send(1, p.INST_WRITE, p.write_params(ct.TORQUE_ENABLE.address, b'\x01'))
    raw.status(1)
    assert wait_until(lambda: events(emu, 1), 2.0)
    e = events(emu, 1)[0]
    assert e['expired_at'] - e['last_instruction'] == pytest.approx(2 * UNIT, abs=1e-9)
    assert e['last_instruction'] >= t_sent and e['applied_at'] == e['expired_at']
    assert raw.read(1, ct.BUS_WATCHDOG) == ct.BUS_WATCHDOG_EXPIRED
    assert raw.read(1, ct.TORQUE_ENABLE) == 1            # stopped, not switched off
    assert not events(emu, 2)                             # servo 2 was never armed
    print(f'\nexpiry {1e3 * (e["expired_at"] - t_sent):.1f} ms after the torque-on write was sent '
          f'(set: {1e3 * 2 * UNIT:.0f} ms)')


def test_every_instruction_addressed_to_the_servo_restarts_the_timer(emu, raw):
    """Servo 1 armed at 100 ms, servo 2 at 2.54 s; for 0.6 s the client talks only to servo 2 (every ~20 ms,
    unicast and SYNC READ naming servo 2 only): servo 1 expires, servo 2 does not. Then both armed at 2.54 s
    and fed every ~20 ms by SYNC READs naming both, PINGs and broadcast WRITEs: neither expires; corrupt
    packets addressed to servo 1 do not count."""
    arm(raw, 1, 5)
    arm(raw, 2, 127)
    t_end = time.monotonic() + 0.6
    k = 0
    while time.monotonic() < t_end:
        if k % 2:
            raw.send(p.BROADCAST_ID, p.INST_SYNC_READ, p.read_params(ct.PRESENT_POSITION.address, 4) + bytes([2]))
            raw.status(2)
        else:
            raw.ping(2)
        raw.send(1, p.INST_PING, corrupt=True)           # bad CRC: not an instruction
        k += 1
        time.sleep(0.02)
    assert events(emu, 1) and not events(emu, 2)
    assert raw.read(1, ct.BUS_WATCHDOG) == -1 and raw.read(2, ct.BUS_WATCHDOG) == 127

    assert raw.write(1, ct.BUS_WATCHDOG, 0) == 0
    assert raw.write(1, ct.BUS_WATCHDOG, 127) == 0
    t_end = time.monotonic() + 0.6
    k = 0
    while time.monotonic() < t_end:
        if k % 3 == 0:
            raw.send(p.BROADCAST_ID, p.INST_SYNC_READ, p.read_params(ct.PRESENT_POSITION.address, 4) + bytes([1, 2]))
            raw.status(1), raw.status(2)
        elif k % 3 == 1:
            raw.send(p.BROADCAST_ID, p.INST_PING)
            raw.status(1), raw.status(2)
        else:
            raw.send(p.BROADCAST_ID, p.INST_WRITE, p.write_params(ct.LED.address, b'\x01'))
        k += 1
        time.sleep(0.02)
    assert len(events(emu, 1)) == 1 and not events(emu, 2)
    for sid in (1, 2):
        last = emu.servos[sid].last_instruction
        assert time.monotonic() - last < 0.5, f'servo {sid}: timer not restarted by the broadcasts'


def test_goal_values_read_only_while_expired_until_zero_is_written(emu, raw):
    arm(raw, 1, 1)
    assert raw.write(1, ct.GOAL_CURRENT, 100) == 0
    assert wait_until(lambda: events(emu, 1), 2.0)
    before = {item: raw.read(1, item) for item in (ct.GOAL_PWM, ct.GOAL_CURRENT, ct.GOAL_VELOCITY,
                                                   ct.GOAL_POSITION)}
    for item, value in ((ct.GOAL_PWM, 10), (ct.GOAL_CURRENT, 50), (ct.GOAL_VELOCITY, 5), (ct.GOAL_POSITION, 10)):
        assert raw.write(1, item, value) == p.ERR_DATA_RANGE, item
    # a SYNC WRITE (no status packet) is not applied either
    raw.send(p.BROADCAST_ID, p.INST_SYNC_WRITE, p.sync_write_params(ct.GOAL_CURRENT.address, 2,
                                                                    {1: ct.encode(ct.GOAL_CURRENT, 70)}))
    assert {item: raw.read(1, item) for item in before} == before
    assert raw.write(1, ct.LED, 1) == 0                   # other RAM items stay writable
    assert raw.write(1, ct.BUS_WATCHDOG, 5) == p.ERR_DATA_RANGE   # re-arming needs the clear first
    assert raw.write(1, ct.BUS_WATCHDOG, 0) == 0          # clears the error
    assert raw.read(1, ct.BUS_WATCHDOG) == 0
    assert raw.write(1, ct.GOAL_CURRENT, 50) == 0
    assert raw.read(1, ct.GOAL_CURRENT) == 50


def test_emanual_example_velocity_mode(emu, raw):
    """The e-Manual's example, steps 1-8, with its numbers (Bus Watchdog 100 = 2,000 ms)."""
    m = ct.DEFAULT_MODEL
    assert raw.write(1, ct.OPERATING_MODE, ct.MODE_VELOCITY) == 0                 # 1. speed control mode,
    assert raw.write(1, ct.TORQUE_ENABLE, 1) == 0                                 #    torque on
    assert raw.write(1, ct.GOAL_VELOCITY, 50) == 0                                # 2. rotates CCW
    assert wait_until(lambda: raw.read(1, ct.PRESENT_VELOCITY) > 40)
    t_armed = raw.send(1, p.INST_WRITE, p.write_params(ct.BUS_WATCHDOG.address, b'\x64'))   # 3. 100 (2,000 ms)
    assert raw.status(1).error == 0
    time.sleep(1.5)
    assert not events(emu, 1)                                                     # not before 2,000 ms
    assert wait_until(lambda: events(emu, 1), 3.0)                               # 4. no instruction: stops,
    e = events(emu, 1)[0]
    assert e['expired_at'] - e['last_instruction'] == pytest.approx(2.0, abs=1e-9)
    assert 2.0 <= e['expired_at'] - t_armed < 2.5
    assert wait_until(lambda: abs(raw.read(1, ct.PRESENT_VELOCITY)) <= 1)        #    to standstill
    assert raw.read(1, ct.PROFILE_ACCELERATION) == 0 and raw.read(1, ct.PROFILE_VELOCITY) == 0
    assert raw.read(1, ct.BUS_WATCHDOG) == -1                                     # 5. -1, Goal read-only
    assert raw.write(1, ct.GOAL_VELOCITY, 150) == p.ERR_DATA_RANGE                # 6. Data Range Error
    assert raw.write(1, ct.BUS_WATCHDOG, 0) == 0                                  # 7. cleared
    assert raw.write(1, ct.GOAL_VELOCITY, 150) == 0                               # 8. rotates CCW again
    assert wait_until(lambda: raw.read(1, ct.PRESENT_VELOCITY) > 100)
    print(f'\nexample: stopped {e["expired_at"] - t_armed:.3f} s after arming 100 x 20 ms; '
          f'{m.rad_s_per_lsb * 150:.2f} rad/s after the clear')


@pytest.mark.parametrize('mode', [ct.MODE_CURRENT, ct.MODE_POSITION, ct.MODE_CURRENT_BASED_POSITION])
def test_stop_per_operating_mode(emu, raw, mode):
    """Current mode: Goal Current 0, no torque: the shaft coasts down through its viscous friction only, as the
    unforced motor J w' = -b w does, w(t) = w0 exp(-b t / J); position modes: the present position at the expiry
    becomes the goal and is held."""
    plant = emu.plant
    rec = []
    emu.on_plant_step = lambda t: rec.append((t, float(plant.w[0]), float(plant.i[0]), float(plant.q[0])))
    assert raw.write(1, ct.OPERATING_MODE, mode) == 0
    assert raw.write(1, ct.TORQUE_ENABLE, 1) == 0
    if mode == ct.MODE_CURRENT:
        assert raw.write(1, ct.GOAL_CURRENT, 200) == 0
    else:
        assert raw.write(1, ct.GOAL_CURRENT, 300) == 0     # current-based position: the current bound
        assert raw.write(1, ct.GOAL_POSITION, raw.read(1, ct.PRESENT_POSITION) + 4000) == 0
    assert wait_until(lambda: raw.read(1, ct.PRESENT_VELOCITY) > 20)
    assert raw.write(1, ct.BUS_WATCHDOG, 1) == 0
    assert wait_until(lambda: events(emu, 1), 2.0)
    e = events(emu, 1)[0]
    with emu._lock:
        goal = emu.servos[1].get(ct.GOAL_POSITION)
    q_stop = next(q for t, _, _, q in reversed(rec) if t <= e['applied_at'])
    time.sleep(0.3)
    after = [r for r in rec if r[0] > e['applied_at']]
    if mode == ct.MODE_CURRENT:
        assert raw.read(1, ct.GOAL_CURRENT) == 0 and raw.read(1, ct.PRESENT_CURRENT) == 0
        assert after and all(i == 0.0 for _, _, i, _ in after)
        t0, w0 = next((t, w) for t, w, _, _ in reversed(rec) if t <= e['applied_at'])
        t1, w1 = next((t, w) for t, w, _, _ in after if t >= t0 + 0.05)
        free = w0 * math.exp(-plant.b * (t1 - t0) / plant.J)
        assert w1 == pytest.approx(free, rel=0.03), (w0, w1, free)     # explicit Euler, h/tau = 0.0125
    else:
        assert goal == ct.rad_to_counts(q_stop)               # the position at the expiry
        assert raw.read(1, ct.GOAL_POSITION) == goal
        assert wait_until(lambda: abs(raw.read(1, ct.PRESENT_VELOCITY)) <= 2, 3.0)
        assert abs(raw.read(1, ct.PRESENT_POSITION) - goal) < 200   # held near it (after the overshoot)
    assert e['mode'] == mode


def test_the_emulators_own_lateness_never_stops_a_servo(emu, raw):
    """Both servos armed at 200 ms; the client pings servo 1 and servo 2 in turn, each as soon as the previous
    answer is in - but the emulator answers one ping 0.6 s late (descheduled; ``stall``). Real servos answer at
    once: the client's silence towards servo 2 is the emulator's doing, so its watchdog must not expire. Then
    the client goes silent itself: both expire, 200 ms after their last instruction (the held time included)."""
    arm(raw, 1, 10)
    arm(raw, 2, 10)
    for k in range(12):
        if k == 5:
            emu.stall(0.6)
        raw.ping(1 + k % 2)
    assert wait_until(lambda: emu.timing.get('servo_clock_paused', 0.0) >= 0.6, 2.0)
    assert not emu.watchdog_events, emu.watchdog_events
    assert wait_until(lambda: len(emu.watchdog_events) == 2, 2.0)
    for e in emu.watchdog_events:
        assert e['expired_at'] - e['last_instruction'] == pytest.approx(10 * UNIT, abs=1e-9)
