"""Benchmark of the dynamics core: cost per evaluation, scaling, numba vs numpy, accuracy-chosen step,
real-time factor, energy drift and cold start.  Prints tables; targets are printed, never asserted.

    python bench/bench_dynamics.py [--quick]

Times of the numba kernels are measured INSIDE numba (an @njit loop calling the kernel; the state is
reset every iteration so the work is identical); the cost of calling the kernel from Python is a row of
its own.  The numpy baseline is flexarm_sim.model.dynamics_numpy (same equations, vectorized numpy).
Whatever kernels.py is when this runs is what gets measured.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit

from flexarm_sim.model import ArmState, arm_from_dict, kernels, load_model, step, whole_arm_modes
from flexarm_sim.model import dynamics_numpy as dn
from flexarm_sim.model.integrators import largest_stable_rk4_step
from flexarm_sim.arms import resolve_arm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELUCA = resolve_arm('deluca_two_link')

TARGET_DELUCA_US = 5.0
TARGET_BOOK_US = 25.0
TARGET_SPEEDUP = 50.0
TARGET_RTF = 200.0
TARGET_COLD_S = 2.0


# ================================================================================ njit timing loops
@njit(cache=False)
def _fd_loop(d, ws, z0, zd0, tau, z, zd, zdd, n):
    fails = 0
    N = z0.size
    for _ in range(n):
        for i in range(N):
            z[i] = z0[i]
            zd[i] = zd0[i]
        if not kernels.forward_dynamics(d, ws, z, zd, tau, zdd):
            fails += 1
    return fails


@njit(cache=False)
def _rk4_loop(d, ws, z0, zd0, tau, z, zd, dt, n):
    fails = 0
    N = z0.size
    for _ in range(n):
        for i in range(N):
            z[i] = z0[i]
            zd[i] = zd0[i]
        if not kernels.rk4_step(d, ws, z, zd, tau, dt, 1):
            fails += 1
    return fails


@njit(cache=False)
def _simulate(d, ws, z, zd, taus, tau, dt, substeps, rec_every, out):
    """Integrate with RK4 (substeps per control period dt) under the torque schedule taus (K, n);
    record z every rec_every periods into out. Returns False on failure."""
    K = taus.shape[0]
    r = 0
    for k in range(K):
        if k % rec_every == 0:
            out[r, :] = z
            r += 1
        for i in range(tau.size):
            tau[i] = taus[k, i]
        if not kernels.rk4_step(d, ws, z, zd, tau, dt, substeps):
            return False
    if K % rec_every == 0:
        out[r, :] = z
    return True


def _best_time(fn, n, repeats, min_time):
    """Per-call seconds: grow n until one run takes min_time, then the best of `repeats` runs."""
    fn(1)
    while True:
        t = time.perf_counter()
        fn(n)
        el = time.perf_counter() - t
        if el >= min_time:
            break
        n = int(n * max(2.0, 1.2 * min_time / max(el, 1e-9)))
    best = el / n
    for _ in range(repeats - 1):
        t = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t) / n)
    return best


def random_state(model, seed=0, deflection=0.005):
    rng = np.random.default_rng(seed)
    z = np.zeros(model.n_coords)
    zd = np.zeros(model.n_coords)
    z[model.q_index] = rng.uniform(-1, 1, model.n_joints)
    zd[model.q_index] = rng.normal(size=model.n_joints) * 0.5
    z[model.mode_index] = rng.normal(size=model.mode_index.size) * deflection
    zd[model.mode_index] = rng.normal(size=model.mode_index.size) * 0.05
    return z, zd


def time_model(model, cfg, numpy_too=True, full=True):
    """dict of per-call microseconds: fd (in numba), rk4 (in numba), fd_py (from Python), fd_np, rk4_np
    (full=False: fd and fd_np only, best of more, shorter runs: robust against a busy machine)."""
    d, ws = model.data, model.workspace()
    z0, zd0 = random_state(model)
    tau = np.full(model.n_joints, 0.1)
    z, zd, zdd = z0.copy(), zd0.copy(), np.zeros(model.n_coords)
    dt = 1e-5
    out = {}
    if not full:
        out['fd'] = 1e6 * _best_time(lambda n: _fd_loop(d, ws, z0, zd0, tau, z, zd, zdd, n), 200,
                                     2 * cfg.repeats, cfg.min_time / 4)

        def np_loop1(n):
            for _ in range(n):
                dn.forward_dynamics(d, z0, zd0, tau)
        out['fd_np'] = 1e6 * _best_time(np_loop1, 5, 2 * cfg.np_repeats, cfg.np_min_time / 4)
        return out
    out['fd'] = 1e6 * _best_time(lambda n: _fd_loop(d, ws, z0, zd0, tau, z, zd, zdd, n), 200, cfg.repeats,
                                 cfg.min_time)
    out['rk4'] = 1e6 * _best_time(lambda n: _rk4_loop(d, ws, z0, zd0, tau, z, zd, dt, n), 50, cfg.repeats,
                                  cfg.min_time)
    assert _fd_loop(d, ws, z0, zd0, tau, z, zd, zdd, 10) == 0

    def py_loop(n):
        f = kernels.forward_dynamics
        for _ in range(n):
            f(d, ws, z0, zd0, tau, zdd)
    out['fd_py'] = 1e6 * _best_time(py_loop, 100, cfg.repeats, cfg.min_time)
    if numpy_too:
        def np_loop(n):
            for _ in range(n):
                dn.forward_dynamics(d, z0, zd0, tau)

        def np_rk4(n):
            for _ in range(n):
                dn.rk4_step(d, z0, zd0, tau, dt)
        out['fd_np'] = 1e6 * _best_time(np_loop, 5, cfg.np_repeats, cfg.np_min_time)
        out['rk4_np'] = 1e6 * _best_time(np_rk4, 2, cfg.np_repeats, cfg.np_min_time)
    return out


# ================================================================================ arms
def book_arm():
    """Book's operation-count case: 6 revolute joints (PUMA-like twists/offsets), links 2 and 3 flexible
    with 3 modes each (2 in-plane + 1 out-of-plane), the others rigid bodies."""
    hp = np.pi / 2

    def rigid(length, mass, com, inertia):
        return {'length': length, 'extra_mass': {'mass': mass, 'com': com, 'inertia': inertia}}

    def flexible(length):
        return {'length': length, 'section': {'shape': 'tube', 'outer_diameter': 0.06, 'inner_diameter': 0.054},
                'material': 'aluminium', 'modes': {'in_plane': 2, 'out_of_plane': 1}, 'damping_ratio': 0.02}

    joints = [
        {'name': 'j1', 'offset': 0.67, 'twist': hp, 'hub': {'mass': 5.0, 'inertia': 0.05},
         'link': rigid(0.0, 10.0, [0.0, -0.02, -0.3], [0.35, 0.35, 0.1])},
        {'name': 'j2', 'hub': {'mass': 3.0, 'inertia': 0.03}, 'link': flexible(0.9)},
        {'name': 'j3', 'offset': 0.15, 'twist': hp, 'hub': {'mass': 2.0, 'inertia': 0.02}, 'link': flexible(0.8)},
        {'name': 'j4', 'offset': 0.1, 'twist': -hp, 'link': rigid(0.0, 0.8, [0, 0, 0.02], [0.002, 0.002, 0.001])},
        {'name': 'j5', 'twist': hp, 'link': rigid(0.0, 0.4, [0, 0, 0.01], [0.001, 0.001, 0.0005])},
        {'name': 'j6', 'offset': 0.06, 'link': rigid(0.0, 0.2, [0, 0, 0.01], [0.0003, 0.0003, 0.0002])},
    ]
    return load_model(arm_from_dict({'name': 'book_6r', 'planar': False, 'joints': joints,
                                     'payload': {'mass': 1.0, 'inertia': 0.002}}))


def chain_arm(n_links, modes):
    """n identical flexible links (modes in-plane modes each; 0 = rigid), alternating twists 0 / pi/2."""
    joints = []
    for j in range(n_links):
        link = {'length': 0.4, 'linear_density': 1.0}
        if modes:
            link.update({'EI_z': 200.0, 'modes': {'in_plane': modes}})
        joints.append({'name': f'j{j}', 'twist': (np.pi / 2 if j % 2 else 0.0),
                       'hub': {'mass': 0.5, 'inertia': 0.005}, 'link': link})
    return load_model(arm_from_dict({'name': f'chain_{n_links}_{modes}', 'joints': joints,
                                     'payload': {'mass': 0.2, 'inertia': 0.0005}}))


# ================================================================================ sections
def section_costs(cfg, deluca):
    print('\n## 1. Cost per evaluation (J and R + Cholesky solve = kernels.forward_dynamics) and per RK4 step')
    rows = []
    for label, model, target in (('(a) De Luca 2 links x 2 modes', deluca, TARGET_DELUCA_US),
                                 ('(b) Book 6 joints, 2 flex x 3 modes', book_arm(), TARGET_BOOK_US)):
        t = time_model(model, cfg)
        rows.append((label, model.n_coords, t, target))
    hdr = (f'{"arm":38s} {"N":>3s} {"fd numba":>9s} {"target":>7s} {"RK4 numba":>10s} {"fd via Python":>13s}'
           f' {"Py overhead":>11s} {"fd numpy":>9s} {"RK4 numpy":>10s} {"numpy/numba":>11s}')
    print(hdr)
    print('-' * len(hdr))
    for label, N, t, target in rows:
        ratio = t['fd_np'] / t['fd']
        print(f'{label:38s} {N:3d} {t["fd"]:8.2f}u {"<=" + format(target, "g"):>7s} {t["rk4"]:9.2f}u '
              f'{t["fd_py"]:12.2f}u {t["fd_py"] - t["fd"]:10.2f}u {t["fd_np"]:8.0f}u {t["rk4_np"]:9.0f}u '
              f'{ratio:10.0f}x')
    print(f'(u = microseconds; targets: (a) <= {TARGET_DELUCA_US:g} us, (b) <= {TARGET_BOOK_US:g} us per '
          f'evaluation; numba >= {TARGET_SPEEDUP:g}x faster than numpy)')
    for label, N, t, target in rows:
        ok = t['fd'] <= target
        sp = t['fd_np'] / t['fd']
        print(f'  {label}: {t["fd"]:.2f} us {"meets" if ok else "MISSES"} the target; speed-up {sp:.0f}x '
              f'{"meets" if sp >= TARGET_SPEEDUP else "MISSES"} >= {TARGET_SPEEDUP:g}x')
    return rows


def section_sweep(cfg):
    print('\n## 2. Scaling: chain of n links x m in-plane modes (N = n (1 + m)); forward dynamics, us')
    ns = (1, 2, 4, 8) if cfg.quick else tuple(range(1, 9))
    ms = (0, 2, 4) if cfg.quick else (0, 1, 2, 3, 4)
    res = {}
    for m in ms:
        for n in ns:
            model = chain_arm(n, m)
            res[(n, m)] = (model.n_coords, time_model(model, cfg, full=False))
    print('numba (in-loop) us per evaluation')
    print('  m \\ n ' + ''.join(f'{n:>8d}' for n in ns))
    for m in ms:
        print(f'  {m:5d} ' + ''.join(f'{res[(n, m)][1]["fd"]:8.2f}' for n in ns))
    print('numpy us per evaluation (ratio numpy/numba)')
    for m in ms:
        print(f'  {m:5d} ' + ''.join(f'{res[(n, m)][1]["fd_np"]:7.0f}({res[(n, m)][1]["fd_np"] / res[(n, m)][1]["fd"]:3.0f}x)'
                                     for n in ns))
    N = np.array([res[k][0] for k in res], float)
    t = np.array([res[k][1]['fd'] for k in res])
    tnp = np.array([res[k][1]['fd_np'] for k in res])
    sel = N >= 4
    p = np.polyfit(np.log(N[sel]), np.log(t[sel]), 1)[0]
    pnp = np.polyfit(np.log(N[sel]), np.log(tnp[sel]), 1)[0]
    print(f'fitted growth exponent over all points with N >= 4: numba us ~ N^{p:.2f}, numpy us ~ N^{pnp:.2f}')
    for m in ms:
        Nm = np.array([res[(n, m)][0] for n in ns], float)
        tm = np.array([res[(n, m)][1]['fd'] for n in ns])
        if len(ns) >= 3:
            pm = np.polyfit(np.log(Nm[-3:]), np.log(tm[-3:]), 1)[0]
            print(f'  m = {m}: exponent over the three largest n: N^{pm:.2f}')
    nmax = ns[-1]
    tm = [res[(nmax, m)][1]['fd'] for m in ms]
    print(f'  n = {nmax}: us vs modes per link {list(ms)}: ' + ', '.join(f'{x:.1f}' for x in tm))
    return res


def _linear_mode(model):
    am = whole_arm_modes(model, [0.0, 0.0])
    J0 = model.mass_matrix(np.zeros(model.n_coords))
    return am.elastic_frequencies_hz[0], am.shapes[:, am.n_rigid], J0


def _crossing_frequency(t, x):
    """Mean frequency from the upward zero crossings (linear interpolation) of x(t)."""
    s = np.sign(x)
    idx = np.nonzero((s[:-1] < 0) & (s[1:] >= 0))[0]
    tc = t[idx] - x[idx] * (t[idx + 1] - t[idx]) / (x[idx + 1] - x[idx])
    return (len(tc) - 1) / (tc[-1] - tc[0])


def run_sim(model, dt, substeps, T, z0, zd0, torque_fn, rec_dt):
    K = int(round(T / dt))
    taus = np.array([torque_fn(k * dt) for k in range(K)], dtype=float).reshape(K, model.n_joints)
    rec_every = int(round(rec_dt / dt))
    out = np.zeros((K // rec_every + 1, model.n_coords))
    z, zd = z0.copy(), zd0.copy()
    ok = _simulate(model.data, model.workspace(), z, zd, taus, np.zeros(model.n_joints), dt, substeps,
                   rec_every, out)
    return ok, out


def tip_deflection(model, Z):
    """World tip position minus the rigid tip at the same joint angles, per row of Z."""
    out = np.zeros((Z.shape[0], 3))
    for k, z in enumerate(Z):
        zr = np.zeros_like(z)
        zr[model.q_index] = z[model.q_index]
        out[k] = model.tip_pose(z)[1] - model.tip_pose(zr)[1]
    return out


def section_accuracy(cfg, model):
    print('\n## 3. Accuracy study (De Luca arm, RK4): pick the largest step with <= 1 % error')
    f_lin, v1, J0 = _linear_mode(model)
    h_stable = largest_stable_rk4_step(model)
    print(f'linearized first whole-arm elastic frequency (joints free): {f_lin:.6f} Hz; '
          f'RK4 stability limit {1e3 * h_stable:.2f} ms')
    # free vibration in the first mode: 1 mm-ish modal amplitude
    amp = 1e-3 / np.max(np.abs(v1[model.mode_index]))
    z0 = amp * v1
    zd0 = np.zeros(model.n_coords)
    T_free = 10.0 if cfg.quick else 20.0
    # bang-bang 0.2 N m at both joints for 2 s (DESIGN §5), then free motion
    bang = lambda t: [0.2, 0.2] if t < 1.0 else ([-0.2, -0.2] if t < 2.0 else [0.0, 0.0])  # noqa: E731
    T_tip = 4.0
    rec = 0.01
    steps = [0.5e-3, 1e-3, 2e-3, 2.5e-3, 5e-3, 10e-3]
    print(f'{"dt ms":>6s} {"f meas Hz":>10s} {"f err %":>8s} {"tip defl err %":>15s} {"tip pos err %":>14s} {"ok":>3s}')
    chosen = None
    for dt in steps:
        if dt > h_stable:
            print(f'{1e3 * dt:6.2f}  beyond the RK4 stability limit')
            continue
        ok, Z = run_sim(model, dt, 1, T_free, z0, zd0, lambda t: [0.0, 0.0], dt)
        if not ok or not np.all(np.isfinite(Z)):
            print(f'{1e3 * dt:6.2f}  failed')
            continue
        eta = (Z - 0.0) @ (J0 @ v1)
        t = np.arange(Z.shape[0]) * dt
        f_meas = _crossing_frequency(t, eta)
        ef = 100 * abs(f_meas / f_lin - 1)
        ok1, Zt = run_sim(model, dt, 1, T_tip, np.zeros(model.n_coords), zd0, bang, rec)
        ok2, Zr = run_sim(model, dt, 16, T_tip, np.zeros(model.n_coords), zd0, bang, rec)
        dfl, dfl_r = tip_deflection(model, Zt), tip_deflection(model, Zr)
        e_defl = 100 * np.max(np.linalg.norm(dfl - dfl_r, axis=1)) / np.max(np.linalg.norm(dfl_r, axis=1))
        pos = np.array([model.tip_pose(z)[1] for z in Zt])
        pos_r = np.array([model.tip_pose(z)[1] for z in Zr])
        e_pos = 100 * np.max(np.linalg.norm(pos - pos_r, axis=1)) / np.max(np.linalg.norm(pos_r - pos_r[0], axis=1))
        good = ef <= 1.0 and e_defl <= 1.0 and e_pos <= 1.0
        if good:
            chosen = dt
        print(f'{1e3 * dt:6.2f} {f_meas:10.6f} {ef:8.4f} {e_defl:15.4f} {e_pos:14.5f} {"yes" if good else "no":>3s}')
    print('(f err: free vibration in the first linearized mode, frequency from zero crossings of the modal '
          f'coordinate over {T_free:g} s vs the linearized value; tip errors: 2 s bang-bang 0.2 N m, 4 s, max '
          'over time vs the same run at a 16x smaller step, normalised by the max reference tip deflection '
          '(defl) / tip excursion (pos))')
    if chosen is None:
        chosen = steps[0]
    print(f'chosen step: {1e3 * chosen:g} ms')
    return chosen


def section_rtf(cfg, model, dt):
    print(f'\n## 4. Real-time factor, De Luca arm, RK4 at the chosen step {1e3 * dt:g} ms')
    T = 10.0 if cfg.quick else 60.0
    z0, zd0 = random_state(model)
    K = int(round(T / dt))
    taus = np.zeros((K, model.n_joints))
    out = np.zeros((2, model.n_coords))
    ws = model.workspace()
    _simulate(model.data, ws, z0.copy(), zd0.copy(), taus[:10], np.zeros(model.n_joints), dt, 1, K, out)
    best = np.inf
    for _ in range(cfg.repeats):
        t = time.perf_counter()
        ok = _simulate(model.data, ws, z0.copy(), zd0.copy(), taus, np.zeros(model.n_joints), dt, 1, K, out)
        best = min(best, time.perf_counter() - t)
        assert ok
    rtf = T / best
    # through the Python API (one `step` call per control period, as a plant loop would)
    s = ArmState(z0.copy(), zd0.copy(), 0.0, ws)
    tau = np.zeros(model.n_joints)
    Kp = min(K, 20000)
    t = time.perf_counter()
    for _ in range(Kp):
        step(model, s, tau, dt)
    rtf_py = Kp * dt / (time.perf_counter() - t)
    print(f'  inside numba : {rtf:12.0f} x real time  (target >= {TARGET_RTF:g}: '
          f'{"meets" if rtf >= TARGET_RTF else "MISSES"}); {1e6 * best / K:.2f} us per step')
    print(f'  Python step(): {rtf_py:12.0f} x real time  ({1e6 * Kp * dt / rtf_py / Kp:.2f} us per step call)')
    return rtf, rtf_py


def section_energy(cfg, model):
    print('\n## 5. Energy drift over 10 s from random initial conditions (De Luca, undamped, no torque)')
    T, sample = 10.0, 0.1
    steps = [0.25e-3, 0.5e-3, 1e-3, 2e-3, 5e-3, 10e-3]
    seeds = (0,) if cfg.quick else (0, 1, 2)
    print(f'{"dt ms":>6s} {"RK4 max|dE|/E0":>15s} {"midpoint max|dE|/E0":>20s}')
    for dt in steps:
        res = []
        for method in ('rk4', 'midpoint'):
            worst = 0.0
            for seed in seeds:
                z, zd = random_state(model, seed)
                ws = model.workspace()
                tau = np.zeros(model.n_joints)
                E0 = model.energies(z, zd)['total']
                chunk = int(round(sample / dt))
                ok = True
                for _ in range(int(round(T / sample))):
                    if method == 'rk4':
                        ok = kernels.rk4_step(model.data, ws, z, zd, tau, dt * chunk, chunk)
                    else:
                        ok = kernels.midpoint_step(model.data, ws, z, zd, tau, dt * chunk, chunk, 1e-12, 20)
                    if not ok or not np.all(np.isfinite(z)):
                        ok = False
                        break
                    worst = max(worst, abs(model.energies(z, zd)['total'] - E0) / abs(E0))
                if not ok:
                    worst = np.inf
                    break
            res.append(worst)
        print(f'{1e3 * dt:6.2f} ' + ' '.join(f'{x:>{w}.2e}' if np.isfinite(x) else f'{"unstable":>{w}s}'
                                             for x, w in zip(res, (15, 20))))


def section_cold_start(cfg):
    print('\n## 6. Cold start: fresh interpreter, import, load the De Luca model, first RK4 step')
    code = ('import time; t0 = time.perf_counter()\n'
            'from flexarm_sim.model import load_model, ArmState, step\n'
            f'm = load_model({DELUCA!r}); s = ArmState.zeros(m); step(m, s, [0.0, 0.0], 1e-3)\n'
            'print(time.perf_counter() - t0)')
    env = dict(os.environ)

    def run(extra_env):
        e = dict(env, **extra_env)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, '-c', code], env=e, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-2000:])
        return wall, float(p.stdout.strip().splitlines()[-1])

    t = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'pass'], env=env, check=True)
    bare = time.perf_counter() - t
    run({})      # make sure the cache is warm
    warm = [run({}) for _ in range(cfg.cold_repeats)]
    wall = min(w for w, _ in warm)
    inproc = min(i for _, i in warm)
    with tempfile.TemporaryDirectory() as tmp:
        cold_wall, cold_in = run({'NUMBA_CACHE_DIR': tmp})
    print(f'  bare interpreter start (python -c pass, incl. the ROS wheels re-exec): {bare:6.2f} s')
    print(f'  warm numba cache: {wall:6.2f} s wall of the whole process, {inproc:5.2f} s import+load+step '
          f'(target <= {TARGET_COLD_S:g} s: {"meets" if wall <= TARGET_COLD_S else "MISSES"})')
    print(f'  cold numba cache (empty NUMBA_CACHE_DIR, compiles the kernels): {cold_wall:6.2f} s wall, '
          f'{cold_in:5.2f} s import+load+step')
    return wall, cold_wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='fewer repeats, a smaller sweep, shorter runs')
    cfg = ap.parse_args(argv)
    cfg.repeats = 3 if cfg.quick else 7
    cfg.min_time = 0.05 if cfg.quick else 0.2
    cfg.np_repeats = 2 if cfg.quick else 3
    cfg.np_min_time = 0.05 if cfg.quick else 0.2
    cfg.cold_repeats = 2 if cfg.quick else 4
    print(f'# bench_dynamics ({"quick" if cfg.quick else "full"}): {platform.processor() or platform.machine()}, '
          f'python {platform.python_version()}, numpy {np.__version__}, numba '
          f'{__import__("numba").__version__}, {os.cpu_count()} cpus')
    t0 = time.perf_counter()
    deluca = load_model(DELUCA)
    rows = section_costs(cfg, deluca)
    section_sweep(cfg)
    dt = section_accuracy(cfg, deluca)
    rtf, rtf_py = section_rtf(cfg, deluca, dt)
    section_energy(cfg, deluca)
    warm, cold = section_cold_start(cfg)
    print('\n## Summary (measured vs target)')
    (la, _, ta, _), (lb, _, tb, _) = rows
    print(f'  (a) De Luca per evaluation   {ta["fd"]:8.2f} us   target <= {TARGET_DELUCA_US:g} us')
    print(f'  (b) Book 6R per evaluation   {tb["fd"]:8.2f} us   target <= {TARGET_BOOK_US:g} us')
    print(f'  numba vs numpy speed-up      {ta["fd_np"] / ta["fd"]:6.0f}x / {tb["fd_np"] / tb["fd"]:.0f}x  '
          f'target >= {TARGET_SPEEDUP:g}x')
    print(f'  real-time factor at {1e3 * dt:g} ms  {rtf:8.0f} (numba loop), {rtf_py:.0f} (Python step)   '
          f'target >= {TARGET_RTF:g}')
    print(f'  cold start (warm cache)      {warm:8.2f} s    target <= {TARGET_COLD_S:g} s '
          f'(cold cache {cold:.1f} s)')
    print(f'(bench time {time.perf_counter() - t0:.0f} s)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
