"""Cold numba compile time of every kernel the plant, the controllers and the runner need, per kernel.

    python bench/bench_compile.py [--quick] [--repeats N]

Each run is a fresh interpreter with an EMPTY numba cache directory (a temporary NUMBA_CACHE_DIR), which
loads the De Luca model and then calls each kernel once, leaves first (a kernel's time is what its own first
call costs once the kernels before it in the table are compiled). Wall time and the process's CPU time
(time.process_time: the machine is shared, CPU time is what the compile itself costs) are printed per kernel,
with their totals and the target (<= 20 s in total). A warm row (second process, same cache) shows what
loading the cache costs. Measured, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from flexarm_sim.arms import resolve_arm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELUCA = resolve_arm('deluca_two_link')
TARGET_TOTAL_S = 20.0

# (label, code run in the child; `m` is the model, `np` numpy, `k` the kernels module), leaves first, and the
# group: 'need' = what the plant, the controllers and the runner load (the <= 20 s target; the kernels
# flexarm_sim.precompile.warm_kernels runs), 'api' = the rest.
STEPS = [
    ('import + load_model (no kernel)', None, None),
    ('dynamics_terms', 'ws = m.workspace(); m.mass_matrix(z); m.rhs(z, zd)', 'need'),
    ('rk4_step', 'k.rk4_step(m.data, ws, z.copy(), zd.copy(), tau, 1e-3, 2)', 'need'),
    ('midpoint_step (plant integrator option)', 'k.midpoint_step(m.data, ws, z.copy(), zd.copy(), tau, 1e-3, 1, 1e-12, 20)',
     'need'),
    ('link_frames', 'm.frames(z)', 'need'),
    ('potential_energies', 'm.energies(z, zd)', 'need'),
    ('state_outputs', 'StateOutputs(m).compute(z, zd)', 'need'),
    ('plant_step (PlantCore)', 'PlantCore(m, 1e-3, 1).warm_up()', 'need'),
    ('forward_dynamics (+ cholesky_solve)', 'm.accelerations(z, zd)', 'need'),
    ('state_ok', 'state_ok(z, zd, 1e4, 1e5)', 'need'),
    ('simulate: sampled torques (_run_samples)', 'simulate(m, 0.01, 1e-3, torque=np.zeros(2))', 'api'),
    ('simulate: Python torque callable (_run_one)', 'simulate(m, 0.01, 1e-3, torque=lambda t, z, zd: [0.0, 0.0])', 'api'),
    ('simulate: compiled law (_run_law, per law)', 'simulate(m, 0.01, 1e-3, torque=law)', 'api'),
]


CHILD = r'''
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
from flexarm_sim.model import load_model, kernels as k
from flexarm_sim.model import simulate
from flexarm_sim.plant.engine import PlantCore, state_ok
from flexarm_sim.plant.outputs import StateOutputs
from numba import njit
m = load_model(sys.argv[1])


@njit
def law(t, z, zd):
    return -np.array([z[0], z[3]])


z = np.zeros(m.n_coords); z[m.q_index] = [0.3, -0.2]; z[m.mode_index] = 0.01
zd = np.full(m.n_coords, 0.1)
tau = np.array([0.1, -0.1])
steps = json.loads(sys.argv[2])
out = [[steps[0][0], time.perf_counter() - t0, time.process_time() - c0]]
g = dict(globals())
for label, code, _group in steps[1:]:
    t, c = time.perf_counter(), time.process_time()
    exec(code, g)
    out.append([label, time.perf_counter() - t, time.process_time() - c])
print('RESULT ' + json.dumps(out))
'''


def run_child(steps, cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    p = subprocess.run([sys.executable, '-c', CHILD, DELUCA, json.dumps(steps)], env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    line = [x for x in p.stdout.splitlines() if x.startswith('RESULT ')][-1]
    return json.loads(line[len('RESULT '):])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='one cold run (the default is the best of 2)')
    ap.add_argument('--repeats', type=int, default=None, help='cold runs (best per kernel is reported)')
    cfg = ap.parse_args(argv)
    repeats = cfg.repeats or (1 if cfg.quick else 2)
    steps = STEPS
    print(f'# bench_compile: cold numba compile per kernel (empty NUMBA_CACHE_DIR), De Luca arm, '
          f'best of {repeats} cold run(s); {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}')
    runs = []
    warm = None
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(run_child(steps, tmp))
            if r == 0:
                warm = run_child(steps, tmp)
    hdr = f'{"kernel":44s} {"wall s":>8s} {"CPU s":>8s} {"warm wall s":>12s}'
    print(hdr)
    print('-' * len(hdr))
    tot = {'need': [0.0, 0.0, 0.0], 'api': [0.0, 0.0, 0.0]}
    for i, (label, _, group) in enumerate(steps):
        w = min(run[i][1] for run in runs)
        c = min(run[i][2] for run in runs)
        ww = warm[i][1]
        if group:
            tot[group] = [a + b for a, b in zip(tot[group], (w, c, ww))]
        print(f'{label:44s} {w:8.2f} {c:8.2f} {ww:12.3f}')
    print('-' * len(hdr))
    w, c, ww = tot['need']
    print(f'{"total: plant, controllers, runner":44s} {w:8.2f} {c:8.2f} {ww:12.3f}')
    w2, c2, ww2 = tot['api']
    print(f'{"total: other API (simulate)":44s} {w2:8.2f} {c2:8.2f} {ww2:12.3f}')
    ok = c <= TARGET_TOTAL_S
    print(f'target: cold compile of the kernels the plant, the controllers and the runner need <= {TARGET_TOTAL_S:g} s: '
          f'CPU {c:.1f} s {"meets" if ok else "MISSES"} it (wall {w:.1f} s; load average now {os.getloadavg()[0]:.2f})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
