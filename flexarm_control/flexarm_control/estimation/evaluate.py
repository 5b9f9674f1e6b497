"""The arm, its simulated sensors, the state estimator and a control law in one process (no ROS, no timing:
reproducible bit for bit) — the evaluation bench and the closed-loop tests.

Each control period 1/control_rate, as the plant in lock-step: the sensors are sampled at the control instant
(flexarm_sim.sensors, seeded noise), the estimator ticks on them (estimation/runtime.py), the law computes the torque
from the estimate (from the true state without an estimator), and the arm model integrates loop_rate/control_rate
steps with that torque held (RK4 within its stable step).

    run = run_closed_loop(model, ModalLQR(model, dt=1/500), 5.5, sensors=SensorConfig(encoders=True, ...),
                          estimator=EstimatorRuntime(model, values))
    run.z, run.z_hat, run.tip, run.tau, residual_vibration(model, run, q1, 2.5), modal_error(model, run)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flexarm_sim.model import ArmState, largest_stable_rk4_step, step
from flexarm_sim.model.equilibrium import static_equilibrium
from flexarm_sim.sensors import SimulatedSensors


@dataclass
class ClosedLoopRun:
    t: np.ndarray          # (K,) control instants
    z: np.ndarray          # (K, N) true state at the instants
    zd: np.ndarray
    z_hat: np.ndarray      # (K, N) the state the law used (the estimate; NaN rows: none, zero torque)
    zd_hat: np.ndarray
    tau: np.ndarray        # (K, n) torque applied from t[k] to t[k+1]
    tip: np.ndarray        # (K, 3) deformed tip position
    q_index: np.ndarray
    mode_index: np.ndarray


def run_closed_loop(model, law, duration, sensors=None, estimator=None, loop_rate=1000.0, control_rate=500.0,
                    z0=None, zd0=None, hook=None) -> ClosedLoopRun:
    """Simulate `duration` seconds (module docstring). sensors: a flexarm_sim.sensors.SensorConfig (needed with an
    estimator); hook(k, t, sample) -> sample (or None: no readings this instant) lets a test corrupt or drop the
    readings before the estimator sees them."""
    ratio = loop_rate / control_rate
    steps = int(round(ratio))
    if steps < 1 or abs(ratio - steps) > 1e-9:
        raise ValueError('control_rate must divide loop_rate')
    N, n = model.n_coords, model.n_joints
    h = largest_stable_rk4_step(model, model.spec.nominal_configuration)
    dt = 1.0 / loop_rate
    substeps = max(1, int(math.ceil(dt / (0.5 * h)))) if math.isfinite(h) and h > 0 else 1
    state = ArmState.zeros(model)
    if z0 is not None:
        state.z[:] = z0
    if zd0 is not None:
        state.zd[:] = zd0
    sim = SimulatedSensors(model, sensors, loop_rate, control_rate, lockstep=True, control_rate=control_rate) \
        if sensors is not None else None
    if estimator is not None and sim is None:
        raise ValueError('an estimator needs sensors')
    K = int(round(duration * control_rate)) + 1
    t = np.arange(K) / control_rate
    Z, ZD, ZH, ZDH = (np.full((K, N), np.nan) for _ in range(4))
    TAU, TIP = np.zeros((K, n)), np.zeros((K, 3))
    tau_applied = np.zeros(n)
    for k in range(K):
        Z[k], ZD[k] = state.z, state.zd
        TIP[k] = model.tip_pose(state.z)[1]
        zh, zdh = state.z.copy(), state.zd.copy()
        if estimator is not None:
            s = sim.sample_all(state.z, state.zd, tau_applied, k * steps, int(round(t[k] * 1e9)))
            if hook is not None:
                s = hook(k, t[k], s)
            if s is not None:
                if s.joints is not None:
                    estimator.joints(t[k], *s.joints)
                if s.strain is not None:
                    estimator.strain(t[k], s.strain)
                if s.accel is not None:
                    estimator.accel(t[k], s.accel)
            est = estimator.tick(t[k])
            zh, zdh = (est.z, est.zd) if est is not None else (None, None)
        if zh is None:
            u = np.zeros(n)
        else:
            ZH[k], ZDH[k] = zh, zdh
            u = law(t[k], zh, zdh)
        if estimator is not None:
            estimator.command(u)
        TAU[k] = u
        if k < K - 1:
            for _ in range(steps):
                step(model, state, u, dt, substeps)
        tau_applied = u
    return ClosedLoopRun(t, Z, ZD, ZH, ZDH, TAU, TIP, np.asarray(model.q_index), np.asarray(model.mode_index))


# ---------------------------------------------------------------------------------------------- figures
def joint_rms(run: ClosedLoopRun, reference) -> np.ndarray:
    """RMS of the joint error against the reference's q_d(t), per joint (rad)."""
    q_ref = np.array([reference.sample(tk)[0] for tk in run.t])
    return np.sqrt(np.mean((run.z[:, run.q_index] - q_ref) ** 2, axis=0))


def residual_vibration(model, run: ClosedLoopRun, q_target, t_end) -> float:
    """max |tip - tip at rest at the target| after the reference ends (m), as bench_controllers measures it."""
    z_eq, _ = static_equilibrium(model, np.asarray(q_target, dtype=float))
    tip_ss = model.tip_pose(z_eq)[1]
    return float(np.max(np.linalg.norm(run.tip[run.t >= t_end] - tip_ss, axis=1)))


def modal_error(run: ClosedLoopRun) -> np.ndarray:
    """Per modal coordinate: RMS of the estimate's error over the run divided by the coordinate's peak |delta|."""
    mi = run.mode_index
    err = run.z_hat[:, mi] - run.z[:, mi]
    ok = np.all(np.isfinite(err), axis=1)
    peak = np.max(np.abs(run.z[:, mi]), axis=0)
    return np.sqrt(np.mean(err[ok] ** 2, axis=0)) / np.where(peak > 0, peak, 1.0)
