"""Command validation (the one rule), clamping, watchdog and the lock-step inbox."""
import numpy as np

from flexarm_sim.common.commands import LatestCommand, Throttle, check_command
from flexarm_sim.plant.commands import OK, TIMEOUT, WAITING, CommandGate, LockstepInbox
from flexarm_sim.arms import resolve_arm


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


def test_due_commands_act_at_their_step_late_ones_at_once_and_the_queue_is_bounded():
    """DueCommands (real time / sim time): a command names the step it acts for; queued until due, the newest due
    one taken; late ones act at once (counted, lateness kept); far-ahead and pre-reset ones refused (counted)."""
    from flexarm_sim.plant.commands import DueCommands
    due = DueCommands([1.0, 1.0], max_ahead=100)
    assert due.submit(5, 10, [0.1, 0.2], next_step=1)[0] == 'queued'
    assert due.submit(6, 10, [0.3, 0.4], next_step=1)[0] == 'queued'
    assert due.take(4) is None                               # not yet due
    assert list(due.take(5)) == [0.1, 0.2]
    assert due.take(5) is None                               # taken once
    assert due.submit(7, 10, [0.5, 0.6], next_step=5)[0] == 'queued'
    assert list(due.take(7)) == [0.5, 0.6]                   # 6 and 7 both due: the newest, 6 dropped
    status, eff = due.submit(3, 10, [9.0, 0.0], next_step=8)  # late by 5 steps: act now, clamped
    assert status == 'late' and list(eff) == [1.0, 0.0] and due.late == 1 and due.max_late_steps == 5
    assert due.submit(109, 10, [0.0, 0.0], next_step=8)[0] == 'refused' and due.far == 1
    assert due.submit(108, 10, [0.0, 0.0], next_step=8)[0] == 'queued'
    status, why = due.submit(9, 10, [float('nan'), 0.0], next_step=8)
    assert status == 'refused' and 'non-finite' in why and due.rejected == 1
    assert due.submit(50, 10, [0.0, 0.0], next_step=8, at_once=True)[0] == 'now'
    bounded = DueCommands([1.0, 1.0], max_ahead=100, max_late=50)   # a command 50 steps late still acts, 51 not
    assert bounded.submit(50, 10, [0.1, 0.1], next_step=100)[0] == 'late'
    status, why = bounded.submit(49, 10, [0.1, 0.1], next_step=100)
    assert status == 'refused' and 'too late' in why and bounded.too_late == 1
    assert bounded.counts()['stamped_too_late'] == 1
    assert bounded.accepted == 1
    due.reset(not_before_ns=20)
    assert due.take(10 ** 6) is None                         # the queue forgotten
    status, why = due.submit(5, 19, [0.0, 0.0], next_step=1)
    assert status == 'refused' and 'before the last reset' in why and due.stale == 1
    assert due.submit(5, 20, [0.0, 0.0], next_step=1)[0] == 'queued'
    assert due.counts() == {'stamped_on_time': 3, 'stamped_late': 1, 'stamped_max_late_steps': 5,
                            'stamped_far_ahead': 1, 'stamped_stale': 1, 'stamped_too_late': 0}


def _realtime_plant(**over):
    import os
    from flexarm_sim.model import load_model
    from flexarm_sim.plant import config
    from flexarm_sim.plant.runtime import PlantRuntime
    arm = resolve_arm('deluca_two_link')
    model = load_model(os.path.abspath(arm))
    values = dict(config.TABLE.defaults(), time_mode='realtime', wait_for_command=False, **over)
    return PlantRuntime(model, config.resolved(values, model))


def test_a_stamped_command_acts_exactly_at_its_step_in_real_time():
    """The plant's real-time step (timed_step, the loop's own) applies a stamped command over the integration to the
    step it names, whenever it arrived before: the delay a controller designs for is the delay it gets. While
    stamped commands come, unstamped ones (the controller's copy for other consumers) are not applied (counted);
    once they stop for command_timeout, unstamped ones act again."""
    rt = _realtime_plant()
    tau = np.zeros(2)
    with rt._lock:
        assert rt.timed_step(tau)                            # step 0 -> 1, no command yet
    assert rt.core.step_index == 1
    assert rt.submit_stamped(5, 1, [0.3, -0.2]) == (True, '')   # computed from state 1, for step 5: a 4-step delay
    assert rt.submit_effort([1.0, 1.0]) == (True, '') and rt.unstamped_superseded == 1
    applied = []
    for _ in range(6):
        with rt._lock:
            assert rt.timed_step(tau)
        applied.append((rt.core.step_index, list(tau)))
    assert applied[:3] == [(2, [0.0, 0.0]), (3, [0.0, 0.0]), (4, [0.0, 0.0])]
    assert applied[3] == (5, [0.3, -0.2]) and applied[5] == (7, [0.3, -0.2])   # from the integration 4 -> 5 on
    assert rt.submit_stamped(3, 1, [0.1, 0.1]) == (True, '')    # late (step 3 is past): acts from the next step
    with rt._lock:
        assert rt.timed_step(tau)
    assert list(tau) == [0.1, 0.1] and rt.due.late == 1 and rt.due.max_late_steps == 5
    # no stamped command for command_timeout: an unstamped one acts again
    steps = int(round(rt.gate.timeout * rt.rate)) + 2
    for _ in range(steps):
        with rt._lock:
            rt.timed_step(tau)
    assert rt.submit_effort([0.7, 0.7]) == (True, '')
    with rt._lock:
        assert rt.timed_step(tau)
    assert list(tau) == [0.7, 0.7] and rt.unstamped_superseded == 1
    values = rt.diagnostics()[2]
    assert values['stamped_on_time'] == 1 and values['stamped_late'] == 1 and values['unstamped_superseded'] == 1
    # stamped commands the rule refuses or clamps count with the others (they were left out of /diagnostics)
    before = rt.diagnostics()[2]
    ok, why = rt.submit_stamped(rt.core.step_index + 2, 1, [float('nan'), 0.0])
    assert not ok and rt.due.rejected == 1
    lim = float(rt.gate.limits[0])
    assert rt.submit_stamped(rt.core.step_index + 2, 1, [10 * lim, 0.0]) == (True, '')
    for _ in range(2):
        with rt._lock:
            assert rt.timed_step(tau)
    assert tau[0] == lim
    values = rt.diagnostics()[2]
    assert values['commands_rejected'] == before['commands_rejected'] + 1 and values['last_reject_reason'] == why
    assert values['commands_clamped'] == before['commands_clamped'] + 1
    assert values['commands_accepted'] == before['commands_accepted'] + 1      # once, when it acted


def test_a_reset_forgets_queued_stamped_commands():
    rt = _realtime_plant()
    tau = np.zeros(2)
    import time
    assert rt.submit_stamped(3, time.time_ns(), [0.5, 0.5]) == (True, '')
    assert rt.reset()[0]
    for _ in range(4):
        with rt._lock:
            assert rt.timed_step(tau)
    assert list(tau) == [0.0, 0.0]
    ok, why = rt.submit_stamped(6, time.time_ns() - 10 ** 9, [0.5, 0.5])     # from a state before the reset
    assert not ok and 'before the last reset' in why
