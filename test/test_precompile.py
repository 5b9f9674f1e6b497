"""`precompile` (flexarm_sim/precompile.py) covers every kernel: every numba kernel of the flexarm packages that can be
called from Python is compiled (or loaded) by `ensure_kernels`, which every node runs at start and `make setup` runs
once — the estimator's filter kernels included (they once compiled at the estimator's first start, ~110 s with no
log line, and its first launches timed out). And the kernel log lines come in the right order."""
import json
import os
import subprocess
import sys
import threading
import time

from flexarm_sim import precompile

# Kernels only the Python API of the model uses (flexarm_sim.model.simulation: a whole run in one numba call), never a
# node or `flexarm run`: compiled at their first use (bench/bench_compile.py, group 'api').
API_ONLY = {'flexarm_sim.model.simulation._run_samples', 'flexarm_sim.model.simulation._run_law',
            'flexarm_sim.model.simulation._run_one'}

SCRIPT = r'''
import gc, importlib, json, pkgutil
from numba.core.registry import CPUDispatcher
for pkg in ('flexarm_sim', 'flexarm_control', 'flexarm_bringup'):
    for m in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + '.'):
        importlib.import_module(m.name)
from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import load_model
from flexarm_sim.precompile import ensure_kernels
lines = []
ensure_kernels(load_model(resolve_arm('spatial_3r')), log=lines.append)
print(json.dumps({'lines': lines, 'kernels': {
    f'{d.py_func.__module__}.{d.py_func.__qualname__}': [len(d.signatures), bool(d.targetoptions.get('no_cpython_wrapper'))]
    for d in gc.get_objects() if isinstance(d, CPUDispatcher) and d.py_func.__module__.startswith('flexarm')}}))
'''


def test_every_kernel_callable_from_python_is_compiled_by_precompile():
    """Every module of the packages imported (so every kernel is seen), then the nodes' warm-up: each kernel with a
    Python entry point has a compiled signature (kernels called only from kernels are compiled with their callers).
    A kernel added anywhere without a KERNEL_GROUPS entry fails here, naming it."""
    r = subprocess.run([sys.executable, '-c', SCRIPT], capture_output=True, text=True, timeout=900,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    kernels = out['kernels']
    assert 'flexarm_control.estimation.filter.joseph_update' in kernels       # the walk saw the estimator's
    missing = sorted(k for k, (n, internal) in kernels.items() if not internal and n == 0 and k not in API_ONLY)
    assert not missing, f'kernels no KERNEL_GROUPS entry compiles: {missing}'
    assert all(k in kernels for k in API_ONLY), 'API_ONLY names a kernel that no longer exists'
    # the line every node logs, last, with the counts
    assert out['lines'][-1].startswith('numba kernels ready in ') and ' compiled, ' in out['lines'][-1], out['lines']


def test_kernel_notices_come_before_the_ready_line(monkeypatch, tmp_path):
    """Another process holds the lock (here another open file description in a thread): 'waiting' is logged before
    'done', even when the notice thread is slow to log after its timeout (that race printed 'compiled by the other
    process' before 'another process is compiling')."""
    monkeypatch.setenv('NUMBA_CACHE_DIR', str(tmp_path))
    monkeypatch.setattr(precompile, 'NOTICE_AFTER_S', 0.05)
    lines = []

    def slow_log(msg):
        if 'waiting' in msg:
            time.sleep(0.3)                 # descheduled between its timeout and its print
        lines.append(msg)

    held, release = threading.Event(), threading.Event()

    def holder():
        with precompile.compile_lock():
            held.set()
            release.wait(5)
    th = threading.Thread(target=holder)
    th.start()
    held.wait(5)
    threading.Timer(0.1, release.set).start()
    with precompile.compile_lock(slow_log):
        lines.append('got the lock')
    th.join()
    assert [ln.split(' ')[0] for ln in lines] == ['another', 'the', 'got'], lines
    assert lines[1].startswith('the other process is done after')

    # a block that ends before the notice is due logs nothing, and its notice never comes later
    lines.clear()
    monkeypatch.setattr(precompile, 'NOTICE_AFTER_S', 0.2)
    with precompile._notice(lines.append, 'slow') as said:
        pass
    time.sleep(0.4)
    assert lines == [] and not said()
