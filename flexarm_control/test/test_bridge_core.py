"""BridgeCore (no ROS): parameters, command validation/clamping, watchdog, faults, back-off, reconnect.

Runs the core against the real vendor SDK on a real pty served by ServoEmulator (in this process).
Time for the watchdog and the back-off is passed in explicitly (``cycle(now)``), so these tests do
not depend on machine load; only the serial replies use the wall clock (generous read timeout). The servos' Bus
Watchdog runs on the wall clock (it is the servo's): off in these tests (bus_watchdog 0) except in the tests of
it, which either feed the servos far more often than its time or stop feeding them on purpose.
"""
import contextlib
import math
import os

import numpy as np
import pytest

from flexarm_control.bridge import control_table as ct
from flexarm_control.bridge.config import BridgeConfig, ConfigError, flatten, load_yaml
from flexarm_control.bridge.core import (DISABLED, ENABLED, FAULT, RECONNECTING, WD_OK,
                                         WD_TIMEOUT, WD_WAITING, Backoff, BridgeCore)
from flexarm_control.emulation.servo_emulator import ServoEmulator
from flexarm_control.bridge.servo_bus import ServoBus

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
KT = 1.5


def params(port, **over):
    p = {
        'port': port, 'baud_rate': 1000000, 'loop_rate': 250.0, 'command_timeout': 0.2,
        'read_timeout': 0.5, 'hardware_status_period': 0,   # generous: loaded machines
        'bus_watchdog': 0.0,
        'reconnect': {'initial_delay': 0.1, 'max_delay': 0.8, 'multiplier': 2.0},
        'joint_names': ['a', 'b'],
        'joints': {
            'a': {'servo_id': 1, 'torque_constant': KT, 'current_limit': 0.5},
            'b': {'servo_id': 2, 'torque_constant': KT, 'direction': -1, 'gear_ratio': 2.0,
                  'zero_offset': 0.3, 'current_limit': 0.4, 'effort_limit': 0.5},
        },
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(p.get(k), dict):
            p[k] = {**p[k], **v}
        else:
            p[k] = v
    return flatten(p)


@pytest.fixture
def emu(tmp_path):
    e = ServoEmulator([1, 2], link_path=str(tmp_path / 'ttyDXL'))
    yield e
    e.close()


def make_core(emu, **over):
    cfg = BridgeConfig.from_mapping(params(emu.port_name, **over))
    logs = []
    core = BridgeCore(cfg, ServoBus(cfg.bus_config()), log=lambda lvl, m: logs.append((lvl, m)))
    core.logs = logs
    return core


@pytest.fixture
def core(emu):
    c = make_core(emu)
    yield c
    c.shutdown()


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def goal(core, emu, sid, item):
    """A Goal item as the emulator has it, after a round trip (sync writes get no reply)."""
    core.bus.ping_all()
    return emu.servos[sid].get(item)


def recover(core, t):
    """Run reconnect attempts (explicit time) until DISABLED; returns the time reached."""
    for _ in range(6):
        t = max(t, core.next_attempt) + 1e-3
        core.cycle(now=t)
        if core.state == DISABLED:
            return t
    raise AssertionError(f'no recovery: {core.last_attempt_error}')


def connect(core, t=0.0):
    core.cycle(now=t)
    assert core.state == DISABLED, core.last_attempt_error


def enable(core, t):
    core._requests.put(req := __import__('flexarm_control.bridge.core', fromlist=['Request']).Request('enable'))
    core.cycle(now=t)
    assert req.success, req.message
    assert core.state == ENABLED


@contextlib.contextmanager
def armed_core(emu):
    """A core whose servos' Bus Watchdog is 40 ms, connected, enabled and driving both joints (one cycle of
    0.3 N m: Goal Current set); shut down afterwards."""
    c = make_core(emu, bus_watchdog=0.04)
    try:
        connect(c)
        enable(c, 0.0)
        c.submit_effort([0.3, 0.3], now=0.001)
        c.cycle(now=0.004)
        assert goal(c, emu, 1, ct.GOAL_CURRENT) != 0
        yield c
    finally:
        c.shutdown()


# ----------------------------------------------------------------------------- configuration
def test_shipped_yaml_is_valid():
    cfg = load_yaml(os.path.join(ROOT, 'flexarm_bringup', 'config', 'hardware_bridge.yaml'))
    assert cfg.names == ['shoulder', 'elbow']
    assert cfg['watchdog_action'] == 'torque_off'
    sh = cfg.joints[0]
    # effort limit = current limit (rounded down to whole LSB) x k_t x gear
    assert sh.effort_limit == pytest.approx(1.0 * 1.78, rel=3e-3) and sh.effort_limit <= 1.78


@pytest.mark.parametrize('name,value,match', [
    ('loop_rate', 5000.0, 'loop_rate'),
    ('baud_rate', 12345, 'baud_rate'),
    ('watchdog_action', 'brake', 'watchdog_action'),
    ('command_timeout', 0.0, 'command_timeout'),
    ('joints.a.direction', 2, 'joints.a.direction'),
    ('joints.a.mode', 'pwm', 'joints.a.mode'),
    ('joints.a.current_limit', 50.0, 'joints.a.current_limit'),
    ('joints.b.position_limits', [1.0, -1.0], 'joints.b.position_limits'),
    ('joints.a.torque_constant', float('nan'), 'joints.a.torque_constant'),
    ('joints.b.servo_id', 1, 'joints'),            # duplicate id
    ('joints.c.servo_id', 3, 'joints.c'),          # joint not in joint_names
    ('joints.a.servoid', 3, 'joints.a.servoid'),   # typo
    ('loop_rat', 3, 'loop_rat'),                   # typo
    ('reconnect.max_delay', 0.01, 'reconnect.max_delay'),
])
def test_invalid_parameters_are_named(name, value, match):
    p = params('/dev/null')
    p[name] = value
    with pytest.raises(ConfigError) as ei:
        BridgeConfig.from_mapping(p)
    assert ei.value.name == match, str(ei.value)
    assert f"'{match}'" in str(ei.value)


def test_missing_joint_names_and_servo_id():
    p = params('/dev/null')
    del p['joint_names']
    with pytest.raises(ConfigError, match='joint_names'):
        BridgeConfig.from_mapping(p)
    p = params('/dev/null')
    del p['joints.b.servo_id']
    with pytest.raises(ConfigError, match='joints.b.servo_id'):
        BridgeConfig.from_mapping(p)


def test_the_bus_config_defaults_are_the_bridge_parameters_defaults():
    """ServoBusConfig (the bus used without the node: tools, benches) and the node's parameter table default alike
    (issue 25: the safety-block poll had drifted, 100 reads against the parameter's 50)."""
    import dataclasses

    from flexarm_control.bridge.config import TABLE
    from flexarm_control.bridge.servo_bus import ServoBusConfig
    bus = {f.name: f.default for f in dataclasses.fields(ServoBusConfig)}
    for param, field in (('hardware_status_period', 'hw_status_period'), ('baud_rate', 'baudrate'),
                         ('model', 'model')):
        assert TABLE[param].default == bus[field], (param, TABLE[param].default, bus[field])
    assert TABLE['hardware_status_period'].default == ct.HARDWARE_STATUS_PERIOD


def test_backoff_schedule():
    b = Backoff(0.1, 2.0, 2.0)
    assert b.schedule(7) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    assert Backoff(0.5, 0.5, 3.0).schedule(3) == [0.5, 0.5, 0.5]
    assert Backoff(0.1, 5.0, 2.0).delay(10 ** 6) == 5.0


# ----------------------------------------------------------------------------- normal operation
def test_starts_disabled_torque_off_and_reads(core, emu):
    assert core.state == RECONNECTING
    assert core.cycle(now=0.0) is None          # connect attempt (its probe read is not published)
    assert core.state == DISABLED
    assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    r = core.cycle(now=0.004)
    assert r is not None and r.ok and r.names == ['a', 'b']
    # joint b: q = -theta/2 + 0.3 with theta = 0
    assert r.position == pytest.approx([0.0, 0.3], abs=2e-3)
    # a command while disabled is accepted but nothing is written
    core.submit_effort([0.3, 0.3], now=0.005)
    core.cycle(now=0.008)
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == 0


def test_enable_commands_units_and_sign(core, emu):
    connect(core)
    enable(core, 0.01)
    assert emu.torque_enabled(1) and emu.torque_enabled(2)
    assert core.watchdog == WD_WAITING
    ok, _ = core.submit_effort([0.3, 0.2], now=0.02)
    assert ok
    core.cycle(now=0.03)
    assert core.watchdog == WD_OK
    lsb = ct.DEFAULT_MODEL.current_amp_per_lsb
    # a: i = tau / kt ; b: i = -tau / (kt * 2)
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.3 / KT / lsb)
    assert goal(core, emu, 2, ct.GOAL_CURRENT) == round(-0.2 / (KT * 2) / lsb)


def test_prompt_write_applies_a_command_when_it_arrives(core, emu):
    """The node's loop, after publishing a reading, waits for the command that answers it and writes it at
    once (write_now) instead of at the next cycle's write; the wait ends on the command, not on a timer."""
    import threading
    lsb = ct.DEFAULT_MODEL.current_amp_per_lsb
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.1, 0.1], now=0.001)
    assert core.cycle(now=0.004) is not None
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.1 / KT / lsb)
    seq = core.command_seq()
    assert not core.wait_for_command(seq, 0.01)                 # nothing new: the wait times out
    threading.Timer(0.05, lambda: core.submit_effort([0.2, 0.2])).start()
    assert core.wait_for_command(seq, 30.0)                     # woken by the command
    assert core.write_now(now=0.006) and core.prompt_writes == 1
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.2 / KT / lsb)
    assert core.diagnostics()['command_latency_max_ms'] >= 0.0
    core._do_disable(0.007)
    assert not core.write_now(now=0.008)                        # only while enabled


def test_validation_rejects_and_keeps_previous_command(core, emu):
    connect(core)
    enable(core, 0.01)
    core.submit_effort([0.1, 0.1], now=0.02)
    for bad in ([math.nan, 0.0], [0.0, math.inf], [1.0], [1.0, 2.0, 3.0], [], ['x', 1]):
        ok, reason = core.submit_effort(bad, now=0.03)
        assert not ok and reason
    assert core.commands_rejected == 6
    core.cycle(now=0.05)
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.1 / KT / ct.DEFAULT_MODEL.current_amp_per_lsb)
    assert core.diagnostics()['last_reject_reason']


def test_clamping_to_effort_limits(core, emu):
    connect(core)
    enable(core, 0.01)
    ok, reason = core.submit_effort([100.0, -100.0], now=0.02)
    assert ok and reason == 'clamped'
    assert core.commands_clamped == 1
    core.cycle(now=0.03)
    lim_a = int(0.5 / ct.DEFAULT_MODEL.current_amp_per_lsb)
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == lim_a                     # current limit 0.5 A
    # b: effort_limit 0.5 N m < 0.4 A * 1.5 * 2 = 1.2 N m -> i = +0.5 / 3 A (direction -1, tau < 0)
    assert goal(core, emu, 2, ct.GOAL_CURRENT) == round(0.5 / 3.0 / ct.DEFAULT_MODEL.current_amp_per_lsb)
    assert core.effort_limit == pytest.approx([lim_a * ct.DEFAULT_MODEL.current_amp_per_lsb * KT, 0.5])


def test_soft_position_limit_cuts_outward_torque(emu):
    c = make_core(emu, joints={'a': {'servo_id': 1, 'torque_constant': KT, 'current_limit': 0.5,
                                     'position_limits': [-1.0, 0.05]},
                               'b': {'servo_id': 2, 'torque_constant': KT}})
    try:
        connect(c)
        enable(c, 0.01)
        emu.plant.q[0] = 0.2                      # joint a beyond its upper limit
        c.submit_effort([0.3, 0.0], now=0.02)
        c.cycle(now=0.03)
        assert goal(c, emu, 1, ct.GOAL_CURRENT) == 0
        assert c.limit_interventions >= 1
        c.submit_effort([-0.3, 0.0], now=0.04)    # back towards the range: allowed
        c.cycle(now=0.05)
        assert goal(c, emu, 1, ct.GOAL_CURRENT) < 0
    finally:
        c.shutdown()


# ----------------------------------------------------------------------------- watchdog
def test_watchdog_torque_off_is_latched(core, emu):
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.2, 0.2], now=0.01)
    core.cycle(now=0.1)
    assert core.watchdog == WD_OK and emu.torque_enabled(1)
    core.cycle(now=0.2)                        # 0.19 s after the command: still fresh
    assert core.state == ENABLED
    core.cycle(now=0.22)                       # 0.21 s > 0.2 s timeout
    assert core.state == DISABLED and core.watchdog == WD_TIMEOUT
    assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    assert core.watchdog_timeouts == 1
    assert core.level()[0] == 'warn'
    core.submit_effort([0.2, 0.2], now=0.3)    # a late command does not re-arm the servos
    core.cycle(now=0.31)
    assert core.state == DISABLED and not emu.torque_enabled(1)


def test_watchdog_from_enable_without_any_command(core, emu):
    connect(core)
    core.submit_effort([0.2, 0.2], now=0.0)    # before enable: does not count as fresh
    enable(core, 1.0)
    core.cycle(now=1.1)
    assert core.watchdog == WD_WAITING and goal(core, emu, 1, ct.GOAL_CURRENT) == 0
    core.cycle(now=1.25)
    assert core.state == DISABLED and core.watchdog == WD_TIMEOUT


def test_watchdog_hold_position_until_next_command(emu):
    c = make_core(emu, watchdog_action='hold_position', hold_gains={'kp': 5.0, 'kd': 0.0})
    try:
        connect(c)
        enable(c, 0.0)
        c.submit_effort([0.2, 0.0], now=0.01)
        c.cycle(now=0.02)
        c.cycle(now=0.3)                            # timeout -> hold here
        assert c.state == ENABLED and c.watchdog == WD_TIMEOUT and c.level()[0] == 'warn'
        q_hold = c.hold_q.copy()
        emu.plant.q[0] += 0.05                      # pushed away: restoring torque toward q_hold
        c.cycle(now=0.31)
        assert goal(c, emu, 1, ct.GOAL_CURRENT) < 0
        assert c.hold_q == pytest.approx(q_hold)
        c.submit_effort([0.1, 0.0], now=0.32)       # next command resumes
        c.cycle(now=0.33)
        assert c.watchdog == WD_OK and goal(c, emu, 1, ct.GOAL_CURRENT) > 0
    finally:
        c.shutdown()


# ----------------------------------------------------------------------------- faults
def fail_next_read(core, emu):
    """Make the next cycle's read fail, independent of timing: corrupt the first reply it gets (the
    state reply, or, when the bus re-synchronises first, the barrier reply of every servo)."""
    emu.corrupt_next(len(core.bus.ids) if core.bus._desync else 1, 'crc')


def test_silent_servo_fault_torque_off_all_then_reconnect_with_backoff(emu):
    core = make_core(emu, fault_after_errors=1)
    try:
        _silent_servo_fault(core, emu)
    finally:
        core.shutdown()


def _silent_servo_fault(core, emu):
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.1, 0.1], now=0.0)
    core.cycle(now=0.01)
    emu.set_silent(True)
    assert core.cycle(now=0.02) is None                 # read timeout -> fault
    assert core.state == FAULT and 'timeout' in core.last_fault
    # torque-off writes were sent (and applied by the emulator) even though nobody answers
    assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    assert core.level()[0] == 'error'
    assert core.cycle(now=0.05) is None and core.state == FAULT     # before initial_delay (0.1 s)
    core.cycle(now=0.13)                                             # attempt 1 fails
    assert core.state == RECONNECTING and core.failed_attempts == 1
    assert core.next_attempt >= core.clock() + 0.15                  # next delay 0.2 s
    emu.set_silent(False)
    core.cycle(now=core.next_attempt - 1e-3)
    assert core.state == RECONNECTING
    core.cycle(now=core.next_attempt + 1e-3)
    assert core.state == DISABLED and core.reconnects == 1           # recovered, torque stays off
    assert not emu.torque_enabled(1)
    assert core.cycle(now=10.0) is not None


def test_crc_error_never_published_and_counted(emu):
    core = make_core(emu, fault_after_errors=1)
    try:
        connect(core)
        stamps = [core.cycle(now=0.01).stamp]
        emu.corrupt_next(1, 'crc')
        assert core.cycle(now=0.02) is None
        assert core.bus.counters.crc_errors == 1 and core.state == FAULT
        t = recover(core, 0.2)
        r = core.cycle(now=t + 0.1)
        assert r is not None and r.stamp > stamps[-1]
    finally:
        core.shutdown()


def test_single_read_error_is_counted_not_a_fault(core, emu):
    """Defaults (shipped policy): one failed read skips that cycle (no publication, no write) and is
    reported in the diagnostics; the next read is valid and operation goes on, torque on."""
    assert core.fault_after == 3 and core.window_errors == 10 and core.window_period == 1.0
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.1, 0.1], now=0.001)
    assert core.cycle(now=0.004) is not None
    emu.corrupt_next(1, 'crc')
    core.submit_effort([0.2, 0.2], now=0.006)
    assert core.cycle(now=0.008) is None
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.1 / KT / ct.DEFAULT_MODEL.current_amp_per_lsb)  # not written
    assert core.state == ENABLED and emu.torque_enabled(1) and emu.torque_enabled(2)
    d = core.diagnostics()
    assert d['crc_errors'] == 1 and d['read_errors_tolerated'] == 1 and d['faults'] == 0
    assert d['consecutive_read_errors'] == 1 and core.level()[0] == 'ok'
    r = core.cycle(now=0.012)
    assert r is not None and r.ok and core.consecutive_errors == 0 and core.state == ENABLED
    assert goal(core, emu, 1, ct.GOAL_CURRENT) == round(0.2 / KT / ct.DEFAULT_MODEL.current_amp_per_lsb)


def test_consecutive_read_errors_make_a_fault(core, emu):
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.1, 0.1], now=0.0)
    core.cycle(now=0.004)
    for k in range(2):                       # below fault_after_errors = 3
        fail_next_read(core, emu)
        assert core.cycle(now=0.008 + 0.004 * k) is None
        assert core.state == ENABLED
    fail_next_read(core, emu)
    assert core.cycle(now=0.02) is None
    assert core.state == FAULT and '3 time(s) in a row' in core.last_fault
    assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    assert core.read_errors_tolerated == 2


def test_scattered_read_errors_within_the_window_make_a_fault(emu):
    """Never two in a row, but fault_window.errors failures within fault_window.period -> fault;
    the same failures spread over more than the period are tolerated."""
    c = make_core(emu, fault_after_errors=2, fault_window={'errors': 4, 'period': 1.0})
    try:
        connect(c)
        enable(c, 0.0)
        t = 0.0
        for k in range(6):                   # error, good read, error, ... 0.35 s apart: <= 3 per 1 s
            t += 0.35
            c.submit_effort([0.0, 0.0], now=t)
            fail_next_read(c, emu)
            assert c.cycle(now=t) is None
            c.submit_effort([0.0, 0.0], now=t + 0.01)
            assert c.cycle(now=t + 0.01) is not None
        assert c.state == ENABLED and c.read_errors_tolerated == 6
        for k in range(4):                   # 4 errors within 0.1 s, each followed by a good read
            t += 0.02
            c.submit_effort([0.0, 0.0], now=t)
            fail_next_read(c, emu)
            assert c.cycle(now=t) is None
            if c.state == FAULT:
                break
            c.submit_effort([0.0, 0.0], now=t + 0.01)
            assert c.cycle(now=t + 0.01) is not None
        assert c.state == FAULT and 'within 1 s' in c.last_fault, c.last_fault
        assert k == 0  # the window already held 3 errors of the last 1 s (0.35 s apart): the 4th trips it
    finally:
        c.shutdown()


def test_tolerated_errors_below_fault_threshold(emu):
    c = make_core(emu, fault_after_errors=3)
    try:
        connect(c)
        for k in range(2):
            fail_next_read(c, emu)
            assert c.cycle(now=0.01 * (k + 1)) is None
        assert c.state == DISABLED and c.skipped_reads == 2
        assert c.cycle(now=0.03) is not None
    finally:
        c.shutdown()


def test_hardware_error_torque_off_all_and_reboot(core, emu):
    connect(core)
    enable(core, 0.0)
    core.submit_effort([0.1, 0.1], now=0.0)
    core.cycle(now=0.01)
    emu.set_hardware_error(2, ct.HW_OVERLOAD)          # servo 2 shuts itself down
    r = core.cycle(now=0.02)
    assert r is not None and r.ok                        # that reading itself is valid
    assert core.state == FAULT and 'overload' in core.last_fault
    assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    core.cycle(now=0.2)                                  # the error persists: attempt fails
    assert core.state == RECONNECTING and 'hardware error' in core.last_attempt_error
    req = __import__('flexarm_control.bridge.core', fromlist=['Request']).Request('reboot')
    core._requests.put(req)
    core.cycle(now=0.3)
    assert req.success and '2' in req.message, req.message
    assert emu.servos[2].hardware_error == 0
    core.cycle(now=1.0)
    assert core.state == DISABLED


def test_port_lost_and_back(core, emu):
    connect(core)
    enable(core, 0.0)
    emu.close_port()
    core.cycle(now=0.01)
    assert core.state == FAULT and 'port' in core.last_fault
    core.cycle(now=0.2)
    assert core.state == RECONNECTING
    emu.reopen_port()                                    # same link path, new pty
    core.cycle(now=core.next_attempt + 0.001)
    assert core.state == DISABLED, core.last_attempt_error
    assert core.cycle(now=5.0) is not None


def test_enable_refused_while_reconnecting(emu):
    emu.set_silent(True)
    c = make_core(emu)
    try:
        c.cycle(now=0.0)
        assert c.state == RECONNECTING and c.level()[0] == 'error'
        from flexarm_control.bridge.core import Request
        req = Request('enable')
        c._requests.put(req)
        c.cycle(now=0.01)
        assert not req.success and 'reconnecting' in req.message
        assert not emu.torque_enabled(1)
    finally:
        c.shutdown()


def test_max_attempts_gives_up(emu):
    emu.set_silent(True)
    c = make_core(emu, reconnect={'max_attempts': 2})
    try:
        c.cycle(now=0.0)
        c.cycle(now=c.next_attempt + 1e-3)
        assert c.gave_up and '(gave up)' in c.level()[1]
    finally:
        c.shutdown()


def test_position_mode_joint(emu):
    c = make_core(emu, joints={'a': {'servo_id': 1, 'torque_constant': KT, 'mode': 'current_position',
                                     'position_limits': [-1.0, 1.0]},
                               'b': {'servo_id': 2, 'torque_constant': KT}})
    try:
        connect(c)
        enable(c, 0.0)
        c.submit_effort([0.0, 0.1], now=0.005)
        ok, why = c.submit_position([5.0, 0.0], now=0.005)            # clamped to 1.0 rad
        assert ok and why == 'clamped'
        c.cycle(now=0.01)
        assert goal(c, emu, 1, ct.GOAL_POSITION) == ct.rad_to_counts(1.0)
        assert emu.servos[1].get(ct.OPERATING_MODE) == ct.MODE_CURRENT_BASED_POSITION
        assert goal(c, emu, 1, ct.GOAL_CURRENT) == emu.servos[1].get(ct.CURRENT_LIMIT)  # bound kept
        assert goal(c, emu, 2, ct.GOAL_CURRENT) > 0
        c.submit_effort([0.0, 0.1], now=0.25)                       # effort fresh, position stale
        c.cycle(now=0.26)
        assert c.state == DISABLED and c.watchdog == WD_TIMEOUT
    finally:
        c.shutdown()


def test_diagnostics_values_are_plain(core, emu):
    connect(core)
    core.cycle(now=0.01)
    d = core.diagnostics()
    for key in ('state', 'watchdog', 'achieved_rate_hz', 'cycle_io_mean_ms', 'cycle_io_max_ms', 'read_failures',
                'crc_errors', 'write_failures', 'commands_rejected', 'commands_clamped', 'reconnects'):
        assert key in d
    s = core.servo_status()
    assert [x['servo_id'] for x in s] == [1, 2]
    assert s[0]['voltage_v'] == pytest.approx(12.0) and s[0]['temperature_c'] == pytest.approx(35.0)
    assert all(isinstance(v, (int, float, str, bool)) for v in d.values())
    assert np.isfinite(s[0]['position_rad'])


# ----------------------------------------------------------------------------- Bus Watchdog, ~/enable confirmation
@pytest.mark.parametrize('value,loop_rate', [(0.03, 250.0), (0.01, 250.0), (2.56, 250.0), (-0.02, 250.0),
                                             (0.1, 20.0)])           # 0.1 s < 4 periods at 20 Hz
def test_bus_watchdog_parameter_is_validated(value, loop_rate):
    p = params('/dev/null')
    p['bus_watchdog'], p['loop_rate'] = value, loop_rate
    with pytest.raises(ConfigError) as ei:
        BridgeConfig.from_mapping(p)
    assert ei.value.name == 'bus_watchdog', str(ei.value)
    for ok, units in ((0.0, 0), (0.02, 1), (0.1, 5), (2.54, 127)):
        p['bus_watchdog'], p['loop_rate'] = ok, 250.0
        assert BridgeConfig.from_mapping(p).bus_watchdog_units == units


def test_arm_identity_is_the_arm_resolvers_and_must_match_the_joints():
    from flexarm_sim.arms import arm_id, resolve_arm
    p = params('/dev/null', joint_names=['shoulder', 'elbow'],
               joints={'shoulder': {'servo_id': 1}, 'elbow': {'servo_id': 2}})
    p = {k: v for k, v in p.items() if not k.startswith(('joints.a.', 'joints.b.'))}
    cfg = BridgeConfig.from_mapping(p)
    path, ident = cfg.arm_identity()                       # default arm: deluca_two_link
    assert path == resolve_arm('deluca_two_link') and ident == arm_id(path, 'deluca_two_link')
    assert ident.startswith('deluca_two_link:') and len(ident.split(':')[1]) == 12
    p['arm'] = 'slewing_beam'                              # one joint 'hub'
    with pytest.raises(ConfigError) as ei:
        BridgeConfig.from_mapping(p).arm_identity()
    assert ei.value.name == 'arm' and "'hub'" in str(ei.value)
    p['arm'] = 'no_such_arm'
    with pytest.raises(ConfigError, match='arm'):
        BridgeConfig.from_mapping(p).arm_identity()


def test_enable_confirmation_rule():
    from flexarm_control.bridge.core import confirm_enable
    ident = 'deluca_two_link:0123456789ab'
    assert confirm_enable(ident, ident) is None
    for given in ('', ' ', 'deluca_two_link', ident + ' ', ident.upper(), 'deluca_two_link:000000000000'):
        assert confirm_enable(given, ident) is not None, given
    assert 'no arm_id' in confirm_enable(ident, '')


def test_enable_arms_every_servo_and_its_goal_writes_keep_it_fed(emu):
    """~/enable: Bus Watchdog armed (5 x 20 ms) on every servo before its torque goes on; a bridge cycling at
    250 Hz feeds both servos (instructions ~4 ms apart << 100 ms): no expiry, no check needed."""
    c = make_core(emu, bus_watchdog=0.1)
    try:
        connect(c)
        assert all(emu.servos[i].bus_watchdog == 0 for i in (1, 2))          # disarmed while disabled
        enable(c, 0.0)
        assert all(emu.servos[i].bus_watchdog == 5 for i in (1, 2))
        assert all(emu.torque_enabled(i) for i in (1, 2))
        import time
        t_end = time.monotonic() + 0.5
        k = 0
        while time.monotonic() < t_end:
            c.submit_effort([0.05, 0.05], now=0.01 + 0.004 * k)
            c.cycle(now=0.01 + 0.004 * k)
            k += 1
            time.sleep(0.004)
        assert c.state == ENABLED and not emu.watchdog_events, (c.last_fault, emu.watchdog_events)
        assert c.diagnostics()['bus_watchdog_s'] == pytest.approx(0.1)
    finally:
        c.shutdown()


def test_expired_servos_are_a_fault_cleared_and_reported_at_reconnect(emu):
    """The bridge goes silent for 0.2 s (a hung host) with the torque on: both servos stop themselves (their
    watchdog expires 40 ms after the last instruction: Goal Current 0, 98 = -1, goals refused). The next cycle
    sees that it was silent longer than half the watchdog time, reads item 98 and faults naming the servos;
    the reconnect clears the expiry (without that the goal writes of configure() would be refused), reports it
    per servo and ~/enable works again."""
    import time
    with armed_core(emu) as c:
        time.sleep(0.2)                                                    # the bridge hangs
        assert {e['id'] for e in emu.watchdog_events} == {1, 2}
        assert all(emu.servos[i].get(ct.GOAL_CURRENT) == 0 for i in (1, 2))
        c.submit_effort([0.3, 0.3], now=0.205)
        c.cycle(now=0.21)
        assert c.state == FAULT and 'Bus Watchdog stopped servo(s) [1, 2]' in c.last_fault, c.last_fault
        assert 'the bridge sent a servo nothing for' in c.last_fault
        assert c.watchdog_trips == {1: 1, 2: 1}
        assert not emu.torque_enabled(1) and not emu.torque_enabled(2)   # and the fault switched torque off
        assert any('torque off confirmed by servo(s) [1, 2]' in m for _, m in c.logs)
        t = recover(c, 0.3)
        assert all(emu.servos[i].bus_watchdog == 0 for i in (1, 2))      # cleared
        msg = [m for lvl, m in c.logs if 'connected to' in m][-1]
        assert 'servo(s) [1, 2] had been stopped by their Bus Watchdog' in msg, msg
        assert c.watchdog_trips == {1: 1, 2: 1}                          # counted once
        enable(c, t + 0.01)                                               # goals accepted again
        c.submit_effort([0.1, 0.1], now=t + 0.011)
        c.cycle(now=t + 0.012)
        assert goal(c, emu, 1, ct.GOAL_CURRENT) != 0 and emu.servos[1].bus_watchdog == 2
        s = c.servo_status()
        assert s[0]['bus_watchdog_trips'] == 1 and s[0]['torque_off'] == 'confirmed'


def test_a_stall_between_read_and_write_is_found_before_the_write(emu):
    """The host stalls after the cycle's read went out and before its write (a SIGSTOP lands anywhere): the servos
    expire, and when the bridge resumes its command watchdog has also run out. The expiry is found before anything
    is written - a FAULT naming the servos and the silence, counted, cleared and reported at the reconnect - not
    hidden by the watchdog's torque off (whose re-enable would clear it unreported; CI saw that)."""
    import time
    with armed_core(emu) as c:
        read = c.bus.read_state

        def read_then_stall():
            r = read()
            time.sleep(0.2)                                              # the bridge hangs after its read
            return r
        c.bus.read_state = read_then_stall
        c.cycle(now=0.5)                                                 # command watchdog (0.2 s) due as well
        c.bus.read_state = read
        assert {e['id'] for e in emu.watchdog_events} == {1, 2}
        assert c.state == FAULT and 'Bus Watchdog stopped servo(s) [1, 2]' in c.last_fault, c.last_fault
        assert 'the bridge sent a servo nothing for 0.2' in c.last_fault, c.last_fault
        assert c.watchdog_trips == {1: 1, 2: 1}
        recover(c, 0.6)
        msg = [m for lvl, m in c.logs if 'connected to' in m][-1]
        assert 'servo(s) [1, 2] had been stopped by their Bus Watchdog' in msg, msg


def test_expiry_during_a_link_outage_is_found_at_reconnect(emu):
    """The servos expire while the bridge cannot reach them at all (adapter unplugged with the torque on): the
    fault's torque off is NOT confirmed by any servo - reported per servo with what stops them instead - and
    the reconnect finds them stopped by their watchdog, clears it and confirms the torque off per servo."""
    with armed_core(emu) as c:
        emu.close_port()
        c.cycle(now=0.01)
        assert c.state == FAULT and set(c.torque_off_failed) == {1, 2}
        fault_log = [m for lvl, m in c.logs if 'FAULT' in m][-1]
        assert 'torque off NOT confirmed by servo(s) [1, 2]' in fault_log and 'no servo' not in fault_log
        assert 'Bus Watchdog stops it 0.04 s after the last instruction' in fault_log, fault_log
        s = c.servo_status()
        assert all(x['torque_off_unconfirmed'] and x['torque_off'].startswith('NOT confirmed') for x in s)
        assert emu.torque_enabled(1) and emu.torque_enabled(2)           # the broadcast never arrived ...
        assert wait_until(lambda: len(emu.watchdog_events) == 2, 2.0)     # ... the servos stopped themselves
        emu.reopen_port()
        recover(c, 0.5)
        msg = [m for lvl, m in c.logs if 'connected to' in m][-1]
        assert 'torque off confirmed by every servo (servo(s) [1, 2] had not confirmed it at the fault)' in msg
        assert 'servo(s) [1, 2] had been stopped by their Bus Watchdog' in msg, msg
        assert c.torque_off_failed == {} and not emu.torque_enabled(1)
        assert [x['torque_off'] for x in c.servo_status()] == ['confirmed (on reconnect)'] * 2


def test_old_firmware_without_bus_watchdog_is_refused_unless_disabled(emu):
    for s in emu.servos.values():
        s.set(ct.FIRMWARE_VERSION, 37)
    c = make_core(emu, bus_watchdog=0.1)
    try:
        c.cycle(now=0.0)
        assert c.state == RECONNECTING and 'firmware v37 has no Bus Watchdog' in c.last_attempt_error
    finally:
        c.shutdown()
    c = make_core(emu, bus_watchdog=0.0)
    try:
        connect(c)
        enable(c, 0.01)
        assert emu.servos[1].bus_watchdog == 0
    finally:
        c.shutdown()


def wait_until(pred, timeout):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()
