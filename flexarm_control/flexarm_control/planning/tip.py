"""Tip-path planning by inverting the flexible model (no ROS): the torque that makes the deformed tip follow a path.

The task is a joint reference q_d(t) (a move from rest to rest); its desired tip path is the tip of the arm held in
static equilibrium at q_d(t) (`desired_tip_path`: the rigid forward kinematics without gravity, the sagging tip
with it) — the arm moving "as if rigid". The tip of a flexible arm driven at its joints is a non-minimum-phase
output: exact causal inversion is unstable, and the stable (non-causal) inverse needs torque before the tip starts
and after it stops (Bayo 1987; Kwon & Book 1994; Devasia, Chen & Paden 1996, "stable inversion"). The planner
solves a finite-window version of it as an output-error least-squares problem on the package's own nonlinear model:

    torque tau(t) = sum_b B_b(t) p_b   (cubic B-splines, knot spacing h, per joint) on [t0 - T_pre, t1 + T_post]
    minimise  sum_k |p_tip(t_k) - p_d(t_k)|^2 / s_tip^2          tip path, the whole window
            + |z(t_K) - z_f|^2 / s_z^2 + |z'(t_K)|^2 / s_v^2     rest at the end: no terminal vibration
            + sum |D2 (p - p_0)|^2 / s_smooth^2                  a smooth correction to the rigid arm's torque p_0
            + sum |q(t_k) - q_d(t_k)|^2 / s_q^2                  (weak) joint path, for outputs fewer than joints
            + penalties beyond 97 % of the effort limits and 95 % of the model's deflection validity
by Levenberg–Marquardt: the residuals come from `simulate` (one numba call per iteration, the plant's integrator),
their Jacobian from the sensitivities S_k = dx_k/dp of the deviation model x_{k+1} = Phi_k x_k + Gamma_k u_k
(the arm linearized along the current trajectory every `lin_stride` samples, flexarm_sim.model.trajectory, and
discretized exactly with the zero-order hold). The non-minimum-phase zeros of the tip output of the shipped arms
are fast (tens of rad/s), so T_pre = T_post = 0.5 s of pre- and post-actuation suffice.

A plan that cannot respect the effort, position or velocity limits or the model's validity is refused
(`PlanError`, naming the joint or link and the duration that would fit), never clipped behind the caller's back.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from scipy.interpolate import BSpline

from flexarm_sim.model import auto_substeps, simulate, validity_limit
from flexarm_sim.model.equilibrium import static_equilibrium
from flexarm_sim.model.trajectory import banded, propagate, state_space_along, tip_jacobians_along, tip_path

from ..laws.base import rigid_model_of


PRE_ACTUATION_S = 0.5
POST_ACTUATION_S = 0.5
KNOT_SPACING_S = 0.03      # torque B-spline knots at most this far apart (De Luca: 0.02 s gives the same tip within 3 %)
CONVERGED_GAIN = 0.05      # stop when an iteration improves the tip RMS by less than this fraction
TERMINAL_FACTOR = 0.1      # the terminal state to a tenth of the tip tolerance: no drift after the plan ends
TORQUE_MARGIN = 0.97          # planned torque at most this fraction of the effort limit
VALIDITY_MARGIN = 0.95        # planned deflection at most this fraction of the model's validity limit


class PlanError(ValueError):
    """The move cannot be planned within the arm's limits or the model's validity (the message says why)."""


@dataclass(frozen=True)
class Plan:
    """A planned motion on the control grid t_k = t0 + k dt (plant time): state, torque, tips.

    tau[k] is applied from t_k to t_(k+1) (zero-order hold); the rows after the last are the final rest."""
    t0: float
    dt: float
    z: np.ndarray               # (K+1, N)
    zd: np.ndarray              # (K+1, N)
    tau: np.ndarray             # (K+1, n)
    tip: np.ndarray             # (K+1, 3) planned (deformed) tip
    tip_desired: np.ndarray     # (K+1, 3) desired tip path
    move_start: float           # the reference's start and end (plant time)
    move_end: float
    info: dict = field(default_factory=dict)
    rest: tuple = None          # (z, tau): the target's static equilibrium and holding torque, in force after the plan

    @property
    def t_end(self) -> float:
        return self.t0 + (self.z.shape[0] - 1) * self.dt

    @property
    def times(self) -> np.ndarray:
        return self.t0 + self.dt * np.arange(self.z.shape[0])

    def index(self, t) -> int:
        """The sample whose period contains t (clamped to the plan); stamps within 1e-6 dt of a sample are it."""
        k = int(math.floor((t - self.t0) / self.dt + 1e-6))
        return min(max(k, 0), self.z.shape[0] - 1)

    def sample(self, t):
        """(z*, zd*, tau*) at plant time t (before the plan: its first sample; after it: the target at rest in
        static equilibrium, exactly, not the plan's last sample)."""
        if self.rest is not None and t > self.t_end + 0.5 * self.dt:
            return self.rest[0], np.zeros_like(self.rest[0]), self.rest[1]
        k = self.index(t)
        return self.z[k], self.zd[k], self.tau[k]

    def shifted(self, offset: float) -> 'Plan':
        """The same plan started `offset` seconds later (the arm's dynamics do not depend on time)."""
        return Plan(self.t0 + offset, self.dt, self.z, self.zd, self.tau, self.tip, self.tip_desired,
                    self.move_start + offset, self.move_end + offset, dict(self.info), self.rest)


def equilibrium_path(model, Q):
    """(Z (K, N), TAU (K, n)): the static equilibrium (deflections under gravity) and holding torque at every row of
    joint angles Q; consecutive rows warm-start one another."""
    Q = np.atleast_2d(np.asarray(Q, dtype=float))
    N, n = model.n_coords, model.n_joints
    qi, mi = np.asarray(model.q_index), np.asarray(model.mode_index)
    Z, TAU = np.zeros((Q.shape[0], N)), np.zeros((Q.shape[0], n))
    zero_v, zero_t = np.zeros(N), np.zeros(n)
    z = np.zeros(N)
    z[qi] = Q[0]
    z, _ = static_equilibrium(model, Q[0])
    if mi.size:
        from flexarm_sim.model import linearize
        K = linearize(model, z).stiffness[np.ix_(mi, mi)]
    for k in range(Q.shape[0]):
        z[qi] = Q[k]
        if mi.size:
            for _ in range(8):
                r = model.rhs(z, zero_v, zero_t)[mi]
                if np.max(np.abs(r)) <= 1e-12 * (1.0 + np.max(np.abs(np.diag(K)))):
                    break
                z[mi] += np.linalg.solve(K, r)
        Z[k] = z
        TAU[k] = -model.rhs(z, zero_v, zero_t)[qi]
    return Z, TAU


def desired_tip_path(model, reference, times):
    """(K, 3): the tip of the arm in static equilibrium at the reference's joint angles at `times`."""
    Q = np.array([np.asarray(reference.sample(t)[0], dtype=float) for t in times])
    return tip_path(model, equilibrium_path(model, Q)[0])


def _bspline_basis(times, t_a, t_b, h):
    """(K, nb) cubic B-spline basis on [t_a, t_b] with knot spacing ~h (clamped ends)."""
    nk = max(2, int(math.ceil((t_b - t_a) / h)) + 1)
    inner = np.linspace(t_a, t_b, nk)
    knots = np.concatenate([[inner[0]] * 3, inner, [inner[-1]] * 3])
    return BSpline.design_matrix(np.clip(times, t_a, t_b), knots, 3).toarray()


def _limits(model):
    js = model.spec.joints
    eff = np.array([j.effort_limit if (j.effort_limit and math.isfinite(j.effort_limit)) else np.inf for j in js])
    pos = np.array([j.position_limits for j in js], dtype=float)
    vel = np.array([j.velocity_limit if (j.velocity_limit and math.isfinite(j.velocity_limit)) else np.inf
                    for j in js])
    return eff, pos, vel


def plan_move(model, reference, dt, t_start=None, z0=None, zd0=None, pre=PRE_ACTUATION_S, post=POST_ACTUATION_S,
              knot_spacing=None, tip_tolerance=None, max_iterations=20, lin_stride=None, time_budget=None,
              log=None) -> Plan:
    """Plan the torque and state trajectory that makes the tip follow the reference's desired tip path.

    Parameters
    ----------
    model : ArmModel
        The arm (the controller's nominal model).
    reference : Reference
        A joint reference with `sample(t) -> (q, qd, qdd)`, `t0` and `end_time` (plant time), from rest to rest.
    dt : float
        The control period, s; the plan's grid. Its samples fall on t_start + k dt when t_start is given.
    t_start : float, optional
        Plant time of the arm state (z0, zd0) the plan starts from; the plan starts at the first grid instant at or
        after t0 - pre (never before t_start). Default: t0 - pre, from static equilibrium at the start.
    z0, zd0 : array, optional
        The state at t_start (default: static equilibrium at the reference's start, at rest).
    pre, post : float
        Seconds of pre-actuation before the move and of post-actuation after it.
    knot_spacing : float, optional
        Spacing of the torque's B-spline knots (default `_knot_spacing`: a quarter period of the first clamped mode,
        within [5 dt, KNOT_SPACING_S]).
    tip_tolerance : float, optional
        s_tip, m (default 1e-4 of the reach).
    max_iterations : int
        Levenberg–Marquardt iterations at most.
    time_budget : float, optional
        Wall seconds after which the best plan so far is returned (its info says so).

    Returns
    -------
    Plan
        `info` holds the planned tip RMS/max error (m), max relative deflection per link, peak torque per joint,
        iterations and the planning time.

    Raises
    ------
    PlanError
        The move needs more than the effort, position or velocity limits or leaves the model's validity.
    """
    with _one_blas_thread():
        return _plan_move(model, reference, dt, t_start, z0, zd0, pre, post, knot_spacing, tip_tolerance,
                          max_iterations, lin_stride, time_budget, log)


def _one_blas_thread():
    """The planner's linear algebra on one BLAS thread: its matrices are small (hundreds), and a controller plans
    beside its control thread (a second BLAS thread competing with it, or with the plant, only slows both)."""
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(1, user_api='blas')
    except ImportError:                # pragma: no cover - threadpoolctl is a dependency
        import contextlib
        return contextlib.nullcontext()


def _plan_move(model, reference, dt, t_start, z0, zd0, pre, post, knot_spacing, tip_tolerance, max_iterations,
               lin_stride, time_budget, log):
    w0 = time.perf_counter()
    N, n = model.n_coords, model.n_joints
    qi = np.asarray(model.q_index)
    t0_ref, t1_ref = float(reference.t0), float(reference.end_time)
    if not (math.isfinite(t0_ref) and math.isfinite(t1_ref) and t1_ref >= t0_ref):
        raise PlanError('the reference has no finite start and end')
    t_a = t0_ref - pre
    if t_start is not None:
        t_a = float(t_start) + max(0, math.ceil((t_a - t_start) / dt - 1e-9)) * dt
    K = int(math.ceil((t1_ref + post - t_a) / dt - 1e-9))
    if K < 4:
        raise PlanError(f'the move ends {t1_ref + post - t_a:.3g} s after the plan can start: nothing to plan')
    times = t_a + dt * np.arange(K + 1)
    Qd = np.array([reference.sample(t) for t in times])           # (K+1, 3, n)
    coarse = np.unique(np.concatenate([np.arange(0, K + 1, 5), [K]]))
    Zeq, Teq = _equilibrium_interp(model, Qd[:, 0], coarse)
    tip_d = tip_path(model, Zeq)
    if z0 is None:
        z0, zd0 = Zeq[0].copy(), np.zeros(N)
    z0 = np.asarray(z0, dtype=float)
    zd0 = np.zeros(N) if zd0 is None else np.asarray(zd0, dtype=float)
    z_f = Zeq[-1]
    reach = sum(js.link.length + abs(js.offset) for js in model.spec.joints) or 1.0
    s_tip = tip_tolerance or 1e-4 * reach
    eff, pos, vel = _limits(model)
    _check_reference(model, Qd[:, 0], pos)
    tau_scale = np.where(np.isfinite(eff), eff, np.maximum(1.0, np.abs(Teq).max(axis=0)))
    # initial torque: the rigid arm's inverse dynamics of the reference plus the flexible arm's holding torque
    rigid = rigid_model_of(model)
    tau_c = np.array([rigid.inverse_dynamics(Qd[k, 0], Qd[k, 1], Qd[k, 2])
                      - rigid.inverse_dynamics(Qd[k, 0], 0 * Qd[k, 0], 0 * Qd[k, 0]) for k in coarse])
    tau_init = Teq + np.column_stack([np.interp(times, times[coarse], tau_c[:, j]) for j in range(n)])
    h = knot_spacing or _knot_spacing(model, dt)
    Bm = _bspline_basis(times, times[0], times[-1], h)
    nb = Bm.shape[1]
    b0, bw = banded(Bm)
    BtB = Bm.T @ Bm
    P = scipy.linalg.solve(BtB + 1e-12 * np.trace(BtB) / nb * np.eye(nb), Bm.T @ tau_init, assume_a='pos')
    P_init = P.copy()           # the smoothness term acts on the correction to this (the rigid arm's torque shape)
    nsub = auto_substeps(model, dt)
    stride = lin_stride or max(1, int(round(0.01 / dt)))
    lin_idx = np.arange(0, K + 1, stride)
    L = np.array([js.link.length for js in model.spec.joints])
    vlim = validity_limit(model)
    # weights: the terminal state as the tip error each coordinate makes, rates over 50 ms
    s_z = np.full(N, s_tip / reach)
    for j, lm in enumerate(model.link_modes):
        for k in range(lm.n_modes):
            s_z[qi[j] + 1 + k] = s_tip / max(float(np.linalg.norm(model.data.phi_tip[j, :, k])), 1e-9)
    s_z = s_z * TERMINAL_FACTOR                                   # the end state held tighter than the path
    s_v = s_z / 0.05
    s_smooth = 5e-3 * tau_scale
    s_q = 0.5                                                      # rad: a weak pull to the joint reference
    D2 = np.diff(np.eye(nb), 2, axis=0)
    J_smooth = np.kron(D2, np.eye(n)) / np.tile(s_smooth, D2.shape[0])[:, None]
    H_smooth = J_smooth.T @ J_smooth
    q_rows = np.arange(0, K + 1, 10)
    n_par = nb * n
    # tip axes the arm can move (a planar arm's tip never leaves its plane: those rows carry no information)
    tip_axes = np.nonzero(np.ptp(tip_d, axis=0) > 1e-9 * reach)[0]
    if tip_axes.size == 0:
        tip_axes = np.arange(3)

    def simulate_plan(P):
        tau = Bm @ P
        res = simulate(model, times[-1] - times[0], dt, torque=tau, z0=z0, zd0=zd0, substeps=nsub,
                       record_energy=False)
        return res, tau

    def residuals(P, res, tau):
        e_tip = (res.tip[:, tip_axes] - tip_d[:, tip_axes]) / s_tip
        term = np.concatenate([(res.z[-1] - z_f) / s_z, res.zd[-1] / s_v])
        smooth = J_smooth @ (P - P_init).ravel()
        jq = ((res.z[q_rows][:, qi] - Qd[q_rows, 0]) / s_q).ravel()
        over_t = (np.abs(tau) - TORQUE_MARGIN * eff) / (1e-3 * tau_scale)
        over_v = (res.relative_deflection - VALIDITY_MARGIN * vlim) / 1e-3
        return np.concatenate([e_tip.ravel(), term, smooth, jq, over_t[over_t > 0], over_v[over_v > 0]])

    def discrete(res, tau):
        """(Phi, Gamma) at the linearization samples: the sub-stepped RK4 map of the linearized arm (the Jacobian
        of the plant's step for a locally linear arm), h = dt / nsub."""
        A, B = state_space_along(model, res.z, res.zd, tau, lin_idx)
        nx = 2 * N
        hs = dt / nsub
        eye = np.eye(nx)
        hA = hs * A
        hA2 = hA @ hA
        R1 = eye + hA / 2 + hA2 / 6 + hA2 @ hA / 24                  # RK4's polynomial on the input
        Phi = eye + hA @ R1
        Gam = hs * (R1 @ B)
        if nsub > 1:
            Phi_s, Gam_s = Phi.copy(), Gam.copy()
            for _ in range(nsub - 1):
                Gam = Phi_s @ Gam + Gam_s
                Phi = Phi_s @ Phi
        return np.ascontiguousarray(Phi), np.ascontiguousarray(Gam)

    def normal_equations(res, tau, r):
        """(H, g) = (J^T J, J^T r) of the residuals' Jacobian, block by block."""
        Phi, Gam = discrete(res, tau)
        C = tip_jacobians_along(model, res.z, lin_idx)
        nx = 2 * N
        bad = res.relative_deflection > VALIDITY_MARGIN * vlim
        keep = np.nonzero(bad.any(axis=1))[0].astype(np.int64)
        rows_tip = np.zeros((K + 1, 3, n_par))
        rows_q = np.zeros((q_rows.size, n, n_par))
        rows_keep = np.zeros((keep.size, N, n_par))
        S = np.zeros((nx, n_par))
        propagate(Phi, Gam, C, stride, b0, bw, N, qi.astype(np.int64), q_rows.astype(np.int64), keep,
                  S, np.zeros_like(S), rows_tip, rows_q, rows_keep)
        blocks = [rows_tip[:, tip_axes, :].reshape(-1, n_par) / s_tip,
                  S / np.concatenate([s_z, s_v])[:, None],
                  None,
                  rows_q.reshape(-1, n_par) / s_q]
        over = np.abs(tau) > TORQUE_MARGIN * eff
        if np.any(over):
            ks, js = np.nonzero(over)
            J_t = np.zeros((ks.size, n_par))
            for row, (k, j) in enumerate(zip(ks, js)):
                J_t[row, np.arange(nb) * n + j] = np.sign(tau[k, j]) * Bm[k] / (1e-3 * tau_scale[j])
            blocks.append(J_t)
        if keep.size:
            at = {int(k): i for i, k in enumerate(keep)}
            ks, js = np.nonzero(bad)
            J_v = np.zeros((ks.size, n_par))
            for row, (k, j) in enumerate(zip(ks, js)):
                m = model.link_modes[j].n_modes
                sl = slice(qi[j] + 1, qi[j] + 1 + m)
                dvec = res.tip_deflection[k, j]
                g = dvec @ model.data.phi_tip[j, :, :m] / max(np.linalg.norm(dvec), 1e-12) / L[j]
                J_v[row] = g @ rows_keep[at[int(k)]][sl] / 1e-3
            blocks.append(J_v)
        H = H_smooth.copy()
        g = np.zeros(n_par)
        row = 0
        for b in blocks:
            if b is None:                      # the smoothness rows: constant
                g += J_smooth.T @ r[row:row + J_smooth.shape[0]]
                row += J_smooth.shape[0]
                continue
            H += b.T @ b
            g += b.T @ r[row:row + b.shape[0]]
            row += b.shape[0]
        return H, g

    cur_res, cur_tau = simulate_plan(P)
    r = residuals(P, cur_res, cur_tau)
    cost = float(r @ r)
    mu = 1e-3
    iterations = 0
    stopped = f'{max_iterations} iterations'
    rms_prev = math.inf
    for it in range(max_iterations):
        iterations = it + 1
        H, g = normal_equations(cur_res, cur_tau, r)
        dH = np.diag(H).copy()
        dH[dH <= 0] = 1.0
        improved = False
        while mu < 1e8:
            try:
                step = -scipy.linalg.cho_solve(scipy.linalg.cho_factor(H + mu * np.diag(dH)), g)
            except (np.linalg.LinAlgError, ValueError):
                mu *= 10.0
                continue
            P_try = P + step.reshape(nb, n)
            try:
                res_try, tau_try = simulate_plan(P_try)
            except Exception:           # noqa: BLE001 - a diverging trial step: a shorter one
                mu *= 10.0
                continue
            r_try = residuals(P_try, res_try, tau_try)
            c_try = float(r_try @ r_try)
            if c_try < cost:
                P, cur_res, cur_tau, r, cost = P_try, res_try, tau_try, r_try, c_try
                mu = max(mu / 3.0, 1e-9)
                improved = True
                break
            mu *= 10.0
        e = np.linalg.norm(cur_res.tip - tip_d, axis=1)
        rms = float(np.sqrt(np.mean(e ** 2)))
        if log:
            log(f'plan iteration {iterations}: tip RMS {1e3 * rms:.3f} mm, max {1e3 * e.max():.3f} mm')
        if not improved:
            stopped = 'no further improvement'
            break
        feasible = not np.any(np.abs(cur_tau) > TORQUE_MARGIN * eff) and \
            not np.any(cur_res.relative_deflection > VALIDITY_MARGIN * vlim)
        if feasible and (rms > (1.0 - CONVERGED_GAIN) * rms_prev or rms < 0.25 * s_tip):
            stopped = 'converged'
            break
        rms_prev = rms
        if time_budget is not None and time.perf_counter() - w0 > time_budget:
            stopped = f'time budget {time_budget:g} s'
            break
    res, tau = cur_res, cur_tau
    _check_feasible(model, res, tau, eff, pos, vel, vlim, t1_ref - t0_ref)
    e = np.linalg.norm(res.tip - tip_d, axis=1)
    in_move = times >= t0_ref - 1e-9
    info = {'plan_time_s': time.perf_counter() - w0, 'iterations': iterations, 'stopped': stopped,
            'tip_rms_m': float(np.sqrt(np.mean(e[in_move] ** 2))), 'tip_max_m': float(e[in_move].max()),
            'max_deflection_over_length': [float(x) for x in res.max_relative_deflection],
            'peak_torque_nm': [float(x) for x in np.abs(tau).max(axis=0)], 'substeps': nsub,
            'pre_s': float(t0_ref - times[0]), 'post_s': float(times[-1] - t1_ref), 'knots': int(nb)}
    z_rest, tau_rest = equilibrium_path(model, Qd[-1:, 0])
    return Plan(float(times[0]), float(dt), res.z.copy(), res.zd.copy(), tau.copy(), res.tip.copy(), tip_d,
                t0_ref, t1_ref, info, (z_rest[0], tau_rest[0]))


def _knot_spacing(model, dt):
    """The torque's knot spacing: a quarter period of the first clamped-joint elastic mode (the plan must be able to
    bring it to rest), within [5 dt, KNOT_SPACING_S]. De Luca arm (0.44 Hz): 0.03 s; spatial 3R (18.8 Hz): 0.013 s."""
    if not np.asarray(model.mode_index).size:
        return KNOT_SPACING_S
    from flexarm_sim.model import whole_arm_modes
    f = whole_arm_modes(model, model.spec.nominal_configuration, free_joints=False).elastic_frequencies_hz
    h = 0.25 / float(f[0]) if f.size and f[0] > 0 else KNOT_SPACING_S
    return float(min(max(h, 5 * dt), KNOT_SPACING_S))


def _equilibrium_interp(model, Q, coarse):
    """equilibrium_path at the samples `coarse` of Q, interpolated (cubic in time) at every sample: the static
    deflection varies smoothly with the configuration."""
    Zc, Tc = equilibrium_path(model, Q[coarse])
    Z = np.empty((Q.shape[0], model.n_coords))
    T = np.empty((Q.shape[0], model.n_joints))
    if coarse.size < 4:
        Zc, Tc = equilibrium_path(model, Q)
        return Zc, Tc
    from scipy.interpolate import CubicSpline
    Z[:] = CubicSpline(coarse, Zc, axis=0)(np.arange(Q.shape[0]))
    T[:] = CubicSpline(coarse, Tc, axis=0)(np.arange(Q.shape[0]))
    Z[:, np.asarray(model.q_index)] = Q
    return Z, T


def _check_reference(model, Q, pos):
    """PlanError if the reference's joint path leaves a joint's position limits: the desired tip path is the arm's
    at those angles, so the plan would have to drive the joint into its hard stop (the plant's stop spring:
    kernels.stop_torque), whose torque the holding torque and the fit would then chase (rigid_puma3's shoulder,
    limit 45 deg, moved by 60 deg: a 2.8 kN m "holding torque" and a refusal naming the waist's effort)."""
    for j, name in enumerate(model.spec.joint_names):
        lo, hi = pos[j]
        qmin, qmax = float(np.min(Q[:, j])), float(np.max(Q[:, j]))
        if qmin < lo - 1e-9 or qmax > hi + 1e-9:
            raise PlanError(f'joint {name}: the reference goes to [{qmin:.4g}, {qmax:.4g}] rad, outside its position '
                            f'limits [{lo:g}, {hi:g}] rad')


def _check_feasible(model, res, tau, eff, pos, vel, vlim, duration):
    names = list(model.spec.joint_names)
    peak = np.abs(tau).max(axis=0)
    for j in range(model.n_joints):
        if peak[j] > eff[j] * (1 + 1e-6):
            T = duration * math.sqrt(peak[j] / eff[j])
            raise PlanError(f'joint {names[j]}: the move needs {peak[j]:.4g} N m, more than its effort limit '
                            f'{eff[j]:.4g} N m (a move of about {T:.2f} s would fit)')
    q = res.q
    for j in range(model.n_joints):
        lo, hi = pos[j]
        if np.any(q[:, j] < lo - 1e-9) or np.any(q[:, j] > hi + 1e-9):
            raise PlanError(f'joint {names[j]}: the planned motion leaves its position limits [{lo:g}, {hi:g}] rad')
        vmax = np.abs(res.qd[:, j]).max()
        if vmax > vel[j] * (1 + 1e-6):
            raise PlanError(f'joint {names[j]}: the planned motion needs {vmax:.4g} rad/s, more than its velocity '
                            f'limit {vel[j]:.4g} rad/s (a move of about {duration * vmax / vel[j]:.2f} s would fit)')
    worst = res.max_relative_deflection
    j = int(np.argmax(worst))
    if worst[j] > vlim:
        T = duration * math.sqrt(worst[j] / vlim)
        raise PlanError(f'link {model.spec.joints[j].name}: the move bends it {100 * worst[j]:.1f} % of its length, '
                        f'beyond the model\'s validity ({100 * vlim:.0f} %; a move of about {T:.2f} s would fit)')
