"""Command validation (the one rule), clamping, watchdog and the lock-step inbox."""
import numpy as np

from flexarm_sim.common.commands import LatestCommand, Throttle, check_command
from flexarm_sim.plant.commands import OK, TIMEOUT, WAITING, CommandGate, LockstepInbox


def test_check_command():
    lim = np.array([2.0, 1.0])
    eff, reason, cl = check_command([0.5, -0.5], -lim, lim)
    assert reason == '' and not cl and list(eff) == [0.5, -0.5]
    eff, _, cl = check_command([1e9, -1e9], -lim, lim)
    assert cl and list(eff) == [2.0, -1.0]
    eff, _, cl = check_command([5.0, -5.0], [0.0, -3.0], [1.0, 3.0])         # asymmetric bounds
    assert cl and list(eff) == [1.0, -3.0]
    for bad in ([1.0], [1.0, 2.0, 3.0], [float('nan'), 0.0], [0.0, float('inf')], [], ['x', 1]):
        eff, reason, _ = check_command(bad, -lim, lim)
        assert eff is None and reason


def test_latest_command_counts_and_keeps_the_previous_on_reject():
    c = LatestCommand([-1.0, -1.0], [1.0, 1.0])
    assert c.submit([0.5, 2.0], 1.0) == (True, 'clamped')
    assert c.submit([float('nan'), 0.0], 2.0)[0] is False
    value, t, seq = c.get()
    assert list(value) == [0.5, 1.0] and t == 1.0 and seq == 1
    assert (c.accepted, c.rejected, c.clamped) == (1, 1, 1)


def test_gate_keeps_previous_command_on_reject_and_times_out():
    g = CommandGate([2.0, 2.0], timeout=0.1)
    out = np.zeros(2)
    assert g.torque(0.0, out) == WAITING and list(out) == [0, 0]
    assert g.submit([1.0, -1.0], 0.0)[0]
    assert g.torque(0.05, out) == OK and list(out) == [1.0, -1.0]
    ok, reason = g.submit([float('nan'), 0.0], 0.06)
    assert not ok and 'non-finite' in reason and g.rejected == 1
    assert g.submit([1.0], 0.06)[0] is False and g.rejected == 2
    assert g.torque(0.09, out) == OK and list(out) == [1.0, -1.0]       # previous kept until timeout
    assert g.torque(0.11, out) == TIMEOUT and list(out) == [0.0, 0.0]   # measured from the last *valid* one
    assert g.torque(0.2, out) == TIMEOUT and g.timeouts == 1            # one lapse counted once
    assert g.submit([5.0, 0.5], 0.3) == (True, 'clamped') and g.clamped == 1
    assert g.torque(0.3, out) == OK and list(out) == [2.0, 0.5]         # recovers at once
    g.set_limits([1.0, 1.0])
    assert g.torque(0.31, out) == OK and list(out) == [1.0, 0.5]
    g.clear()
    assert g.torque(0.32, out) == WAITING and list(out) == [0.0, 0.0]


def test_throttle():
    th = Throttle(1.0)
    assert th(0.0) and not th(0.5) and th(1.0) and th.suppressed == 1


def test_lockstep_inbox_orders_by_step_and_checks_stamp():
    box = LockstepInbox([1.0])
    out = np.zeros(1)
    box.expect(1, 100)
    assert box.submit(2, 0, [0.2])[0]            # future: buffered
    assert box.submit(1, 999, [0.1])[0]           # wrong stamp: taken but refused
    with box.cond:
        assert not box.take(out)
    assert box.stale == 1
    assert box.submit(1, 100, [5.0])[0] and box.clamped == 1
    with box.cond:
        assert box.take(out) and out[0] == 1.0
    box.expect(2, 200)
    with box.cond:
        assert box.take(out) and out[0] == 0.2     # stamp 0 accepted
    assert not box.submit(1, 0, [0.0])[0] and box.stale == 2
    assert not box.submit(3, 0, [float('nan')])[0] and box.rejected == 1
    box.reset()
    box.expect(1, 300)
    with box.cond:
        assert not box.take(out)
