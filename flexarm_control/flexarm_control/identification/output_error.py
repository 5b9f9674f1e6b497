"""Output-error (simulation-error) identification of an arm's physical parameters from recorded closed loops.

The data (`ClosedLoopRecord`): an experiment in which a joint feedback law with known gains held the arm while it
was excited (`flexarm excite`: pd_servo tracking a multisine), sampled every control period dt:
    u_k          the torque applied over [t_k, t_k+1) (what the drives report)
    q_k, qd_k    the joint readings the law acted on (encoders, the drives' velocity)
The law was u_k = f_k - kp q_k - kd qd_k with an unknown feed-forward f. For a parameter vector theta the model
replays the same closed loop (flexarm_sim.model.replay): scale (u_k + kp (q_k - offset - q) + kd (qd_k - qd)),
q, qd the model's, and predicts the readings q + offset. Identification minimises the sum over records, joints and
samples of ((q_pred - q_k) / sigma)^2, sigma the readings' noise (the encoder's step / sqrt(12), or its noise),
by Levenberg-Marquardt (Marquardt's diagonal scaling, steps limited to `MAX_STEP` in theta) with forward-difference
sensitivities computed in parallel threads (the replay kernel releases the GIL).

Why a closed-loop replay: a free joint integrates any torque error twice, and a lightly damped model driven open
loop by the recorded torque resonates wherever its frequencies are wrong (the recorded torque holds the real
loop's feedback at the real frequencies); the cost is then flat far from the truth and steep near it. The law's
known gains keep a wrong model's replay near the recording from any start the limits allow.

Statistics: the residuals are not white (encoder quantization of a slow motion, process noise such as torque
ripple, unmodelled dynamics), so the covariance of the estimate is the sandwich (J^T J)^-1 S (J^T J)^-1 with S the
Newey-West estimate of the scores' long-run covariance (Newey & West, Econometrica 55, 1987; for white residuals
it is Ljung's s^2 (J^T J)^-1, System Identification, 2nd ed., sec. 9.3), J the residuals' sensitivity. Identifiability: the
singular values of J with theta's scaling; a direction with sigma_i < RANK_TOL sigma_max is not determined by
these signals, and a parameter whose standard error exceeds NOT_DETERMINED in theta (for a log-scaled one: its
value known to within a factor e) is reported "not identifiable from these signals" and kept at its nominal value
(the fit is repeated without it): never a number the data do not carry.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from flexarm_sim.model import load_model, replay
from flexarm_sim.model.integrators import IntegrationError
from flexarm_sim.model.spec import ArmSpecError

from .parameters import FitError, ParameterSet

__all__ = ['ClosedLoopRecord', 'Identification', 'identify', 'predict', 'nrmse', 'strain_of', 'accel_of',
           'identifiability', 'RecordError']

ACCEL_CHANNELS = ('accel.x', 'accel.y', 'accel.z')    # the tip accelerometer's axes (tip frame) as fitted outputs

MAX_STEP = 0.5                # largest change of theta in one step (a factor 1.65 of a log-scaled parameter)
DIFF_STEP = 1e-4              # forward-difference step in theta
RANK_TOL = 1e-6               # singular value / largest: not determined
NOT_DETERMINED = 1.0          # standard error in theta beyond which a parameter is not identifiable
CHI2_TOL = 0.05               # converged: the last step lowered the sum of squared (noise-weighted) residuals by
                              # less than this (a change of chi^2 << 1 moves no estimate by a noticeable part of its
                              # standard error), ...
COST_RTOL = 1e-9              # ... or by less than this relatively (a model far from the data: chi^2 >> N), ...
STEP_TOL = 1e-6               # ... or moved no theta by more than this
MAX_LAMBDA = 1e10
HORIZON_START_S = 3.0         # s of each record the continuation starts with (doubled until the whole is fitted)
MISFIT = 4.0                  # mean squared residual (noise units) beyond which the calibrated model is said not to
                              # explain the recording (RMS residual twice the readings' noise)


class RecordError(ValueError):
    """A recording identification cannot use; the message names the topic or field."""


@dataclass
class ClosedLoopRecord:
    """One recorded closed loop, sampled every dt from t0 (see the module docstring). Arrays (K, n), arm order."""

    dt: float
    joint_names: tuple
    torque: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    position_noise: np.ndarray            # (n,) rad: the readings' noise standard deviation
    source: str = '<record>'
    t0: float = 0.0
    delay: int = 0                        # periods between the readings a torque was computed from and its period
    law_position: np.ndarray = None       # what the law acted on, if not the readings (e.g. a simulated plant's
    law_velocity: np.ndarray = None       # exact joint state; the drives' own velocity): (K, n)
    strain: np.ndarray = None             # (K, g) strain gauge readings at the same instants, or None
    gauges: tuple = ()                    # their descriptions, '<joint>@<x>:<plane>:c=<m>' (sensing.parse_gauge)
    strain_noise: np.ndarray = None       # (g,) the readings' noise standard deviation (after the amplifier's filter)
    strain_alpha: float = 1.0             # the amplifier's first-order low-pass at dt (sensors.lowpass_alpha; 1: none)
    accel: np.ndarray = None              # (K, 3) m/s^2 the tip accelerometer's readings (tip frame) at the same
                                          # instants, or None
    accel_noise: np.ndarray = None        # (3,) their noise standard deviation (after the accelerometer's filter)
    accel_alpha: float = 1.0              # the accelerometer's first-order low-pass at dt (1: none)
    applied_at: np.ndarray = None         # (K,) s after t0: when the command of each reading took effect (a real-time
                                          # loop's timing, model.replay; NaN: never); torque[k] is then reading k's
    sample_times: np.ndarray = None       # (K,) s after t0: when each reading was taken (with applied_at; default k dt)

    def __post_init__(self):
        self.torque = np.ascontiguousarray(self.torque, dtype=float)
        self.position = np.ascontiguousarray(self.position, dtype=float)
        self.velocity = np.ascontiguousarray(self.velocity, dtype=float)
        self.law_position = np.ascontiguousarray(self.position if self.law_position is None else self.law_position,
                                                 dtype=float)
        self.law_velocity = np.ascontiguousarray(self.velocity if self.law_velocity is None else self.law_velocity,
                                                 dtype=float)
        n = len(self.joint_names)
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise RecordError(f'{self.source}: sample period dt must be > 0, got {self.dt}')
        for name in ('torque', 'position', 'velocity', 'law_position', 'law_velocity'):
            a = getattr(self, name)
            if a.ndim != 2 or a.shape[1] != n or a.shape[0] < 2:
                raise RecordError(f'{self.source}: {name}: expected (samples, {n}) for joints '
                                  f'{", ".join(self.joint_names)}, got shape {a.shape}')
            if a.shape[0] != self.torque.shape[0]:
                raise RecordError(f'{self.source}: {name} has {a.shape[0]} samples, torque {self.torque.shape[0]}')
            bad = ~np.isfinite(a)
            if bad.any():
                k, j = np.argwhere(bad)[0]
                raise RecordError(f'{self.source}: {name}[{self.joint_names[j]}] is not finite at sample {k}')
        for name in ('kp', 'kd', 'position_noise'):
            v = _per(self.source, name, getattr(self, name), n, 'joint')
            if not np.all(np.isfinite(v)) or np.any(v < 0):
                raise RecordError(f'{self.source}: {name} must be finite and >= 0 per joint, got {v}')
            setattr(self, name, v)
        if not (isinstance(self.delay, (int, np.integer)) and 0 <= self.delay < self.torque.shape[0]):
            raise RecordError(f'{self.source}: delay must be a whole number of periods >= 0, got {self.delay!r}')
        if np.any(self.position_noise <= 0):
            raise RecordError(f'{self.source}: position_noise must be > 0 (the encoder step / sqrt(12))')
        if self.applied_at is not None:
            from flexarm_sim.model.simulation import command_events
            if self.delay:
                raise RecordError(f'{self.source}: delay must be 0 with applied_at (the instants say when each '
                                  'command acted)')
            self.applied_at = np.ascontiguousarray(self.applied_at, dtype=float)
            K = self.torque.shape[0]
            if self.sample_times is not None:
                st = np.ascontiguousarray(self.sample_times, dtype=float)
                if st.shape != (K,) or not np.all(np.isfinite(st)) or np.any(np.diff(st) <= 0):
                    raise RecordError(f'{self.source}: sample_times: expected ({K},) finite, increasing instants')
                self.sample_times = st
            try:
                events, _ = command_events(self.applied_at, K, self.dt, self.sample_times)
            except ValueError as e:
                raise RecordError(f'{self.source}: {e}') from None
            if not events.size:
                raise RecordError(f'{self.source}: applied_at: no command took effect (all NaN): no closed loop to '
                                  'replay')
        elif self.sample_times is not None:
            raise RecordError(f'{self.source}: sample_times without applied_at (readings off the period are a '
                              'real-time loop\'s: when its commands took effect is needed too)')
        if isinstance(self.gauges, str):
            raise RecordError(f'{self.source}: gauges: a list of gauge descriptions, got the string {self.gauges!r}')
        self.gauges = tuple(self.gauges)
        self._check_accel()
        if self.strain is None:
            if self.gauges:
                raise RecordError(f'{self.source}: gauges {", ".join(self.gauges)} without strain readings')
            return
        g = len(self.gauges)
        self.strain = np.ascontiguousarray(self.strain, dtype=float)
        if self.strain.ndim != 2 or self.strain.shape != (self.torque.shape[0], g) or not g:
            raise RecordError(f'{self.source}: strain: expected ({self.torque.shape[0]}, {g}) readings of the gauges '
                              f'{", ".join(self.gauges) or "(none given)"}, got shape {self.strain.shape}')
        self.strain_noise, self.strain_alpha = self._sensor_channel('strain', self.strain, self.gauges, 'gauge')

    def _check_accel(self):
        if self.accel is None:
            return
        K = self.torque.shape[0]
        self.accel = np.ascontiguousarray(self.accel, dtype=float)
        if self.accel.shape != (K, 3):
            raise RecordError(f'{self.source}: accel: expected ({K}, 3) readings (tip frame x, y, z), got shape '
                              f'{self.accel.shape}')
        self.accel_noise, self.accel_alpha = self._sensor_channel('accel', self.accel, ACCEL_CHANNELS, 'axis')

    def _sensor_channel(self, name, readings, labels, what):
        """(noise (m,), alpha) of a sensor's readings (K, m) validated: finite, its `<name>_noise` > 0 per channel,
        its `<name>_alpha` (a first-order low-pass) in (0, 1]; RecordError naming the field."""
        bad = ~np.isfinite(readings)
        if bad.any():
            k, i = np.argwhere(bad)[0]
            raise RecordError(f'{self.source}: {name}[{labels[i]}] is not finite at sample {k}')
        given = getattr(self, f'{name}_noise')
        noise = _per(self.source, f'{name}_noise', given if given is not None else np.nan, len(labels), what)
        if not np.all(np.isfinite(noise) & (noise > 0)):
            raise RecordError(f'{self.source}: {name}_noise must be > 0 per {what} (the readings\' standard '
                              f'deviation), got {noise}')
        alpha = getattr(self, f'{name}_alpha')
        try:
            a = float(alpha)
        except (TypeError, ValueError):
            a = math.nan
        if not (math.isfinite(a) and 0.0 < a <= 1.0):
            raise RecordError(f'{self.source}: {name}_alpha must be in (0, 1] (1: no filter), got {alpha}')
        return noise, a

    @property
    def samples(self) -> int:
        return self.torque.shape[0]

    @property
    def duration(self) -> float:
        return (self.samples - 1) * self.dt

    @property
    def channels(self) -> tuple:
        """The fitted outputs, in the residuals' order per sample: the joints, the gauges, the accelerometer's axes."""
        return tuple(self.joint_names) + (self.gauges if self.strain is not None else ()) + \
            (ACCEL_CHANNELS if self.accel is not None else ())

    def without_strain(self) -> 'ClosedLoopRecord':
        """The same record with the joint readings only (what encoders alone determine)."""
        return ClosedLoopRecord(self.dt, self.joint_names, self.torque, self.position, self.velocity, self.kp, self.kd,
                                self.position_noise, self.source, self.t0, self.delay, self.law_position,
                                self.law_velocity, applied_at=self.applied_at, sample_times=self.sample_times)

    def without_accel(self) -> 'ClosedLoopRecord':
        """The same record without its accelerometer readings (joints and gauges)."""
        return dataclasses.replace(self, accel=None, accel_noise=None, accel_alpha=1.0)


def _per(source, name, value, n, what):
    """value as one float per joint (or gauge): a scalar for all, or n of them; RecordError naming the field."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise RecordError(f'{source}: {name}: expected numbers, got {value!r}') from None
    if a.ndim == 0 or a.shape == (1,):
        return np.full(n, float(a.reshape(-1)[0]))
    if a.shape != (n,):
        raise RecordError(f'{source}: {name}: expected one value or one per {what} ({n}), got shape {a.shape}')
    return a.copy()


def nrmse(pred, meas):
    """Per channel: RMS(pred - meas) / RMS(meas - mean(meas)): 0 a perfect fit, 1 no better than the mean."""
    pred, meas = np.asarray(pred), np.asarray(meas)
    spread = np.sqrt(np.mean((meas - meas.mean(axis=0)) ** 2, axis=0))
    err = np.sqrt(np.mean((pred - meas) ** 2, axis=0))
    return np.where(spread > 0, err / np.where(spread > 0, spread, 1.0), np.inf)


def _initial_state(model, rec, offset):
    z0, zd0 = np.zeros(model.n_coords), np.zeros(model.n_coords)
    z0[model.q_index] = rec.law_position[0] - offset
    zd0[model.q_index] = rec.law_velocity[0]
    return z0, zd0


def simulate_record(model, rec, scale=None, offset=None, samples=None, delay=0.0):
    """The model's replay of a record (its first `samples`, default all): (predicted readings (K, n), z (K, N)).
    delay (s, a record with applied_at): every command acts that much later than recorded (never before its own
    reading)."""
    return replay_record(model, rec, scale, offset, samples, delay)[:2]


def replay_record(model, rec, scale=None, offset=None, samples=None, delay=0.0):
    """simulate_record's replay with its rates and torques: (predicted readings (K, n), z, zd (K, N), the torque
    applied from each sample (K, n))."""
    n = model.n_joints
    scale = np.ones(n) if scale is None else np.asarray(scale, dtype=float)
    offset = np.zeros(n) if offset is None else np.asarray(offset, dtype=float)
    z0, zd0 = _initial_state(model, rec, offset)
    k = rec.samples if samples is None else max(2, min(int(samples), rec.samples))
    Z, ZD, TAU = replay(model, rec.dt, rec.torque[:k], rec.law_position[:k], rec.law_velocity[:k], rec.kp, rec.kd,
                        min(rec.delay, k - 1), z0=z0, zd0=zd0, scale=scale, offset=offset,
                        applied_at=_acting(rec, k, delay),
                        sample_times=None if rec.sample_times is None else rec.sample_times[:k])
    return Z[:, model.q_index] + offset, Z, ZD, TAU


def _acting(rec, k, delay):
    """When the first k commands of a real-time record acted, `delay` later than recorded (None without applied_at)."""
    if rec.applied_at is None:
        return None
    a = rec.applied_at[:k]
    if not delay:
        return a
    read = rec.sample_times[:k] if rec.sample_times is not None else np.arange(k) * rec.dt
    return np.where(np.isnan(a), np.nan, np.maximum(a + delay, read))


def strain_of(model, rec, Z):
    """The gauges' readings the model predicts from its states Z (K, N) of a replay, bias aside: S z through the
    amplifier's low-pass y_k = y_k-1 + alpha (u_k - y_k-1), y_0 = u_0 (flexarm_sim.sensors). A gauge's constant bias
    is not a model parameter: each residual is taken about its mean (the least-squares bias)."""
    from scipy.signal import lfilter

    from flexarm_sim.model.sensing import SensorSpecError, parse_gauge, strain_matrix
    try:
        S = strain_matrix(model, [parse_gauge(model, g) for g in rec.gauges])
    except SensorSpecError as e:
        raise RecordError(f'{rec.source}: {e}') from None
    u = Z @ S.T
    a = rec.strain_alpha
    if a >= 1.0:
        return u
    return lfilter([a], [1.0, a - 1.0], u, axis=0, zi=((1.0 - a) * u[:1]))[0]


def accel_of(model, rec, Z, ZD, TAU):
    """The tip accelerometer's readings the model predicts along a replay (Z, ZD (K, N), TAU (K, n): the torque
    applied from each sample), bias aside: the specific force at each sample with the torque that acted up to it
    (the period that ends there: a reading taken at a control instant, before its command acts; the first sample
    with the first torque) through the accelerometer's first-order low-pass (flexarm_sim.sensors), y_0 = u_0. Its
    residuals are taken about their mean, as the gauges' (a constant bias is not a model parameter)."""
    from scipy.signal import lfilter

    from ..estimation.filter import tip_specific_forces
    U = np.vstack([TAU[:1], TAU[:-1]])
    u = tip_specific_forces(model, Z, ZD, U)
    a = rec.accel_alpha
    if a >= 1.0:
        return u
    return lfilter([a], [1.0, a - 1.0], u, axis=0, zi=((1.0 - a) * u[:1]))[0]


def _channel_residuals(model, rec, replayed, k):
    """Noise-weighted residuals (k, channels) of a replay's (replay_record's) first k samples (the gauges' and the
    accelerometer's about their mean)."""
    q, Z, ZD, TAU = replayed
    out = [(q - rec.position[:k]) / rec.position_noise]
    if rec.strain is not None:
        e = strain_of(model, rec, Z) - rec.strain[:k]
        out.append((e - e.mean(axis=0)) / rec.strain_noise)
    if rec.accel is not None:
        e = accel_of(model, rec, Z, ZD, TAU) - rec.accel[:k]
        out.append((e - e.mean(axis=0)) / rec.accel_noise)
    return np.hstack(out) if len(out) > 1 else out[0]


def _channel_nrmse(model, rec, replayed):
    """NRMSE per channel (joints, then gauges and accelerometer axes with their bias fitted)."""
    q, Z, ZD, TAU = replayed
    out = [nrmse(q, rec.position)]
    if rec.strain is not None:
        s = strain_of(model, rec, Z)
        out.append(nrmse(s + (rec.strain - s).mean(axis=0), rec.strain))
    if rec.accel is not None:
        a = accel_of(model, rec, Z, ZD, TAU)
        out.append(nrmse(a + (rec.accel - a).mean(axis=0), rec.accel))
    return np.concatenate(out)


def predict(spec, rec, scale=None, offset=None, delay=0.0):
    """(predicted joint readings, NRMSE per channel: joints, gauges, accelerometer axes) of an arm (ArmSpec or
    model) on a record (e.g. held out)."""
    model = spec if hasattr(spec, 'q_index') else load_model(spec)
    _check_joints(model.spec, rec)
    replayed = replay_record(model, rec, scale, offset, delay=delay)
    return replayed[0], _channel_nrmse(model, rec, replayed)


def _check_joints(spec, rec):
    names = tuple(j.name for j in spec.joints)
    if tuple(rec.joint_names) != names:
        raise RecordError(f'{rec.source}: joints {", ".join(rec.joint_names)}, the arm {spec.name} has '
                          f'{", ".join(names)}: another arm\'s recording (give the arm it was made with)')


@dataclass
class Identification:
    """What `identify` found. Arrays are in the order of `names`."""

    names: list
    units: list
    nominal: np.ndarray
    estimate: np.ndarray
    std_error: np.ndarray            # NaN for a parameter not identifiable
    identifiable: np.ndarray         # bool
    why_not: dict                    # name -> why it is not identifiable
    correlation: np.ndarray
    singular_values: np.ndarray      # of the scaled sensitivity, largest first
    cost: float                      # per residual, in noise units (1: the noise alone)
    cost_nominal: float
    iterations: int
    converged: bool
    message: str
    nrmse: list                      # per record: per joint
    history: list = field(default_factory=list)   # (iteration, cost, estimate)
    correlation_time: float = 1.0    # the residuals' integrated autocorrelation time, samples (1: white)
    misfit: str = ''                 # non-empty: the calibrated model does not explain the recordings (why)
    seconds: float = 0.0
    evaluations: int = 0
    spec: object = None              # the calibrated ArmSpec
    arm_dict: dict = None            # its plain-data form (the calibrated arm file)
    scale: np.ndarray = None
    offset: np.ndarray = None
    delay: float = 0.0               # loop.delay (s), when fitted

    def table(self) -> str:
        rows = [f'{"parameter":<26} {"nominal":>12} {"estimate":>12} {"std error":>11}  note']
        for i, name in enumerate(self.names):
            se = f'{self.std_error[i]:11.3g}' if np.isfinite(self.std_error[i]) else f'{"-":>11}'
            note = '' if self.identifiable[i] else 'NOT identifiable: ' + self.why_not.get(name, '')
            rows.append(f'{name:<26} {self.nominal[i]:12.6g} {self.estimate[i]:12.6g} {se}  {note}'.rstrip())
        return '\n'.join(rows)


class _Problem:
    """The residual function of a fit: theta (the free parameters; the others at their nominal values)."""

    def __init__(self, pset: ParameterSet, records, free):
        self.pset, self.records, self.free = pset, records, np.asarray(free, dtype=int)
        self.theta_full = pset.theta0()
        self.evaluations = 0
        self.horizon = None                  # s of each record the residuals cover (None: all)

    def full(self, theta):
        t = self.theta_full.copy()
        t[self.free] = theta
        return t

    def residual(self, theta):
        """Weighted residuals (N,), or None when the parameters give no valid arm or the replay fails."""
        self.evaluations += 1
        t = self.full(theta)
        try:
            model = load_model(self.pset.spec_of(t))
            scale, offset = self.pset.drive(t)
            delay = self.pset.delay(t)
            out = []
            for rec in self.records:
                k = rec.samples if self.horizon is None else min(rec.samples, int(self.horizon / rec.dt) + 1)
                replayed = replay_record(model, rec, scale, offset, k, delay)
                out.append(_channel_residuals(model, rec, replayed, replayed[0].shape[0]).ravel())
        except RecordError:
            raise
        except (ArmSpecError, IntegrationError, np.linalg.LinAlgError, ValueError):
            return None
        r = np.concatenate(out)
        return r if np.all(np.isfinite(r)) else None

    def jacobian(self, theta, r0, pool):
        cols = []
        for i in range(theta.size):
            t = theta.copy()
            t[i] += DIFF_STEP if self._room(i, t[i] + DIFF_STEP) else -DIFF_STEP
            cols.append(t)
        rs = list(pool.map(self.residual, cols))
        J = np.empty((r0.size, theta.size))
        for i, (t, r) in enumerate(zip(cols, rs)):
            if r is None:
                raise FitError(f'{self.pset.names[self.free[i]]}: the model fails next to the current estimate '
                               f'({self.pset.values(self.full(theta))[self.free[i]]:.6g})')
            J[:, i] = (r - r0) / (t[i] - theta[i])
        return J

    def _room(self, i, x):
        p = self.pset.params[self.free[i]]
        return p.clip(x) == x


def correlation_time(r, records):
    """Integrated autocorrelation time of the residuals (samples; 1 for white ones): 1 + 2 sum_k rho_k up to the
    first lag whose autocorrelation is <= 0, per record and joint, weighted by the channel's sum of squares. The
    residuals of N samples carry about N / tau independent ones (Sokal's estimate)."""
    taus, weights = [], []
    at = 0
    for rec in records:
        n = len(rec.channels)
        R = r[at:at + rec.samples * n].reshape(rec.samples, n)
        at += rec.samples * n
        for j in range(n):
            acf, end, ss = _autocorrelation(R[:, j])
            if acf is None:
                continue
            taus.append(1.0 + 2.0 * float(np.sum(acf[1:end])))
            weights.append(ss)
    return float(np.average(taus, weights=weights)) if taus else 1.0


def _statistics(J, cost, n_res, r=None, records=None):
    """(covariance in theta, singular values, right singular vectors) of a sensitivity J.

    Without r: s^2 (J^T J)^+, s^2 = cost / (n_res - p) (white residuals). With the residuals r of `records`: the
    Newey-West covariance (J^T J)^+ S (J^T J)^+, S = sum over lags l <= L of (1 - l / (L + 1)) (Gamma_l + Gamma_l^T)
    (Gamma_0 once), Gamma_l = sum_t g_t g_{t+l}^T of the per-sample scores g_t = sum over joints of J_t^T r_t, L the
    residuals' longest correlation (the first lag whose autocorrelation is <= 0, at most a tenth of a record):
    residuals coloured by process noise or quantization of a slow motion weigh as what they are."""
    p = J.shape[1]
    U, sv, Vt = np.linalg.svd(J, full_matrices=False)
    inv = np.where(sv > RANK_TOL * sv[0], 1.0 / np.where(sv > 0, sv, 1.0) ** 2, 0.0) if sv.size else sv
    Hinv = (Vt.T * inv) @ Vt
    if r is None or not p:
        return Hinv * (cost / max(n_res - p, 1)), sv, Vt
    S = np.zeros((p, p))
    at = 0
    for rec in records:
        n = len(rec.channels)
        k = rec.samples
        Jr = J[at:at + k * n].reshape(k, n, p)
        rr = r[at:at + k * n].reshape(k, n)
        at += k * n
        g = np.einsum('knp,kn->kp', Jr, rr)
        L = min(_correlation_lag(rr), k // 10)
        S += g.T @ g
        for lag in range(1, L + 1):
            G = g[:-lag].T @ g[lag:]
            S += (1.0 - lag / (L + 1.0)) * (G + G.T)
    return Hinv @ S @ Hinv, sv, Vt


def _autocorrelation(x):
    """(autocorrelation of x about its mean by lag, the first lag whose autocorrelation is <= 0 (or len(x)), sum
    of squares); (None, 0, 0) for a constant x."""
    x = x - x.mean()
    ss = float(x @ x)
    if ss <= 0.0:
        return None, 0, 0.0
    m = 1 << int(math.ceil(math.log2(2 * x.size)))
    f = np.fft.rfft(x, m)
    acf = np.fft.irfft(f * np.conj(f), m)[:x.size] / ss
    neg = np.flatnonzero(acf[1:] <= 0.0)
    return acf, (int(neg[0]) + 1 if neg.size else x.size), ss


def _correlation_lag(R):
    """The largest over the columns of R of the first lag whose autocorrelation is <= 0."""
    return max([_autocorrelation(R[:, j])[1] for j in range(R.shape[1])] + [0])


def _rank_deficient(pset, free, J):
    """{parameter index: why} of the free parameters whose sensitivity is zero or a combination of the others'
    (singular values of J below RANK_TOL of the largest): no data of this kind determines them."""
    out = {}
    colnorm = np.linalg.norm(J, axis=0)
    if not J.shape[1]:
        return out
    for i in range(len(free)):          # theta is in each parameter's typical size: sensitivities compare
        if colnorm[i] <= RANK_TOL * float(np.max(colnorm)):
            out[free[i]] = 'the readings do not change with it'
    if len(out) == len(free):
        return out
    _, sv, Vt = np.linalg.svd(J / np.where(colnorm > 0, colnorm, 1.0), full_matrices=False)
    for k in range(sv.size):
        if sv[k] < RANK_TOL * sv[0]:
            involved = [free[i] for i in np.argsort(-np.abs(Vt[k]))[:3] if abs(Vt[k, i]) > 0.3]
            for i in involved:
                partners = [pset.names[j] for j in involved if j != i]
                out.setdefault(i, 'the readings do not change with it' if not partners else
                               f'only a combination with {", ".join(partners)} changes the readings')
    return out


def _undetermined(pset, free, J, cost, n_res, r=None, records=None):
    """{parameter index: why} of the free parameters these signals do not determine: rank (`_rank_deficient`) or a
    standard error beyond NOT_DETERMINED in theta (with the residuals r: their Newey-West covariance)."""
    out = _rank_deficient(pset, free, J)
    cov, _, _ = _statistics(J, cost, n_res, r, records)
    for i, f in enumerate(free):
        if f in out:
            continue
        se = math.sqrt(max(cov[i, i], 0.0))
        if se > NOT_DETERMINED:
            p = pset.params[f]
            what = f'known only within a factor {math.exp(se):.3g}' if p.log else \
                f'standard error {se * p.typical:.3g} {p.unit}'.rstrip()
            out[f] = f'{what} from these signals'
    return out


def _levenberg_marquardt(prob, theta, r, J, pool, max_iter, say, history, t_start, first_it=1):
    """Minimise |r(theta)|^2 from theta (residuals r, sensitivity J there). Returns (theta, r, cost, iterations,
    converged, message)."""
    pset, free = prob.pset, list(prob.free)
    cost = float(r @ r)
    lam = 1e-3
    it = first_it - 1
    drop = math.inf
    for it in range(first_it, first_it + max_iter):
        if J is None:
            J = prob.jacobian(theta, r, pool)
        g = J.T @ r
        H = J.T @ J
        D = np.diag(np.maximum(np.diag(H), 1e-12 * max(float(np.max(np.diag(H))), 1e-300)))
        accepted = False
        while lam <= MAX_LAMBDA:
            try:
                step = np.linalg.solve(H + lam * D, -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            big = float(np.max(np.abs(step)))
            if big > MAX_STEP:
                step *= MAX_STEP / big
            cand = pset.clip(prob.full(theta + step))[free]
            rn = prob.residual(cand)
            cn = float(rn @ rn) if rn is not None else math.inf
            if cn < cost:
                moved = float(np.max(np.abs(cand - theta)))
                drop, drop_abs = (cost - cn) / cost, cost - cn
                theta, r, cost = cand, rn, cn
                lam = max(lam / 5, 1e-9)
                accepted = True
                break
            lam *= 8
        J = None
        say(f'iteration {it}: cost {cost / r.size:.6g}  ' +
            '  '.join(f'{pset.names[f]}={pset.params[f].value(x):.6g}' for f, x in zip(free, theta)) +
            f'  ({time.monotonic() - t_start:.1f} s)')
        history.append((it, cost / r.size, pset.values(prob.full(theta))))
        if not accepted:
            return theta, r, cost, it, True, 'converged: no step lowers the cost (a minimum)'
        if drop_abs < CHI2_TOL or drop < COST_RTOL or moved < STEP_TOL:
            return theta, r, cost, it, True, (f'converged: the last step lowered the sum of squared residuals by '
                                              f'{drop_abs:.2g} (relative {drop:.1e}) and moved theta by {moved:.1e}')
    return theta, r, cost, it, False, (f'did not converge within {it - first_it + 1} iterations (the last step still '
                                       f'lowered the cost by {drop:.1e}): the best estimate so far is reported')


def _checked(spec, records, fit):
    """(records as a list, ParameterSet): RecordError / FitError for records of another arm or a fit they cannot
    carry."""
    records = list(records)
    if not records:
        raise RecordError('no recording given')
    pset = fit if isinstance(fit, ParameterSet) else ParameterSet(spec, fit)
    for rec in records:
        _check_joints(spec, rec)
        if pset.fits_delay and rec.applied_at is None:
            raise FitError(f'loop.delay: {rec.source} is not a real-time loop\'s record (no instants at which its '
                           'commands acted: lock-step and sim-time loops have no unrecorded delay)')
    return records, pset


def identifiability(spec, records, fit, threads=None) -> dict:
    """What the signals of `records` would determine of the parameters `fit` of the arm `spec`, were it the truth:
    {name: (standard error, why not identifiable or '')} from the sensitivities and residuals at spec (no fit; the
    statistics `identify` reports at its estimate). For designing an experiment or choosing sensors: e.g. the same
    records with and without their strain gauges (ClosedLoopRecord.without_strain)."""
    records, pset = _checked(spec, records, fit)
    free = list(range(len(pset.params)))
    prob = _Problem(pset, records, free)
    theta = pset.theta0()
    r = prob.residual(theta)
    if r is None:
        raise FitError(f'the arm cannot replay the recording ({", ".join(rec.source for rec in records)})')
    with ThreadPoolExecutor(max_workers=threads or max(1, min(os.cpu_count() or 1, len(free))),
                            thread_name_prefix='identify') as pool:
        J = prob.jacobian(theta, r, pool)
    why = _undetermined(pset, free, J, float(r @ r), r.size, r, records)
    cov, _, _ = _statistics(J, float(r @ r), r.size, r, records)
    values = pset.values(theta)
    out = {}
    for i, p in enumerate(pset.params):
        se = math.sqrt(max(cov[i, i], 0.0))
        out[pset.names[i]] = (values[i] * se if p.log else p.typical * se, why.get(i, ''))
    return out


def _whole(prob, theta, what):
    """The residuals of theta over the whole records; FitError if the model cannot replay them."""
    r = prob.residual(theta)
    if r is None:
        raise FitError(f'{what} cannot replay the whole recording (the model fails or diverges on it): '
                       f'{", ".join(f"{prob.pset.names[f]}={prob.pset.params[f].value(x):.6g}" for f, x in zip(prob.free, theta))}')
    return r


def identify(spec, records, fit, *, max_iter=40, progress=None, threads=None, start=None) -> Identification:
    """Fit the parameters `fit` (names, parameters.ParameterSet) of the nominal arm `spec` to closed-loop records.

    progress(line) gets one line per iteration. start: initial values (name -> value) instead of the nominal ones.
    Raises FitError / RecordError for what cannot be fitted at all; a fit that stops without converging returns
    with converged False and the reason in `message`, its best estimate kept."""
    t_start = time.monotonic()
    records, pset = _checked(spec, records, fit)
    say = progress or (lambda line: None)
    theta_all = pset.theta0()
    if start:
        for name, v in start.items():
            if name not in pset.names:
                raise FitError(f'start: {name} is not fitted')
            p = pset.params[pset.names.index(name)]
            theta_all[pset.names.index(name)] = p.clip(p.theta(float(v)))
    free = list(range(len(pset.params)))
    why_not = {}
    threads = threads or max(1, min(os.cpu_count() or 1, len(free)))
    history = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix='identify') as pool:
        prob = _Problem(pset, records, free)
        if start:
            r0 = prob.residual(pset.theta0())
            cost_nominal = float(r0 @ r0) / r0.size if r0 is not None else math.inf
        prob.theta_full = theta_all.copy()
        r_nom = prob.residual(np.asarray(theta_all)[free])
        if r_nom is None:
            raise FitError(f'the starting arm cannot replay the recording ({", ".join(r.source for r in records)})')
        if not start:
            cost_nominal = float(r_nom @ r_nom) / r_nom.size
        # parameters these signals cannot determine at the start are fixed at their nominal values
        J = prob.jacobian(np.asarray(theta_all)[free], r_nom, pool)
        bad = _rank_deficient(pset, free, J)
        for _ in range(len(pset.params)):
            if not bad:
                break
            worst = max(bad)                     # drop one at a time: the rest may be fine without it
            why_not[pset.names[worst]] = bad[worst]
            say(f'{pset.names[worst]}: not identifiable ({bad[worst]}): kept at its nominal value')
            free.remove(worst)
            if not free:
                break
            keep = [i for i, f in enumerate(prob.free) if f in free]
            prob.free = np.asarray(free, dtype=int)
            if theta_all[worst] != pset.theta0()[worst]:       # (a start value): the others are fitted at nominal
                theta_all[worst] = prob.theta_full[worst] = pset.theta0()[worst]
                r_nom = _whole(prob, np.asarray(theta_all)[free], 'the start')
                J = prob.jacobian(np.asarray(theta_all)[free], r_nom, pool)
            else:
                J = J[:, keep]
            bad = _rank_deficient(pset, free, J)
        theta = np.asarray(theta_all)[free].astype(float)
        r = r_nom
        cost = float(r @ r)
        say(f'iteration 0: cost {cost / r.size:.6g} (mean squared residual in noise units)  ' +
            '  '.join(f'{pset.names[f]}={pset.params[f].value(x):.6g}' for f, x in zip(free, theta)))
        history.append((0, cost / r.size, pset.values(prob.full(theta))))
        converged, message, it = not free, 'no parameter left to fit' if not free else '', 0
        # continuation: fit the first HORIZON_START_S of each record, then twice as much, ... (a lightly damped
        # mode whose frequency is a few per cent off drifts out of phase over a long record: the cost over the
        # whole of it has minima wherever the phase wraps; over a short one it has the one)
        longest = max(rec.duration for rec in records)
        h = HORIZON_START_S
        while free and h < longest:
            prob.horizon = h
            say(f'fitting the first {h:g} s of each recording')
            rh = prob.residual(theta)
            if rh is None:
                break
            theta, _, _, it, _, _ = _levenberg_marquardt(prob, theta, rh, None, pool, max_iter, say, history,
                                                         t_start, it + 1)
            h *= 2.0
        prob.horizon = None
        if it:
            say('fitting the whole of each recording')
            r = _whole(prob, theta, 'the estimate fitted on the first part')
            J = None
            stage_start = it
        else:
            stage_start = 0
        sv, cov = np.zeros(0), np.zeros((0, 0))
        while free:
            theta, r, cost, it, converged, message = _levenberg_marquardt(
                prob, theta, r, J, pool, max_iter - (it - stage_start), say, history, t_start, it + 1)
            # statistics at the estimate; what they do not determine is fixed at its nominal value and the rest
            # fitted again from here (the estimate and the calibrated arm must be one consistent fit)
            J = prob.jacobian(theta, r, pool)
            late = _undetermined(pset, free, J, cost, r.size, r, records)
            if not late:
                cov, sv, _ = _statistics(J, cost, r.size, r, records)
                break
            for f, why in late.items():
                why_not[pset.names[f]] = why
                say(f'{pset.names[f]}: not identifiable ({why}): kept at its nominal value; fitting the others again')
            keep = [i for i, f in enumerate(free) if f not in late]
            prob.theta_full = prob.full(theta)
            for f in late:
                prob.theta_full[f] = pset.theta0()[f]
            free = [f for f in free if f not in late]
            prob.free = np.asarray(free, dtype=int)
            theta = theta[keep]
            if not free:
                break
            r = _whole(prob, theta, 'the estimate with the parameters not identifiable at their nominal values')
            J = None
            if it - stage_start >= max_iter:
                converged, message = False, message + '; no iteration left to fit again without the parameters ' \
                                                      'not identifiable'
                cov, sv, _ = _statistics(prob.jacobian(theta, r, pool), float(r @ r), r.size, r, records)
                break
        cost = float(r @ r)
        tau = correlation_time(r, records)
    theta_full = prob.full(theta)
    for name in why_not:                          # not identifiable: the nominal value, never the fit's number
        i = pset.names.index(name)
        theta_full[i] = pset.theta0()[i]
    values = pset.values(theta_full)
    std = np.full(len(pset.params), np.nan)
    corr = np.full((len(pset.params),) * 2, np.nan)
    for a, fa in enumerate(free):
        p = pset.params[fa]
        if pset.names[fa] in why_not:
            continue
        se_theta = math.sqrt(max(cov[a, a], 0.0))
        std[fa] = values[fa] * se_theta if p.log else p.typical * se_theta     # delta method for ln
        for b, fb in enumerate(free):
            denom = math.sqrt(max(cov[a, a] * cov[b, b], 1e-300))
            corr[fa, fb] = cov[a, b] / denom
    spec_hat = pset.spec_of(theta_full)
    scale, offset = pset.drive(theta_full)
    delay = pset.delay(theta_full)
    model = load_model(spec_hat)
    fits = [_channel_nrmse(model, rec, replay_record(model, rec, scale, offset, delay=delay)) for rec in records]
    misfit = ''
    if cost / r.size > MISFIT:
        unfitted = [f'{js.name}.{k}' for js in spec.joints for k in ('viscous', 'coulomb')
                    if f'{js.name}.{k}' not in pset.names]
        misfit = (f'the residuals are {math.sqrt(cost / r.size):.3g} times the readings\' noise (RMS): the calibrated '
                  'model does not explain the recording; a parameter not fitted differs from the arm file'
                  + (f' (joint friction is not fitted: {", ".join(unfitted)})' if unfitted else '')
                  + ', or the arm has what the model lacks')
        say('warning: ' + misfit)
    return Identification(
        names=pset.names, units=[p.unit for p in pset.params], nominal=np.array([p.nominal for p in pset.params]),
        estimate=values, std_error=std, identifiable=np.array([n not in why_not for n in pset.names]),
        why_not=why_not, correlation=corr, singular_values=sv, cost=cost / r.size, cost_nominal=cost_nominal,
        iterations=it, converged=converged, message=message, nrmse=fits, history=history, correlation_time=tau,
        seconds=time.monotonic() - t_start, evaluations=prob.evaluations, spec=spec_hat,
        arm_dict=pset.arm_dict(theta_full), scale=scale, offset=offset, misfit=misfit, delay=delay)
