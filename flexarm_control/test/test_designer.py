"""The gain designer (controller/designer.py): in its thread it designs the cells asked for at its duty cycle and stops
at once; its design process designs exactly as the law, follows weight changes, survives a kill, is given up for the
thread when it cannot start, and is terminated at once when the controller stops mid-design."""
import collections
import os
import signal
import time

import numpy as np
import pytest

from flexarm_control.controller import config as cconfig
from flexarm_control.controller.designer import DUTY, WORKER_FAILURES, DesignWorker, GainDesigner
from flexarm_control.controller.runtime import ControllerRuntime
from flexarm_sim.arms import load_arm_model


class SlowLaw:
    """A stand-in scheduled law: each cell takes `cost` s to design."""

    def __init__(self, cost):
        self.cost = cost
        self.wanted = collections.deque()
        self.generation = 0
        self.installed = {}

    def design_cell(self, key):
        time.sleep(self.cost)
        return f'design {key}'

    def install(self, key, design, generation):
        self.installed[key] = design


def test_cells_are_designed_at_the_duty_cycle_and_stop_ends_the_rest_at_once():
    law = SlowLaw(0.5)                            # rests 1 s after each design (DUTY 1/3)
    d = GainDesigner(law)
    d.start()
    try:
        t0 = time.monotonic()
        d.request([(0,), (1,)])
        while d.designed < 2 and time.monotonic() - t0 < 10.0:
            time.sleep(0.005)
        took = time.monotonic() - t0
        assert law.installed == {(0,): 'design (0,)', (1,): 'design (1,)'}
        # the second design waited for the first's rest: (1/DUTY - 1) x its 0.5 s
        assert took >= 0.5 + 0.5 * (1 / DUTY - 1) + 0.5 - 0.02, took
    finally:
        t_stop = time.monotonic()
        d.stop()                                   # in the second design's rest (1 s)
        stopped_in = time.monotonic() - t_stop
    rest = 0.5 * (1 / DUTY - 1)
    assert not d._thread.is_alive() and stopped_in < 0.5 * rest, stopped_in    # not slept out (0.30 s of 0.3 before)


# ---------------------------------------------------------------------------------------------- the design process
def _same(a, b):
    """Designs equal to the last bit (tuples of arrays, or HoldDesign dataclasses)."""
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    else:
        for f in ('K', 'z_eq', 'tau_eq', 'P', 'W'):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        assert a.authority == b.authority and a.decay_rate == b.decay_rate


@pytest.fixture(scope='module')
def runtime():
    """A real-time tip_tracking controller's runtime on the De Luca arm: a robust delayed modal design and a hold law."""
    model = load_arm_model('deluca_two_link')[0]
    values = dict(cconfig.TABLES['tip_tracking'].defaults(), rate=500.0, lockstep=False)
    return ControllerRuntime('tip_tracking', model, values)


@pytest.mark.timeout(300)
def test_the_process_designs_every_scheduled_law_exactly_as_the_law_and_follows_its_weights(runtime):
    """The design process rebuilds each law from its design_recipe: its designs equal the law's own to the last bit
    (the robust delayed tip_tracking design, and the safe mode's hold law), and after a weight change (a new
    generation) the new weights'; killed, the next design starts a new process."""
    law, hold = runtime.law, runtime.fallback
    assert law.robust > 0 and law.history > 0                  # the robust, delay-augmented design is exercised
    w = DesignWorker(law.model.spec)
    try:
        key = (2, -3)
        _same(w.design('law', law, key, law.generation), law.design_cell(key))
        # not niced: the cells are needed now (controller/worker.py)
        assert os.getpriority(os.PRIO_PROCESS, w.pid) == os.getpriority(os.PRIO_PROCESS, 0)
        hkey = (1, -1)
        _same(w.design('hold', hold, hkey, hold.generation), hold.design_cell(hkey))
        old = law.design_cell(key)
        tip_max = law.gains()['tip_max']
        law.set_gains(tip_max=2.0 * tip_max)
        try:
            new = w.design('law', law, key, law.generation)
            _same(new, law.design_cell(key))
            assert not np.array_equal(new[0], old[0])          # the weights changed the gain
        finally:
            law.set_gains(tip_max=tip_max)
        os.kill(w.pid, signal.SIGKILL)                         # a design process killed between designs
        with pytest.raises(Exception, match='exited'):
            w.design('law', law, key, law.generation)
        _same(w.design('law', law, key, law.generation), old)  # a new process, the recipe sent to it again
        assert w.starts == 2
    finally:
        w.close()


class _Logs(list):
    def __call__(self, level, msg):
        self.append((level, msg))


@pytest.mark.timeout(300)
def test_a_design_process_that_cannot_start_leaves_the_designer_designing_in_its_thread(runtime):
    """A process that fails WORKER_FAILURES times in a row (here: its job cannot build a model) is given up: the
    designer designs in its own thread, says so, and the designs are the law's."""
    law = runtime.fallback
    logs = _Logs()
    d = GainDesigner(law, logs, DesignWorker('not an arm spec'), name='hold')
    installed = {}
    d.law = type('Recorder', (), {})()                   # the hold law's designs, installed into `installed`
    d.law.wanted, d.law.generation = collections.deque(), 0
    d.law.design_recipe, d.law.design_cell = law.design_recipe, law.design_cell
    d.law.install = lambda key, design, gen: installed.__setitem__(key, design)
    keys = [(3, 0), (3, 1), (3, 2), (3, 3)]
    d.start()
    try:
        d.request(keys)
        t0 = time.monotonic()
        while len(installed) < len(keys) and time.monotonic() - t0 < 120.0:
            time.sleep(0.05)
    finally:
        d.stop(join=False)
        d.worker.close()
        d.join()
    assert sorted(installed) == sorted(keys) and d.failures == 0
    assert d.worker_failures == WORKER_FAILURES
    assert [lvl for lvl, _ in logs] == ['warn'] * (WORKER_FAILURES - 1) + ['error'], logs
    assert 'every cell from now on' in logs[-1][1] and 'could not start' in logs[-1][1]
    for k in keys:
        _same(installed[k], law.design_cell(k))


@pytest.mark.timeout(300)
def test_stopping_the_runtime_mid_design_ends_the_process_at_once():
    """A controller stopped while its process designs (SIGTERM at start-up: the first cells of the move) stops at
    once: the busy process is terminated (its return code is SIGTERM's), not waited for (the designer threads were
    joined for up to 2 s each before: 6.3 s to exit once)."""
    model = load_arm_model('deluca_two_link')[0]
    rt = ControllerRuntime('modal', model, dict(cconfig.TABLES['modal'].defaults(), rate=500.0, lockstep=False))
    rt.start()
    try:
        rt.hold_designer.request([(k, -k) for k in range(1, 8)])        # several seconds of hold designs
        t0 = time.monotonic()
        while rt.hold_designer.designed < 1 and time.monotonic() - t0 < 120.0:
            time.sleep(0.02)
        assert rt.hold_designer.designed >= 1                          # the process is up and designing
        proc = rt.design_worker._proc
    finally:
        t_stop = time.monotonic()
        rt.stop()
        took = time.monotonic() - t_stop
    assert proc.returncode == -signal.SIGTERM, proc.returncode
    assert took < 2.0 + 1.0, took                                       # grace + terminate, far below the old joins
    assert not rt.hold_designer._thread.is_alive() and not rt.designer._thread.is_alive()
