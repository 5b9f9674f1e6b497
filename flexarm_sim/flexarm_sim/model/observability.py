"""Which modes a sensor set observes at a configuration: the observability Gramian of the arm linearized there.

The arm is linearized about its static equilibrium at joint angles q (equilibrium.static_equilibrium: the holding
torques and the gravity sag), x = (dz, dzd), sampled with a zero-order hold every dt (the sensors' sample period):
x_{k+1} = Phi x_k, y_k = C x_k + v_k with v_k ~ N(0, R) (R: each reading's noise variance). The finite-horizon
Gramian

    W = sum_{k=0}^{K-1} (Phi^k)^T C^T R^-1 C Phi^k,        K = horizon / dt

is the Fisher information that K samples carry about the initial state: its inverse is the smallest covariance
(Cramer-Rao bound) any estimator reaches from them, and W's null space is the unobservable subspace. The horizon
is finite because the joints are free (rigid-body modes are double integrators: no infinite-horizon Gramian).

Rank and conditioning are judged on the Jacobi-scaled Gramian D^-1/2 W D^-1/2 (D = diag W), which does not change
with the units of the states (rad, m, rad/s, m/s). Per mode (the whole-arm modes with the joints free,
linearize.whole_arm_modes; rigid-body modes first), the information about the mode's amplitude and rate gives the
bound on the standard deviation of its estimate, expressed as the tip displacement of the mode (m; rigid-body
modes: the joint angle along the mode, rad).

Adding a sensor adds its term to W (the information of independent readings adds), so a larger sensor set never
observes less.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .equilibrium import static_equilibrium
from .linearize import linearize, whole_arm_modes, zero_order_hold
from .sensing import SensorSet, tip_frame_jacobians

RANK_TOL = 1e-10          # relative eigenvalue threshold of the scaled Gramian


def default_noise(model, sensors: SensorSet, encoder_std=None, strain_std=2e-6, accel_std=0.02) -> np.ndarray:
    """Per-reading noise standard deviation for the Gramian: encoders their quantization (2 pi / counts / sqrt 12;
    4096 counts when the set names none), strain gauges 2 micro-strain, accelerometer 0.02 m/s^2."""
    counts = sensors.encoder_counts or 4096
    enc = 2 * math.pi / counts / math.sqrt(12.0) if encoder_std is None else encoder_std
    out = []
    if sensors.encoders:
        out += [enc] * model.n_joints
    out += [strain_std] * len(sensors.gauges)
    if sensors.accelerometer:
        out += [accel_std] * 3
    return np.array(out, dtype=float)


@dataclass
class ModeObservability:
    frequency_hz: float
    rigid: bool
    observable: bool
    std: float                  # Cramer-Rao bound of the mode's amplitude (m at the tip; rad for rigid modes)


@dataclass
class ObservabilityReport:
    q: np.ndarray
    dt: float
    horizon: float
    labels: list
    n_states: int
    rank: int
    condition: float            # of the Jacobi-scaled Gramian over its observable part (inf if rank deficient)
    eigenvalues: np.ndarray     # of the scaled Gramian, ascending
    modes: list                 # ModeObservability per whole-arm mode
    gramian: np.ndarray         # W (2N, 2N)
    unobservable: np.ndarray    # (2N, 2N - rank) basis of the unobservable subspace (scaled coordinates mapped back)

    def as_dict(self) -> dict:
        """JSON-ready (an infinite condition or std, i.e. unobservable, is None)."""
        def fin(x):
            return float(x) if math.isfinite(x) else None
        return {'q': [float(x) for x in self.q], 'dt_s': self.dt, 'horizon_s': self.horizon,
                'readings': list(self.labels), 'states': int(self.n_states), 'rank': int(self.rank),
                'condition': fin(self.condition),
                'modes': [{'frequency_hz': float(m.frequency_hz), 'rigid': bool(m.rigid),
                           'observable': bool(m.observable), 'std': fin(m.std)} for m in self.modes]}


def discrete_model(model, q, dt):
    """(Phi, Gamma, lin) of the arm linearized at its static equilibrium at q, zero-order hold over dt."""
    z_eq, tau_eq = static_equilibrium(model, np.asarray(q, dtype=float))
    lin = linearize(model, z_eq, tau_eq)
    Phi, Gamma = zero_order_hold(*lin.state_space(), dt)
    return Phi, Gamma, lin


def gramian(Phi, C, Rinv, steps: int) -> np.ndarray:
    """sum_{k<steps} (Phi^k)^T C^T Rinv C Phi^k."""
    W = np.zeros_like(Phi)
    M = C.T @ Rinv @ C
    P = np.eye(Phi.shape[0])
    for _ in range(steps):
        W += P.T @ M @ P
        P = Phi @ P
    return 0.5 * (W + W.T)


def observability(model, sensors: SensorSet, q=None, dt=2e-3, horizon=None, noise=None) -> ObservabilityReport:
    """The observability of the arm's state from `sensors` at joint angles q (default: nominal configuration),
    sampled every dt, over `horizon` seconds (default: two periods of the slowest elastic whole-arm mode, 1 s for a
    rigid arm); noise: per-reading standard deviations (default_noise)."""
    q = np.asarray(model.spec.nominal_configuration if q is None else q, dtype=float)
    N = model.n_coords
    modes = whole_arm_modes(model, q, free_joints=True)
    if horizon is None:
        el = modes.elastic_frequencies_hz[modes.elastic_frequencies_hz > 1e-6]
        horizon = 2.0 / float(el[0]) if el.size else 1.0
    steps = max(1, int(round(horizon / dt)))
    Phi, _, lin = discrete_model(model, q, dt)
    C, _ = sensors.jacobians(model, lin)
    sd = default_noise(model, sensors) if noise is None else np.asarray(noise, dtype=float)
    if sd.shape != (C.shape[0],) or not np.all(sd > 0):
        raise ValueError(f'noise: expected {C.shape[0]} positive standard deviations, got {sd}')
    W = gramian(Phi, C, np.diag(1.0 / sd ** 2), steps)
    d = np.diag(W).copy()
    seen = d > RANK_TOL * max(float(d.max()), 1e-300)
    s = np.where(seen, 1.0 / np.sqrt(np.where(seen, d, 1.0)), 0.0)
    Ws = W * s[:, None] * s[None, :]
    lam, V = np.linalg.eigh(Ws)
    top = max(float(lam[-1]), 1e-300)
    ok = lam > RANK_TOL * top
    rank = int(ok.sum())
    cond = float(top / lam[ok][0]) if rank == 2 * N else math.inf
    null = V[:, ~ok] * np.where(seen, s, 1.0)[:, None]
    # per whole-arm mode i: x = (V a, V a'), a = V^-1 dz (mass-normalised shapes). The amplitude a_i and its rate
    # are linear functionals f of x; they can be estimated iff f vanishes on the unobservable subspace, and the
    # bound on their variance is f W^+ f^T, shown as the tip displacement of the mode
    Cp, _ = tip_frame_jacobians(model, lin.z0)
    Vinv = np.linalg.inv(np.hstack([modes.shapes, modes.unstable_shapes]))   # stable columns first (index i)
    F = scipy.linalg.block_diag(Vinv, Vinv)            # rows: amplitudes, then rates
    Wp = np.linalg.pinv(W, rcond=RANK_TOL)
    nulln = null / np.maximum(np.linalg.norm(null, axis=0), 1e-300) if null.size else null
    per_mode = []
    for i, f in enumerate(modes.frequencies_hz):
        v = modes.shapes[:, i]
        rigid = i < modes.n_rigid
        unit = float(np.linalg.norm(v[model.q_index])) if rigid else float(np.linalg.norm(Cp @ v))
        obs = True
        for row in (F[i], F[N + i]):
            if nulln.size and np.max(np.abs(row @ nulln)) > 1e-6 * float(np.linalg.norm(row)):
                obs = False
        std = math.sqrt(max(float(F[i] @ Wp @ F[i]), 0.0)) * unit if obs else math.inf
        per_mode.append(ModeObservability(float(f), bool(rigid), obs, std))
    return ObservabilityReport(q, float(dt), float(horizon), sensors.labels(model), 2 * N, rank, cond, lam,
                               per_mode, W, null)
