"""Issue 28 item 4: lock-step never hangs silently; the inbox keeps only commands near the step it waits for.

In-process (PlantRuntime with a sink standing in for the node; the 'controller' answers each state from the sink,
as the controller node does over DDS). Timing assertions only bound what load cannot break: the watchdog fires
after (never before) its timeout, and zero-torque periods run no faster than one per control period of wall time.
"""
import os
import threading
import time

import numpy as np
import pytest

from flexarm_sim.model import load_model
from flexarm_sim.plant import config
from flexarm_sim.plant.commands import LockstepInbox
from flexarm_sim.plant.runtime import PlantRuntime
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()
TIMEOUT = 0.3


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


class Sink:
    """The node's side of PlantRuntime: records states, logs and diagnostics; a controller answers each new state
    (step + 1, the state's stamp, a constant torque) while `answering`."""

    def __init__(self, rt, torque=(0.05, 0.02)):
        self.rt, self.torque = rt, list(torque)
        self.answering = False
        self.logs, self.states = [], []
        self.cond = threading.Condition()

    def state(self, z, zd, tau, step, t_ns):
        with self.cond:
            self.states.append((step, t_ns, tau.copy()))
            self.cond.notify_all()
        if self.answering:
            self.rt.submit_stamped(step + 1, t_ns, self.torque)

    def log(self, level, message):
        with self.cond:
            self.logs.append((level, message))
            self.cond.notify_all()

    def joint_state(self, *a):
        pass

    def clock(self, *a):
        pass

    def markers(self, *a):
        pass

    def diagnostics(self, *a):
        pass

    def wait(self, pred, timeout=30.0, what='condition'):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f'timed out waiting for {what}; logs {self.logs[-5:]}')
                self.cond.wait(left)

    def logged(self, level, text):
        return [m for lv, m in self.logs if lv == level and text in m]


def runtime(model, **over):
    values = dict(config.TABLE.defaults(), time_mode='lockstep', **{'lockstep.controller_timeout': TIMEOUT,
                                                                     'publish_rates.markers': 0.0})
    values.update(over)
    rt = PlantRuntime(model, config.resolved(values, model))
    sink = Sink(rt)
    return rt, sink


def test_a_silent_controller_is_reported_and_stops_the_plant(deluca):
    rt, sink = runtime(deluca)
    t0 = time.monotonic()
    rt.start(sink)
    try:
        # no controller yet: reported (WARN) after the timeout, not before; the plant keeps waiting at step 0
        sink.wait(lambda: sink.logged('warn', 'no controller command yet'), what='the first-command warning')
        assert time.monotonic() - t0 >= TIMEOUT
        level, msg, v = rt.diagnostics()
        assert level == 'warn' and 'no controller command yet' in msg and v['lockstep_waiting_for_step'] == 1
        assert rt.core.step_index == 0
        # the controller runs: no report, the plant integrates
        sink.answering = True
        rt.submit_stamped(1, sink.states[-1][1], sink.torque)       # answers the state it was sent
        sink.wait(lambda: rt.core.step_index >= 200, what='200 lock-step periods')
        assert rt.diagnostics()[0] == 'ok'
        # it dies: ERROR after the timeout, integration stands still (policy `stop`), the state is re-sent
        sink.answering = False
        t_dead = time.monotonic()
        sink.wait(lambda: sink.logged('error', 'controller silent'), what='the silence error')
        assert time.monotonic() - t_dead >= TIMEOUT
        step = rt.core.step_index
        n_states = len(sink.states)
        level, msg, v = rt.diagnostics()
        assert level == 'error' and 'integration stopped' in msg and v['lockstep_controller_timeouts'] == 1
        sink.wait(lambda: len(sink.states) > n_states, what='a re-sent state')        # republish_period 0.5 s
        assert rt.core.step_index == step and sink.states[-1][0] == step
        assert len(sink.logged('error', 'controller silent')) == 1                    # reported once per silence
        # it comes back: the plant goes on and says so
        sink.answering = True
        rt.submit_stamped(step + 1, sink.states[-1][1], sink.torque)
        sink.wait(lambda: rt.core.step_index >= step + 100, what='lock-step resumed')
        assert sink.logged('info', 'answers again') and rt.diagnostics()[0] == 'ok'
    finally:
        rt.stop()


def test_zero_torque_policy_goes_on_at_real_time_pace(deluca):
    rt, sink = runtime(deluca, **{'lockstep.on_controller_timeout': 'zero_torque'})
    period = rt.control_steps / rt.rate
    rt.start(sink)
    try:
        sink.wait(lambda: sink.states, what='the first state')
        sink.answering = True
        rt.submit_stamped(1, sink.states[-1][1], sink.torque)
        sink.wait(lambda: rt.core.step_index >= 100, what='100 periods')
        assert np.allclose(rt.core.tau, sink.torque)
        sink.answering = False
        sink.wait(lambda: sink.logged('error', 'controller silent'), what='the silence error')
        t1, p1 = time.monotonic(), rt.zero_torque_periods
        sink.wait(lambda: rt.zero_torque_periods >= p1 + 20, what='20 zero-torque periods')
        elapsed, periods = time.monotonic() - t1, rt.zero_torque_periods - p1
        assert periods <= elapsed / period + 1                     # paced: never faster than real time
        assert np.all(rt.core.tau == 0.0)                          # no torque without the controller
        level, msg, v = rt.diagnostics()
        assert level == 'error' and 'zero torque' in msg and v['lockstep_zero_torque_periods'] >= 20
        # the controller answers the current state again: its torque is back
        sink.answering = True
        rt.submit_stamped(rt.core.step_index // rt.control_steps + 1, sink.states[-1][1], sink.torque)
        sink.wait(lambda: sink.logged('info', 'answers again'), what='the recovery')
        sink.wait(lambda: np.allclose(rt.core.tau, sink.torque), what='the controller\'s torque')
    finally:
        rt.stop()


def test_far_future_commands_are_rejected_and_counted_and_never_stall(deluca):
    """1,100 commands for steps 1e9... (the issue's attack): none is kept, each is counted; the command the plant
    waits for is still taken."""
    box = LockstepInbox([1.0, 1.0])
    box.expect(1, 100)
    for k in range(1100):
        ok, reason = box.submit(10 ** 9 + k, 0, [0.5, 0.5])
        assert not ok and reason.startswith('far ahead')
    assert box.far == 1100 and box.accepted == 0
    assert box.submit(1, 100, [0.3, -0.3])[0]
    out = np.zeros(2)
    with box.cond:
        assert box.take(out) and list(out) == [0.3, -0.3]
    # near future (a controller answering before the plant moved on) is still buffered, up to MAX_AHEAD - 1
    box.expect(2, 200)
    assert box.submit(2 + LockstepInbox.MAX_AHEAD - 1, 0, [0.1, 0.1])[0]
    assert not box.submit(2 + LockstepInbox.MAX_AHEAD, 0, [0.1, 0.1])[0] and box.far == 1101

    rt, sink = runtime(deluca)
    rt.start(sink)
    try:
        sink.wait(lambda: sink.states, what='the first state')
        for k in range(1100):
            assert not rt.submit_stamped(10 ** 9 + k, 0, [1.0, 1.0])[0]
        sink.answering = True
        rt.submit_stamped(1, sink.states[-1][1], sink.torque)
        sink.wait(lambda: rt.core.step_index >= 100, what='the plant running after the flood')
        v = rt.diagnostics()[2]
        assert v['lockstep_far_ahead_commands'] == 1100
    finally:
        rt.stop()
