"""Designing gain-schedule cells ahead of use, in a thread of their own (real time).

A scheduled law (laws.modal.ModalLQR with `design_on_demand` False) never designs inside a control call: it lists
the cells it lacks in `law.wanted` and uses the nearest designed cell meanwhile; the designer designs them (and the
cells a new reference will visit, `request`) with the law's pure `design_cell` and installs them.
"""
from __future__ import annotations

import threading
import time

# the designer computes at most this fraction of the time (it holds the interpreter lock the state thread needs: at
# full speed a robust cell design, ~45 ms of CPU, left the De Luca controller's state thread 1000-3000 states behind)
DUTY = 1.0 / 3.0


class GainDesigner:
    def __init__(self, law, log=None):
        self.law = law
        self.log = log
        self._cv = threading.Condition()
        self._queue = []
        self._running = False
        self._thread = None
        self.designed = 0
        self.failures = 0

    def request(self, keys):
        with self._cv:
            for k in keys:
                if k not in self._queue:
                    self._queue.append(k)
            self._cv.notify()

    def request_configurations(self, qs):
        """Queue the cells the joint configurations qs need."""
        self.request(self.law.cells_for(qs))

    def start(self):
        self._running = True
        self._thread = threading.Thread(target=self._loop, name='gain-designer', daemon=True)
        self._thread.start()

    def stop(self):
        self._running = False
        with self._cv:
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _next(self):
        with self._cv:
            while self._running:
                while self.law.wanted:                      # cells a control call fell back from
                    k = self.law.wanted.popleft()
                    if k not in self._queue:
                        self._queue.append(k)
                if self._queue:
                    return self._queue.pop(0)
                self._cv.wait(0.05)
        return None

    def _loop(self):
        while self._running:
            key = self._next()
            if key is None:
                return
            gen = self.law.generation
            t0 = time.perf_counter()
            try:
                design = self.law.design_cell(key)
            except Exception as e:  # noqa: BLE001 - the law keeps using its nearest cell; reported in diagnostics
                self.failures += 1
                if self.log:
                    self.log('warn', f'gain design of cell {key} failed: {e!r}')
                continue
            self.law.install(key, design, gen)
            self.designed += 1
            rest = (time.perf_counter() - t0) * (1.0 / DUTY - 1.0)
            with self._cv:                  # stop() ends the rest at once (a loaded machine's rest lasts seconds)
                self._cv.wait_for(lambda: not self._running, timeout=rest)
