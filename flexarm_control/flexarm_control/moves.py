"""The standard move, perturbed arms and in-process runs of a controller on it (no ROS): what `make bench` and the
tests measure, with the figures of figures.py.

    model = load_model(...); law = make_controller('tip_tracking', model, dt=0.002)
    res, fig = run_move(law, plant=perturbed_model(model.spec), reference=standard_move(model))

The standard move is Naganathan's case 1: every joint by 60 deg in 2.5 s with the cycloidal profile, from the
arm's nominal configuration, starting at t = 0.5 s; the run lasts 6 s from the start of the move (`flexarm run`'s
default). A perturbed arm is the same arm with another payload and link stiffness (every E.I and G.J scaled), the
controller keeping the nominal model: the robustness study of issue 23.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from flexarm_sim.model import load_model, simulate, validity_limit
from flexarm_sim.model.spec import arm_from_dict, arm_to_dict

from .figures import move_figures
from .laws.reference import PointToPoint, move_target
from .planning import desired_tip_path

MOVE_ANGLE = math.radians(60.0)
MOVE_TIME = 2.5
MOVE_START = 0.5
RUN_DURATION = 6.0


def standard_move(model, angle=MOVE_ANGLE, move_time=MOVE_TIME, t_move=MOVE_START):
    """The cycloidal move of every joint by `angle` from the nominal configuration, starting at t_move; a joint
    whose position limits the move by +angle would leave moves by -angle instead (laws.reference.move_target, as the
    controller's default move: rigid_puma3's shoulder, upper limit 45 deg)."""
    q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
    lims = np.array([js.position_limits for js in model.spec.joints], dtype=float)
    return PointToPoint(q0, move_target(q0, angle, lims[:, 0], lims[:, 1]), move_time, t_move)


def perturbed_spec(spec, payload=1.2, stiffness=0.85, damping=None):
    """The arm with its payload (mass and inertia) scaled by `payload`, every link's E.I and G.J by `stiffness`, and
    (damping not None) every link's modal damping ratio set to `damping`."""
    d = arm_to_dict(spec)
    pay = d.get('payload') or {}
    if pay:
        pay['mass'] = float(pay.get('mass', 0.0)) * payload
        if 'inertia' in pay:
            pay['inertia'] = (np.asarray(pay['inertia'], dtype=float) * payload).tolist()
    for js in d['joints']:
        link = js.get('link') or {}
        if damping is not None and link:
            link['damping_ratio'] = float(damping)
        for key in ('EI_z', 'EI_y', 'GJ'):
            if link.get(key):
                link[key] = float(link[key]) * stiffness
        sec = link.get('section')
        if sec is not None and 'material' in link:          # stiffness from the section: scale the modulus
            mat = link['material']
            if isinstance(mat, dict):
                for key in ('youngs_modulus', 'shear_modulus'):
                    if mat.get(key):
                        mat[key] = float(mat[key]) * stiffness
    d['name'] = f"{d.get('name', 'arm')}_payload{round(100 * payload)}_stiffness{round(100 * stiffness)}" + \
        ('' if damping is None else f"_damping{f'{100 * damping:g}'.replace('.', 'p')}pct")
    return arm_from_dict(d, source=f'{spec.name} perturbed')


def perturbed_model(spec, payload=1.2, stiffness=0.85, damping=None):
    return load_model(perturbed_spec(spec, payload, stiffness, damping))


class ModalScale:
    """A law fed the state with its modal coordinates and rates scaled by `scale` (a model whose modal coordinates
    are off by that factor)."""

    def __init__(self, law, scale):
        self.law, self.scale = law, float(scale)
        self.mi = np.asarray(law.model.mode_index)

    def __call__(self, t, z, zd):
        z, zd = np.array(z, dtype=float), np.array(zd, dtype=float)
        z[self.mi] *= self.scale
        zd[self.mi] *= self.scale
        return self.law(t, z, zd)


class DelayedCommand:
    """A law run every `period` s whose command acts exactly `delay` s after the state it was computed from (the
    transport of the state and the command over ROS, in process and without timing), for a plant integrated every
    `step` s (period and delay whole multiples of it): called every step, it returns the command in force. Before
    the first command arrives, zero torque."""

    def __init__(self, law, period, delay, step):
        self.law = law
        self.every = int(round(period / step))
        self.lag = int(round(delay / step))
        if self.every < 1 or abs(self.every * step - period) > 1e-9 * period or \
                abs(self.lag * step - delay) > 1e-9 * max(period, delay):
            raise ValueError(f'period {period} and delay {delay} must be whole multiples of the step {step}')
        self.k = 0
        self.pending = collections.deque()
        self.u = None

    def __call__(self, t, z, zd):
        if self.k % self.every == 0:
            u = np.array(self.law(t, z, zd), dtype=float)
            self.pending.append((self.k + self.lag, u))
            if self.u is None:
                self.u = np.zeros_like(u)
        while self.pending and self.pending[0][0] <= self.k:
            self.u = self.pending.popleft()[1]
        self.k += 1
        return self.u


def run_move(law, plant=None, reference=None, duration=RUN_DURATION, modal_scale=None, z0=None, delay=None,
             delay_step=None):
    """Simulate `plant` (default: the law's model) under `law` on `reference` (default: the standard move) for the
    move's start + duration; returns (SimulationResult, figures dict of figures.move_figures plus peak torque).
    `delay` (s): the command acts that long after its state (DelayedCommand; the plant then integrated every
    `delay_step`, default half the law's period); None: lock-step (the command acts from its state's instant)."""
    model = law.model
    plant = plant or model
    reference = reference or standard_move(model)
    law.set_reference(reference)
    plan = getattr(law, 'plan', None)
    t_move, t_ref_end = float(reference.t0), float(reference.end_time)
    t_cmd_end = max(t_ref_end, plan.t_end if plan is not None else -math.inf)
    shaper = getattr(law, 'shaper', None)
    if shaper is not None:
        t_cmd_end = t_ref_end + float(np.max(shaper.times))
    if z0 is None:
        from .planning import equilibrium_path
        z0 = equilibrium_path(plant, [np.asarray(reference.sample(0.0)[0], dtype=float)])[0][0]
    controller = law if modal_scale is None else ModalScale(law, modal_scale)
    T = t_move + duration
    step = law.dt
    if delay is not None:
        step = delay_step or 0.5 * law.dt
        controller = DelayedCommand(controller, law.dt, delay, step)
    res = simulate(plant, T, step, controller, z0=z0)
    tip_d = desired_tip_path(model, reference, res.t)
    fig = move_figures(res.t, res.tip, tip_d, t_move, t_ref_end, t_cmd_end, duration, res.relative_deflection,
                       validity_limit(plant))
    fig['peak_torque_nm'] = [float(x) for x in np.abs(res.tau).max(axis=0)]
    if plan is not None:
        fig['plan_time_s'] = float(plan.info.get('plan_time_s', float('nan')))
    return res, fig
