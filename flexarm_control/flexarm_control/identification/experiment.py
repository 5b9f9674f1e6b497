"""The identification experiment: a multisine joint reference about an operating point, tracked by pd_servo.

Design (`design_excitation`): per joint a sum of sines at `n_freq` log-spaced frequencies spanning the arm's first
whole-arm modes (from a fifth of the lowest elastic frequency, joints held or free, to 1.5 times the third free one,
at most a tenth of the control rate), each with amplitude proportional to 1/f (a flat velocity spectrum: every
decade gets the same energy), random phases (seeded; a different draw per joint, so the joints' inputs are
uncorrelated), faded in and out over `ramp` seconds by a raised cosine: the arm starts and ends at rest at the
operating point. The holding law is pd_servo (its gains known: the identification replays the same law around the
model, output_error.py).

Safety (`check_excitation`): the experiment is simulated on the nominal arm under the same law and refused
(ExcitationError naming the limit) if it would leave a joint's position limits, reach `LIMIT_USE` of its velocity or
effort limit (a saturated torque is no longer the law the identification replays), or bend a link beyond
`VALIDITY_USE` of the model's validity (margin for an arm that is not the nominal one). Without an amplitude the
design scales it to the largest that keeps all of these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flexarm_sim.model import simulate, validity_limit, whole_arm_modes

from ..laws.pd import PDServo
from ..laws.reference import Reference
from .output_error import ClosedLoopRecord

__all__ = ['Excitation', 'ExcitationError', 'design_excitation', 'check_excitation', 'run_offline',
           'LIMIT_USE', 'VALIDITY_USE']

LIMIT_USE = 0.6               # fraction of a joint's velocity and effort limits the experiment may reach
VALIDITY_USE = 0.5            # fraction of the model's validity limit the links may bend to
DEFAULT_N_FREQ = 24
DEFAULT_RAMP_S = 1.0
LATENCY_STEPS = 8             # run_offline with a latency: the arm integrated at dt / LATENCY_STEPS


class ExcitationError(ValueError):
    """An experiment that would leave the arm's limits or the model's validity; the message says which."""


@dataclass(frozen=True)
class Excitation(Reference):
    """q_d(t) = q0 + w(t) sum_i a_ji sin(2 pi f_i t + phi_ji), w the raised-cosine fade (module docstring)."""

    q0: tuple
    amplitude: tuple          # rad per joint: the peak of the multisine before the fade
    frequencies: tuple        # Hz
    duration: float
    ramp: float = DEFAULT_RAMP_S
    seed: int = 0
    slope: float = 1.5        # amplitude of the sine at f proportional to f^-slope

    def __post_init__(self):
        n = len(self.q0)
        if len(self.amplitude) != n:
            raise ExcitationError(f'amplitude: one per joint ({n}), got {len(self.amplitude)}')
        if not all(math.isfinite(a) and a >= 0 for a in self.amplitude):
            raise ExcitationError(f'amplitude: finite and >= 0 rad per joint, got {self.amplitude}')
        if not (math.isfinite(self.duration) and self.duration > 2 * self.ramp >= 0):
            raise ExcitationError(f'duration {self.duration} s must exceed twice the fade ({self.ramp} s)')
        if not self.frequencies or not all(math.isfinite(f) and f > 0 for f in self.frequencies):
            raise ExcitationError(f'frequencies: positive, got {self.frequencies}')

    @property
    def n_joints(self):
        return len(self.q0)

    @property
    def end_time(self):
        return self.duration

    def _shape(self):
        """(f (m,), weights (n, m), phases (n, m)): per joint, unit-peak before the amplitude."""
        f = np.asarray(self.frequencies, dtype=float)
        rng = np.random.default_rng(self.seed)
        phases = rng.uniform(0.0, 2 * np.pi, (self.n_joints, f.size))
        w = f ** -self.slope
        t = np.linspace(0.0, self.duration, max(2000, int(self.duration * 40 * f.max())))
        peaks = np.array([np.max(np.abs(np.sin(2 * np.pi * np.outer(t, f) + phases[j]) @ w))
                          for j in range(self.n_joints)])
        return f, w[None, :] / peaks[:, None], phases

    def sample(self, t):
        if not hasattr(self, '_cache'):
            object.__setattr__(self, '_cache', self._shape())
        f, W, ph = self._cache
        a = np.asarray(self.amplitude, dtype=float)
        t = float(t)
        if t <= 0.0 or t >= self.duration:
            return np.asarray(self.q0, dtype=float), np.zeros(self.n_joints), np.zeros(self.n_joints)
        om = 2 * np.pi * f
        arg = om[None, :] * t + ph
        s = (W * np.sin(arg)).sum(axis=1)
        sd = (W * om * np.cos(arg)).sum(axis=1)
        sdd = -(W * om * om * np.sin(arg)).sum(axis=1)
        r = self.ramp
        if r > 0 and t < r:
            x, xd, xdd = self._fade(t / r, r)
        elif r > 0 and t > self.duration - r:
            x, xd, xdd = self._fade((self.duration - t) / r, r)
            xd = -xd
        else:
            x, xd, xdd = 1.0, 0.0, 0.0
        q = np.asarray(self.q0, dtype=float) + a * x * s
        qd = a * (xd * s + x * sd)
        qdd = a * (xdd * s + 2 * xd * sd + x * sdd)
        return q, qd, qdd

    @staticmethod
    def _fade(u, r):
        """Raised cosine 0 -> 1 over u in [0, 1] (u = time / r) and its time derivatives."""
        return 0.5 - 0.5 * math.cos(math.pi * u), 0.5 * math.pi / r * math.sin(math.pi * u), \
            0.5 * (math.pi / r) ** 2 * math.cos(math.pi * u)

    def trajectory(self, rate=100.0):
        """(times, positions, velocities, accelerations) sampled at `rate` Hz: the points of a JointTrajectory."""
        times = np.arange(int(math.floor(self.duration * rate)) + 1) / rate
        if times[-1] < self.duration:
            times = np.append(times, self.duration)
        P, V, A = (np.array(x) for x in zip(*(self.sample(t) for t in times)))
        return times, P, V, A

    def describe(self) -> dict:
        return {'q0': list(self.q0), 'amplitude': list(self.amplitude), 'frequencies': list(self.frequencies),
                'duration': self.duration, 'ramp': self.ramp, 'seed': self.seed, 'slope': self.slope}


def excitation_band(model, q0, control_rate):
    """(f_lo, f_hi) Hz: the band that spans the arm's first whole-arm modes (module docstring)."""
    free = whole_arm_modes(model, q0, free_joints=True).elastic_frequencies_hz
    held = whole_arm_modes(model, q0, free_joints=False).elastic_frequencies_hz
    if free.size == 0:
        raise ExcitationError(f'arm {model.spec.name} has no elastic mode: nothing to excite')
    lo = 0.2 * min(float(free[0]), float(held[0]) if held.size else float(free[0]))
    hi = 1.5 * float(free[min(2, free.size - 1)])
    return lo, min(hi, control_rate / 10.0)


def holding_gains(model, dt, kp=None, kv=None, input_delay=None):
    """pd_servo's gains on this arm at this control period and input delay (s; the node's: none in lock-step, one
    period in real time), as the node computes them: Naganathan's rule where kp / kv are not given, k_v capped by
    the sampling and the delay (a capped rule joint's k_p lowered with it)."""
    law = PDServo(model, kp=kp, kv=kv, dt=dt, input_delay=input_delay)
    return law.kp.copy(), law.kv.copy()


def _closed_loop(model, law_model, exc, kp, kv, dt, counts_per_rev=0, velocity_resolution=0.0, effort_noise=0.0,
                 seed=0, law_reads='readings', latency=None):
    """Simulate the experiment: `model` the arm, pd_servo designed on `law_model` acting on the readings (quantized
    angles, the drives' velocity) or, law_reads='state', on the exact joint state (a simulated plant's FlexState).
    latency (K,) s: a real-time loop's timing, the command of reading k written latency[k] after it (rounded to
    dt / LATENCY_STEPS; the arm integrated at that step, a newer command written first superseding it, zero torque
    before the first); None: each command acts over its own period. Returns (simulation result at the readings,
    readings q, qd, commanded torque, the law's q, qd, the instants the commands were written (s; None without a
    latency))."""
    fine = LATENCY_STEPS
    law = PDServo(law_model, kp=kp, kv=kv, dt=dt)
    law.set_reference(exc)
    q_step = 2 * math.pi / counts_per_rev if counts_per_rev else 0.0
    qi = np.asarray(model.q_index)
    K = int(round(exc.duration / dt)) + 1
    Q, QD, U = np.zeros((K, model.n_joints)), np.zeros((K, model.n_joints)), np.zeros((K, model.n_joints))
    LQ, LQD = np.zeros((K, model.n_joints)), np.zeros((K, model.n_joints))
    rng = np.random.default_rng(seed)
    state = {'k': 0}

    def command(t, z, zd):
        k = state['k']
        q, qd = z[qi].copy(), zd[qi].copy()
        if q_step:
            q = np.round(q / q_step) * q_step
        if velocity_resolution:
            qd = np.round(qd / velocity_resolution) * velocity_resolution
        zq, zdq = z.copy(), zd.copy()
        if law_reads == 'readings':
            zq[qi], zdq[qi] = q, qd
        u = law(t, zq, zdq)
        if k < K:
            Q[k], QD[k], U[k], LQ[k], LQD[k] = q, qd, u, zq[qi], zdq[qi]
        state['k'] = k + 1
        return u

    def noise(u):
        return u + (rng.normal(0.0, effort_noise, u.shape) if effort_noise else 0.0)

    z0 = np.zeros(model.n_coords)
    z0[qi] = exc.q0
    if latency is None:
        res = simulate(model, exc.duration, dt, torque=lambda t, z, zd: noise(command(t, z, zd)), z0=z0,
                       record_energy=False)
        return res, Q, QD, U, LQ, LQD, None
    lat = np.asarray(latency, dtype=float)
    if lat.shape != (K,) or not np.all(np.isfinite(lat) & (lat >= 0)):
        raise ValueError(f'latency: expected ({K},) finite values >= 0 s, one per reading')
    m_fine = np.arange(K) * fine + np.round(lat * fine / dt).astype(int)      # fine step of each write
    due = {}
    for m in range(K):
        due.setdefault(int(m_fine[m]), []).append(m)
    live = {'j': 0, 'cur': -1, 'tau': np.zeros(model.n_joints)}

    def fine_torque(t, z, zd):
        j = live['j']
        live['j'] = j + 1
        if j % fine == 0 and j // fine < K:
            command(t, z, zd)
        for m in due.get(j, ()):
            if m > live['cur']:                       # an older command written late is superseded
                live['cur'] = m
                live['tau'] = noise(U[m])
        return live['tau'] if live['cur'] >= 0 else np.zeros(model.n_joints)

    res = simulate(model, exc.duration, dt / fine, torque=fine_torque, z0=z0, record_energy=False)
    return _every(res, fine), Q, QD, U, LQ, LQD, m_fine * (dt / fine)


def _every(res, m):
    """A simulation result sampled every m-th period."""
    from dataclasses import replace
    out = {f: getattr(res, f)[::m] for f in ('t', 'z', 'zd', 'tau', 'tip', 'energy')}
    if res.tip_deflection is not None:
        out['tip_deflection'] = res.tip_deflection[::m]
    return replace(res, **out)


def check_excitation(model, exc, kp, kv, dt):
    """Simulate the experiment on `model` and return its figures; ExcitationError if it leaves a limit."""
    res, Q, QD, U, _, _, _ = _closed_loop(model, model, exc, kp, kv, dt)
    out = {'peak_torque': np.abs(U).max(axis=0), 'peak_velocity': np.abs(res.qd).max(axis=0),
           'excursion': np.abs(res.q - np.asarray(exc.q0)).max(axis=0),
           'peak_deflection': float(np.max(res.relative_deflection))}
    problems = []
    for j, js in enumerate(model.spec.joints):
        lo, hi = js.position_limits
        if np.min(res.q[:, j]) <= lo or np.max(res.q[:, j]) >= hi:
            problems.append(f'joint {js.name} leaves its position limits [{lo:g}, {hi:g}] rad '
                            f'({np.min(res.q[:, j]):.3f} .. {np.max(res.q[:, j]):.3f})')
        if math.isfinite(js.velocity_limit) and out['peak_velocity'][j] > LIMIT_USE * js.velocity_limit:
            problems.append(f'joint {js.name} reaches {out["peak_velocity"][j]:.3g} rad/s, over '
                            f'{LIMIT_USE:.0%} of its velocity limit {js.velocity_limit:g}')
        if math.isfinite(js.effort_limit) and out['peak_torque'][j] > LIMIT_USE * js.effort_limit:
            problems.append(f'joint {js.name} needs {out["peak_torque"][j]:.3g} N m, over {LIMIT_USE:.0%} of its '
                            f'effort limit {js.effort_limit:g} (a saturated torque is not the law identification '
                            'replays)')
    lim = VALIDITY_USE * validity_limit(model)
    if out['peak_deflection'] > lim:
        problems.append(f'a link deflects {100 * out["peak_deflection"]:.1f} % of its length, over {100 * lim:.1f} % '
                        f'({VALIDITY_USE:.0%} of the model\'s validity)')
    if problems:
        raise ExcitationError('the experiment is refused: ' + '; '.join(problems))
    return out


def design_excitation(model, duration=30.0, dt=2e-3, q0=None, amplitude=None, band=None, n_freq=DEFAULT_N_FREQ,
                      ramp=DEFAULT_RAMP_S, seed=0, kp=None, kv=None, slope=1.5, input_delay=None):
    """(Excitation, kp, kv, figures): a checked experiment (module docstring). amplitude None: the largest that
    keeps every limit (with a 10 % margin); given: checked as given. kp, kv: the gains pd_servo will use with this
    input delay (holding_gains: the node caps k_v the same way), which the recording must name."""
    q0 = tuple(float(x) for x in (model.spec.nominal_configuration if q0 is None else q0))
    if len(q0) != model.n_joints:
        raise ExcitationError(f'q0: one angle per joint ({model.n_joints}), got {len(q0)}')
    try:
        kp, kv = holding_gains(model, dt, kp, kv, input_delay)
    except ValueError as e:
        raise ExcitationError(f'the holding gains: {e}') from None
    lo, hi = band if band is not None else excitation_band(model, q0, 1.0 / dt)
    if not (0 < lo < hi < 0.5 / dt):
        raise ExcitationError(f'band: expected 0 < low < high < {0.5 / dt:g} Hz (Nyquist), got {lo}, {hi}')
    freqs = tuple(float(f) for f in np.geomspace(lo, hi, int(n_freq)))
    if amplitude is not None:
        a = np.broadcast_to(np.asarray(amplitude, dtype=float), (model.n_joints,))
        exc = Excitation(q0, tuple(a), freqs, float(duration), ramp, seed, slope)
        return exc, kp, kv, check_excitation(model, exc, kp, kv, dt)
    a = np.full(model.n_joints, 0.01)
    for _ in range(6):       # each joint's amplitude to the largest its own limits allow (the joints couple: repeat)
        exc = Excitation(q0, tuple(a), freqs, float(duration), ramp, seed, slope)
        res, Q, QD, U, _, _, _ = _closed_loop(model, model, exc, kp, kv, dt)
        shared = VALIDITY_USE * validity_limit(model) / max(float(np.max(res.relative_deflection)), 1e-12)
        factor = np.full(model.n_joints, shared)
        for j, js in enumerate(model.spec.joints):
            if math.isfinite(js.effort_limit):
                factor[j] = min(factor[j], LIMIT_USE * js.effort_limit / max(float(np.abs(U[:, j]).max()), 1e-12))
            if math.isfinite(js.velocity_limit):
                factor[j] = min(factor[j],
                                LIMIT_USE * js.velocity_limit / max(float(np.abs(res.qd[:, j]).max()), 1e-12))
            lo_j, hi_j = js.position_limits
            room = min(q0[j] - lo_j, hi_j - q0[j])
            if math.isfinite(room):
                factor[j] = min(factor[j], room / max(float(np.abs(res.q[:, j] - q0[j]).max()), 1e-12))
        factor = np.minimum(0.9 * factor, 4.0)       # at most x4 per round: the response is not quite linear
        a = a * factor
        if np.all(np.abs(factor - 0.9) < 0.05):
            break
    for _ in range(4):                                # the check's margins, kept by backing off
        exc = Excitation(q0, tuple(float(x) for x in a), freqs, float(duration), ramp, seed, slope)
        try:
            return exc, kp, kv, check_excitation(model, exc, kp, kv, dt)
        except ExcitationError:
            a = 0.8 * a
    exc = Excitation(q0, tuple(float(x) for x in a), freqs, float(duration), ramp, seed, slope)
    return exc, kp, kv, check_excitation(model, exc, kp, kv, dt)


def run_offline(model, exc, kp, kv, dt, law_model=None, counts_per_rev=4096, velocity_resolution=0.0,
                effort_noise=0.0, seed=0, law_reads='state', source='offline experiment', gauges=(),
                strain_noise=None, strain_bandwidth=None, strain_bias=0.0, latency=None, accelerometer=False):
    """Run the experiment on a simulated arm in this process (the plant `model`, pd_servo designed on `law_model`,
    default the same): the readings quantized (encoder counts per turn, the drives' velocity resolution), torque
    noise (N m) added to what the arm gets; the law acts on the exact joint state (law_reads='state', as on the
    simulated plant) or on the readings ('readings', as on hardware). `gauges` ('<joint>@<x>[:<plane>]'): strain
    gauges read every period by the plant's sensor model (flexarm_sim.sensors: noise, bias, the amplifier's low-pass;
    defaults its DEFAULTS). latency (K,) s: each command written that long after its reading, as a hardware bridge
    does (the record then carries the instants, `applied_at`). accelerometer: a tip accelerometer read every period
    by the plant's sensor model (its noise and low-pass, DEFAULTS), with the torque that acted up to the reading as
    the lock-step plant reads it. Returns the ClosedLoopRecord a recording of it gives (flexarm identify's
    reader)."""
    from flexarm_sim.model.sensing import parse_gauge
    from flexarm_sim.sensors import DEFAULTS, SensorConfig, SimulatedSensors

    if law_reads not in ('state', 'readings'):
        raise ValueError(f"law_reads: 'state' or 'readings', got {law_reads!r}")
    res, Q, QD, U, LQ, LQD, applied = _closed_loop(model, law_model or model, exc, kp, kv, dt, counts_per_rev,
                                                   velocity_resolution, effort_noise, seed, law_reads, latency)
    noise = (2 * math.pi / counts_per_rev) / math.sqrt(12) if counts_per_rev else 1e-6
    strain, texts, s_noise, alpha = None, (), None, 1.0
    if gauges:
        parsed = [parse_gauge(model, g) for g in gauges]
        bias = np.broadcast_to(np.asarray(strain_bias, dtype=float), (len(parsed),))
        cfg = SensorConfig(seed=seed, gauges=tuple(parsed), strain_bias=tuple(bias),
                           strain_noise=DEFAULTS['strain.noise'] if strain_noise is None else strain_noise,
                           strain_bandwidth=DEFAULTS['strain.bandwidth'] if strain_bandwidth is None
                           else strain_bandwidth, strain_rate=1.0 / dt)
        sensors = SimulatedSensors(model, cfg, 1.0 / dt, 1.0 / dt, lockstep=True, control_rate=1.0 / dt)
        strain = np.array([sensors.read_strain(z) for z in res.z])
        texts = tuple(gauge_text(model, g) for g in parsed)
        s_noise = np.sqrt(sensors.strain_variance)
        alpha = sensors.alpha_strain
    accel, a_noise, a_alpha = None, None, 1.0
    if accelerometer:
        if latency is not None:
            raise ValueError('accelerometer: with the lock-step timing only (no latency)')
        cfg = SensorConfig(seed=seed + 1, accelerometer=True, accel_rate=1.0 / dt)
        sensors = SimulatedSensors(model, cfg, 1.0 / dt, 1.0 / dt, lockstep=True, control_rate=1.0 / dt)
        acted = np.vstack([res.tau[:1], res.tau[:-1]])          # the torque the arm got up to each reading
        accel = np.array([sensors.read_accel(z, zd, u) for z, zd, u in zip(res.z, res.zd, acted)])
        a_noise = np.full(3, math.sqrt(sensors.accel_variance))
        a_alpha = sensors.alpha_accel
    return ClosedLoopRecord(dt, tuple(j.name for j in model.spec.joints), U, Q, QD, kp, kv, noise, source=source,
                            law_position=LQ, law_velocity=LQD, strain=strain, gauges=texts, strain_noise=s_noise,
                            strain_alpha=alpha, applied_at=applied, accel=accel, accel_noise=a_noise,
                            accel_alpha=a_alpha)


def gauge_text(model, g) -> str:
    """A StrainGauge's description as sensing.parse_gauge reads it (sensing.gauge_spec)."""
    from flexarm_sim.model.sensing import PLANE_NAMES, gauge_spec
    return gauge_spec(model.spec.joints[g.link].name, g.x, PLANE_NAMES[g.plane], g.c)
