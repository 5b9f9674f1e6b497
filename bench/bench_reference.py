"""Large deflections: the assumed-modes model, nonlinear (default) and linear (geometric_nonlinearity: false),
against the geometrically exact rigid-segment chain (flexarm_sim/test/exact_planar_chain.py) at N and 2N
elements per link (the chain converges as 1/N^2; |chain(N) - chain(2N)| is three times chain(2N)'s error).

    python bench/bench_reference.py [--quick]      (--quick: N = 10, 20 instead of 20, 40)

The cases are those of flexarm_sim/test/test_large_deflection.py (large_deflection_cases.py); targets are the
issue's and printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'flexarm_sim', 'test'))

from large_deflection_cases import (chain_measure, deluca_bang_bang, model_measure,  # noqa: E402
                                    slewing_spin_up, spinning_beam)


def _max_norm(a):
    a = np.asarray(a)
    return float(np.max(np.linalg.norm(a, axis=1) if a.ndim == 2 else np.abs(a)))


def _err(x, ref):
    return np.inf if x is None or not np.all(np.isfinite(x)) else _max_norm(x - ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true')
    args = ap.parse_args()
    N = 10 if args.quick else 20
    print(f'reference: rigid-segment chain, N = {2 * N} elements per link; "chain bound" = |chain({N}) - '
          f'chain({2 * N})| (3x the reference\'s own error)\n')
    print(f'{"case":52s} {"nonlinear":>11s} {"linear":>11s} {"chain bound":>12s} {"target":>9s}  peak (reference)')
    t0 = time.perf_counter()
    for amp, target in ((0.2, 2e-3), (0.05, 0.3e-3)):
        case = deluca_bang_bang(amp)
        ref, coarse = chain_measure(case, 2 * N), chain_measure(case, N)
        nl, lin = _err(model_measure(case), ref), _err(model_measure(case, False), ref)
        print(f'{case.name + ": tip path, max":52s} {1e3 * nl:8.3f} mm {1e3 * lin:8.3f} mm '
              f'{1e3 * _max_norm(ref - coarse):9.3f} mm {1e3 * target:6.1f} mm')
    case = slewing_spin_up()
    ref, coarse = chain_measure(case, 2 * N), chain_measure(case, N)
    peak = _max_norm(ref)
    y_nl, y_lin = model_measure(case), model_measure(case, False)
    lin_txt = (f'{100 * _err(y_lin, ref) / peak:9.1f} %' if y_lin is not None and _err(y_lin, ref) < 10 * peak
               else '  diverges ')
    print(f'{case.name + ": hub-frame deflection":52s} {100 * _err(y_nl, ref) / peak:9.2f} % {lin_txt:>11s} '
          f'{100 * _max_norm(ref - coarse) / peak:10.2f} % {"2 %":>9s}  {1e3 * peak:.1f} mm'
          + ('' if y_lin is None else f' (linear model peak {1e3 * _max_norm(y_lin):.0f} mm)'))
    print('\nin-plane frequency of the slewing beam spinning at Omega on a heavy hub (Hz), and its rise '
          'f^2 - f0^2 (Hz^2):')
    print(f'{"Omega rad/s":>11s} {"chain(" + str(N) + ")":>10s} {"chain(" + str(2 * N) + ")":>10s} '
          f'{"nonlinear":>10s} {"linear":>10s} {"rise ref":>9s} {"rise nl":>9s} {"nl err":>8s} {"bound":>7s}')
    f0 = None
    for w in (0.0, 5.0, 10.0, 15.0, 20.0):
        c = spinning_beam(w)
        fc, fr = chain_measure(c, N)[0], chain_measure(c, 2 * N)[0]
        fn = model_measure(c)[0]
        fl = model_measure(c, False)
        fl = np.nan if fl is None else fl[0]
        if f0 is None:
            f0 = (fc, fr, fn)
        rise_c, rise_r, rise_n = fc ** 2 - f0[0] ** 2, fr ** 2 - f0[1] ** 2, fn ** 2 - f0[2] ** 2
        rel = f'{100 * (rise_n - rise_r) / rise_r:+7.2f}%' if w else '        '
        bnd = f'{100 * abs(rise_c - rise_r) / rise_r:6.2f}%' if w else '       '
        lin = f'{fl:10.4f}' if np.isfinite(fl) else '  unstable'
        print(f'{w:11.1f} {fc:10.4f} {fr:10.4f} {fn:10.4f} {lin} {rise_r:9.4f} {rise_n:9.4f} {rel} {bnd}')
    print('target: the nonlinear rise within 2 % of the reference (bound included); the linear model\'s '
          'frequency falls with Omega (spin softening) and is lost above the first frequency')
    print(f'\n({time.perf_counter() - t0:.0f} s)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
