"""Integrators at equal accuracy (issue 27 items 2 and 3), in process, no ROS.

Per shipped arm, without damping, friction or stops (spec.conservative), released from a bent start (every link's
first mode coordinate at 5 % of its length, the higher ones at 1 %), 10 s of free motion at a 1 ms period:
the largest relative energy error and simulate()'s real-time factor of
  * rk4 at its stability rule (the default of simulate() and the plant),
  * rk4 with the sub-steps doubled until the energy holds within the target 1e-4 (its cost at equal accuracy),
  * gauss (two-stage Gauss-Legendre) at its accuracy rule.
Targets: gauss within 1e-4 on every arm; its real-time factor >= 2x that of rk4 at equal accuracy (item 3).
"""
import argparse
import os
import sys
import time

from flexarm_sim.arms import shipped_arms
from flexarm_sim.model import auto_substeps, simulate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'flexarm_sim', 'test'))
from free_motion_cases import bent_start, free_arm, relative_energy_error  # noqa: E402

DT = 1e-3
ENERGY_TARGET = 1e-4
SPEED_TARGET = 2.0


def run(model, T, method, substeps=None):
    """(largest relative energy error, real-time factor, sub-steps) of one run (after a warm-up run)."""
    z0 = bent_start(model)
    simulate(model, 0.01, DT, z0=z0, method=method, substeps=substeps)
    t0 = time.perf_counter()
    res = simulate(model, T, DT, z0=z0, method=method, substeps=substeps)
    wall = time.perf_counter() - t0
    n = substeps or auto_substeps(model, DT, method)
    return float(relative_energy_error(res).max()), T / wall, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='2 s runs instead of 10 s')
    args = ap.parse_args()
    T = 2.0 if args.quick else 10.0
    print(f'bench_integrators: free motion {T:g} s at 1 ms, energy error target {ENERGY_TARGET:g}, '
          f'speed target gauss >= {SPEED_TARGET:g}x rk4 at equal accuracy')
    print(f'  {"arm":16s} {"rk4 default":>24s} {"rk4 at equal accuracy":>28s} {"gauss":>24s} {"speed ratio":>12s}')
    for name in shipped_arms():
        model = free_arm(name)
        e_r, f_r, n_r = run(model, T, 'rk4')
        e_a, f_a, n_a = e_r, f_r, n_r
        while e_a > ENERGY_TARGET and n_a < 512:
            n_a *= 2
            e_a, f_a, _ = run(model, T, 'rk4', n_a)
        e_g, f_g, n_g = run(model, T, 'gauss')
        ratio = f_g / f_a
        held = 'held' if e_a <= ENERGY_TARGET else 'NOT held at 512'
        print(f'  {name:16s} {e_r:8.1e} {f_r:6.1f}x RT ({n_r:3d})   {e_a:8.1e} {f_a:6.1f}x RT ({n_a:3d}, {held})'
              f'   {e_g:8.1e} {f_g:6.1f}x RT ({n_g:3d})   {ratio:5.2f}x '
              f'{"meets" if ratio >= SPEED_TARGET and e_g <= ENERGY_TARGET else "MISSES"}')
    print('  (energy error: largest |E(t) - E(0)| / E(0); x RT: simulated seconds per wall second; (n): sub-steps '
          'per 1 ms period)')


if __name__ == '__main__':
    main()
