"""The state estimator without ROS: the filter (filter.py) on streams of sensor readings, with what real streams
need — validation, missing sensors, resets, diagnostics. The node (nodes/estimator_node.py) decodes messages and
calls this; tests and the evaluation bench drive it in-process.

    rt = EstimatorRuntime(model, values)          # values: config.TABLE's (validated)
    rt.joints(t, q, qd, effort); rt.strain(t, y); rt.accel(t, f); rt.command(u)     # (accepted, reason)
    est = rt.tick(t)                              # the estimate at t (None: none yet / no encoders for too long)

Ticks. Every reading is kept (in stamp order, per sensor) until a tick fuses it at its own stamp: a tick at t takes
the readings stamped up to t — encoders, strain gauges, accelerometer; at equal stamps in that order — and, from the
previous estimate's instant to each reading's, predicts in k = round(gap / period) steps of gap / k (k >= 1; readings
stamped with jitter, as a bridge's read times are, are predicted over the time that really passed) with the torque of
that interval (`input`: the latest command, or the measured effort of the encoder reading that ends the interval —
the drives' torque over its period), then predicts on to t if no reading is stamped there. A reading stamped at or
before an instant already estimated (it came too late, or again) is dropped and counted as late; the first encoder
reading initializes the filter. Why every reading at its stamp (issue 28): a process that is descheduled for tens of
ms and then estimates from the newest reading only (depth-1 queues) predicts the whole gap with one torque and
fuses readings at instants they were not taken — in real time at load 3 the strain innovations reached 23.7 standard
deviations and the filter reset 49 times.

Bad input never corrupts the estimate:
* readings are checked before they are kept: right size, finite, in range (joint angles within the joint limits
  +- JOINT_MARGIN, |strain| <= sensors.strain.max, |acceleration| < sensors.accelerometer.range: a saturated
  accelerometer is wrong); a bad one is rejected, counted and named in diagnostics (`last_reject`);
* a configured sensor without readings for its timeout (of sample time) is flagged missing (WARN): the filter
  predicts without it, and says when it is back; without encoder readings the estimate is predicted from the
  commands for at most `max_prediction`, then none is given (ERROR) until they return;
* a reading farther than `innovation_bound` standard deviations from its prediction (the filter disagrees with the
  sensors: a collision, a slipped encoder, a diverged filter), or a filter whose state is no longer finite, resets
  the filter to the encoder-consistent state (joint angles from the encoders, static deflection, rates from the
  drives or zero) with an ERROR diagnostic for `error_hold` seconds;
* time going backwards (a plant reset in simulation) re-initializes the filter.
The estimate is always finite.

The accelerometer's first-order low-pass is inverted from consecutive readings (AccelInverse) before its reading is
fused, so the filter's measurement model (the specific force at the stamp) holds; a lagged reading fused as
instantaneous made the loop with the modal LQR chatter and reset (test_estimation).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from flexarm_sim.common.commands import check_command
from flexarm_sim.common.params import DERIVED, ConfigError
from flexarm_sim.model.sensing import SensorSet, SensorSpecError, parse_gauge

from ..controller.designer import WORKER_READY_WAIT_S, DesignWorker, GainDesigner
from . import config
from .filter import FilterDiverged, FilterNoise, ModalKalmanFilter

JOINT_MARGIN = 0.5           # rad beyond the joint limits an encoder may read before its reading is out of range
MAX_PREDICT_PERIODS = 10000  # periods predicted in one tick at most (a longer gap re-initializes)
MAX_QUEUED = 256             # readings kept per sensor until a tick fuses them
ACCEL_UNPAIRED_WARN = 50     # accelerometer readings none of which could be inverted: a rate mismatch, warned once


class AccelInverse:
    """The tip accelerometer's specific force at a sample instant from two consecutive readings, its first-order
    low-pass inverted (flexarm_sim.sensors: y_k = y_{k-1} + alpha (a_k + n_k - y_{k-1})):

        a_k + n_k = (y_k - (1 - alpha) y_{k-1}) / alpha

    exact, and its noise n_k is the white per-sample noise (std config.accel_sample_std_of): the filter's measurement
    model h = a(z, zd, u) then holds at the reading's stamp. Fusing the filtered reading as if it were a_k left a lag
    of (1 - alpha) / alpha samples (0.8 ms at 100 Hz, 500 Hz) unmodelled: when the torque changes from one period to
    the next, the tip acceleration jumps with it and the lagged reading missed the prediction by tens of its
    0.024 m/s^2 standard deviation — with the modal LQR on Bryson weights (issue 23) the filter reset on most
    periods of a 0.3 rad move in 1 s (338 resets, both torques saturated) while the same run without the low-pass
    had none. A reading whose predecessor is unknown (the first, one after a rejected, dropped or late reading: a
    gap other than one sample period) cannot be inverted; it is not fused and starts the chain again (counted:
    `unpaired`; readings that keep arriving at another period than sensors.accelerometer.rate are never fused, and
    the runtime says so)."""

    def __init__(self, alpha: float, period: float):
        self.alpha = float(alpha)
        self.period = float(period)
        self._prev = None                    # (stamp, reading) of the latest reading seen
        self.paired = 0
        self.unpaired = 0
        self.last_gap = math.nan

    def __call__(self, t, y):
        prev, self._prev = self._prev, (t, y)
        if self.alpha >= 1.0:
            self.paired += 1
            return y
        if prev is not None:
            self.last_gap = t - prev[0]
        if prev is None or abs(t - prev[0] - self.period) > 0.25 * self.period:
            self.unpaired += 1
            return None
        self.paired += 1
        return (y - (1.0 - self.alpha) * prev[1]) / self.alpha


@dataclass
class Estimate:
    t: float
    z: np.ndarray
    zd: np.ndarray
    tau: np.ndarray              # torque the prediction applied over the last period
    std: np.ndarray              # standard deviation of every state (z, zd, strain biases)


class Track:
    """Bookkeeping of one sensor stream."""

    def __init__(self, name, timeout):
        self.name = name
        self.timeout = timeout
        self.queue = []              # (t, data) readings not yet fused, in stamp order
        self.last_t = None           # stamp of the newest accepted reading
        self.accepted = self.rejected = self.late = 0
        self.last_reject = ''
        self.missing = False
        self.max_sigma = 0.0         # largest normalized innovation since the last diagnostics
        self.sum_sigma2 = 0.0
        self.n_sigma = 0

    def reject(self, why):
        self.rejected += 1
        self.last_reject = why
        return False, why

    def keep(self, t, data):
        self.accepted += 1
        q = self.queue
        if q and t < q[-1][0]:                    # reordered in transport: into its place
            q.insert(bisect.bisect_right([r[0] for r in q], t), (t, data))
        else:
            q.append((t, data))
        if len(q) > MAX_QUEUED:                   # nobody ticks: the oldest are of no use any more
            self.late += len(q) - MAX_QUEUED
            del q[:len(q) - MAX_QUEUED]
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        return True, ''

    def due(self, t, t_last):
        """The queued readings stamped up to t, in order (those at or before t_last, an instant already estimated,
        are dropped and counted as late)."""
        q = self.queue
        k = 0
        while k < len(q) and q[k][0] <= t:
            k += 1
        out, self.queue = q[:k], q[k:]
        if t_last is not None:
            fresh = [r for r in out if r[0] > t_last]
            self.late += len(out) - len(fresh)
            out = fresh
        return out

    def record_sigma(self, s):
        self.max_sigma = max(self.max_sigma, s)
        self.sum_sigma2 += s * s
        self.n_sigma += 1


class EstimatorRuntime:
    """design_ahead (the real-time node): the filter's cells are designed ahead by a GainDesigner in a process of its
    own (ModalKalmanFilter.cell), never inside a tick; start() / stop() run and end it."""

    def __init__(self, model, values: dict, log=None, design_ahead=False):
        self.model = model
        self.values = dict(values)
        self.log = log or (lambda level, msg: None)
        v = values
        gauges = []
        names = v['sensors.strain.gauges']
        for i, text in enumerate([] if names is DERIVED else names):
            try:
                gauges.append(parse_gauge(model, text, v['sensors.strain.distance']))
            except SensorSpecError as e:
                raise ConfigError(f'sensors.strain.gauges[{i}]', str(e)) from None
        self.sensor_set = SensorSet(True, tuple(gauges), bool(v['sensors.accelerometer.enabled']))
        self.rate = float(v['rate'])
        self.dt = 1.0 / self.rate
        self.noise = FilterNoise(
            encoder=config.encoder_std(v), velocity=v['sensors.encoders.velocity_noise'],
            strain=v['sensors.strain.noise'], accel=config.accel_sample_std_of(v), torque=v['process_noise.torque'],
            modal_force=v['process_noise.modal_force'], bias=v['sensors.strain.bias_std'],
            bias_drift=v['sensors.strain.bias_drift'], joint_rate0=v['initial_std.joint_rate'],
            modal0=v['initial_std.modal'], modal_rate0=v['initial_std.modal_rate'])
        self.filter = ModalKalmanFilter(model, self.sensor_set, self.dt, self.noise, v['schedule_step'])
        self.design_worker = self.designer = None
        if design_ahead:
            self.design_worker = DesignWorker(model.spec)
            self.designer = GainDesigner(self.filter, self.log, self.design_worker, name='state_estimator')
            self.filter.design_on_demand = False
            self.filter.prefetch([model.spec.nominal_configuration])      # the first cells, before any reading
        self.tracks = {'encoders': Track('encoders', v['sensors.encoders.timeout'])}
        if gauges:
            self.tracks['strain'] = Track('strain gauges', v['sensors.strain.timeout'])
        if self.sensor_set.accelerometer:
            self.tracks['accelerometer'] = Track('tip accelerometer', v['sensors.accelerometer.timeout'])
        self.accel_inverse = AccelInverse(config.accel_alpha(v), 1.0 / v['sensors.accelerometer.rate'])
        n = model.n_joints
        self.n = n
        lims = np.array([js.position_limits for js in model.spec.joints], dtype=float)
        self.q_lo, self.q_hi = lims[:, 0] - JOINT_MARGIN, lims[:, 1] + JOINT_MARGIN
        self.effort_limit = np.array([js.effort_limit if math.isfinite(js.effort_limit) else np.inf
                                      for js in model.spec.joints], dtype=float)
        self.use_measured_effort = v['input'] == 'measured_effort'
        self.bound = float(v['innovation_bound'])
        self.u = np.zeros(n)                 # latest valid command (clipped to the effort limits)
        self.commands_accepted = self.commands_rejected = 0
        self.last_command_reject = ''
        self.t_last = None                   # time of the last tick
        self.last_joints = None              # (t, q, qd) of the latest accepted encoder reading
        self.ticks = 0
        self.resets = 0
        self.last_reset = ''
        self.error_until = -math.inf
        self.no_estimate = False
        self.initializations = 0
        self.last_estimate = None
        self._last_effort = None
        self._t_first = None

    # ------------------------------------------------------------------ lifecycle
    def start(self):
        """Start the cell designer (design_ahead)."""
        if self.designer is not None:
            if not self.design_worker.wait_ready(WORKER_READY_WAIT_S):      # before the readings (worker.py)
                self.log('warn', f'the cell design process was not ready after {WORKER_READY_WAIT_S:g} s: '
                                 'estimating beside its start-up')
            self.designer.start()

    def stop(self):
        """End the cell designer at once (a design in progress is abandoned)."""
        if self.designer is not None:
            self.designer.stop(join=False)
            self.design_worker.close()
            self.designer.join()

    # ------------------------------------------------------------------ inputs
    def command(self, u):
        """A torque command (N m per joint): (accepted, reason); clipped to the effort limits like the plant."""
        a, why, _clamped = check_command(u, -self.effort_limit, self.effort_limit)
        if a is None:
            self.commands_rejected += 1
            self.last_command_reject = f'command: {why}'
            return False, self.last_command_reject
        self.u = a
        self.commands_accepted += 1
        return True, ''

    def joints(self, t, q, qd=None, effort=None):
        """An encoder (+ drive) reading sampled at t (s)."""
        tr = self.tracks['encoders']
        q = _vector(q, self.n)
        if q is None:
            return tr.reject(f'encoders: expected {self.n} finite angles')
        if not math.isfinite(t):
            return tr.reject('encoders: bad stamp')
        out = np.nonzero((q < self.q_lo) | (q > self.q_hi))[0]
        if out.size:
            j = int(out[0])
            return tr.reject(f'encoders: {self.model.spec.joint_names[j]} = {q[j]:g} rad beyond its limits '
                             f'[{self.q_lo[j] + JOINT_MARGIN:g}, {self.q_hi[j] - JOINT_MARGIN:g}] + {JOINT_MARGIN} rad')
        if qd is not None:
            qd = _vector(qd, self.n)
            if qd is None:
                return tr.reject('encoders: non-finite or missized joint rates')
        if effort is not None:
            effort = _vector(effort, self.n)
            if effort is None:
                return tr.reject('encoders: non-finite or missized efforts')
        return tr.keep(float(t), (q, qd, effort))

    def strain(self, t, y):
        """Strain gauge readings (one per configured gauge, in their order) sampled at t."""
        tr = self.tracks.get('strain')
        if tr is None:
            return False, 'no strain gauges configured'
        y = _vector(y, len(self.sensor_set.gauges))
        if y is None or not math.isfinite(t):
            return tr.reject(f'strain: expected {len(self.sensor_set.gauges)} finite readings')
        lim = self.values['sensors.strain.max']
        big = np.nonzero(np.abs(y) > lim)[0]
        if big.size:
            return tr.reject(f'strain: {self.sensor_set.gauges[int(big[0])].name} reads {y[big[0]]:g}, beyond '
                             f'+-{lim:g}')
        return tr.keep(float(t), y)

    def accel(self, t, f):
        """Tip accelerometer reading (3,) m/s^2 sampled at t."""
        tr = self.tracks.get('accelerometer')
        if tr is None:
            return False, 'no accelerometer configured'
        f = _vector(f, 3)
        if f is None or not math.isfinite(t):
            return tr.reject('accelerometer: expected 3 finite values')
        r = self.values['sensors.accelerometer.range']
        if np.any(np.abs(f) >= r):
            return tr.reject(f'accelerometer: {np.array2string(f, precision=4)} m/s^2 at or beyond its range +-{r:g} '
                             '(saturated)')
        return tr.keep(float(t), f)

    # ------------------------------------------------------------------ the tick
    def tick(self, t) -> Estimate | None:
        """The estimate at time t (module docstring); None before the first encoder reading or when the encoders
        have been missing for longer than max_prediction."""
        t = float(t)
        kf = self.filter
        if self.t_last is not None and t < self.t_last - 0.5 * self.dt:
            self.log('info', f'time went back from {self.t_last:.6f} to {t:.6f} s (a reset): re-initializing')
            kf.initialized = False
            self.t_last = None
        enc = self.tracks['encoders'].due(t, self.t_last)
        if enc:
            self.last_joints = (enc[-1][0], enc[-1][1][0], enc[-1][1][1])
        if not kf.initialized:
            if not enc:
                return None
            for key in self.tracks:                  # what came before the first encoder reading is of no use
                self.tracks[key].due(enc[-1][0], None)
            self._initialize(enc[-1][1][0], enc[-1][1][1])
            self.initializations += 1
            self.t_last = t
            return self._estimate(t, self.u)
        # every reading due, fused at its own stamp in stamp order (encoders, strain, accelerometer at equal stamps);
        # the prediction between them applies the torque of the interval: the measured effort of the encoder
        # reading that ends it (the drives' torque over its period), or the latest command
        events = [(r[0], 0, 'encoders', r[1]) for r in enc]
        for order, key in ((1, 'strain'), (2, 'accelerometer')):
            if key in self.tracks:
                events += [(r[0], order, key, r[1]) for r in self.tracks[key].due(t, self.t_last)]
        events.sort(key=lambda e: (e[0], e[1]))
        efforts = [(r[0], r[1][2]) for r in enc if r[1][2] is not None] if self.use_measured_effort else []
        u = self.u
        try:
            for ts, _, key, data in events:
                if key == 'accelerometer':
                    data = self.accel_inverse(ts, data)
                    if data is None:             # the reading before it is unknown: it only starts the chain
                        self._check_accel_rate()
                        continue
                u = self._torque(ts, efforts)
                self._predict_to(ts, u)
                self._fuse(key, data, u)
            if t > self.t_last:
                u = self._torque(t, efforts)
                self._predict_to(t, u)
            self.ticks += 1
        except _Veto as e:
            self._reset(t, str(e))
        except FilterDiverged as e:
            self._reset(t, f'filter diverged: {e}')
        if self._without_estimate(t):
            return None
        return self._estimate(t, u)

    def predicted(self, t) -> Estimate | None:
        """The estimate at t predicted from the last fused instant with the latest command, *not kept*: the filter
        stays at that instant, so readings stamped before t that arrive later are still fused at their stamps (the
        encoders are flagged missing as by tick). For a caller that must publish while no reading comes — the
        node's timer: silent encoders, or a process that received them late. Kept, such a prediction dropped every
        reading stamped before t as late: beside two CPU hogs a 0.33 s stall of the estimator's process, predicted
        from the last command, put the estimate 0.1-0.23 rad off the arm and the filter reset (issue 28).
        None as tick (no estimate yet, or the encoders missing beyond max_prediction), or when the prediction
        fails."""
        t = float(t)
        kf = self.filter
        if self._without_estimate(t) or not kf.initialized or self.t_last is None:
            return None
        if t <= self.t_last:
            return self.last_estimate
        t_last = self.t_last
        try:
            with kf.kept():
                self._predict_to(t, self.u)
                return Estimate(t, kf.z.copy(), kf.zd.copy(), np.array(self.u, dtype=float), kf.std())
        except FilterDiverged:
            return None                   # no prediction (the filter itself is kept; its next tick decides)
        finally:
            self.t_last = t_last

    def _without_estimate(self, t) -> bool:
        """Flag the missing sensors at t; is there no estimate to give (the encoders missing beyond
        max_prediction)?"""
        self._flag_missing(t)
        tr = self.tracks['encoders']
        gap = t - tr.last_t if tr.last_t is not None else math.inf
        self.no_estimate = tr.missing and gap > self.values['max_prediction']
        return self.no_estimate

    def _check_accel_rate(self):
        inv = self.accel_inverse
        if inv.paired == 0 and inv.unpaired == ACCEL_UNPAIRED_WARN:
            self.log('warn', f'tip accelerometer: {inv.unpaired} readings {inv.last_gap * 1e3:.4g} ms apart, none one '
                             f'sample period ({inv.period * 1e3:.4g} ms, sensors.accelerometer.rate) after the one '
                             'before: its low-pass cannot be inverted, none fused (set sensors.accelerometer.rate to '
                             'the rate it samples at)')

    def _torque(self, t, efforts):
        """The torque over the interval that ends at t: the effort of the first encoder reading at or after t (it
        measured that interval), else the last one known, else the latest command."""
        for ts, eff in efforts:
            if ts >= t:
                self._last_effort = eff
                return eff
        return self._last_effort if (self.use_measured_effort and self._last_effort is not None) else self.u

    def _torque_change(self, u):
        """The uncertainty (per joint) of the torque acting at an accelerometer reading's instant, for its
        covariance (filter.update_accel). With the drives' measured torque (input measured_effort) u is the mean
        over the period, while the reading responds at once to the torque acting at its instant: a command that
        reached the plant within the period leaves them apart by up to the torque's change — taken as the larger of
        |u - u_prev| (u_prev: the previous reading's torque) and |u_cmd - u| (u_cmd: the latest command, which the
        plant may already apply). In process (the modal LQR on the estimate, commands reaching the plant 0.5-0.9 ms
        into a 2 ms period, De Luca on encoders + strain + accelerometer): without it 773 filter resets in 3.5 s
        (accelerometer innovations to 347 standard deviations), with it none (test_estimation). With the commanded
        torque (input command: lock-step, what the plant applies over the period) there is no uncertainty."""
        prev, self._accel_u = self._accel_u, np.array(u, dtype=float)
        if not self.use_measured_effort or prev is None:
            return None
        return np.maximum(np.abs(self._accel_u - prev), np.abs(self.u - self._accel_u))

    _accel_u = None

    def _predict_to(self, t, u):
        """Predict from t_last to t in k = round(gap / period) equal steps (k >= 1 if t > t_last)."""
        gap = t - self.t_last
        if gap <= 0:
            return
        periods = max(1, int(round(gap / self.dt)))
        if periods > MAX_PREDICT_PERIODS:
            raise FilterDiverged(f'{periods} periods since the last tick')
        for _ in range(periods):
            self.filter.predict(u, gap / periods)
        self.t_last = t

    def _fuse(self, key, data, u):
        kf = self.filter
        tr = self.tracks[key]

        def check(sigma):
            tr.record_sigma(sigma)
            if sigma > self.bound:
                raise _Veto(f'{tr.name}: innovation {sigma:.3g} standard deviations (bound {self.bound:g})')
            return True
        if key == 'encoders':
            q, qd, _ = data
            kf.update_encoders(q, qd, check=check)
        elif key == 'strain':
            kf.update_strain(data, check=check)
        else:
            kf.update_accel(data, u, check=check, u_std=self._torque_change(u))

    def _initialize(self, q, qd, at_rest=True):
        self.filter.initialize(q, qd if self.noise.velocity > 0 else None, at_rest)

    def _reset(self, t, why):
        """Back to the encoder-consistent state (ERROR diagnostic for error_hold)."""
        self.resets += 1
        self.last_reset = why
        self.error_until = t + self.values['error_hold']
        lj = self.last_joints
        if lj is None:
            self.filter.initialized = False
            self.t_last = None
        else:
            self._initialize(lj[1], lj[2], at_rest=False)
            self.t_last = t
        self.log('error', f'estimate reset to the encoder-consistent state: {why}')

    def _flag_missing(self, t):
        if self._t_first is None:
            self._t_first = t
        for tr in self.tracks.values():
            ref = tr.last_t if tr.last_t is not None else self._t_first     # never seen: since the first tick
            gone = t - ref > tr.timeout
            if gone and not tr.missing:
                tr.missing = True
                self.log('warn', f'{tr.name} missing: no reading for {t - ref:.3f} s (timeout {tr.timeout:g} s); '
                                 'predicting without it')
            elif not gone and tr.missing:
                tr.missing = False
                self.log('info', f'{tr.name} back')

    def _estimate(self, t, u):
        kf = self.filter
        e = Estimate(t, kf.z.copy(), kf.zd.copy(), np.array(u, dtype=float), kf.std())
        self.last_estimate = e
        return e

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self, t=None):
        """(level, message, values) of /diagnostics; resets the per-period innovation maxima."""
        kf = self.filter
        v = {'rate_hz': self.rate, 'ticks': self.ticks, 'initialized': kf.initialized,
             'input': self.values['input'], 'commands_rejected': self.commands_rejected,
             'resets': self.resets, 'last_reset': self.last_reset or 'none', 'innovation_bound': self.bound,
             'linearizations': kf.n_designs + kf.n_installed}
        if self.designer is not None:
            v.update(cells_designed_ahead=self.designer.designed, cell_design_failures=self.designer.failures,
                     cells_from_disk_cache=self.design_worker.cache_hits, cells_wanted=len(kf.wanted))
        if kf.initialized:
            std = kf.std()
            N = kf.N
            v['std_joint_angle_max_rad'] = float(std[kf.qi].max())
            if kf.mi.size:
                v['std_modal_max'] = float(std[kf.mi].max())
                v['std_modal_rate_max'] = float(std[N + kf.mi].max())
            if kf.ng:
                v['strain_bias'] = ' '.join(f'{b:.3g}' for b in kf.bias)
        if 'accelerometer' in self.tracks:
            v['accelerometer_unpaired'] = self.accel_inverse.unpaired
        missing, rejected = [], []
        for key, tr in self.tracks.items():
            v[f'{key}_accepted'] = tr.accepted
            v[f'{key}_rejected'] = tr.rejected
            v[f'{key}_late'] = tr.late
            v[f'{key}_missing'] = tr.missing
            v[f'{key}_innovation_max'] = tr.max_sigma
            v[f'{key}_innovation_rms'] = math.sqrt(tr.sum_sigma2 / tr.n_sigma) if tr.n_sigma else 0.0
            if tr.last_reject:
                v[f'{key}_last_reject'] = tr.last_reject
                rejected.append(tr.name)
            if tr.missing:
                missing.append(tr.name)
            tr.max_sigma, tr.sum_sigma2, tr.n_sigma = 0.0, 0.0, 0
        now = self.t_last if t is None else t
        if self.no_estimate:
            return 'error', 'encoders missing: no estimate', v
        if now is not None and now < self.error_until:
            return 'error', f'filter reset: {self.last_reset}', v
        if not kf.initialized:
            return 'warn', 'waiting for the first encoder reading', v
        if missing:
            return 'warn', f'missing: {", ".join(missing)} (predicting without)', v
        return 'ok', 'estimating', v


class _Veto(Exception):
    """An innovation beyond the bound (the update is not applied)."""


def _vector(x, n):
    try:
        a = np.asarray(x, dtype=float).ravel()
    except (TypeError, ValueError):
        return None
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        return None
    return a
