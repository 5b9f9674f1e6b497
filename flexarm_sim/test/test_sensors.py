"""Sensor models of the simulated arm (flexarm_sim/sensors.py) and their sampling by the plant runtime: quantization,
noise statistics against the stated figures, the low-pass's step and -3 dB response, saturation, seeding (lock-step
runs bit-identical), parameter checks naming the parameter."""
import math
import os
import threading

import numpy as np
import pytest

from flexarm_sim.common.params import ConfigError
from flexarm_sim.model import load_model
from flexarm_sim.model.sensing import tip_specific_force
from flexarm_sim.plant import config
from flexarm_sim.plant.runtime import PlantRuntime
from flexarm_sim.sensors import (SensorConfig, SimulatedSensors, filtered_noise_std, lowpass_alpha, preset_values)
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


def _cfg(model, **kw):
    v = config.resolved(dict(config.TABLE.defaults(), **kw), model)
    return SensorConfig.from_values(model, v)


def test_encoders_quantize_to_their_counts_and_drives_report_quantized_rates(deluca):
    cfg = _cfg(deluca, **{'sensors.encoders.enabled': True, 'sensors.encoders.counts_per_rev': 4096,
                          'sensors.effort.resolution': 0.005})
    s = SimulatedSensors(deluca, cfg, 1000.0, 500.0)
    lsb = 2 * math.pi / 4096
    rng = np.random.default_rng(1)
    for _ in range(200):
        z, zd = rng.uniform(-3, 3, deluca.n_coords), rng.uniform(-5, 5, deluca.n_coords)
        tau = rng.uniform(-2, 2, 2)
        q, qd, eff = s.read_joints(z, zd, tau)
        counts = q / lsb
        assert np.allclose(counts, np.round(counts), atol=1e-9)
        assert np.all(np.abs(q - z[deluca.q_index]) <= lsb / 2 + 1e-12)
        assert np.all(np.abs(qd - zd[deluca.q_index]) <= cfg.velocity_resolution / 2 + 1e-12)
        assert np.all(np.abs(eff - tau) <= 0.0025 + 1e-12)


def test_strain_noise_bias_and_the_filtered_noise_level(deluca):
    """Gauges at rest (true strain 0): the readings average to the bias, and their spread is the stated noise
    through the low-pass, sigma sqrt(alpha / (2 - alpha)) (the stationary variance of y_k = y_k-1 + alpha (u_k -
    y_k-1) driven by white noise of variance sigma^2)."""
    bias = [3e-5, -1e-5]
    cfg = _cfg(deluca, **{'sensors.strain.gauges': ['shoulder@0.05', 'elbow@0.1'], 'sensors.strain.noise': 4e-6,
                          'sensors.strain.bias': bias, 'sensors.strain.bandwidth': 100.0, 'sensors.strain.rate': 500.0})
    s = SimulatedSensors(deluca, cfg, 1000.0, 500.0)
    z = np.zeros(deluca.n_coords)
    y = np.array([s.read_strain(z) for _ in range(40000)])[100:]
    alpha = lowpass_alpha(100.0, 500.0)
    expected = filtered_noise_std(4e-6, alpha)
    assert np.allclose(y.mean(axis=0), bias, atol=1e-7)
    # the readings are correlated (filtered): ~ (2 - alpha) / alpha samples per independent one
    assert np.allclose(y.std(axis=0), expected, rtol=0.05)


def test_lowpass_step_and_bandwidth():
    """The discrete first-order filter: a step reaches 1 - (1 - alpha)^k after k samples, and a sine at the stated
    bandwidth (sampled 50x faster) comes out at 1/sqrt(2) of its amplitude (-3 dB)."""
    alpha = lowpass_alpha(10.0, 500.0)
    y, out = 0.0, []
    for _ in range(20):
        y += alpha * (1.0 - y)
        out.append(y)
    assert np.allclose(out, 1 - (1 - alpha) ** np.arange(1, 21), rtol=1e-12)
    f, fs = 10.0, 500.0
    y, peak = 0.0, 0.0
    for k in range(5000):
        y += alpha * (math.sin(2 * math.pi * f * k / fs) - y)
        if k > 2500:
            peak = max(peak, abs(y))
    assert peak == pytest.approx(1 / math.sqrt(2), rel=0.02)


def test_accelerometer_reads_the_model_then_noise_and_saturates(deluca):
    cfg = _cfg(deluca, **{'sensors.accelerometer.enabled': True, 'sensors.accelerometer.noise_density': 0.0,
                          'sensors.accelerometer.bandwidth': 0.0, 'sensors.accelerometer.range': 20.0})
    s = SimulatedSensors(deluca, cfg, 1000.0, 500.0)
    z, zd = np.zeros(deluca.n_coords), np.zeros(deluca.n_coords)
    zd[deluca.q_index] = [1.0, -2.0]
    tau = np.array([0.3, -0.2])
    assert np.allclose(s.read_accel(z, zd, tau), tip_specific_force(deluca, z, zd, tau))
    zd[deluca.q_index] = [5.0, 0.0]                         # turning at 5 rad/s: ~25 m/s^2 centripetal at the tip
    big = s.read_accel(z, zd, tau)
    assert np.max(np.abs(big)) == 20.0 and s.accel_saturated == 1


def test_seeded_noise_is_reproducible_and_seeds_differ(deluca):
    kw = {'sensors.encoders.enabled': True, 'sensors.encoders.noise': 1e-3, 'sensors.strain.gauges': ['shoulder@0.05'],
          'sensors.accelerometer.enabled': True}
    runs = []
    for seed in (7, 7, 8):
        s = SimulatedSensors(deluca, _cfg(deluca, **kw, **{'sensors.seed': seed}), 1000.0, 500.0, lockstep=True,
                             control_rate=500.0)
        z = np.zeros(deluca.n_coords)
        runs.append(np.concatenate([np.concatenate([x.joints[0], x.strain, x.accel]) for x in
                                    (s.sample(k, z, z, np.zeros(2), k, 0, instant=True) for k in range(50))]))
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_sensor_parameters_name_what_does_not_fit(deluca):
    base = config.resolved(config.TABLE.defaults(), deluca)
    for over, name in (({'sensors.strain.gauges': ['wrist@0.1']}, 'sensors.strain.gauges[0]'),
                       ({'sensors.strain.gauges': ['shoulder@0.1', 'elbow@0.5', 'elbow@0.9']},
                        'sensors.strain.gauges[2]'),
                       ({'sensors.strain.gauges': ['shoulder@0.1', 'shoulder@0.1']}, 'sensors.strain.gauges'),
                       ({'sensors.strain.gauges': ['shoulder@0.1'], 'sensors.strain.bias': [0.0, 0.0]},
                        'sensors.strain.bias'),
                       ({'sensors.strain.gauges': ['shoulder@0.1'], 'sensors.strain.rate': 2000.0},
                        'sensors.strain.rate'),
                       ({'time_mode': 'lockstep', 'sensors.accelerometer.enabled': True,
                         'sensors.accelerometer.rate': 250.0}, 'sensors.accelerometer.rate')):
        with pytest.raises(ConfigError) as e:
            config.check_against_arm(dict(base, **over), deluca)
        assert e.value.name == name, (e.value.name, str(e.value))


def test_presets_place_one_gauge_per_flexible_link():
    m = load_model(os.path.join(ARMS, 'spatial_3r.yaml'))
    v = preset_values(m, 'strain_accel')
    assert v['sensors.strain.gauges'] == ['shoulder@0.05:in_plane', 'elbow@0.05:in_plane']   # the hip has no link
    assert v['sensors.accelerometer.enabled'] and v['sensors.encoders.enabled']
    cfg = _cfg(m, **v)
    assert [g.link for g in cfg.gauges] == [1, 2]
    assert preset_values(m, 'encoders')['sensors.strain.gauges'] == []


class _Sink:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def sensors(self, s):
        with self.lock:
            self.events.append(('sensors', s.t_ns, s.step, s.joints[0].tolist(), s.strain.tolist(), s.accel.tolist()))

    def state(self, z, zd, tau, step, t_ns):
        with self.lock:
            self.events.append(('state', t_ns, step, z.tolist()))

    def joint_state(self, *a):
        with self.lock:
            self.events.append(('true joint_state',))

    def clock(self, *a):
        pass

    def markers(self, *a):
        pass

    def diagnostics(self, *a):
        pass

    def log(self, *a):
        pass


def _lockstep_run(model, n_periods=30):
    v = config.resolved(dict(config.TABLE.defaults(), time_mode='lockstep', **{
        'sensors.encoders.enabled': True, 'sensors.encoders.noise': 2e-3,
        'sensors.strain.gauges': ['shoulder@0.05', 'elbow@0.05'], 'sensors.accelerometer.enabled': True,
        'publish_rates.markers': 0.0, 'sensors.seed': 3}), model)
    rt = PlantRuntime(model, v)
    sink = _Sink()
    rt.start(sink)
    try:
        for k in range(n_periods):
            ev = threading.Event()
            while rt.inbox.expected != 2 * k + 1:
                ev.wait(0.001)
            rt.submit_stamped(2 * k + 1, 0, [0.2, -0.1])
        while rt.core.step_index < 2 * n_periods:
            ev.wait(0.001)
    finally:
        rt.stop()
    return sink.events


def test_lockstep_samples_every_sensor_at_each_control_instant_before_its_state(deluca):
    """Lock-step: at every control instant the readings (stamped with the instant and its step) come before the
    state, /joint_states carries the encoders' reading (no true joint state), and two runs are bit-identical."""
    a = _lockstep_run(deluca)
    b = _lockstep_run(deluca)
    assert a == b
    assert not any(e[0] == 'true joint_state' for e in a)
    states = [i for i, e in enumerate(a) if e[0] == 'state']
    for i in states[:30]:
        prev = a[i - 1]
        assert prev[0] == 'sensors' and prev[1:3] == a[i][1:3]     # same stamp and step, just before it
        q_true = np.array(a[i][3])[deluca.q_index]
        assert np.all(np.abs(np.array(prev[3]) - q_true) < 0.02)  # noisy (2 mrad), quantized encoders
