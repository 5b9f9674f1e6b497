"""Gain-schedule cells of a move (in-process, no ROS): what a controller with an empty design cache designs when it
accepts a reference (issue 28), with joint 0 cyclic (laws/schedule.py: an arm turning about gravity's axis) against
the full grid over every joint.

Per shipped arm, the move of every joint by 30 and 60 deg from the nominal configuration: the cells the real-time
modal law (4 ms of delay, robust, 500 Hz) and the safe mode's hold law (envelope 2-50 ms periods, 0-30 ms delays) ask
for (`cells_for` over 50 points of the move, as the controller runtime queues them). On the De Luca arm the CPU time
to design the 30 deg move's cells both ways (after the laws' one-time set-up), one run each, and their ratio.
Target: the cyclic schedule asks for at most half the cells of the full grid on every shipped arm.
"""
import argparse
import time

import numpy as np

from flexarm_control.controller.safe_mode import Envelope, SafeHoldLaw
from flexarm_control.laws.modal import ModalLQR
from flexarm_control.laws.schedule import ScheduleGrid
from flexarm_sim.arms import resolve_arm, shipped_arms
from flexarm_sim.model import cyclic_joints, load_model

DT = 0.002
DELAY = 0.004
ENVELOPE = Envelope(DT, 0.05, 0.03)


def laws(model, full):
    modal = ModalLQR(model, dt=DT, input_delay=DELAY)
    hold = SafeHoldLaw(model, ENVELOPE)
    if full:
        none = np.zeros(model.n_joints, dtype=bool)
        modal._schedule = ScheduleGrid(model, modal._schedule.step, cyclic=none)
        hold._schedule = ScheduleGrid(model, hold._schedule.step, cyclic=none)
    return modal, hold


def move(model, deg):
    q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
    return [q0 + np.radians(deg) * s for s in np.linspace(0.0, 1.0, 50)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='cell counts only (no design times)')
    args = ap.parse_args()
    print('# bench_schedule: gain-schedule cells of a move, joint 0 cyclic against the full grid')
    print('\n| arm | cyclic joints | move | modal cells (cyclic / full) | hold cells (cyclic / full) | ratio | target |')
    print('|---|---|---|---|---|---|---|')
    for arm in shipped_arms():
        model = load_model(resolve_arm(arm))
        for deg in (30, 60):
            qs = move(model, deg)
            counts = []
            for full in (False, True):
                modal, hold = laws(model, full)
                counts.append((len(modal.cells_for(qs)), len(hold.cells_for(qs))))
            (mc, hc), (mf, hf) = counts
            ratio = (mf + hf) / max(1, mc + hc)
            print(f'| {arm} | {np.flatnonzero(cyclic_joints(model.spec)).tolist()} | {deg} deg | {mc} / {mf} | '
                  f'{hc} / {hf} | {ratio:.1f}x fewer | >= 2x |', flush=True)
    if args.quick:
        return
    model = load_model(resolve_arm('deluca_two_link'))
    qs = move(model, 30)
    for law in laws(model, False):           # the one-time set-up (the robust design's erring arms: ~0.5 s) first
        law.design_cell(law.cells_for(qs)[0])
    times = []
    for full in (False, True):
        modal, hold = laws(model, full)
        t0 = time.process_time()
        for law in (modal, hold):
            for key in law.cells_for(qs):
                law.design_cell(key)
        times.append(time.process_time() - t0)
    print(f'\nDe Luca arm, 30 deg move: designing its cells took {times[0]:.2f} s of CPU cyclic, {times[1]:.2f} s on '
          f'the full grid: {times[1] / times[0]:.1f}x less (one run each, this machine)')


if __name__ == '__main__':
    main()
