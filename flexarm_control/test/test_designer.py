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


def test_pending_counts_every_cell_asked_for_until_it_is_installed():
    """`pending` (the controller's `gain_cells_pending`, which `flexarm run` waits on before a real-time move):
    queued cells, cells the law fell back from, and the one being designed all count until it is installed."""
    law = SlowLaw(0.3)
    d = GainDesigner(law)
    d.request([(0,), (1,)])
    law.wanted.append((2,))
    assert d.pending() == 3
    d.start()
    try:
        t0 = time.monotonic()
        while not law.installed and time.monotonic() - t0 < 5.0:
            assert d.pending() == 3 or law.installed, d.pending()       # taken from the queue: still pending
            time.sleep(0.002)
        t1 = time.monotonic()
        while d.pending() and time.monotonic() - t1 < 10.0:
            time.sleep(0.005)
        assert d.pending() == 0 and set(law.installed) == {(0,), (1,), (2,)}
    finally:
        d.stop()


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
def test_the_process_designs_every_scheduled_law_exactly_as_the_law_and_follows_its_weights(runtime, tmp_path,
                                                                                          monkeypatch):
    """The design process rebuilds each law from its design_recipe: its designs equal the law's own to the last bit
    (the robust delayed tip_tracking design, and the safe mode's hold law), and after a weight change (a new
    generation) the new weights'; killed, the next design starts a new process. A cell asked for again (the same
    weights) comes from the disk cache, equal to the bit; new weights are designed, not read."""
    monkeypatch.setenv('FLEXARM_CACHE_DIR', str(tmp_path))
    law, hold = runtime.law, runtime.fallback
    assert law.robust > 0 and law.history > 0                  # the robust, delay-augmented design is exercised
    w = DesignWorker(law.model.spec)
    try:
        key = (2, -3)
        _same(w.design('law', law, key, law.generation), law.design_cell(key))
        assert w.cache_hits == 0
        _same(w.design('law', law, key, law.generation), law.design_cell(key))
        assert w.cache_hits == 1
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
            assert w.cache_hits == 1                           # designed: another recipe, another cache entry
        finally:
            law.set_gains(tip_max=tip_max)
        # a design process killed between designs, its death not yet seen when the next call starts (the call
        # fails) - made deterministic: killed, reaped, and its poll() still saying 'running' (the race made real)
        dead = w._proc
        os.kill(w.pid, signal.SIGKILL)
        dead.wait(timeout=60)
        dead.poll = lambda: None
        with pytest.raises(Exception, match='exited'):
            w.design('law', law, key, law.generation)
        _same(w.design('law', law, key, law.generation), old)  # a new process, the recipe sent to it again
        assert w.starts == 2
        hits = w.cache_hits
        _same(w.design('law', law, key, law.generation), old)  # asked again: from the cache
        assert w.cache_hits == hits + 1
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
def test_stopping_the_runtime_mid_design_ends_the_process_at_once(monkeypatch):
    """A controller stopped while its process designs (SIGTERM at start-up: the first cells of the move) stops at
    once: the busy process is terminated (its return code is SIGTERM's), not waited for (the designer threads were
    joined for up to 2 s each before: 6.3 s to exit once)."""
    monkeypatch.setenv('FLEXARM_CACHE_DIR', 'off')                    # designing, not reading earlier designs
    model = load_arm_model('deluca_two_link')[0]
    rt = ControllerRuntime('modal', model, dict(cconfig.TABLES['modal'].defaults(), rate=500.0, lockstep=False))
    rt.start()
    try:
        rt.hold_designer.request([(k, -k) for k in range(1, 8)])        # several seconds of hold designs
        t0 = time.monotonic()
        # up (one cell designed) and busy with the next one (a call in flight): between two calls the process is idle
        # and a stop ends it normally (exit 0: a run beside three CPU hogs stopped it in that gap)
        def busy():
            lock = rt.design_worker._call_lock                    # an RLock: held by the designer thread's call
            if lock.acquire(blocking=False):
                lock.release()
                return False
            return True
        while (rt.hold_designer.designed < 1 or not busy()) and time.monotonic() - t0 < 120.0:
            time.sleep(0.02)
        assert rt.hold_designer.designed >= 1 and busy()
        proc = rt.design_worker._proc
    finally:
        t_stop = time.monotonic()
        rt.stop()
        took = time.monotonic() - t_stop
    assert proc.returncode == -signal.SIGTERM, proc.returncode
    assert took < 2.0 + 1.0, took                                       # grace + terminate, far below the old joins
    assert not rt.hold_designer._thread.is_alive() and not rt.designer._thread.is_alive()


def test_the_disk_cache_keys_on_arm_recipe_and_code_and_refuses_damaged_entries(runtime, tmp_path):
    """design_cache.py: a design read back equals the one stored; another arm or other weights are other entries;
    a truncated or altered entry is not unpickled (counted, None: designed again); an unwritable cache only counts."""
    from flexarm_control.controller.design_cache import DesignCache
    from flexarm_control.moves import perturbed_spec
    law = runtime.fallback
    spec, recipe = law.model.spec, law.design_recipe()
    c = DesignCache(tmp_path, spec, recipe)
    design = law.design_cell((0, 1))
    assert c.get((0, 1)) is None and c.misses == 1
    c.put((0, 1), design)
    _same(DesignCache(tmp_path, spec, recipe).get((0, 1)), design)         # a later run: read back to the bit
    assert DesignCache(tmp_path, spec, recipe).dir == c.dir
    other_arm = perturbed_spec(spec, 1.2, 0.85)
    cls, kw = recipe
    assert len({c.dir, DesignCache(tmp_path, other_arm, recipe).dir,
                DesignCache(tmp_path, spec, (cls, dict(kw, schedule_step=1.5 * kw['schedule_step']))).dir}) == 3
    path = c._path((0, 1))
    data = path.read_bytes()
    for damaged in (data[:-7], data[:-1] + bytes([data[-1] ^ 1]), b'', b'junk'):
        path.write_bytes(damaged)
        fresh = DesignCache(tmp_path, spec, recipe)
        assert fresh.get((0, 1)) is None and fresh.corrupt + fresh.misses == 1 and fresh.hits == 0
    blocked = tmp_path / 'a_file'                         # a root that cannot hold directories (even for root)
    blocked.write_text('x')
    c2 = DesignCache(blocked, spec, recipe)
    c2.put((0, 1), design)
    assert c2.write_failures == 1 and c2.get((0, 1)) is None


# ---------------------------------------------------------------------------------------------- the estimator's cells
@pytest.mark.timeout(300)
def test_the_real_time_estimator_never_designs_in_a_tick_and_its_process_designs_as_the_filter(tmp_path, monkeypatch):
    """EstimatorRuntime(design_ahead=True), as the real-time estimator node runs it: the nominal configuration's
    cells are designed at construction; a state entering an undesigned cell designs nothing in the call (the nearest
    designed cell stands in) and lists the cell, then its neighbours, for the designer; the design process designs
    each one equal to the filter's own design to the bit (a later run reads it from the disk cache), and once
    installed the cell is used."""
    from flexarm_control.estimation import config as econfig
    from flexarm_control.estimation.runtime import EstimatorRuntime
    from flexarm_sim.sensors import preset_values
    monkeypatch.setenv('FLEXARM_CACHE_DIR', str(tmp_path))
    model = load_arm_model('deluca_two_link')[0]
    pre = preset_values(model, 'strain_accel')
    values = dict(econfig.TABLE.defaults(), **{k: v for k, v in pre.items() if k in econfig.TABLE})
    rt = EstimatorRuntime(model, values, design_ahead=True)
    kf = rt.filter
    # joint 0 is cyclic (laws/schedule.py): the cells one step along joint 1 around the nominal configuration
    assert len(kf._cells) == 3 and not kf.design_on_demand
    designs = kf.n_designs
    q = np.array([0.62, -0.41])                                            # cell (0, -4): three steps away on joint 1
    key = kf.cell_key(q)
    stand_in = kf.cell(q)
    assert kf.n_designs == designs and key not in kf._cells
    assert key == (0, -4) and stand_in is kf._cells[(0, -1)]               # the nearest designed cell
    assert list(kf.wanted) == [(0, -4), (0, -5), (0, -3)]                  # the cell first, then its neighbours
    kf.cell(q)
    assert len(kf.wanted) == 3                                             # listed once

    def same(a, b):
        for f in ('z_eq', 'tau_eq', 'Phi', 'Q', 'H_accel'):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)

    w = DesignWorker(model.spec)
    try:
        same(w.design('state_estimator', kf, key, kf.generation), kf.design_cell(key))
        same(w.design('state_estimator', kf, key, kf.generation), kf.design_cell(key))
        assert w.cache_hits == 1
    finally:
        w.close()
    rt.start()
    try:
        t0 = time.monotonic()
        while (kf.wanted or key not in kf._cells) and time.monotonic() - t0 < 60.0:
            time.sleep(0.02)
        same(kf.cell(q), kf.design_cell(key))
        assert kf.cell(q) is kf._cells[key] and rt.designer.failures == 0
        assert rt.diagnostics()[2]['cells_from_disk_cache'] >= 1             # the cell the worker above designed
    finally:
        rt.stop()
    assert not rt.designer._thread.is_alive() and rt.design_worker.pid is None
