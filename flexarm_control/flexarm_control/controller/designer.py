"""Designing gain-schedule cells ahead of use (real time): a thread per scheduled law, the designs in a process.

A scheduled law (laws.modal.ModalLQR, controller.safe_mode.SafeHoldLaw, with `design_on_demand` False) never designs
inside a control call: it lists the cells it lacks in `law.wanted` and uses the nearest designed cell meanwhile; its
GainDesigner designs them (and the cells a new reference will visit, `request`) and installs them.

The design itself is the law's pure `design_cell`, computed by a DesignWorker: a process of its own (worker.py; not
niced: the cells are needed now), shared by a controller's laws, that builds each law again from its
`design_recipe()` - (class, constructor keyword arguments) such that `cls(load_model(spec), **kwargs).design_cell(key)`
equals `law.design_cell(key)` - and designs the cells asked for. The thread only waits for it (in a pipe read,
without the interpreter lock). The process keeps every design on disk (design_cache.py): a cell designed by an
earlier run of the same arm, law and code is read, not designed. Without a worker, or after WORKER_FAILURES
consecutive failures of its process, the thread designs itself, at most DUTY of the time.
"""
from __future__ import annotations

import threading
import time

from .worker import WorkerProcess, WorkerProcessError

# designing in the thread, the designer computes at most this fraction of the time (it holds the interpreter lock the
# state thread needs: at full speed a robust cell design, ~45 ms of CPU, left the De Luca controller's state thread
# 1000-3000 states behind)
DUTY = 1.0 / 3.0
WORKER_FAILURES = 3          # consecutive process failures after which a designer designs in its own thread
WORKER_READY_WAIT_S = 30.0   # s a real-time runtime waits for its design process before its loop runs (worker.py)


def design_server(spec):
    """The worker's request handler (worker.py): (name, generation, recipe or None, key) -> ('design' or 'cached',
    design); the recipe of (name, generation) comes with the first request of that generation. A law is built from
    its recipe only when a cell is not in the disk cache."""
    from flexarm_sim.model import load_model
    from .design_cache import DesignCache
    model = load_model(spec)                  # (a spec that builds no model: the process cannot start)
    laws = {}

    def handle(request):
        name, generation, recipe, key = request
        if recipe is not None:
            laws[name] = {'generation': generation, 'recipe': recipe, 'law': None,
                          'cache': DesignCache.for_recipe(spec, recipe)}
        have = laws.get(name)
        if have is None or have['generation'] != generation:
            return 'failed', f'no design recipe of {name} generation {generation}'
        cache = have['cache']
        design = cache.get(key) if cache is not None else None
        if design is not None:
            return 'cached', design
        if have['law'] is None:
            cls, kwargs = have['recipe']
            have['law'] = cls(model, **kwargs)
        design = have['law'].design_cell(key)
        if cache is not None:
            cache.put(key, design)
        return 'design', design
    return handle


class DesignWorker(WorkerProcess):
    """The design process of a controller's scheduled laws (all on one arm, `spec`)."""

    def __init__(self, spec):
        # not niced: the cells are needed now (worker.py docstring)
        super().__init__(f'{__name__}:design_server', spec, 'gain design', nice=0)
        self._recipes = {}                    # name -> the generation the current process has the recipe of
        self.cache_hits = 0                   # cells read from the disk cache (design_cache.py), not designed

    def on_start(self):
        self._recipes = {}

    def design(self, name, law, key, generation):
        """law.design_cell(key) of `law`'s weights of `generation`, computed by the process."""
        with self._call_lock:
            self.start()                          # a new process (on_start) has no recipe yet
            recipe = law.design_recipe() if self._recipes.get(name) != generation else None
            kind, value = self.call((name, generation, recipe, key))
            if kind not in ('design', 'cached'):
                raise RuntimeError(value)
            self.cache_hits += kind == 'cached'
            self._recipes[name] = generation
        return value


class GainDesigner:
    def __init__(self, law, log=None, worker: DesignWorker | None = None, name=None):
        self.law = law
        self.log = log
        self.worker = worker if hasattr(law, 'design_recipe') else None
        self.name = name or getattr(law, 'name', 'law')
        self._cv = threading.Condition()
        self._queue = []
        self._running = False
        self._thread = None
        self.designed = 0
        self.failures = 0
        self._designing = False            # a cell taken from the queue and not installed yet
        self.worker_failures = 0           # consecutive failures of the design process

    def request(self, keys):
        with self._cv:
            for k in keys:
                if k not in self._queue:
                    self._queue.append(k)
            self._cv.notify()

    def pending(self) -> int:
        """Cells asked for and not installed yet (queued, wanted by the law, or being designed)."""
        with self._cv:
            return len(self._queue) + len(self.law.wanted) + int(self._designing)

    def request_configurations(self, qs):
        """Queue the cells the joint configurations qs need."""
        self.request(self.law.cells_for(qs))

    def start(self):
        self._running = True
        self._thread = threading.Thread(target=self._loop, name=f'gain-designer-{self.name}', daemon=True)
        self._thread.start()

    def stop(self, join=True):
        """End the thread (a design in its thread is finished first; one the process computes is abandoned when the
        owner stops the process - stop(join=False) first, then the worker, then join())."""
        self._running = False
        with self._cv:
            self._cv.notify_all()
        if join:
            self.join()

    def join(self, timeout=2.0):
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _next(self):
        with self._cv:
            while self._running:
                while self.law.wanted:                      # cells a control call fell back from
                    k = self.law.wanted.popleft()
                    if k not in self._queue:
                        self._queue.append(k)
                if self._queue:
                    self._designing = True
                    return self._queue.pop(0)
                self._cv.wait(0.05)
        return None

    def _design(self, key, gen):
        """(design, seconds of this thread's computing) of cell `key`."""
        if self.worker is not None and self.worker_failures < WORKER_FAILURES:
            try:
                design = self.worker.design(self.name, self.law, key, gen)
                self.worker_failures = 0
                return design, 0.0
            except WorkerProcessError as e:
                if not self._running:
                    raise
                self.worker_failures += 1
                if self.log is not None:
                    last = self.worker_failures >= WORKER_FAILURES
                    self.log('error' if last else 'warn', f'the gain design process failed ({e}): cell {key} '
                             'designed in the controller' + (f', and every cell from now on (at most {DUTY:.0%} of '
                                                             'the time)' if last else ''))
        t0 = time.perf_counter()
        design = self.law.design_cell(key)
        return design, time.perf_counter() - t0

    def _loop(self):
        while self._running:
            key = self._next()
            if key is None:
                return
            gen = self.law.generation
            try:
                design, busy = self._design(key, gen)
                self.law.install(key, design, gen)
                self.designed += 1
            except WorkerProcessError:          # stopped meanwhile
                return
            except Exception as e:  # noqa: BLE001 - the law keeps using its nearest cell; reported in diagnostics
                self.failures += 1
                if self.log is not None:
                    self.log('warn', f'gain design of cell {key} failed: {e!r}')
                continue
            finally:
                self._designing = False
            if busy > 0.0:
                rest = busy * (1.0 / DUTY - 1.0)
                with self._cv:                  # stop() ends the rest at once (a loaded machine's rest lasts seconds)
                    self._cv.wait_for(lambda: not self._running, timeout=rest)
