"""Every numba kernel the nodes and `flexarm run` use, compiled once per install and loaded from numba's cache
afterwards — the one place kernels register (KERNEL_GROUPS).

`make setup` runs `precompile` (a colcon user runs `ros2 run flexarm_sim precompile` once after building a new
workspace; without it the first node start compiles). Every node calls `ensure_kernels` at start: under a
machine-wide file lock it runs each group of KERNEL_GROUPS once on the node's model, so processes started together
(a launch file, `flexarm run`) never compile the same kernel twice — the second waits for the first's cache, then
loads it. Each node logs, in this order: that it waits for another process (if it does, after NOTICE_AFTER_S),
that it is compiling or loading (if that takes longer than NOTICE_AFTER_S), then always
`numba kernels ready in N s (k compiled, m loaded from the cache)` with N the whole time, waiting included.

Measured (2 cores, idle, numba 0.68): a cold compile of every group takes ~60 s of one core (the dynamics kernels
~40 s, the estimator's filter ~15 s); a warm start loads them in ~0.3-1 s. The kernels are specialised on array types
only (every arm description gives the same types), so one arm compiles them for all.

A new kernel: add the function that warms it (runs it once on a model) to KERNEL_GROUPS;
flexarm_sim/test/test_precompile.py fails for a kernel of any flexarm package that no group compiles.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import importlib.util
import os
import sys
import tempfile
import threading
import time

import numpy as np
from numba.core.registry import CPUDispatcher

from .common.signals import held
from .arms import resolve_arm
from .model import load_model, replay, simulate, trajectory
from .model.integrators import METHODS
from .plant.engine import PlantCore, state_ok
from .plant.outputs import ArmOutputs, StateOutputs

NOTICE_AFTER_S = 1.5

# 'module:function', function(model) warms (compiles or loads) the group's kernels; in the order compiled. A group
# of a package that is not installed is skipped (flexarm_sim alone has no estimator).
KERNEL_GROUPS = (
    'flexarm_sim.precompile:warm_kernels',                  # dynamics, integrators, outputs: plant, controllers, runner
    'flexarm_control.estimation.filter:warm_kernels',       # the state estimator's Kalman filter
)


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
            with _notice(log, 'another flexarm process is compiling the numba kernels: waiting for its cache') as said:
                fcntl.flock(fd, fcntl.LOCK_EX)
            if said():
                log(f'the other process is done after {time.monotonic() - t0:.1f} s of waiting')
        yield
    finally:
        os.close(fd)           # releases the lock


@contextlib.contextmanager
def _notice(log, message):
    """Log `message` if the block takes longer than NOTICE_AFTER_S; yields said() -> was it logged. The notice is
    logged before the block's end or not at all (a lock orders the helper thread against the block's end), so
    whatever the caller logs after the block comes after it."""
    lock = threading.Lock()
    state = {'done': False, 'said': False}
    done = threading.Event()

    def notice():
        if done.wait(NOTICE_AFTER_S) or not log:
            return
        with lock:
            if not state['done']:
                log(message)
                state['said'] = True
    th = threading.Thread(target=notice, daemon=True)
    th.start()
    try:
        yield lambda: state['said']
    finally:
        with lock:
            state['done'] = True
        done.set()


def warm_kernels(model):
    """Run every kernel entry point the plant, the controllers and the runner use, once, on `model`."""
    z, zd = np.zeros(model.n_coords), np.zeros(model.n_coords)
    for method in METHODS:
        PlantCore(model, 1e-3, 1, method).warm_up()
    state_ok(z, zd, 1.0, 1.0)
    StateOutputs(model).compute(z, zd)
    ArmOutputs(model, 2).geometry(z)
    model.accelerations(z, zd)
    model.energies(z, zd)
    trajectory.warm_up(model)                                   # the planner (tip_tracking)
    simulate(model, 2e-3, 1e-3, torque=np.zeros((2, model.n_joints)), record_energy=False)
    zeros = np.zeros((2, model.n_joints))
    replay(model, 1e-3, zeros, zeros, zeros, 0.0, 0.0)            # identification (flexarm identify)
    replay(model, 1e-3, zeros, zeros, zeros, 0.0, 0.0, applied_at=np.arange(len(zeros)) * 1e-3)   # (real-time loops)


def _compile_counts():
    """(kernels compiled, kernels loaded from the cache) in this process so far (numba dispatcher statistics)."""
    compiled = loaded = 0
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance may ask the object for __class__, which some objects answer with an
        # error (numpy's NpzFile.f attribute bag raised AttributeError in a process that had loaded an .npz)
        if issubclass(type(obj), CPUDispatcher) and getattr(obj, '__module__', '').startswith('flexarm'):
            st = obj.stats
            compiled += len(st.cache_misses)
            loaded += len(st.cache_hits)
    return compiled, loaded


def _groups():
    """The warm-up functions of KERNEL_GROUPS whose package is installed."""
    out = []
    for entry in KERNEL_GROUPS:
        module, _, name = entry.partition(':')
        if importlib.util.find_spec(module.split('.')[0]) is None:
            continue
        out.append(getattr(importlib.import_module(module), name))
    return out


def ensure_kernels(model, log=None):
    """Load (first start after an install: compile) every kernel of KERNEL_GROUPS, under the machine-wide lock;
    logs how long it took, waiting included, and how many were compiled and loaded (module docstring); returns s."""
    t0 = time.monotonic()
    groups = _groups()
    with compile_lock(log):
        with _notice(log, 'compiling or loading the numba kernels (a first start after an install compiles them: '
                          '~1 min of one core; `ros2 run flexarm_sim precompile` does it once) ...'):
            # a stop signal waits until the kernels are in (common/signals.held): raised inside llvmlite's object
            # cache callbacks (ctypes) the Stop is swallowed with an 'Exception ignored ... Traceback' and start-up
            # goes on anyway (seen: SIGINT 0.8 s into the plant's start, 2 in 36)
            with held():
                for warm in groups:
                    warm(model)
    dt = time.monotonic() - t0
    if log:
        compiled, loaded = _compile_counts()
        log(f'numba kernels ready in {dt:.1f} s ({compiled} compiled, {loaded} loaded from the cache)')
    return dt


def _compile_group(entry, arm):
    """`precompile --group <entry> <arm>` (a child of main): warm one group, no lock (the parent holds it)."""
    module, _, name = entry.partition(':')
    t0 = time.monotonic()
    getattr(importlib.import_module(module), name)(load_model(resolve_arm(arm)))
    compiled, loaded = _compile_counts()
    print(f'precompile: {entry}: {compiled} compiled, {loaded} loaded in {time.monotonic() - t0:.1f} s', flush=True)
    return 0


def main(argv=None):
    """`precompile [arm]`: compile (or verify the cache of) every kernel; prints the time taken. With more than one
    core, each group of KERNEL_GROUPS compiles in a process of its own, all at once (the groups share no kernel;
    numba compiles in one thread: 2 cores, ~40 s for the dynamics and ~17 s for the filter side by side instead of
    one after the other), under the machine-wide lock; then every kernel is loaded from the cache as a node does."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--group']:
        return _compile_group(argv[1], argv[2])
    arm = argv[0] if argv else 'deluca_two_link'
    model = load_model(resolve_arm(arm))
    log = lambda m: print(f'precompile: {m}', flush=True)  # noqa: E731
    entries = [e for e in KERNEL_GROUPS if importlib.util.find_spec(e.partition(':')[0].split('.')[0]) is not None]
    if len(entries) > 1 and (os.cpu_count() or 1) > 1:
        import subprocess
        with compile_lock(log):
            procs = [subprocess.Popen([sys.executable, '-m', 'flexarm_sim.precompile', '--group', e, arm])
                     for e in entries]
            codes = [p.wait() for p in procs]
        if any(codes):
            log(f'a group failed to compile (exit codes {codes})')
            return 1
    ensure_kernels(model, log=log)
    return 0


if __name__ == '__main__':
    sys.exit(main())
