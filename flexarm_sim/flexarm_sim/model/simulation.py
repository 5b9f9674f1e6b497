"""Offline simulation API (scripts, notebooks, tests): build an arm, simulate, get arrays back.

    from flexarm_sim.model import load_model, simulate
    model = load_model('deluca_two_link.yaml')
    res = simulate(model, T=5.0, dt=1e-3, torque=lambda t, z, zd: [0.2, 0.2] if t < 1 else [0, 0])
    res.t, res.q, res.tip_deflection, res.tip, res.energy, res.modal, res.valid

`torque` is sampled once per control period dt (zero-order hold) and may be
  * None (zero torque), or an array of samples: shape (n_joints,) (constant) or (K, n_joints) with one row per
    period (K >= T/dt; the last row is held) — the whole run is one numba call;
  * a compiled law, an @njit function law(t, z, zd) -> array (n_joints,) that does not modify z, zd — the whole
    loop, law included, runs inside numba;
  * any Python callable (t, z, zd) -> tau, e.g. a control law object — a Python loop around numba steps.
The dynamics are integrated by `method` ('rk4', 'midpoint' or 'gauss': integrators.METHODS; 'gauss' keeps the
energy of free motion, rk4 damps stiff modes numerically) with `substeps` sub-steps per period; by default (None)
the plant's rule (integrators.auto_substeps: RK4 stable on the fastest linearized mode, gauss accurate on it, and
the hard stops' contact while a joint can reach its stop).

Validity: the assumed-modes kinematics hold for moderate deflections. `res.relative_deflection` is each link's
tip deflection over its length; a run whose largest value exceeds `validity_limit(model)` (VALIDITY_LIMIT with
the geometric nonlinearity, VALIDITY_LIMIT_LINEAR without) has `res.valid` False and says why in
`res.validity_message`. The limits come from the comparison with a geometrically exact model
(test_large_deflection.py): on the De Luca arm, link 1 deflecting 20 % of its length (+-0.2 N m bang-bang) leaves
the nonlinear model's tip within 0.8 mm of the exact one and the linear model's 25 mm off; at 5 % (+-0.05 N m)
the linear model is 1.1 mm off (0.1 % of the reach), the nonlinear one 0.04 mm.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba.core.dispatcher import Dispatcher

from . import kernels
from .integrators import (MIDPOINT_MAX_ITER, MIDPOINT_TOL, IntegrationError, auto_substeps, has_stops,
                          method_code)

# Largest tip deflection / link length within the model's stated validity (see the module docstring).
VALIDITY_LIMIT = 0.15
VALIDITY_LIMIT_LINEAR = 0.05


def validity_limit(model) -> float:
    """The fraction of the link length up to which the model's deflections are within its validity."""
    return VALIDITY_LIMIT if model.spec.geometric_nonlinearity else VALIDITY_LIMIT_LINEAR


@dataclass
class SimulationResult:
    t: np.ndarray          # (K,)
    z: np.ndarray          # (K, N) generalized coordinates [q_1, delta_1.., q_2, ...]
    zd: np.ndarray         # (K, N)
    tau: np.ndarray        # (K, n) torque applied from t[k] to t[k+1] (last row repeats)
    tip: np.ndarray        # (K, 3) deformed tip position of the last link, base frame, m
    energy: np.ndarray     # (K,) total mechanical energy (kinetic + elastic + gravity), NaN if not recorded
    q_index: np.ndarray
    mode_index: np.ndarray
    tip_deflection: np.ndarray = None    # (K, n, 3) tip deflection of every link in its link frame, m
    link_length: np.ndarray = None       # (n,)
    validity_limit: float = VALIDITY_LIMIT
    substeps: tuple = field(default=(1, 1))   # (sub-steps per period, while a joint can reach its stop)

    @property
    def q(self):
        return self.z[:, self.q_index]

    @property
    def qd(self):
        return self.zd[:, self.q_index]

    @property
    def modal(self):
        """Modal coordinates delta (K, n_modes): amplitudes of the scaled mode shapes, NOT deflections in metres
        (tip_deflection has those)."""
        return self.z[:, self.mode_index]

    @property
    def delta(self):
        """Alias of `modal` (modal coordinates, not metres)."""
        return self.modal

    @property
    def relative_deflection(self):
        """(K, n) |tip deflection| / link length (0 for rigid links)."""
        L = np.where(self.link_length > 0, self.link_length, np.inf)
        return np.linalg.norm(self.tip_deflection, axis=2) / L

    @property
    def max_relative_deflection(self):
        """(n,) largest |tip deflection| / link length of each link over the run."""
        return self.relative_deflection.max(axis=0)

    @property
    def valid(self) -> bool:
        """True if every link's deflection stayed within the model's validity (validity_limit)."""
        return bool(np.all(self.max_relative_deflection <= self.validity_limit))

    @property
    def validity_message(self) -> str:
        worst = self.max_relative_deflection
        j = int(np.argmax(worst))
        if self.valid:
            return (f'within the model\'s validity: largest tip deflection {100 * worst[j]:.1f} % of the link length '
                    f'(limit {100 * self.validity_limit:.0f} %)')
        k = int(np.argmax(self.relative_deflection[:, j] > self.validity_limit))
        return (f'OUTSIDE the model\'s validity: link {j} deflects {100 * worst[j]:.1f} % of its length '
                f'(limit {100 * self.validity_limit:.0f} %), first at t = {self.t[k]:.3f} s')


# ---------------------------------------------------------------------------------------------- numba loops


@kernels.kernel(**kernels.INTERNAL)
def _record(d, ws, k, z, zd, want_energy, tau0, Z, ZD, TIP, DEFL, E, RF, pL, RE, pE):
    """Sample k of the result: state, tip position, per-link tip deflections, energy."""
    N = z.shape[0]
    for i in range(N):
        Z[k, i] = z[i]
        ZD[k, i] = zd[i]
    if want_energy:
        el, gr = kernels.potential_energies(d, z, RF, pL, RE, pE)     # (fills the frames of z)
        E[k] = kernels.kinetic_energy(d, ws, z, zd, tau0, ws.NN[0], ws.VN[0]) + el + gr
    else:
        kernels.link_frames(d, z, RF, pL, RE, pE)
    n = pE.shape[0]
    for i in range(3):
        TIP[k, i] = pE[n - 1, i]
    kernels.tip_deflections(d, z, DEFL[k])


@kernels.kernel(**kernels.INTERNAL)
def _advance(d, ws, z, zd, tau, dt, n_free, n_contact, stops, method):
    """One period with the sub-step count of the plant's rule (more while a joint can reach its stop)."""
    n_sub = n_free
    if stops and kernels.stops_within_reach(d, z, zd, dt):
        n_sub = n_contact
    return kernels.call_step(d, ws, z, zd, tau, dt, n_sub, method, MIDPOINT_TOL, MIDPOINT_MAX_ITER)


@kernels.kernel(**kernels.INTERNAL)
def _finite(z, zd):
    for i in range(z.shape[0]):
        if not (np.isfinite(z[i]) and np.isfinite(zd[i])):
            return False
    return True


@kernels.kernel(**kernels.KERNEL_LONG)
def _run_samples(d, ws, z, zd, taus, dt, n_free, n_contact, stops, method, want_energy, tau0,
                 Z, ZD, TAU, TIP, DEFL, E, RF, pL, RE, pE):
    """The whole run under sampled torques (row k for period k, the last row held). Returns the index of the
    period that failed, or -1."""
    K = Z.shape[0] - 1
    rows = taus.shape[0]
    for k in range(K + 1):
        _record(d, ws, k, z, zd, want_energy, tau0, Z, ZD, TIP, DEFL, E, RF, pL, RE, pE)
        tau = taus[min(k, rows - 1)]
        for i in range(tau.shape[0]):
            TAU[k, i] = tau[i]
        if k < K:
            if not (_advance(d, ws, z, zd, tau, dt, n_free, n_contact, stops, method) and _finite(z, zd)):
                return k
    return -1


@kernels.kernel(**kernels.KERNEL)
def _run_law(law, d, ws, z, zd, dt, n_free, n_contact, stops, method, want_energy, tau0, tau,
             Z, ZD, TAU, TIP, DEFL, E, RF, pL, RE, pE):
    """The whole run under a compiled law tau = law(t, z, zd). Returns the failing period, or -1."""
    K = Z.shape[0] - 1
    for k in range(K + 1):
        _record(d, ws, k, z, zd, want_energy, tau0, Z, ZD, TIP, DEFL, E, RF, pL, RE, pE)
        out = law(k * dt, z, zd)
        for i in range(tau.shape[0]):
            tau[i] = out[i]
            TAU[k, i] = out[i]
        if k < K:
            if not (_advance(d, ws, z, zd, tau, dt, n_free, n_contact, stops, method) and _finite(z, zd)):
                return k
    return -1


@kernels.kernel(**kernels.KERNEL_NO_NRT)
def _run_one(d, ws, k, z, zd, tau, dt, n_free, n_contact, stops, method, want_energy, tau0,
             Z, ZD, TAU, TIP, DEFL, E, RF, pL, RE, pE):
    """Period k of a run driven from Python: record sample k (with the torque tau chosen for it), then advance
    unless k is the last sample. False if the step failed."""
    _record(d, ws, k, z, zd, want_energy, tau0, Z, ZD, TIP, DEFL, E, RF, pL, RE, pE)
    for i in range(tau.shape[0]):
        TAU[k, i] = tau[i]
    if k < Z.shape[0] - 1:
        return _advance(d, ws, z, zd, tau, dt, n_free, n_contact, stops, method) and _finite(z, zd)
    return True


@kernels.kernel(**kernels.KERNEL_LONG)
def _run_replay(d, ws, z, zd, taus, q_meas, qd_meas, offset, scale, kp, kd, delay, dt, n_free, n_contact, stops,
                method, tau, Z, ZD, TAU):
    """The whole run of a recorded closed loop (`replay`): period k applies
    scale (taus[k] + kp (q_meas[k-delay] - offset - q[k-delay]) + kd (qd_meas[k-delay] - qd[k-delay])) at the joints
    (no correction before sample `delay`). Returns the failing period, or -1."""
    K = Z.shape[0] - 1
    n = taus.shape[1]
    qi = d.q_index
    for k in range(K + 1):
        for i in range(z.shape[0]):
            Z[k, i] = z[i]
            ZD[k, i] = zd[i]
        m = k - delay
        for j in range(n):
            c = qi[j]
            u = taus[k, j]
            if m >= 0:
                u += kp[j] * (q_meas[m, j] - offset[j] - Z[m, c]) + kd[j] * (qd_meas[m, j] - ZD[m, c])
            tau[j] = scale[j] * u
            TAU[k, j] = tau[j]
        if k < K:
            if not (_advance(d, ws, z, zd, tau, dt, n_free, n_contact, stops, method) and _finite(z, zd)):
                return k
    return -1


@kernels.kernel(**kernels.KERNEL_LONG)
def _run_replay_events(d, ws, z, zd, taus, q_meas, qd_meas, offset, scale, kp, kd, ev_t, ev_c, times, dt, n_free,
                       n_contact, stops, method, tau, Z, ZD, TAU):
    """A recorded closed loop whose commands took effect at recorded instants (`replay` with applied_at): from
    ev_t[e] (s after sample 0) command c = ev_c[e] acts, scale (taus[c] + kp (q_meas[c] - offset - q[c])
    + kd (qd_meas[c] - qd[c])), q[c] the model's joints at sample c (c <= the current sample); zero torque before
    the first. Sample k is at times[k]; a period is integrated piecewise between the instants, each piece with the
    period's sub-steps (the result smooth in the instants). Returns the failing period, or -1."""
    K = Z.shape[0] - 1
    n = taus.shape[1]
    qi = d.q_index
    E = ev_t.shape[0]
    eps = 1e-9 * dt
    e = 0
    cur = -1
    for k in range(K + 1):
        for i in range(z.shape[0]):
            Z[k, i] = z[i]
            ZD[k, i] = zd[i]
        t = times[k]
        t_end = times[k + 1] if k < K else t + dt
        while e < E and ev_t[e] <= t + eps:
            cur = ev_c[e]
            e += 1
        _event_torque(qi, taus, q_meas, qd_meas, offset, scale, kp, kd, cur, n, Z, ZD, tau)
        for j in range(n):
            TAU[k, j] = tau[j]
        if k == K:
            break
        while True:
            t_next = t_end
            if e < E and ev_t[e] < t_end - eps:
                t_next = ev_t[e]
            h = t_next - t
            if h > eps:       # every piece with the period's sub-steps: the run is smooth in the instants (a count
                #               that grew with the piece's length jumped with them: a fit of loop.delay stalled)
                if not (_advance(d, ws, z, zd, tau, h, n_free, n_contact, stops, method) and _finite(z, zd)):
                    return k
            t = t_next
            if t_next >= t_end - eps:
                break
            cur = ev_c[e]
            e += 1
            _event_torque(qi, taus, q_meas, qd_meas, offset, scale, kp, kd, cur, n, Z, ZD, tau)
    return -1


@kernels.kernel(**kernels.INTERNAL)
def _event_torque(qi, taus, q_meas, qd_meas, offset, scale, kp, kd, c, n, Z, ZD, tau):
    for j in range(n):
        if c < 0:
            tau[j] = 0.0
        else:
            col = qi[j]
            tau[j] = scale[j] * (taus[c, j] + kp[j] * (q_meas[c, j] - offset[j] - Z[c, col])
                                 + kd[j] * (qd_meas[c, j] - ZD[c, col]))


# ---------------------------------------------------------------------------------------------- the API
def _start(model, dt, method, z0, zd0, substeps):
    """(data, workspace, z, zd, sub-steps free, with a stop engaged) of a run from (z0, zd0) (default rest)."""
    N = model.n_coords
    d = model.data
    ws = model.workspace()
    kernels.step_addresses(d, ws, (method,))
    z = np.zeros(N)
    zd = np.zeros(N)
    if z0 is not None:
        z[:] = z0
    if zd0 is not None:
        zd[:] = zd0
    if substeps:
        n_free = n_contact = int(substeps)
    else:
        n_free = auto_substeps(model, dt, method)
        n_contact = auto_substeps(model, dt, method, stops_engaged=True) if has_stops(model) else n_free
    return d, ws, z, zd, n_free, n_contact




def command_events(applied_at, K: int, dt: float, sample_times=None):
    """(instants (E,), command indices (E,)) of the commands that took effect, in time order: command m from
    applied_at[m] (s after sample 0; NaN: never), a command that takes effect after a newer one dropped (the newer
    was written first: the older never acts). ValueError naming a command applied before its own reading (taken at
    sample_times[m], default m dt)."""
    a = np.asarray(applied_at, dtype=float)
    if a.shape != (K,):
        raise ValueError(f'applied_at: expected ({K},) instants, one per command, got shape {a.shape}')
    m = np.flatnonzero(~np.isnan(a))
    if np.any(~np.isfinite(a[m])):
        raise ValueError('applied_at: infinite instants')
    read = m * dt if sample_times is None else np.asarray(sample_times, dtype=float)[m]
    early = m[a[m] < read - 1e-9 * dt]
    if early.size:
        i = int(early[0])
        t_i = i * dt if sample_times is None else float(sample_times[i])
        raise ValueError(f'applied_at[{i}] = {a[i]:.6g} s: before its own reading at {t_i:.6g} s')
    order = m[np.lexsort((m, a[m]))]
    keep = order[np.maximum.accumulate(order) == order] if order.size else order
    return np.ascontiguousarray(a[keep]), np.ascontiguousarray(keep.astype(np.int64))


def simulate(model, T: float, dt: float, torque=None, z0=None, zd0=None, substeps=None,
             method: str = 'rk4', record_energy: bool = True) -> SimulationResult:
    """Simulate for T seconds with control period dt; returns the sampled trajectory (see the module docstring).
    IntegrationError if a step fails (the message names the time)."""
    code = method_code(method)
    if not (np.isfinite(T) and np.isfinite(dt) and T >= 0 and dt > 0):
        raise ValueError(f'T must be >= 0 and dt > 0 (finite), got T={T}, dt={dt}')
    n_steps = int(round(T / dt))
    N, n = model.n_coords, model.n_joints
    d, ws, z, zd, n_free, n_contact = _start(model, dt, method, z0, zd0, substeps)
    stops = has_stops(model)
    t = np.arange(n_steps + 1) * dt
    Z, ZD = np.zeros((n_steps + 1, N)), np.zeros((n_steps + 1, N))
    TAU, TIP, E = np.zeros((n_steps + 1, n)), np.zeros((n_steps + 1, 3)), np.full(n_steps + 1, np.nan)
    DEFL = np.zeros((n_steps + 1, n, 3))
    frames = (np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3)))
    tau0 = np.zeros(n)
    args = (dt, n_free, n_contact, stops, code, bool(record_energy), tau0)
    out = (Z, ZD, TAU, TIP, DEFL, E) + frames
    if isinstance(torque, Dispatcher):
        failed = _run_law(torque, d, ws, z, zd, *args, np.zeros(n), *out)
    elif torque is None or not callable(torque):
        taus = np.zeros((1, n)) if torque is None else np.asarray(torque, dtype=float)
        if taus.ndim == 1:
            taus = taus.reshape(1, -1)
        if taus.ndim != 2 or taus.shape[1] != n or taus.shape[0] == 0:
            raise ValueError(f'torque: expected a callable, None, or samples of shape ({n},) or (K, {n}); '
                             f'got shape {np.shape(torque)}')
        if not np.all(np.isfinite(taus)):
            raise ValueError('torque: non-finite samples')
        failed = _run_samples(d, ws, z, zd, np.require(taus, float, ('C', 'W')), *args, *out)
    else:
        failed = -1
        tau = np.zeros(n)
        for k in range(n_steps + 1):
            tau[:] = np.asarray(torque(t[k], z.copy(), zd.copy()), dtype=float)
            if not _run_one(d, ws, k, z, zd, tau, *args, *out):
                failed = k
                break
    if failed >= 0:
        raise IntegrationError(f'{method} step failed at t={t[failed]:.6f} s (from t={t[failed]:.6f} to '
                               f'{t[failed] + dt:.6f}; mass matrix, convergence or non-finite state)')
    return SimulationResult(t, Z, ZD, TAU, TIP, E, model.q_index, model.mode_index, DEFL,
                            np.array([js.link.length for js in model.spec.joints]), validity_limit(model),
                            (n_free, n_contact))


def replay(model, dt: float, torque, q_meas, qd_meas, kp, kd, delay: int = 0, z0=None, zd0=None, scale=None,
           offset=None, substeps=None, method: str = 'rk4', applied_at=None, sample_times=None):
    """Replay a recorded closed loop on the model (output-error identification, flexarm_control.identification).

    The recording holds the torque u_k = f_k - kp q_m - kd qd_m (m = k - delay) a joint feedback law applied over
    period k (f_k: feed-forward, excitation) and the joint readings q_m, qd_m it acted on `delay` periods earlier.
    Period k of the replay applies
        scale (torque[k] + kp (q_meas[m] - offset - q_m) + kd (qd_meas[m] - qd_m)) = scale (f_k - kp q_m - kd qd_m)
    at the joints, q and qd the model's: the same law closed around the model, without knowing f. `scale` is the
    torque constant's error (the drive reports current times its nominal constant); `offset` the encoders' zero
    error. An arm without joint stiffness integrates any torque error twice and a weakly damped model resonates under
    the recorded torque: only the closed loop keeps a wrong model's replay near the recording (the law's gains
    are those of the experiment, `flexarm excite`). Returns (z, zd, tau), arrays (K, N), (K, N), (K, n): the state at
    each sample and the torque applied from it. IntegrationError if a step fails.

    applied_at (K,), s after sample 0: a real-time loop's timing (a hardware bridge writes each command when it
    arrives, a varying fraction of a period after its readings, or a period later): torque[m] is then the command
    computed from reading m (delay must be 0), acting from applied_at[m] (>= m dt; NaN: never written) until the
    next command takes effect; a command written after a newer one is superseded and never acts; zero torque before
    the first. The periods are integrated piecewise between these instants. sample_times (K,), s after sample 0
    (with applied_at): when each reading was taken, if not every dt (a real-time loop's jitter)."""
    code = method_code(method)
    n, N = model.n_joints, model.n_coords
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f'dt must be > 0 (finite), got {dt}')
    for name, v in (('z0', z0), ('zd0', zd0)):
        if v is not None and np.shape(v) != (N,):
            raise ValueError(f'{name}: expected shape ({N},), got {np.shape(v)}')
    taus = np.require(np.asarray(torque, dtype=float), float, ('C', 'W'))
    K = taus.shape[0] if taus.ndim == 2 else 0
    q_meas = np.ascontiguousarray(q_meas, dtype=float)
    qd_meas = np.ascontiguousarray(qd_meas, dtype=float)
    for name, a in (('torque', taus), ('q_meas', q_meas), ('qd_meas', qd_meas)):
        if a.ndim != 2 or a.shape != (K, n) or K == 0:
            raise ValueError(f'{name}: expected shape (K, {n}) with K >= 1 as torque has, got {a.shape}')
        if not np.all(np.isfinite(a)):
            raise ValueError(f'{name}: non-finite samples')
    vec = {}
    for name, v, default in (('kp', kp, 0.0), ('kd', kd, 0.0), ('scale', scale, 1.0), ('offset', offset, 0.0)):
        a = np.full(n, default) if v is None else np.broadcast_to(np.asarray(v, dtype=float), (n,)).copy()
        if not np.all(np.isfinite(a)):
            raise ValueError(f'{name}: non-finite')
        vec[name] = a
    d, ws, z, zd, n_free, n_contact = _start(model, dt, method, z0, zd0, substeps)
    Z, ZD, TAU = np.zeros((K, N)), np.zeros((K, N)), np.zeros((K, n))
    delay = int(delay)
    if not 0 <= delay < K:
        raise ValueError(f'delay: expected 0 <= delay < {K} samples, got {delay}')
    if applied_at is not None:
        if delay:
            raise ValueError('delay: 0 with applied_at (the instants say when each command acted)')
        times = np.arange(K) * float(dt) if sample_times is None else np.ascontiguousarray(sample_times, dtype=float)
        if times.shape != (K,) or not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
            raise ValueError(f'sample_times: expected ({K},) finite, increasing instants')
        ev_t, ev_c = command_events(applied_at, K, dt, times)
        failed = _run_replay_events(d, ws, z, zd, taus, q_meas, qd_meas, vec['offset'], vec['scale'], vec['kp'],
                                    vec['kd'], ev_t, ev_c, times, float(dt), n_free, n_contact, has_stops(model),
                                    code, np.zeros(n), Z, ZD, TAU)
    else:
        if sample_times is not None:
            raise ValueError('sample_times: only with applied_at (a real-time loop\'s record)')
        failed = _run_replay(d, ws, z, zd, taus, q_meas, qd_meas, vec['offset'], vec['scale'], vec['kp'], vec['kd'],
                             delay, float(dt), n_free, n_contact, has_stops(model), code, np.zeros(n),
                             Z, ZD, TAU)
    if failed >= 0:
        raise IntegrationError(f'{method} step failed at t={failed * dt:.6f} s of the replay (mass matrix, '
                               f'convergence or non-finite state)')
    return Z, ZD, TAU
