"""The sensors of the simulated arm (no ROS): what a real flexible arm measures, with its imperfections.

Each sensor reads the ideal value of model/sensing.py and degrades it:

* joint encoders + drives (/joint_states): angle quantized to 2 pi / counts_per_rev after Gaussian noise
  (`encoders.noise`, rad); the drive's velocity estimate quantized to `velocity_resolution` (a Dynamixel X reports
  0.229 rpm steps); the measured torque (motor current) with Gaussian noise and quantization (`effort.*`): in
  realtime/simtime the mean torque over the loop steps since the previous encoder sample (a current measurement
  integrated over its sample period), so a command that arrived within the period is weighed by the time it acted —
  the torque a state estimator must predict that period with (the last step's torque alone misplaced it by up to a
  period; issue 28).
* strain gauges: strain c w''(x) plus a constant bias, Gaussian noise (std per sample), then the amplifier's
  first-order low-pass (`bandwidth`).
* tip accelerometer: specific force in the tip frame plus white noise of density n (m/s^2/sqrt(Hz); per sample
  std n sqrt(f_s / 2), the density over the sample band), the first-order low-pass `bandwidth`, clipped to
  +-`range` (saturation).

The low-pass filters are discrete, y_k = y_{k-1} + alpha (u_k - y_{k-1}), alpha = 1 - exp(-2 pi f_c / f_s) at the
sensor's sample rate f_s (the sensor's digital filter; bandwidth 0 = none). After it the noise variance is
sigma^2 alpha / (2 - alpha) (`filtered_noise_std`).

Noise is drawn from one seeded generator per sensor (numpy PCG64, seed = (`seed`, sensor number)), so a run that
samples in the same order (lock-step, in-process) is reproducible bit for bit.

Sampling: in realtime/simtime each sensor at its own rate (a whole number of loop steps; the encoders at
publish_rates.joint_states); in lock-step every sensor at every control instant, before the state is published.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .common.params import ConfigError
from .model.sensing import DEFAULT_GAUGE_DISTANCE, SensorSpecError, parse_gauge, strain_matrix, tip_specific_force

# the default figures of every sensor: one owner for the plant's sensor models and the estimator's assumptions
DEFAULTS = {
    'encoders.counts_per_rev': 4096,            # Dynamixel X-series: 4096 per turn
    'encoders.noise': 0.0,                      # rad, before quantization
    'encoders.velocity_resolution': 0.229 * 2 * math.pi / 60,   # rad/s: 0.229 rpm
    'effort.noise': 0.0,                        # N m
    'effort.resolution': 0.0,                   # N m (Dynamixel XM430: 2.69 mA x 1.78 N m/A = 4.8 mN m)
    'strain.distance': DEFAULT_GAUGE_DISTANCE,  # m
    'strain.noise': 2e-6,                       # strain (2 micro-strain: a bridge amplifier at ~1 kHz)
    'strain.bandwidth': 200.0,                  # Hz
    'strain.rate': 500.0,                       # Hz
    'accelerometer.noise_density': 2e-3,        # m/s^2/sqrt(Hz) (~200 micro-g/sqrt(Hz), a MEMS accelerometer)
    'accelerometer.bandwidth': 100.0,           # Hz
    'accelerometer.range': 16 * 9.80665,        # m/s^2 (+-16 g)
    'accelerometer.rate': 500.0,                # Hz
}


PRESETS = ('encoders', 'strain', 'strain_accel')
GAUGE_POSITION = 0.05          # fraction of the link length from the joint: the presets' gauge position


def preset_values(arm, name: str) -> dict:
    """The `sensors.*` parameters of a named sensor set for an arm (an ArmModel or its ArmSpec); the plant and the
    estimator use the same names:
    encoders        joint encoders (+ drives)
    strain          + one strain gauge per flexible link (its first bending plane) at GAUGE_POSITION of its
                    length, near the root where the fundamental mode bends the link most
    strain_accel    + a tip accelerometer"""
    if name not in PRESETS:
        raise ValueError(f'sensor set must be one of {", ".join(PRESETS)}, got {name!r}')
    spec = getattr(arm, 'spec', arm)
    out = {'sensors.encoders.enabled': True, 'sensors.strain.gauges': [],
           'sensors.accelerometer.enabled': name == 'strain_accel'}
    if name in ('strain', 'strain_accel'):
        gauges = []
        for js in spec.joints:
            plane = 'in_plane' if js.link.n_in_plane else 'out_of_plane' if js.link.n_out_of_plane else None
            if plane is not None:
                gauges.append(f'{js.name}@{round(GAUGE_POSITION * js.link.length, 4):g}:{plane}')
        out['sensors.strain.gauges'] = gauges
    return out


def quantize(x, step):
    """x rounded to multiples of step (step 0: unchanged)."""
    return x if step <= 0 else np.round(np.asarray(x) / step) * step


def lowpass_alpha(bandwidth_hz: float, rate_hz: float) -> float:
    """Coefficient of the discrete first-order low-pass at sample rate rate_hz (bandwidth 0: 1, no filter)."""
    return 1.0 if bandwidth_hz <= 0 else 1.0 - math.exp(-2 * math.pi * bandwidth_hz / rate_hz)


def filtered_noise_std(std: float, alpha: float) -> float:
    """Standard deviation of white noise of std `std` after the low-pass of coefficient alpha."""
    return std * math.sqrt(alpha / (2.0 - alpha))


def accel_sample_std(noise_density: float, rate_hz: float) -> float:
    """Per-sample std of white noise of density n (m/s^2/sqrt(Hz)) sampled at rate_hz: n sqrt(f_s / 2)."""
    return noise_density * math.sqrt(0.5 * rate_hz)


@dataclass(frozen=True)
class SensorConfig:
    """Which sensors the simulated arm has and their figures (from the plant's `sensors.*` parameters)."""

    seed: int = 0
    encoders: bool = False
    counts_per_rev: int = DEFAULTS['encoders.counts_per_rev']
    encoder_noise: float = DEFAULTS['encoders.noise']
    velocity_resolution: float = DEFAULTS['encoders.velocity_resolution']
    effort_noise: float = DEFAULTS['effort.noise']
    effort_resolution: float = DEFAULTS['effort.resolution']
    gauges: tuple = ()
    strain_noise: float = DEFAULTS['strain.noise']
    strain_bias: tuple = ()                     # per gauge
    strain_bandwidth: float = DEFAULTS['strain.bandwidth']
    strain_rate: float = DEFAULTS['strain.rate']
    accelerometer: bool = False
    accel_noise_density: float = DEFAULTS['accelerometer.noise_density']
    accel_bandwidth: float = DEFAULTS['accelerometer.bandwidth']
    accel_range: float = DEFAULTS['accelerometer.range']
    accel_rate: float = DEFAULTS['accelerometer.rate']

    @property
    def any(self) -> bool:
        return self.encoders or bool(self.gauges) or self.accelerometer

    @classmethod
    def from_values(cls, model, v: dict, prefix: str = 'sensors.') -> 'SensorConfig':
        """From (validated) parameter values with dotted names under `prefix`; ConfigError naming the parameter
        for what needs the arm (gauge descriptions, one bias per gauge)."""
        def g(name):
            return v[prefix + name]
        gauges = []
        names = g('strain.gauges')
        for i, text in enumerate([] if _not_set(names) else names):
            try:
                gauges.append(parse_gauge(model, text, g('strain.distance')))
            except SensorSpecError as e:
                raise ConfigError(f'{prefix}strain.gauges[{i}]', str(e)) from None
        if len({x.name for x in gauges}) != len(gauges):
            raise ConfigError(f'{prefix}strain.gauges', f'a gauge is listed twice: {names}')
        bias = g('strain.bias')
        bias = [] if _not_set(bias) else list(bias)
        if len(bias) == 1:
            bias = bias * len(gauges)
        if bias and len(bias) != len(gauges):
            raise ConfigError(f'{prefix}strain.bias', f'expected {len(gauges)} values (one per gauge) or one for '
                                                      f'all, got {len(bias)}')
        return cls(seed=g('seed'), encoders=g('encoders.enabled'), counts_per_rev=g('encoders.counts_per_rev'),
                   encoder_noise=g('encoders.noise'), velocity_resolution=g('encoders.velocity_resolution'),
                   effort_noise=g('effort.noise'), effort_resolution=g('effort.resolution'), gauges=tuple(gauges),
                   strain_noise=g('strain.noise'), strain_bias=tuple(bias or [0.0] * len(gauges)),
                   strain_bandwidth=g('strain.bandwidth'), strain_rate=g('strain.rate'),
                   accelerometer=g('accelerometer.enabled'), accel_noise_density=g('accelerometer.noise_density'),
                   accel_bandwidth=g('accelerometer.bandwidth'), accel_range=g('accelerometer.range'),
                   accel_rate=g('accelerometer.rate'))


def _not_set(v) -> bool:
    return v is None or type(v).__name__ == '_Derived'


@dataclass
class SensorSample:
    """The readings of one sample instant (None: that sensor was not sampled)."""

    t_ns: int
    step: int
    joints: tuple = None          # (q, qd, effort) measured
    strain: np.ndarray = None     # (n_gauges,)
    accel: np.ndarray = None      # (3,) m/s^2, tip frame
    strain_variance: np.ndarray = field(default=None, repr=False)


class SimulatedSensors:
    """The sensor models of one plant. `sample(...)` from the loop thread only."""

    def __init__(self, model, cfg: SensorConfig, loop_rate: float, joint_state_rate: float, lockstep=False,
                 control_rate: float = 0.0):
        self.model = model
        self.cfg = cfg
        self.qi = np.asarray(model.q_index)
        self.lockstep = bool(lockstep)
        n = model.n_joints
        ss = np.random.SeedSequence(int(cfg.seed))
        self._rng_enc, self._rng_eff, self._rng_strain, self._rng_acc = (np.random.default_rng(s)
                                                                         for s in ss.spawn(4))
        self.res_q = 2 * math.pi / cfg.counts_per_rev if cfg.counts_per_rev > 0 else 0.0
        self.S = strain_matrix(model, cfg.gauges) if cfg.gauges else np.zeros((0, model.n_coords))
        self.bias = np.asarray(cfg.strain_bias, dtype=float)
        self.every_js = _every(loop_rate, joint_state_rate)
        self.every_strain = _every(loop_rate, cfg.strain_rate)
        self.every_accel = _every(loop_rate, cfg.accel_rate)
        fs_strain = control_rate if self.lockstep else cfg.strain_rate
        fs_accel = control_rate if self.lockstep else cfg.accel_rate
        self.alpha_strain = lowpass_alpha(cfg.strain_bandwidth, fs_strain) if cfg.gauges else 1.0
        self.alpha_accel = lowpass_alpha(cfg.accel_bandwidth, fs_accel) if cfg.accelerometer else 1.0
        self.accel_std = accel_sample_std(cfg.accel_noise_density, fs_accel) if cfg.accelerometer else 0.0
        self.accel_variance = filtered_noise_std(self.accel_std, self.alpha_accel) ** 2
        self.strain_variance = np.full(len(cfg.gauges),
                                       filtered_noise_std(cfg.strain_noise, self.alpha_strain) ** 2)
        self._strain_f = None
        self._accel_f = None
        self.n = n
        self.samples = {'joints': 0, 'strain': 0, 'accel': 0}
        self.accel_saturated = 0
        self._tau_sum = np.zeros(n)          # torque summed over the loop steps since the last encoder sample
        self._tau_steps = 0

    @property
    def joints(self) -> bool:
        return self.cfg.encoders

    def reset(self):
        """Forget the filters' state (a plant reset); the noise sequences continue."""
        self._strain_f = None
        self._accel_f = None
        self._tau_sum[:] = 0.0
        self._tau_steps = 0

    # ------------------------------------------------------------------ the sensors
    def read_joints(self, z, zd, tau):
        cfg = self.cfg
        q = z[self.qi]
        if cfg.encoder_noise > 0:
            q = q + cfg.encoder_noise * self._rng_enc.standard_normal(self.n)
        q = quantize(q, self.res_q)
        qd = quantize(zd[self.qi], cfg.velocity_resolution)
        eff = np.asarray(tau, dtype=float)
        if cfg.effort_noise > 0:
            eff = eff + cfg.effort_noise * self._rng_eff.standard_normal(self.n)
        eff = quantize(eff, cfg.effort_resolution)
        self.samples['joints'] += 1
        return np.array(q, dtype=float), np.array(qd, dtype=float), np.array(eff, dtype=float)

    def read_strain(self, z):
        cfg = self.cfg
        u = self.S @ z + self.bias
        if cfg.strain_noise > 0:
            u = u + cfg.strain_noise * self._rng_strain.standard_normal(u.size)
        self._strain_f = u if self._strain_f is None else self._strain_f + self.alpha_strain * (u - self._strain_f)
        self.samples['strain'] += 1
        return self._strain_f.copy()

    def read_accel(self, z, zd, tau):
        u = tip_specific_force(self.model, z, zd, tau)
        if self.accel_std > 0:
            u = u + self.accel_std * self._rng_acc.standard_normal(3)
        self._accel_f = u if self._accel_f is None else self._accel_f + self.alpha_accel * (u - self._accel_f)
        r = self.cfg.accel_range
        out = np.clip(self._accel_f, -r, r)
        self.accel_saturated += int(np.any(out != self._accel_f))
        self.samples['accel'] += 1
        return out

    # ------------------------------------------------------------------ sampling
    def sample(self, k, z, zd, tau, step, t_ns, instant=False):
        """The readings due after loop step k; in lock-step only at a control instant (`instant`), then every
        sensor. None if nothing is due."""
        cfg = self.cfg
        if self.lockstep:
            if not instant:
                return None
            return self.sample_all(z, zd, tau, step, t_ns)
        self._tau_sum += tau
        self._tau_steps += 1
        js = cfg.encoders and self.every_js > 0 and k % self.every_js == 0
        st = bool(cfg.gauges) and k % self.every_strain == 0
        ac = cfg.accelerometer and k % self.every_accel == 0
        if not (js or st or ac):
            return None
        joints = None
        if js:
            joints = self.read_joints(z, zd, self._tau_sum / self._tau_steps)
            self._tau_sum[:] = 0.0
            self._tau_steps = 0
        return SensorSample(int(t_ns), int(step),
                            joints=joints,
                            strain=self.read_strain(z) if st else None,
                            accel=self.read_accel(z, zd, tau) if ac else None,
                            strain_variance=self.strain_variance if st else None)

    def sample_all(self, z, zd, tau, step, t_ns):
        """Every configured sensor now (the plant idles: paused, waiting for the first command)."""
        cfg = self.cfg
        self._tau_sum[:] = 0.0
        self._tau_steps = 0
        return SensorSample(int(t_ns), int(step),
                            joints=self.read_joints(z, zd, tau) if cfg.encoders else None,
                            strain=self.read_strain(z) if cfg.gauges else None,
                            accel=self.read_accel(z, zd, tau) if cfg.accelerometer else None,
                            strain_variance=self.strain_variance if cfg.gauges else None)

    def diagnostics(self) -> dict:
        cfg = self.cfg
        names = (['encoders'] if cfg.encoders else []) + [g.name for g in cfg.gauges] + \
            (['tip accelerometer'] if cfg.accelerometer else [])
        return {'sensors': ', '.join(names) or 'none', 'sensor_samples_joints': self.samples['joints'],
                'sensor_samples_strain': self.samples['strain'], 'sensor_samples_accel': self.samples['accel'],
                'accelerometer_saturated': self.accel_saturated}


def _every(loop_rate, rate) -> int:
    return 0 if rate <= 0 else max(1, int(round(loop_rate / rate)))
