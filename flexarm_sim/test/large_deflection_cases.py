"""The large-deflection cases of issue 15, run on the assumed-modes model and on the geometrically exact chain
(exact_planar_chain.py): shared by test_large_deflection.py (asserts) and bench/bench_reference.py (prints the
linear model next to them).

Each case returns, per run, the quantity it compares; `chain_measure(case, N)` runs the reference with N elements
per flexible link and `model_measure(case, nonlinear)` the model (default sub-steps), so a comparison is
`max |model - chain(N)|` with the chain's own discretisation error bounded by |chain(N) - chain(N/2)| (the
midpoint-rule chain converges as 1/N^2: chain(N/2) - chain(N) is three times chain(N)'s error).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
from exact_planar_chain import chain_from_spec, simulate_chain

from flexarm_sim.model import IntegrationError, load_arm, load_model, simulate
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()
DT = 1e-3


def undamped(spec):
    """The arm without modal damping (the chain's springs are undamped; modal damping has no chain equivalent)."""
    return replace(spec, joints=tuple(replace(j, link=replace(j.link, damping_ratio=np.zeros(
        j.link.n_in_plane + j.link.n_out_of_plane + j.link.n_torsion))) for j in spec.joints))


def in_hub_frame(tip, hub_angle):
    """(x, y) of base-frame points in the frame turning with the first joint: y is the transverse deflection."""
    c, s = np.cos(hub_angle), np.sin(hub_angle)
    return np.stack([c * tip[:, 0] + s * tip[:, 1], -s * tip[:, 0] + c * tip[:, 1]], axis=1)


def crossing_frequency(t, y, t_from):
    """Frequency (Hz) of y(t) for t > t_from from its upward zero crossings (about its mean), linearly
    interpolated between samples."""
    k = t > t_from
    t, y = t[k], y[k] - y[k].mean()
    i = np.nonzero((y[:-1] < 0) & (y[1:] >= 0))[0]
    if i.size < 3:
        return np.nan
    tc = t[i] - y[i] * (t[i + 1] - t[i]) / (y[i + 1] - y[i])
    return (tc.size - 1) / (tc[-1] - tc[0])


class Case:
    """A spec, a torque history (K, n) at DT, initial joint rates; `measure(t, tip, hub_angle)` -> array."""

    def __init__(self, name, spec, T, taus, qd0=None):
        self.name, self.spec, self.T, self.taus = name, spec, T, np.asarray(taus, float)
        self.qd0 = np.zeros(spec.n_joints) if qd0 is None else np.asarray(qd0, float)

    def measure(self, t, tip, hub_angle):
        raise NotImplementedError

    def chain_run(self, N):
        chain = chain_from_spec(self.spec, N)
        qd = np.zeros(chain.n_bodies)
        qd[chain.motor_body] = self.qd0
        t, tip, q = simulate_chain(chain, self.T, DT, self.taus, qd0=qd)
        return t, tip, q[:, chain.motor_body[0]]

    def model_run(self, nonlinear=True):
        model = load_model(replace(self.spec, geometric_nonlinearity=nonlinear))
        zd0 = np.zeros(model.n_coords)
        zd0[model.q_index] = self.qd0
        try:
            r = simulate(model, self.T, DT, self.taus, zd0=zd0, record_energy=False)
        except IntegrationError:
            return None
        return r.t, r.tip[:, :2], r.q[:, 0]


def chain_measure(case, N):
    return case.measure(*case.chain_run(N))


def model_measure(case, nonlinear=True):
    """The case's measure on the model, or None if the run failed (diverged)."""
    run = case.model_run(nonlinear)
    return None if run is None else case.measure(*run)


class TipPath(Case):
    """Measure: the tip's path in the base plane (K, 2), m."""

    def measure(self, t, tip, hub_angle):
        return tip


class HubFrameDeflection(Case):
    """Measure: the tip's transverse deflection in the frame turning with the hub (K,), m."""

    def measure(self, t, tip, hub_angle):
        return in_hub_frame(tip, hub_angle)[:, 1]


class SpinningFrequency(Case):
    """Measure: frequency (Hz) of the tip's in-plane vibration seen from the hub, after the excitation."""

    t_excite = 0.15

    def measure(self, t, tip, hub_angle):
        return np.array([crossing_frequency(t, in_hub_frame(tip, hub_angle)[:, 1], self.t_excite)])


def deluca_bang_bang(amplitude):
    """De Luca & Siciliano's arm, +amplitude N m at both joints for 1 s, -amplitude for 1 s, then 1 s free (the
    README's example): the tip path."""
    spec = undamped(load_arm(os.path.join(ARMS, 'deluca_two_link.yaml')))
    taus = np.zeros((3000, 2))
    taus[:1000], taus[1000:2000] = amplitude, -amplitude
    return TipPath(f'De Luca bang-bang +-{amplitude:g} N m', spec, 3.0, taus)


def slewing_spin_up(rate=20.0, T_up=3.0, T_hold=2.0):
    """The shipped slewing beam spun up from rest to `rate` rad/s in T_up s (hub acceleration
    rate/T_up (1 - cos 2 pi t/T_up), torque = that times the rigid inertia about the hub), then free for T_hold s.
    20 rad/s is above the first in-plane frequency (~13 rad/s), where the linear model's spin softening makes the
    beam's in-plane stiffness negative. Measure: transverse tip deflection seen from the hub."""
    spec = undamped(load_arm(os.path.join(ARMS, 'slewing_beam.yaml')))
    J = load_model(spec).mass_matrix(np.zeros(1 + spec.joints[0].link.n_in_plane))[0, 0]
    t = np.arange(int(round((T_up + T_hold) / DT))) * DT
    alpha = np.where(t < T_up, rate / T_up * (1.0 - np.cos(2 * np.pi * t / T_up)), 0.0)
    return HubFrameDeflection(f'slewing beam spin-up to {rate:g} rad/s', spec, T_up + T_hold, (J * alpha)[:, None])


def spinning_beam(rate, hub_inertia=100.0, T=3.0):
    """The slewing beam on a heavy hub (hub_inertia kg m^2: the spin rate stays `rate` rad/s to 1e-4), spinning
    from t = 0, plucked by a half-sine hub torque pulse (0.15 s, peak hub acceleration 3 rad/s^2). Measure: the
    in-plane vibration frequency seen from the hub (Kane, Ryan & Banerjee 1987: it rises with rate^2;
    a linear assumed-modes model falls instead)."""
    spec = undamped(load_arm(os.path.join(ARMS, 'slewing_beam.yaml')))
    j0 = spec.joints[0]
    spec = replace(spec, joints=(replace(j0, hub=replace(j0.hub, inertia=np.diag([0.0, 0.0, hub_inertia]))),))
    t = np.arange(int(round(T / DT))) * DT
    tp = SpinningFrequency.t_excite
    taus = np.where(t < tp, hub_inertia * 3.0 * np.sin(np.pi * t / tp), 0.0)[:, None]
    return SpinningFrequency(f'beam spinning at {rate:g} rad/s', spec, T, taus, qd0=[rate])
