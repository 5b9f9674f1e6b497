"""Every numba kernel the nodes use, compiled once per install and loaded from numba's cache afterwards.

`make setup` runs `python -m flexarm_sim.precompile` (a colcon user runs `ros2 run flexarm_sim precompile` once
after building a new workspace; without it the first node start compiles). Every node calls `ensure_kernels`
at start: under a machine-wide file lock it runs each kernel once on the node's model, so processes started
together (a launch file, `flexarm run`) never compile the same kernel twice — the second waits for the first's
cache, then loads it. A start that takes longer than a moment logs that it is compiling, and how long it took.

The kernels are specialised on array types only (every arm description gives the same types), so one arm
compiles them for all.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import sys
import tempfile
import threading
import time

import numpy as np
from numba.core.registry import CPUDispatcher

from .arms import resolve_arm
from .model import load_model, simulate, trajectory
from .plant.engine import PlantCore, state_ok
from .plant.outputs import ArmOutputs, StateOutputs

NOTICE_AFTER_S = 1.5


def _lock_path() -> str:
    d = os.environ.get('NUMBA_CACHE_DIR') or tempfile.gettempdir()
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f'flexarm-kernels-{os.getuid()}.lock')


@contextlib.contextmanager
def compile_lock(log=None):
    """Exclusive machine-wide lock around loading/compiling the kernels; logs when it waits for another process
    for more than a moment (loading a warm cache takes well under a second)."""
    path = _lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            t0 = time.monotonic()
            with _notice(log, 'another flexarm process is compiling the numba kernels: waiting for its cache'):
                fcntl.flock(fd, fcntl.LOCK_EX)
            if log and time.monotonic() - t0 > NOTICE_AFTER_S:
                log(f'kernels compiled by the other process after {time.monotonic() - t0:.1f} s of waiting')
        yield
    finally:
        os.close(fd)           # releases the lock


@contextlib.contextmanager
def _notice(log, message):
    """Log `message` if the block takes longer than NOTICE_AFTER_S."""
    done = threading.Event()

    def notice():
        if not done.wait(NOTICE_AFTER_S) and log:
            log(message)
    th = threading.Thread(target=notice, daemon=True)
    th.start()
    try:
        yield
    finally:
        done.set()


def warm_kernels(model):
    """Run every kernel entry point the plant, the controllers and the runner use, once, on `model`."""
    z, zd = np.zeros(model.n_coords), np.zeros(model.n_coords)
    for method in ('rk4', 'midpoint'):
        PlantCore(model, 1e-3, 1, method).warm_up()
    state_ok(z, zd, 1.0, 1.0)
    StateOutputs(model).compute(z, zd)
    ArmOutputs(model, 2).geometry(z)
    model.accelerations(z, zd)
    model.energies(z, zd)
    trajectory.warm_up(model)                                   # the planner (tip_tracking)
    simulate(model, 2e-3, 1e-3, torque=np.zeros((2, model.n_joints)), record_energy=False)


def _compile_counts():
    """(kernels compiled, kernels loaded from the cache) in this process so far (numba dispatcher statistics)."""
    compiled = loaded = 0
    for obj in gc.get_objects():
        if isinstance(obj, CPUDispatcher) and getattr(obj, '__module__', '').startswith('flexarm'):
            st = obj.stats
            compiled += len(st.cache_misses)
            loaded += len(st.cache_hits)
    return compiled, loaded


def ensure_kernels(model, log=None):
    """Load (first start after an install: compile) every kernel, under the machine-wide lock; returns seconds."""
    t0 = time.monotonic()
    with compile_lock(log):
        with _notice(log, 'loading the numba kernels (the first start from an install compiles them, ~20 s; '
                          'later starts load them from the cache) ...'):
            warm_kernels(model)
    dt = time.monotonic() - t0
    if dt > NOTICE_AFTER_S and log:
        compiled, loaded = _compile_counts()
        log(f'numba kernels ready in {dt:.1f} s ({compiled} compiled, {loaded} loaded from the cache)')
    return dt


def main(argv=None):
    """`precompile [arm]`: compile (or verify the cache of) every kernel; prints the time taken."""
    argv = sys.argv[1:] if argv is None else argv
    arm = argv[0] if argv else 'deluca_two_link'
    model = load_model(resolve_arm(arm))
    dt = ensure_kernels(model, log=lambda m: print(f'precompile: {m}', flush=True))
    print(f'precompile: kernels ready ({dt:.1f} s)', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
