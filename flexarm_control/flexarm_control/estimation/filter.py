"""A Kalman filter for the modal state of a flexible arm: the nonlinear model predicts, gain-scheduled
linearizations carry the covariance (an extended Kalman filter whose Jacobians are designed per grid cell of the
joint configuration, as the modal LQR's gains are).

State x = (z, zd, b): the generalized coordinates z = [q_1, delta_1.., q_2, ...], their rates, and the constant
biases b of the strain gauges (random walks). Input u: the joint torque over the period (zero-order hold).

Prediction over one period dt:
    (z, zd) <- the arm model integrated with u (flexarm_sim.model.step, RK4 within its stable step)
    P <- Phi P Phi^T + Q_d
with Phi = e^{A dt} of the arm linearized at its static equilibrium at the grid point nearest the estimated joint
angles (flexarm_sim.model.linearize about (z_eq, 0, tau_eq)), and Q_d = Gamma W Gamma^T the covariance of a
generalized force held over the period (W = diag(torque_std^2 on the joint rows, modal_force_std^2 on the modal
rows), Gamma = int_0^dt e^{As} ds [0; J^-1]), plus bias_drift^2 dt on the biases.

Updates (y = h(x) + v, v ~ N(0, R)), one per sensor group as its readings come:
    encoders       h = q (+ the joint rates when their noise is given)
    strain gauges  h = S z + b                           (S: flexarm_sim.model.sensing.strain_matrix)
    accelerometer  h = R_tip^T (a_tip - g)(z, zd, u)      (the nonlinear reading; H from the scheduled linearization)
    nu = y - h(x), S = H P H^T + R, K = P H^T S^-1, x <- x + K nu, P <- (I - K H) P (I - K H)^T + K R K^T (Joseph)
Each update returns the largest normalized innovation |nu_i| / sqrt(S_ii) (the runtime bounds it).

For a fixed cell the covariance converges to the solution of the filter's discrete algebraic Riccati equation
(test_estimation checks it against scipy's solve_discrete_are).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from flexarm_sim.model import ArmState, IntegrationError, largest_stable_rk4_step, linearize, step, zero_order_hold
from flexarm_sim.model.equilibrium import static_equilibrium
from flexarm_sim.model.kernels import INTERNAL, KERNEL_LONG, KERNEL_NO_NRT, forward_dynamics, kernel, link_frames
from flexarm_sim.model.sensing import TIP_ACCEL_STEP, SensorSet, strain_matrix

from ..laws.lti import dlqe
from ..laws.schedule import ScheduleGrid

RK4_SAFETY = 0.5
ACCEL_REL_STEP = 1e-6          # relative step of the accelerometer model's forward differences in (z, zd)


@njit(cache=True)
def propagate(P, Phi, Q):
    """Phi P Phi^T + Q, symmetrized."""
    out = Phi @ P @ Phi.T + Q
    return 0.5 * (out + out.T)


@njit(cache=True)
def joseph_update(P, H, R, nu):
    """(dx, P+, largest |nu_i| / sqrt(S_ii)) of the update with readings nu = y - h(x), H, R (Joseph form):
    S = H P H^T + R, K = P H^T S^-1, P+ = (I - K H) P (I - K H)^T + K R K^T. A non-finite result is the caller's
    to detect."""
    PHt = P @ H.T
    S = H @ PHt + R
    S = 0.5 * (S + S.T)
    K = np.linalg.solve(S, PHt.T).T
    sig = 0.0
    for i in range(nu.shape[0]):
        v = abs(nu[i]) / np.sqrt(abs(S[i, i]))
        if v > sig:
            sig = v
    IKH = -K @ H
    for i in range(IKH.shape[0]):
        IKH[i, i] += 1.0
    Pn = IKH @ P @ IKH.T + K @ R @ K.T
    return K @ nu, 0.5 * (Pn + Pn.T), sig


def warm_kernels(model=None):
    """Compile (first start after an install) or load the filter's kernels once, before the first reading
    (registered in flexarm_sim.precompile.KERNEL_GROUPS: every node's start and `precompile` run it)."""
    P, H, R, nu = np.eye(2), np.eye(2), np.eye(2), np.zeros(2)
    propagate(P, P, P)
    joseph_update(P, H, R, nu)
    innovation_sigma(P, H, R, nu)
    if model is not None:                   # the accelerometer's model (a reading's update; identification's replays)
        kf = ModalKalmanFilter(model, SensorSet(), 0.002, FilterNoise(encoder=1e-3))
        kf.update_accel(np.zeros(3), np.zeros(model.n_joints), u_std=np.ones(model.n_joints))
        tip_specific_forces(model, np.zeros((1, model.n_coords)), np.zeros((1, model.n_coords)),
                            np.zeros((1, model.n_joints)))


@njit(cache=True)
def innovation_sigma(P, H, R, nu):
    """largest |nu_i| / sqrt(S_ii), S = H P H^T + R."""
    sig = 0.0
    for i in range(nu.shape[0]):
        s = R[i, i]
        for a in range(P.shape[0]):
            if H[i, a] != 0.0:
                for b in range(P.shape[0]):
                    s += H[i, a] * P[a, b] * H[i, b]
        v = abs(nu[i]) / np.sqrt(abs(s))
        if v > sig:
            sig = v
    return sig


@kernel(**INTERNAL)
def _tip_force(d, ws, z, zd, u, step, g, sc, out):
    """flexarm_sim.model.sensing.tip_specific_force in a kernel: R_tip^T (a_tip - g), a_tip the second difference
    of the tip position along z +- step zd + step^2/2 z''. False if the mass matrix is not positive definite."""
    zz, zdd, RF, pL, RE, pE, R0, p0 = sc[0], sc[1], sc[5], sc[6], sc[7], sc[8], sc[9], sc[10]
    N = d.n_coords
    last = d.n_joints - 1
    if not forward_dynamics(d, ws, z, zd, u, zdd):
        return False
    link_frames(d, z, RF, pL, RE, pE)
    for a in range(3):
        p0[a] = pE[last, a]
        for b in range(3):
            R0[a, b] = RE[last, a, b]
    for i in range(N):
        zz[i] = z[i] + step * zd[i] + 0.5 * step * step * zdd[i]
    link_frames(d, zz, RF, pL, RE, pE)
    for a in range(3):
        out[a] = pE[last, a] - 2.0 * p0[a]
    for i in range(N):
        zz[i] = z[i] - step * zd[i] + 0.5 * step * step * zdd[i]
    link_frames(d, zz, RF, pL, RE, pE)
    for a in range(3):
        out[a] = (out[a] + pE[last, a]) / (step * step) - g[a]
    f0, f1, f2 = out[0], out[1], out[2]
    for a in range(3):
        out[a] = R0[0, a] * f0 + R0[1, a] * f1 + R0[2, a] * f2
    return True


@kernel(**KERNEL_LONG)
def _tip_forces(d, ws, Z, ZD, U, step, g, sc, out):
    """out[k] = the accelerometer's reading at (Z[k], ZD[k], U[k]) for every k, without the GIL (ws and sc the
    caller's own); -1, or the first k whose mass matrix is not positive definite."""
    for k in range(Z.shape[0]):
        if not _tip_force(d, ws, Z[k], ZD[k], U[k], step, g, sc, out[k]):
            return k
    return -1


def accel_scratch(model):
    """The scratch arrays of the accelerometer's reading model (_tip_force, accel_reading_model) for an arm."""
    N, n = model.n_coords, model.n_joints
    return (np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(n), np.zeros((n, 3, 3)), np.zeros((n, 3)),
            np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((3, 3)), np.zeros(3), np.zeros(3))


def tip_specific_forces(model, Z, ZD, U):
    """(K, 3) m/s^2: flexarm_sim.model.sensing.tip_specific_force along a trajectory (Z, ZD (K, N), torques U (K, n))
    in one kernel that releases the GIL (identification's replays run in threads). ValueError at a sample whose
    mass matrix is not positive definite."""
    Z, ZD, U = (np.ascontiguousarray(a, dtype=float) for a in (Z, ZD, U))
    out = np.zeros((Z.shape[0], 3))
    k = _tip_forces(model.data, model.workspace(), Z, ZD, U, TIP_ACCEL_STEP,
                    np.array(model.data.gravity, dtype=float), accel_scratch(model), out)
    if k >= 0:
        raise ValueError(f'tip acceleration: mass matrix not positive definite at sample {k}')
    return out


@kernel(**KERNEL_NO_NRT)
def accel_reading_model(d, ws, z, zd, u, step, g, rel_step, sc, h, J, Ju):
    """The accelerometer's reading h = tip_specific_force(z, zd, u) (3,), J = dh/d(z, zd) (3, 2N) by forward
    differences of relative step rel_step, Ju = dh/du (3, n), exact (h is affine in u: unit
    differences). sc: scratch arrays (ModalKalmanFilter._accel_scratch). False if a mass matrix is not positive
    definite."""
    zc, zdc, uc, hp = sc[2], sc[3], sc[4], sc[11]
    N = d.n_coords
    if not _tip_force(d, ws, z, zd, u, step, g, sc, h):
        return False
    for i in range(N):
        zc[i] = z[i]
        zdc[i] = zd[i]
    for i in range(2 * N):
        k = i % N
        x = zc if i < N else zdc
        keep = x[k]
        e = rel_step * max(1.0, abs(keep))
        x[k] = keep + e
        if not _tip_force(d, ws, zc, zdc, u, step, g, sc, hp):
            return False
        x[k] = keep
        for a in range(3):
            J[a, i] = (hp[a] - h[a]) / e
    for j in range(u.shape[0]):
        for m in range(u.shape[0]):
            uc[m] = u[m]
        uc[j] = u[j] + 1.0
        if not _tip_force(d, ws, z, zd, uc, step, g, sc, hp):
            return False
        for a in range(3):
            Ju[a, j] = hp[a] - h[a]
    return True


@dataclass(frozen=True)
class FilterNoise:
    """Noise the filter assumes (standard deviations)."""

    encoder: float                 # rad, joint angle reading (quantization included)
    velocity: float = 0.0          # rad/s, joint rate reading; 0: rates not fused
    strain: float = 2e-6           # strain reading
    accel: float = 0.02            # m/s^2, accelerometer reading (per axis, after its filter)
    torque: float = 0.01           # N m, generalized force on each joint row over a period (process)
    modal_force: float = 0.01      # N, generalized force on each modal row over a period (process)
    bias: float = 5e-5             # initial std of each strain gauge's bias; 0: biases not estimated
    bias_drift: float = 1e-6       # strain / sqrt(s), random walk of the biases
    joint_rate0: float = 0.5       # rad/s, initial std of the joint rates (not measured at initialization)
    modal0: float = 0.02           # m, initial std of the modal coordinates
    modal_rate0: float = 0.2       # m/s, initial std of the modal rates


class FilterDiverged(ArithmeticError):
    """The filter's state or covariance is no longer finite (or the model integration failed)."""


@dataclass
class Cell:
    z_eq: np.ndarray
    tau_eq: np.ndarray
    Phi: np.ndarray               # (nx, nx) with the bias block
    Q: np.ndarray                 # (nx, nx)
    H_accel: np.ndarray           # (3, nx) or None


class ModalKalmanFilter:
    def __init__(self, model, sensors: SensorSet, dt: float, noise: FilterNoise, schedule_step: float = 0.1):
        self.model = model
        self.sensors = sensors
        self.dt = float(dt)
        self.noise = noise
        self.schedule_step = float(schedule_step)
        N, n = model.n_coords, model.n_joints
        self.N, self.n = N, n
        self.qi = np.asarray(model.q_index)
        self.mi = np.asarray(model.mode_index)
        self.ng = len(sensors.gauges) if noise.bias > 0 else 0
        self.nx = 2 * N + self.ng
        self.S = strain_matrix(model, sensors.gauges) if sensors.gauges else np.zeros((0, N))
        h = largest_stable_rk4_step(model, model.spec.nominal_configuration)
        self.substeps = max(1, int(math.ceil(self.dt / (RK4_SAFETY * h)))) if math.isfinite(h) and h > 0 else 1
        self._schedule = ScheduleGrid(model, self.schedule_step)         # laws/schedule.py
        self._cells = {}                   # cell key -> Cell
        self._stationary = {}              # cell key -> stationary covariance (or None)
        self.design_on_demand = True       # False (real time): cells designed ahead (see `cell`)
        self.wanted = collections.deque()  # real time: cells to design, for the designer (controller/designer.py)
        self.n_installed = 0               # cells designed elsewhere and installed
        self._last_key = None
        self._stand_in = None              # (key, cells designed, the nearest designed cell) of the last search
        self.state = ArmState.zeros(model)
        self.bias = np.zeros(self.ng)
        self.P = np.eye(self.nx)
        self._eye = np.eye(self.nx)
        self._models = {}                  # constant (H, R) of the linear readings
        self.initialized = False
        self.n_designs = 0
        n = self.n
        self._gravity = np.array(model.data.gravity, dtype=float)
        self._accel_scratch = accel_scratch(model)
        self._accel_out = (np.zeros(3), np.zeros((3, 2 * N)), np.zeros((3, n)))     # h, J, Ju (update_accel)

    # ------------------------------------------------------------------ schedule
    def cell_key(self, q):
        return self._schedule.nearest(q)

    def cell(self, q) -> Cell:
        """The design of q's cell. In process (`design_on_demand`) a missing one is designed here. In real time
        (False) a cell is 1-5 ms of CPU (static equilibrium, linearization, e^{A dt}): designed inside a tick it
        made the estimates late by as much, 27 times in the standard move (bench_estimation, issue 28); so when the
        state enters a cell, the cell and its neighbours (one step along every joint but a cyclic one,
        laws/schedule.py) not designed yet are listed in `wanted` for a GainDesigner (controller/designer.py: a
        process of its own, the designs kept on disk), and
        the nearest designed cell carries the covariance meanwhile (Phi and Q change little over one 0.1 rad step;
        the state itself is predicted by the nonlinear model)."""
        key = self.cell_key(q)
        c = self._cells.get(key)
        if self.design_on_demand or not self._cells:
            if c is None:
                c = self._cells[key] = self.design_cell(key)
            return c
        if key != self._last_key:
            self._last_key = key
            for k in self._neighbourhood(key):
                if k not in self._cells and k not in self.wanted:
                    self.wanted.append(k)
        if c is None:
            # the stand-in is searched once per cell entered and per installed design, not per tick (a search over
            # ~100 cells is ~0.1 ms, the tick's own cost)
            n = len(self._cells)
            if self._stand_in is None or self._stand_in[:2] != (key, n):
                near = min(list(self._cells), key=lambda k: sum((a - b) ** 2 for a, b in zip(k, key)))
                self._stand_in = (key, n, self._cells[near])
            c = self._stand_in[2]
        return c

    def _neighbourhood(self, key):
        """key first, then the cells one step away along any joints but the cyclic ones (3^n - 1 without them)."""
        out = [key]
        for d in itertools.product(*[(0,) if c else (0, -1, 1) for c in self._schedule.cyclic]):
            k = tuple(a + b for a, b in zip(key, d))
            if k != key:
                out.append(k)
        return out

    # the GainDesigner's interface (controller/designer.py)
    generation = 0

    def design_cell(self, key) -> Cell:
        """The design of cell `key` (pure: nothing of the filter changes but the design count)."""
        return self.design(self._schedule.configuration(key))

    def design_recipe(self):
        """(class, keyword arguments) that build a filter of the same designs (a design process builds it)."""
        return type(self), dict(sensors=self.sensors, dt=self.dt, noise=self.noise, schedule_step=self.schedule_step)

    def install(self, key, design, generation):
        """Store a cell designed elsewhere."""
        if key not in self._cells:
            self._cells[key] = design
            self.n_installed += 1

    def prefetch(self, qs):
        """Design now the cells of the configurations qs and their neighbours."""
        for k in self.cells_for(qs):
            self._cells[k] = self.design_cell(k)

    def cells_for(self, qs):
        """The cells (keys) the joint configurations qs and their neighbours need that are not designed yet."""
        keys = []
        for q in qs:
            for k in self._neighbourhood(self.cell_key(q)):
                if k not in self._cells and k not in keys:
                    keys.append(k)
        return keys

    def design(self, q) -> Cell:
        """Phi, Q_d and the accelerometer's Jacobian at the static equilibrium at joint angles q."""
        model, N, dt = self.model, self.N, self.dt
        z_eq, tau_eq = static_equilibrium(model, q)
        lin = linearize(model, z_eq, tau_eq)
        A, _ = lin.state_space()
        Bw = np.vstack([np.zeros((N, N)), np.linalg.inv(lin.mass)])
        Phi, Gam = zero_order_hold(A, Bw, dt)
        w = np.full(N, self.noise.modal_force ** 2)
        w[self.qi] = self.noise.torque ** 2
        Q = Gam @ np.diag(w) @ Gam.T
        nx = self.nx
        Pa, Qa = np.eye(nx), np.zeros((nx, nx))
        Pa[:2 * N, :2 * N], Qa[:2 * N, :2 * N] = Phi, 0.5 * (Q + Q.T)
        if self.ng:
            Qa[2 * N:, 2 * N:] = np.eye(self.ng) * self.noise.bias_drift ** 2 * dt
        Ha = None
        if self.sensors.accelerometer:
            C, _ = SensorSet(encoders=False, accelerometer=True).jacobians(model, lin)
            Ha = np.zeros((3, nx))
            Ha[:, :2 * N] = C
        self.n_designs += 1
        return Cell(z_eq, tau_eq, Pa, Qa, Ha)

    # ------------------------------------------------------------------ state
    @property
    def z(self):
        return self.state.z

    @property
    def zd(self):
        return self.state.zd

    def initialize(self, q, qd=None, at_rest=True):
        """The encoder-consistent state: joint angles q (rates qd, else zero), deflections in static equilibrium
        there, modal rates zero, biases zero. Covariance: at_rest (start-up: the arm rests in its static
        equilibrium) the filter's stationary covariance there (`stationary_covariance`), so the first readings do not
        jolt the estimate (a wide prior moves it by the noise of the first readings, which the modal LQR's large
        gains on the modal rates turn into torque); otherwise (a reset while moving) the wide prior of `noise`."""
        q = np.asarray(q, dtype=float)
        z_eq, _ = static_equilibrium(self.model, q)
        self.state.z[:] = z_eq
        self.state.zd[:] = 0.0
        if qd is not None:
            self.state.zd[self.qi] = qd
        self.bias[:] = 0.0
        self.initialized = True
        if at_rest:
            P = self.stationary_covariance(q)
            if P is not None:
                self.P = P.copy()
                if self.ng:     # the biases are not known at start (the stationary covariance has learnt them)
                    N2 = 2 * self.N
                    self.P[N2:, :] = 0.0
                    self.P[:, N2:] = 0.0
                    self.P[N2:, N2:] = np.eye(self.ng) * self.noise.bias ** 2
                return
        ns = self.noise
        d = np.zeros(self.nx)
        N = self.N
        d[self.mi] = ns.modal0 ** 2
        d[self.qi] = ns.encoder ** 2
        d[N + self.mi] = ns.modal_rate0 ** 2
        d[N + self.qi] = (ns.velocity if (qd is not None and ns.velocity > 0) else ns.joint_rate0) ** 2
        d[2 * N:] = ns.bias ** 2
        self.P = np.diag(d)

    def measurement_model(self):
        """(H, R) of all readings at once (encoders, strain gauges, accelerometer linearized at the cell)."""
        Hs, Rs = [], []
        H, R = self.encoder_model(False)
        Hs.append(H)
        Rs.append(np.diag(R))
        if self.sensors.gauges:
            H, R = self.strain_model()
            Hs.append(H)
            Rs.append(np.diag(R))
        return Hs, Rs

    def stationary_covariance(self, q):
        """The a-posteriori covariance the filter converges to at the cell of q with every sensor fused each period:
        the stationary Kalman filter of the cell (laws.lti.dlqe: the a-priori P of the dual discrete Riccati
        equation, P+ = P - P H^T (H P H^T + R)^-1 H P). None if it has no solution."""
        c = self.cell(q)
        key = self.cell_key(q)
        if key in self._stationary:
            return self._stationary[key]
        Hs, Rs = self.measurement_model()
        if self.sensors.accelerometer:
            Hs.append(c.H_accel)
            Rs.append(np.full(3, self.noise.accel ** 2))
        H, R = np.vstack(Hs), np.diag(np.concatenate(Rs))
        Q = c.Q + 1e-18 * np.eye(self.nx)          # positive definite for the solver (rigid modes, biases)
        try:
            Pp = dlqe(c.Phi, H, Q, R)[2]
            if not (np.all(np.isfinite(Pp)) and np.min(np.linalg.eigvalsh(Pp)) > -1e-12 * np.max(np.diag(Pp))):
                Pp = None
        except (np.linalg.LinAlgError, ValueError):
            Pp = None
        if key in self._cells:                     # not of a neighbour's design standing in (real time)
            self._stationary[key] = Pp
        return Pp

    def set_state(self, z, zd, P=None, bias=None):
        self.state.z[:] = z
        self.state.zd[:] = zd
        if P is not None:
            self.P = np.array(P, dtype=float)
        if bias is not None and self.ng:
            self.bias[:] = bias
        self.initialized = True

    @contextlib.contextmanager
    def kept(self):
        """The state, covariance and biases as they were at entry restored at exit (a prediction not kept)."""
        z, zd, t, P, bias = self.state.z.copy(), self.state.zd.copy(), self.state.t, self.P.copy(), self.bias.copy()
        initialized = self.initialized
        try:
            yield self
        finally:
            self.set_state(z, zd, P, bias)
            self.state.t, self.initialized = t, initialized

    # ------------------------------------------------------------------ filter
    def predict(self, u, h=None):
        """One period with torque u; h: its length when it is not exactly dt (readings stamped with jitter: the
        state is integrated over h, the covariance carried by the period's Phi and Q)."""
        c = self.cell(self.state.z[self.qi])
        h = self.dt if h is None else float(h)
        sub = self.substeps if h <= self.dt else int(math.ceil(self.substeps * h / self.dt))
        try:
            step(self.model, self.state, np.asarray(u, dtype=float), h, sub)
        except IntegrationError as e:
            raise FilterDiverged(f'prediction failed: {e}') from None
        self.P = propagate(self.P, c.Phi, c.Q)
        self._check()

    def _update(self, nu, H, R):
        try:
            dx, P, sig = joseph_update(self.P, np.ascontiguousarray(H), np.ascontiguousarray(R), nu)
        except Exception as e:  # noqa: BLE001 - numba raises for a singular S
            raise FilterDiverged(f'update failed: {e}') from None
        N = self.N
        self.state.z += dx[:N]
        self.state.zd += dx[N:2 * N]
        if self.ng:
            self.bias += dx[2 * N:]
        self.P = P
        self._check()
        return sig


    def encoder_model(self, with_rates: bool):
        key = ('encoders', bool(with_rates))
        if key not in self._models:
            self._models[key] = self._encoder_model(with_rates)
        return self._models[key]

    def _encoder_model(self, with_rates: bool):
        n, N = self.n, self.N
        rows = 2 * n if with_rates else n
        H = np.zeros((rows, self.nx))
        H[np.arange(n), self.qi] = 1.0
        r = [self.noise.encoder ** 2] * n
        if with_rates:
            H[n + np.arange(n), N + self.qi] = 1.0
            r += [self.noise.velocity ** 2] * n
        return H, np.diag(r)

    def update_encoders(self, q, qd=None, check=None):
        """Joint angles (and rates, if their noise is set and qd is given). `check(sigma) -> bool` may veto the
        update before it is applied (innovation bound). Returns the normalized innovation."""
        with_rates = qd is not None and self.noise.velocity > 0
        H, R = self.encoder_model(with_rates)
        y = np.concatenate([q, qd]) if with_rates else np.asarray(q, dtype=float)
        h = np.concatenate([self.state.z[self.qi], self.state.zd[self.qi]]) if with_rates else self.state.z[self.qi]
        return self._gated(y - h, H, R, check)

    def strain_model(self):
        if 'strain' not in self._models:
            self._models['strain'] = self._strain_model()
        return self._models['strain']

    def _strain_model(self):
        N, ng = self.N, len(self.sensors.gauges)
        H = np.zeros((ng, self.nx))
        H[:, :N] = self.S
        if self.ng:
            H[:, 2 * N:] = np.eye(ng)
        return H, np.eye(ng) * self.noise.strain ** 2

    def update_strain(self, y, check=None):
        H, R = self.strain_model()
        h = self.S @ self.state.z + (self.bias if self.ng else 0.0)
        return self._gated(np.asarray(y, dtype=float) - h, H, R, check)

    def update_accel(self, y, u, check=None, u_std=None):
        """The accelerometer's reading, taken with torque u acting (the torque of the period that ends). Extended
        Kalman update: the reading is linearized at the current estimate (accel_reading_model), not at the cell's
        equilibrium — in motion its axial part is mostly the centripetal acceleration, quadratic in the rates, and
        with the geometric nonlinearity it depends strongly on the modal state (the rest linearization was off by
        a factor 30 there and made the filter diverge).

        u_std (per joint): the uncertainty of the torque acting at the sample instant. The reading responds to that
        torque at once (h is affine in u), so its covariance is R = sigma_a^2 I + J_u diag(u_std^2) J_u^T,
        J_u = dh/du (exact by differences: h is affine in u)."""
        u = np.require(u, float, ('C', 'W'))
        h, J, Ju = self._accel_out
        if not accel_reading_model(self.model.data, self.state.workspace, self.state.z, self.state.zd, u,
                                   TIP_ACCEL_STEP, self._gravity, ACCEL_REL_STEP, self._accel_scratch, h, J, Ju):
            raise FilterDiverged('accelerometer model: mass matrix not positive definite at the estimate')
        H = np.zeros((3, self.nx))
        H[:, :2 * self.N] = J
        R = np.eye(3) * self.noise.accel ** 2
        if u_std is not None and np.any(np.asarray(u_std) > 0):
            R = R + (Ju * np.asarray(u_std, dtype=float) ** 2) @ Ju.T
        return self._gated(np.asarray(y, dtype=float) - h, H, R, check)

    def _gated(self, nu, H, R, check):
        nu = np.ascontiguousarray(nu, dtype=float)
        if not math.isfinite(float(nu.sum())):
            raise FilterDiverged('non-finite innovation')
        if check is not None:
            sig = innovation_sigma(self.P, np.ascontiguousarray(H), np.ascontiguousarray(R), nu)
            if not check(sig):
                return sig
        return self._update(nu, H, R)

    def _check(self):
        # a sum is finite only if every term is (an overflow to inf counts as divergence too)
        if not math.isfinite(float(self.state.z.sum() + self.state.zd.sum() + self.P.sum() + self.bias.sum())):
            raise FilterDiverged('non-finite state or covariance')

    def std(self) -> np.ndarray:
        """Standard deviations of every state (sqrt of the covariance's diagonal)."""
        return np.sqrt(np.clip(np.diag(self.P), 0.0, None))
