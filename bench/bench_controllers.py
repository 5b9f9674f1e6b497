"""Controller benchmark (in-process: control law + model + simulate, control period 1 ms).

Task: a cycloidal move of every joint by 60 deg in 2.5 s from q = 0, then a 3 s hold (--quick: De Luca only,
1.5 s hold). Arms: De Luca two-link (horizontal) and Naganathan's spatial 3R (gravity; RK4 sub-steps of 0.25 ms).
Controllers: PD + rigid feedforward with the thesis gains (controller side, ZOH at 1 kHz, k_v capped by the
sampling, k_p lowered to keep a damping ratio >= 0.3 where it is); PD servo on the plant side (ServoCompliantActuator
with the thesis gains uncapped, evaluated every integration sub-step, the step short enough to resolve its
velocity loop; command from the reference); modal LQR;
computed torque (w_n = pi f_0); each without and with a ZV shaper on the lightly damped (zeta < 0.6) closed-loop
modes at the target.
Metrics: joint RMS tracking error (vs the law's own, possibly shaped, reference); peak tip deflection |tip - rigid
tip at the measured joint angles|; residual tip vibration max |tip - tip at rest at the target| after the
reference ends; 2 % settling time of the tip (band 2 % of the tip travel, from t = 0); peak |torque|; mean law
update time (us; the modal law's gain-schedule cells along the reference are designed before the run, as the
node designs them in a background thread; cells the measured configuration visits beyond them are designed
inside the call and count).
"""
import argparse
import math
import os
import sys
import time

import numpy as np

from flexarm_control.laws import (ComputedTorque, ModalLQR, PDServo, PointToPoint, ServoCompliantActuator,
                                  make_shaper, model_modes, static_equilibrium)
from flexarm_control.laws.pd import naganathan_gains
from flexarm_sim.model import load_model, simulate
from flexarm_sim.plant.servo import servo_substeps

ARMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'flexarm_bringup', 'config', 'arms')


class Timed:
    def __init__(self, law):
        self.law, self.t = law, []

    def __call__(self, t, z, zd):
        t0 = time.perf_counter()
        u = self.law(t, z, zd)
        self.t.append(time.perf_counter() - t0)
        return u


def run(model, law, q1, T, hold, dt, substeps, shaping):
    n = model.n_joints
    law.set_reference(PointToPoint(np.zeros(n), q1, T))
    if shaping:
        f, zeta = model_modes(model, q1, 'closed_loop', K=law.feedback_matrix(q1))
        sel = (zeta < 0.6) & (f < 0.25 / dt)
        law.set_shaper(make_shaper('zv', f[sel][:2], zeta[sel][:2]) if np.any(sel) else None)
    t_end = T + (law.shaper.duration if law.shaper is not None else 0.0)
    if hasattr(law, 'prefetch'):     # gain-schedule designs ahead of the run, as the node does in the background
        law.prefetch([law.reference.sample(t)[0] for t in np.linspace(0.0, t_end, 200)])
    timed = Timed(law)
    plant_side = isinstance(law, ServoCompliantActuator)
    r = simulate(model, t_end + hold, law.dt if plant_side else dt, torque=timed,
                 substeps=1 if plant_side else substeps, record_energy=False)
    ref = np.array([law.reference.sample(t)[0] for t in r.t])
    rms = math.sqrt(np.mean((r.q - ref) ** 2))
    zr = r.z.copy()
    zr[:, model.mode_index] = 0.0
    stride = max(1, len(r.t) // 3000)
    defl = max(np.linalg.norm(r.tip[k] - model.tip_pose(zr[k])[1]) for k in range(0, len(r.t), stride))
    z_eq, _ = static_equilibrium(model, q1)
    tip_ss = model.tip_pose(z_eq)[1]
    dev = np.linalg.norm(r.tip - tip_ss, axis=1)
    resid = float(np.max(dev[r.t >= t_end]))
    band = 0.02 * np.linalg.norm(tip_ss - r.tip[0])
    outside = np.nonzero(dev > band)[0]
    settle = r.t[outside[-1] + 1] if outside.size and outside[-1] + 1 < len(r.t) else (
        0.0 if not outside.size else math.inf)
    return dict(rms=rms, defl=defl, resid=resid, settle=settle, tau=np.abs(r.tau).max(axis=0),
                us=1e6 * np.mean(timed.t), faults=law.n_faults)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true')
    a = ap.parse_args(argv)
    arms = [('deluca_two_link', 1)] if a.quick else [('deluca_two_link', 1), ('spatial_3r', 4)]
    hold = 1.5 if a.quick else 3.0
    dt = 1e-3
    for arm, sub in arms:
        model = load_model(os.path.join(ARMS, arm + '.yaml'))
        n = model.n_joints
        q1 = np.full(n, math.pi / 3)
        task = [np.zeros(n), q1]
        sub_servo = max(sub, servo_substeps(model, naganathan_gains(model, task=task)[1], dt))
        laws = {
            'PD (thesis gains)': lambda: PDServo(model, task=task, dt=dt),
            'PD servo, plant side': lambda: ServoCompliantActuator(model, task=task, dt=dt / sub_servo),
            'modal LQR': lambda: ModalLQR(model, dt=dt),
            'computed torque': lambda: ComputedTorque(model, dt=dt),
        }
        print(f'\n{arm}: 60 deg cycloid of every joint in 2.5 s, {hold} s hold, control 1 kHz, '
              f'RK4 {dt / sub * 1e3:.2f} ms (plant-side servo: {dt / sub_servo * 1e6:.1f} us)')
        print(f'{"controller":34s} {"RMS e_q":>9s} {"tip defl":>9s} {"resid":>9s} {"settle":>7s} '
              f'{"peak |tau| (N m)":>26s} {"us/upd":>7s}')
        for name, mk in laws.items():
            for shaping in (False, True):
                try:
                    m = run(model, mk(), q1, 2.5, hold, dt, sub, shaping)
                except Exception as e:     # report, keep going
                    print(f'{name + (" + ZV" if shaping else ""):34s} failed: {e}')
                    continue
                tau = ' '.join(f'{x:7.2f}' for x in m['tau'])
                print(f'{name + (" + ZV" if shaping else ""):34s} {m["rms"]:9.2e} {m["defl"]:9.2e} '
                      f'{m["resid"]:9.2e} {m["settle"]:7.2f} {tau:>26s} {m["us"]:7.1f}'
                      + (f'  faults {m["faults"]}' if m['faults'] else ''), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
