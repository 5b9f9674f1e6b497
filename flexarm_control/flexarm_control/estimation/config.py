"""Parameters of the `state_estimator` node (no ROS): its table (flexarm_sim.common.params).

config/estimator.yaml is generated from TABLE (`python -m flexarm_bringup.docs --write`; a test checks the shipped
file is). The sensor names and defaults follow the plant's `sensors.*` parameters (flexarm_sim/sensors.py DEFAULTS:
one owner), so one description of the sensors configures the simulated ones and what the estimator assumes of them;
on hardware they describe the real sensors.
"""
from __future__ import annotations

import math
import sys

from flexarm_sim.common.params import (DERIVED, Param, ParamTable, boolean, choice, float_range, integer, string,
                                       string_list)
from flexarm_sim.plant.config import CONTROL_RATE
from flexarm_sim.sensors import DEFAULTS, accel_sample_std, filtered_noise_std, lowpass_alpha

INPUTS = ('command', 'measured_effort')

TABLE = ParamTable('state_estimator', {
    'arm': Param('deluca_two_link', string(),
                 'arm description (a YAML path or the name of a shipped arm); must be the plant\'s or the hardware\'s'),
    'rate': Param(CONTROL_RATE, float_range(lo=1.0, hi=10000.0),
                  'Hz, the filter\'s period 1/rate: the rate of /joint_states (each reading is one period; '
                  'sim.launch.py sets the plant\'s publish_rates.joint_states to it) and the control rate'),
    'lockstep': Param(False, boolean(),
                      'plant in lockstep: estimate each control instant of /flexarm/state (whose step and stamp '
                      'only are read) from the readings stamped at that instant and the stamped command'),
    'realtime_priority': Param(0, integer(lo=0, hi=99),
                               'not lockstep: SCHED_FIFO priority of the thread that takes the readings and publishes '
                               'the estimate, where permitted (CAP_SYS_NICE or an rtprio limit; refused -> warning); '
                               'its DDS receive threads one below; 0 = normal scheduling, the default: FIFO gains '
                               'nothing measured (modal on encoders beside two CPU hogs: kept in 4 of 7 runs at 45, '
                               '6 of 9 at 0, and at 45 the plant fell behind more, up to 123 skipped periods; '
                               'issue 28)'),
    'input': Param('command', choice(INPUTS),
                   'the torque the prediction applies: command (/effort_controller/commands, lockstep '
                   '/flexarm/effort_command) or measured_effort (the effort of /joint_states: the drives\' measured '
                   'torque over the last period)'),
    'sensors.encoders.counts_per_rev': Param(DEFAULTS['encoders.counts_per_rev'], integer(lo=0, hi=2 ** 31),
                                             'encoder counts per revolution (quantization 2 pi / counts; Dynamixel '
                                             'X: 4096); 0 = not quantized'),
    'sensors.encoders.noise': Param(DEFAULTS['encoders.noise'], float_range(lo=0.0, hi=1.0),
                                    'rad, std of the angle noise beyond quantization'),
    'sensors.encoders.velocity_noise': Param(0.0, float_range(lo=0.0, hi=100.0),
                                             'rad/s, std of the joint rates of /joint_states; 0 = the rates are not '
                                             'fused (only the angles)'),
    'sensors.encoders.timeout': Param(0.1, float_range(lo=0.001, hi=10.0),
                                      's without /joint_states: flagged missing, the estimate is predicted from the '
                                      'commands (for at most max_prediction)'),
    'sensors.strain.gauges': Param(DERIVED, string_list(),
                                   'strain gauges fused from /flexarm/strain, each \'<link>@<x m>[:in_plane|'
                                   'out_of_plane][:c=<m>]\' as the plant\'s sensors.strain.gauges; not set = none'),
    'sensors.strain.distance': Param(DEFAULTS['strain.distance'], float_range(lo=0.0, lo_open=True, hi=1.0),
                                     'm, distance c of a gauge from the neutral axis unless its description gives one'),
    'sensors.strain.noise': Param(DEFAULTS['strain.noise'], float_range(lo=0.0, lo_open=True, hi=1.0),
                                  'strain, std of a reading\'s noise'),
    'sensors.strain.bias_std': Param(5e-5, float_range(lo=0.0, hi=1.0),
                                     'strain, prior std of each gauge\'s bias (estimated); 0 = biases not estimated'),
    'sensors.strain.bias_drift': Param(1e-6, float_range(lo=0.0, hi=1.0), 'strain/sqrt(s), random walk of the biases'),
    'sensors.strain.max': Param(0.01, float_range(lo=0.0, lo_open=True, hi=1.0),
                                '|strain| beyond this is out of range: rejected and counted'),
    'sensors.strain.timeout': Param(0.1, float_range(lo=0.001, hi=10.0),
                                    's (of sample time) without a strain reading: flagged missing, the filter '
                                    'predicts without it'),
    'sensors.accelerometer.enabled': Param(False, boolean(), 'fuse the tip accelerometer of /flexarm/tip_imu'),
    'sensors.accelerometer.noise_density': Param(DEFAULTS['accelerometer.noise_density'],
                                                 float_range(lo=0.0, lo_open=True, hi=100.0),
                                                 'm/s^2/sqrt(Hz), white noise density'),
    'sensors.accelerometer.bandwidth': Param(DEFAULTS['accelerometer.bandwidth'], float_range(lo=0.0, hi=1e5),
                                             'Hz, its first-order low-pass (inverted from consecutive readings '
                                             'before they are fused)'),
    'sensors.accelerometer.rate': Param(DEFAULTS['accelerometer.rate'], float_range(lo=1.0, hi=1e5),
                                        'Hz, its sample rate'),
    'sensors.accelerometer.range': Param(DEFAULTS['accelerometer.range'], float_range(lo=0.0, lo_open=True, hi=1e4),
                                         'm/s^2: readings at or beyond +-range (saturated) are rejected and counted'),
    'sensors.accelerometer.timeout': Param(0.1, float_range(lo=0.001, hi=10.0),
                                           's (of sample time) without an accelerometer reading: flagged missing'),
    'process_noise.torque': Param(0.01, float_range(lo=0.0, lo_open=True, hi=1e4),
                                  'N m, std of an unmodelled torque on each joint over a period (model error)'),
    'process_noise.modal_force': Param(0.01, float_range(lo=0.0, lo_open=True, hi=1e4),
                                       'N, std of an unmodelled generalized force on each modal coordinate over a '
                                       'period'),
    'initial_std.joint_rate': Param(0.5, float_range(lo=0.0, lo_open=True, hi=1e3),
                                    'rad/s, initial std of the joint rates (the angles start at the encoders\')'),
    'initial_std.modal': Param(0.02, float_range(lo=0.0, lo_open=True, hi=10.0),
                               'm, initial std of the modal coordinates (they start at the static deflection)'),
    'initial_std.modal_rate': Param(0.2, float_range(lo=0.0, lo_open=True, hi=100.0),
                                    'm/s, initial std of the modal rates'),
    'innovation_bound': Param(20.0, float_range(lo=1.0, hi=1e6),
                              'a reading farther than this many standard deviations from its prediction resets the '
                              'filter to the encoder-consistent state (ERROR diagnostic)'),
    'error_hold': Param(2.0, float_range(lo=0.0, hi=3600.0), 's the ERROR diagnostic stays after a reset'),
    'max_prediction': Param(0.5, float_range(lo=0.0, hi=60.0),
                            's of prediction without encoder readings; beyond, no estimate is published (the '
                            'controller\'s state_timeout stops it)'),
    'schedule_step': Param(0.1, float_range(lo=0.001, hi=10.0),
                           'rad, grid of the linearizations that carry the covariance'),
}, title='state_estimator')

HEADER = """Parameters of the flexarm state estimator (flexarm_control `state_estimator`), generated from
flexarm_control/estimation/config.py.
  ros2 run flexarm_control state_estimator --ros-args --params-file config/estimator.yaml [-p arm:=slewing_beam]
Reads /joint_states, the commanded effort and the configured strain gauges / tip accelerometer; publishes
/flexarm/state_estimate (flexarm_msgs/FlexState). Controllers read it with state_topic:=/flexarm/state_estimate
(sim.launch.py / hardware.launch.py estimator:=...). `[]` = not set: the value named in the comment."""


def render() -> str:
    return TABLE.render_yaml(HEADER)


def encoder_std(values: dict) -> float:
    """rad: the angle noise the filter assumes, quantization (2 pi / counts / sqrt 12) and noise together."""
    counts = values['sensors.encoders.counts_per_rev']
    q = 2 * math.pi / counts / math.sqrt(12.0) if counts > 0 else 0.0
    s = math.hypot(q, values['sensors.encoders.noise'])
    return s if s > 0 else 1e-6           # an ideal encoder still has the float's resolution


def accel_alpha(values: dict) -> float:
    """The coefficient of the accelerometer's first-order low-pass at its sample rate (flexarm_sim.sensors)."""
    return lowpass_alpha(values['sensors.accelerometer.bandwidth'], values['sensors.accelerometer.rate'])


def accel_std(values: dict) -> float:
    """m/s^2: the per-axis noise of a reading after the accelerometer's filter (flexarm_sim.sensors' model)."""
    return filtered_noise_std(accel_sample_std_of(values), accel_alpha(values))


def accel_sample_std_of(values: dict) -> float:
    """m/s^2: the per-axis white noise of one sample before the low-pass: the noise of a reading with the low-pass
    inverted (runtime.AccelInverse), which is what the filter fuses."""
    return accel_sample_std(values['sensors.accelerometer.noise_density'], values['sensors.accelerometer.rate'])


if __name__ == '__main__':
    sys.stdout.write(render())
