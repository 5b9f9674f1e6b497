"""Controllers judged at the tip (issue 23): every controller x {nominal, perturbed plant} x every shipped arm.

In-process, lock-step semantics (flexarm_control.moves.run_move: `simulate`, the torque computed from the state at
t_k acts from t_k), control at 500 Hz. The task is the standard move: every joint by 60 deg in 2.5 s, cycloidal,
from the nominal configuration, figures over 6 s from the start of the move (flexarm_control.figures). The perturbed
plant has +20 % payload and -15 % E.I (and G.J); the controller keeps the nominal model (and plan).

Columns: tip path error RMS / max (mm) against the desired tip path, tip error at the end of the move (2.5 s), ringing
after the command ended (mm), 1 mm settling time (s from the start), largest link deflection (% of length) and whether
it stays within the model's validity, peak torque (N m), planning time (s, tip_tracking). A move the planner cannot
fit within the limits is reported as refused, with its reason.

Then the robustness of the modal feedback (laws.modal.closed_loop_radius at the move's start, middle and end): the
range of modal-coordinate scale for which the sampled loop stays stable, whether the four payload x stiffness
corners (+-20 %, +-15 %) are, and the actual delays (whole ms) for which the nominal arm and all four corners are, for
the lock-step design (tip_tracking's robust one and its certainty-equivalent counterpart, laws/modal.py "Robust
lock-step design") and the real-time ones (designed for one period of delay; for the default periods, the former
certainty-equivalent design and the robust one, laws/modal.py "Robust delay design").
Last, the planning time of the standard move against its target (<= 2 s, De Luca arm).

    python bench/bench_controllers.py [--quick]      (--quick: the De Luca arm only)
"""
import argparse
import math
import sys
import time

import numpy as np

from flexarm_control.controller.kinds import KINDS, law_class
from flexarm_control.laws import make_shaper, model_modes
from flexarm_control.laws.modal import closed_loop_radius, remembering_designs
from flexarm_control.moves import perturbed_model, run_move, standard_move
from flexarm_control.planning import PlanError, plan_move
from flexarm_sim.arms import resolve_arm, shipped_arms
from flexarm_sim.model import load_model

DT = 0.002
PLAN_TARGET_S = 2.0


def controllers():
    """(label, factory(model) -> law): every registered kind, and the modal law with a ZVD shaper."""
    out = [(k, (lambda m, k=k: law_class(k)(m, dt=DT))) for k in KINDS]

    def modal_zvd(model):
        law = law_class('modal')(model, dt=DT)
        q1 = standard_move(model).q1
        f, zeta = model_modes(model, q1, 'closed_loop', K=law.feedback_matrix(q1))
        sel = (zeta < 0.6) & (f < 0.25 / DT)
        law.set_shaper(make_shaper('zvd', f[sel][:2], zeta[sel][:2]) if np.any(sel) else None)
        return law
    out.insert(2, ('modal+zvd', modal_zvd))
    return out


def row(arm, label, plant_label, f):
    mm = lambda v: 'n/a' if v is None else f'{1e3 * v:.3g}'
    s = lambda v: 'never' if v is None else f'{v:.2f}'
    defl = max(f['max_deflection_over_length'])
    valid = 'yes' if f['model_valid'] else 'NO'
    plan = f"{f['plan_time_s']:.2f}" if 'plan_time_s' in f else ''
    print(f"| {arm} | {label} | {plant_label} | {mm(f['tip_rms_error_m'])} / {mm(f['tip_max_error_m'])} | "
          f"{mm(f['end_of_move_tip_error_m'])} | {mm(f['residual_vibration_m'])} | {s(f['settling_time_1mm_s'])} | "
          f"{100 * defl:.1f} ({valid}) | {', '.join(f'{x:.3g}' for x in f['peak_torque_nm'])} | {plan} |", flush=True)


def figures_table(arms):
    print('| arm | controller | plant | tip RMS / max (mm) | end of move (mm) | ringing (mm) | 1 mm settle (s) | '
          'deflection % (valid) | peak torque (N m) | plan (s) |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for arm in arms:
        model = load_model(resolve_arm(arm))
        plants = (('nominal', model), ('+20% payload, -15% EI', perturbed_model(model.spec, 1.2, 0.85)))
        for label, make in controllers():
            for plant_label, plant in plants:
                try:
                    _, f = run_move(make(model), plant)
                except PlanError as e:
                    print(f'| {arm} | {label} | {plant_label} | refused: {e} |||||||', flush=True)
                    continue
                except Exception as e:  # noqa: BLE001 - a diverging run is a result too
                    print(f'| {arm} | {label} | {plant_label} | failed: {e!r} |||||||', flush=True)
                    continue
                row(arm, label, plant_label, f)


def scale_range(law, model, qs, lo=0.3, hi=3.0):
    """(smallest, largest) modal-coordinate scale with a stable loop at every q (bisection from 1)."""
    def stable(s):
        return all(closed_loop_radius(law, model, q, s) < 1.0 for q in qs)
    if not stable(1.0):
        return None

    def edge(a, b):                  # a stable, b unstable or the search bound
        if stable(b):
            return b
        for _ in range(12):
            c = 0.5 * (a + b)
            a, b = (c, b) if stable(c) else (a, c)
        return a
    return edge(1.0, lo), edge(1.0, hi)


def delay_ranges(ms):
    """'0-5, 7 ms' from the stable whole-millisecond delays."""
    out, k = [], 0
    while k < len(ms):
        j = k
        while j + 1 < len(ms) and ms[j + 1] == ms[j] + 1:
            j += 1
        out.append(f'{ms[k]}' if j == k else f'{ms[k]}-{ms[j]}')
        k = j + 1
    return (', '.join(out) + ' ms') if out else 'none'


def margins_table(arms):
    print('\n| arm | feedback | design | stable modal scale | payload x E.I corners (+-20 %, +-15 %) | stable actual delays '
          '(0-12 ms) | corners: stable actual delays |')
    print('|---|---|---|---|---|---|---|')
    for arm in arms:
        model = load_model(resolve_arm(arm))
        if not model.mode_index.size:
            continue
        q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
        qs = [q0, q0 + math.radians(30), q0 + math.radians(60)]
        corners = [perturbed_model(model.spec, p, e) for p in (0.8, 1.2) for e in (0.85, 1.15)]
        for kind in ('modal', 'tip_tracking'):
            periods = law_class(kind).design_periods(1.0 / DT)
            robust = law_class(kind).robust_delay_design > 0      # the class's real-time default
            lockstep = (('lock-step', 0.0, {}),)
            if law_class(kind).lockstep_robust_errors:
                lockstep = (('lock-step, robust (default)', 0.0, {}),
                            ('lock-step, certainty-equivalent', 0.0, {'robust': 0.0}))
            for design, delay, kw in (*lockstep, ('real time, 1 period', DT, {}),
                                      (f'real time, {periods} periods, certainty-equivalent'
                                       + ('' if robust else ' (default)'), periods * DT, {'robust': 0.0}),
                                      (f'real time, {periods} periods, robust' + (' (default)' if robust else ''),
                                       periods * DT, {'robust': 1.0})):
                law = remembering_designs(law_class(kind)(model, dt=DT, input_delay=delay, **kw))
                r = scale_range(law, model, qs)
                rng = 'unstable' if r is None else f'x{r[0]:.2f} - x{r[1]:.2f}'
                ok = [max(closed_loop_radius(law, p, q) for q in qs) for p in corners]
                corner = 'all stable' if max(ok) < 1 else \
                    f'{sum(x >= 1 for x in ok)} of 4 unstable (worst radius {max(ok):.5f})'
                ms = [d for d in range(13) if max(closed_loop_radius(law, model, q, input_delay=1e-3 * d)
                                                   for q in qs) < 1.0]
                mc = [d for d in range(13) if max(closed_loop_radius(law, p, q, input_delay=1e-3 * d)
                                                   for p in corners for q in qs) < 1.0]
                print(f'| {arm} | {kind} | {design} | {rng} | {corner} | {delay_ranges(ms)} | {delay_ranges(mc)} |',
                      flush=True)


def plan_time(arm='deluca_two_link'):
    model = load_model(resolve_arm(arm))
    ref = standard_move(model)
    plan_move(model, ref, DT, max_iterations=1)                      # kernels warm
    w, c = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        p = plan_move(model, ref, DT)
        w.append(time.perf_counter() - t0)
        c.append(time.process_time() - c0)
    print(f'\nplanning the standard move ({arm}, 500 Hz grid, {p.info["knots"]} knots x {model.n_joints} joints, '
          f'{p.info["iterations"]} iterations): wall best {min(w):.2f} s, median {float(np.median(w)):.2f} s of 3 '
          f'(target <= {PLAN_TARGET_S:g} s: ratio {min(w) / PLAN_TARGET_S:.2f}); CPU {min(c):.2f} s (the wall time of '
          f'an idle machine; on a loaded one the wall time is longer); planned tip RMS {1e3 * p.info["tip_rms_m"]:.3f} '
          f'mm, max {1e3 * p.info["tip_max_m"]:.3f} mm')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='the De Luca arm only')
    args, _ = ap.parse_known_args(argv)
    arms = ['deluca_two_link'] if args.quick else shipped_arms()
    figures_table(arms)
    margins_table(arms)
    plan_time()
    return 0


if __name__ == '__main__':
    sys.exit(main())
