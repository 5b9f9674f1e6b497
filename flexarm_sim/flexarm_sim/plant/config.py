"""Parameters of the `plant` node: the table (flexarm_sim.common.params) and the rules that need the arm (no ROS).

config/plant.yaml is generated from TABLE (`python -m flexarm_sim.plant.config > plant.yaml`; a test checks the
shipped file is). Nested YAML keys are dotted parameter names (`publish_rates.state`). Run-time changes
(`ros2 param set /plant ...`) can only move a parameter within its stated range; the safety limits can only be
tightened (effort limits at most the arm file's).
"""
from __future__ import annotations

import math
import sys


from ..common.params import (DERIVED, ConfigError, Param, ParamTable, boolean, choice, float_list, float_range,
                             integer, off_or_range, string, string_list)
from ..model.integrators import METHODS
from ..sensors import DEFAULTS as SENSOR_DEFAULTS
from .servo import WATCHDOG_ACTIONS

TIME_MODES = ('realtime', 'simtime', 'lockstep')
INTEGRATORS = METHODS
MAX_LOOP_RATE = 50000.0
MIN_RATE = 1.0                 # Hz: slower loops and clocks are no simulation of a controlled arm
MIN_PUBLISH_RATE = 0.01       # Hz: one message per 100 s; 0 switches a topic off
CONTROL_RATE = 500.0          # Hz: /flexarm/state's default rate, which the controllers' and the estimator's `rate`,
                              # sim.launch.py's control_rate and `flexarm run/excite --control-rate` default to (the
                              # loop closes on 2 cores)

TABLE = ParamTable('plant', {
    'arm': Param('deluca_two_link', string(),
                 'arm description: a YAML path, or the name of a shipped arm (flexarm_sim/arms)'),
    'time_mode': Param('realtime', choice(TIME_MODES),
                       'realtime: wall-clock paced, stamps = sample instants on the ROS (wall) clock; simtime: '
                       '/clock from 0, paced by real_time_factor; lockstep: each control period waits for '
                       'flexarm_msgs/JointEffortCommand on /flexarm/effort_command (reproducible bit for bit)'),
    'loop_rate': Param(1000.0, float_range(lo=MIN_RATE, hi=MAX_LOOP_RATE),
                       'Hz: integration steps per second of simulated time (dt = 1/loop_rate)'),
    'integrator': Param('rk4', choice(INTEGRATORS), 'rk4 | midpoint (implicit midpoint, stiffly stable) | gauss (2-stage Gauss-Legendre: '
                        'keeps the energy, every mode within 0.02 % of its frequency)'),
    'substeps': Param(0, integer(lo=0, hi=1000),
                      'integration sub-steps per step; 0 = automatic (RK4 within its stable step, gauss within its accuracy rule)'),
    'real_time_factor': Param(1.0, off_or_range(0.001, 1000.0, zero='as fast as possible'),
                              'simtime: simulated seconds per wall second; 0 = as fast as possible', runtime=True),
    'initial.position': Param(DERIVED, float_list(),
                              'rad, one per joint; not set = zeros (also the target of /flexarm/reset to_initial)'),
    'initial.velocity': Param(DERIVED, float_list(), 'rad/s, one per joint; not set = zeros'),
    'initial.modal_position': Param(DERIVED, float_list(),
                                    'modal coordinates of all flexible links, arm order; not set = zeros'),
    'initial.modal_velocity': Param(DERIVED, float_list(), 'modal rates; not set = zeros'),
    'wait_for_command': Param(False, boolean(),
                              'realtime/simtime: hold the arm until the first valid command (sim.launch.py sets it '
                              'when it starts a controller, so a gravity-loaded arm does not fall meanwhile)'),
    'start_paused': Param(False, boolean(),
                          'start paused at step 0 (the initial state is re-sent at a low rate) until /flexarm/pause '
                          'false: recorders and observers connect before the first step (flexarm run sets it in '
                          'lockstep: a recording from step 0)'),
    'pause_at': Param(0.0, float_range(lo=0.0, hi=1e9),
                      's of plant time: pause there (the first control instant at or after it), as /flexarm/pause does; '
                      '0 = never. flexarm run sets it in lockstep: every run ends at the same step', runtime=True),
    'servo.enabled': Param(False, boolean(),
                           'plant-side joint position servo (Naganathan): torque = effort command + kp (q_c - q) + '
                           'kv (qdot_c - qdot) at every sub-step, q_c (qdot_c) from /position_controller/commands; '
                           'not in lockstep'),
    'servo.kp': Param(DERIVED, float_list(lo=0.0, hi=1e6), 'N m/rad per joint; required with servo.enabled'),
    'servo.kv': Param(DERIVED, float_list(lo=0.0, hi=1e5), 'N m s/rad per joint; required with servo.enabled'),
    'command_timeout': Param(0.2, float_range(lo=0.001, hi=10.0),
                             's of plant time without a valid command -> the watchdog action', runtime=True),
    'watchdog.action': Param('hold', choice(WATCHDOG_ACTIONS),
                             'realtime/simtime, after command_timeout: hold (the drives hold the joints where they '
                             'are: a joint servo at every sub-step, gains watchdog.hold_kp/kv, + the static holding '
                             'torque), damp (rate feedback only: braked where it is) or zero_torque (the arm '
                             'coasts); the next valid command releases it'),
    'watchdog.hold_kp': Param(DERIVED, float_list(lo=0.0, hi=1e6),
                              'N m/rad per joint of the hold; not set = Naganathan\'s rule (pi f0)^2 J0 at half the '
                              'first clamped-joint frequency f0 (plant/servo.py hold_gains)'),
    'watchdog.hold_kv': Param(DERIVED, float_list(lo=0.0, hi=1e5),
                              'N m s/rad per joint of the hold (and of damp); not set = 4 sqrt(kp J0), damping ratio '
                              '2 on the rigid joint inertia'),
    'effort_limits': Param(DERIVED, float_list(lo=0.0, lo_open=True),
                           'N m per joint, clamp limits, at most the arm file\'s; not set = the arm file\'s',
                           runtime=True),
    'publish_rates.joint_states': Param(1000.0, off_or_range(MIN_PUBLISH_RATE, MAX_LOOP_RATE),
                                        'Hz (simulated time), at most loop_rate; 0 = off', runtime=True),
    'publish_rates.state': Param(CONTROL_RATE, off_or_range(MIN_PUBLISH_RATE, MAX_LOOP_RATE),
                                 'Hz, /flexarm/state = the control rate (controllers answer every state; the '
                                 'controllers\' `rate` must equal it); at most loop_rate; lockstep: the control '
                                 'period, a divisor of loop_rate; 0 = off', runtime=True),
    'publish_rates.markers': Param(30.0, off_or_range(MIN_PUBLISH_RATE, 100.0), 'Hz, /flexarm/markers; 0 = off',
                                   runtime=True),
    'publish_rates.diagnostics': Param(1.0, float_range(lo=MIN_PUBLISH_RATE, hi=100.0),
                                       'Hz (wall clock), /diagnostics', runtime=True),
    'publish_rates.clock': Param(1000.0, float_range(lo=MIN_RATE, hi=MAX_LOOP_RATE),
                                 'Hz (simulated time), /clock in simtime and lockstep; at most loop_rate',
                                 runtime=True),
    'frame_ids.base': Param('base_link', string(), 'frame of /flexarm/state poses and of the markers'),
    'max_catchup_steps': Param(5, integer(lo=0, hi=1000),
                               'realtime: late steps run back to back up to this many periods behind; beyond, '
                               'missed periods are skipped and counted', runtime=True),
    'timing.spin_us': Param(150.0, float_range(lo=0.0, hi=10000.0),
                            'realtime/simtime: sleep to the deadline minus at most this (us; adapts to the measured sleep overshoot), then busy-wait'),
    'timing.realtime_priority': Param(50, integer(lo=0, hi=99),
                                      'realtime: SCHED_FIFO priority of the timing-loop thread where permitted '
                                      '(CAP_SYS_NICE or an rtprio limit; refused -> warning); 0 = normal scheduling'),
    'divergence.max_abs_position': Param(1.0e4, float_range(lo=0.0, lo_open=True, hi=1.0e6),
                                         'bound on |z| (rad, m): beyond it integration stops until a reset',
                                         runtime=True),
    'divergence.max_abs_velocity': Param(1.0e5, float_range(lo=0.0, lo_open=True, hi=1.0e7),
                                         'bound on |dz/dt| (rad/s, m/s)', runtime=True),
    'markers.centerline_points': Param(20, integer(lo=2, hi=1000), 'samples per link centre line'),
    'markers.trail_length': Param(300, integer(lo=0, hi=10000), 'end-effector trail points; 0 = no trail',
                                  runtime=True),
    'lockstep.republish_period': Param(0.5, float_range(lo=0.01, hi=60.0),
                                       's wall: re-send the current state while waiting for a command',
                                       runtime=True),
    'lockstep.controller_timeout': Param(5.0, float_range(lo=0.05, hi=3600.0),
                                         's wall: a controller that has not answered the plant\'s state for this long '
                                         'is reported (log line, /diagnostics ERROR; WARN before its first command) '
                                         'and lockstep.on_controller_timeout applies', runtime=True),
    'lockstep.on_controller_timeout': Param('stop', choice(('stop', 'zero_torque')),
                                            'stop: integration stops (the state is re-sent) until the controller '
                                            'answers; zero_torque: the plant goes on with zero torque, one control '
                                            'period per period of wall time, until it answers (the run is then no '
                                            'longer reproducible)', runtime=True),
    # ---------------------------------------------------------------- sensor models (flexarm_sim/sensors.py)
    'sensors.seed': Param(0, integer(lo=0, hi=2 ** 31 - 1), 'seed of the sensors\' noise (reproducible runs)'),
    'sensors.encoders.enabled': Param(False, boolean(),
                                      '/joint_states carries what encoders and drives measure (quantized angle, the '
                                      'drive\'s velocity, measured torque) instead of the true joint state; sampled '
                                      'at publish_rates.joint_states (lockstep: every control instant)'),
    'sensors.encoders.counts_per_rev': Param(SENSOR_DEFAULTS['encoders.counts_per_rev'], integer(lo=0, hi=2 ** 31),
                                             'encoder counts per revolution (Dynamixel X: 4096); 0 = not quantized'),
    'sensors.encoders.noise': Param(SENSOR_DEFAULTS['encoders.noise'], float_range(lo=0.0, hi=1.0),
                                    'rad, std of Gaussian noise before quantization'),
    'sensors.encoders.velocity_resolution': Param(SENSOR_DEFAULTS['encoders.velocity_resolution'],
                                                  float_range(lo=0.0, hi=10.0),
                                                  'rad/s, step of the drive\'s velocity (Dynamixel: 0.229 rpm); 0 = '
                                                  'exact'),
    'sensors.effort.noise': Param(SENSOR_DEFAULTS['effort.noise'], float_range(lo=0.0, hi=1e4),
                                  'N m, std of the measured joint torque\'s noise (with sensors.encoders.enabled)'),
    'sensors.effort.resolution': Param(SENSOR_DEFAULTS['effort.resolution'], float_range(lo=0.0, hi=1e4),
                                       'N m, quantization of the measured torque (Dynamixel XM430: 0.0048); 0 = none'),
    'sensors.strain.gauges': Param(DERIVED, string_list(),
                                   'strain gauges, each \'<link>@<x m>[:in_plane|out_of_plane][:c=<m>]\' (link: joint '
                                   'name, <joint>_link or index); published on /flexarm/strain '
                                   '(flexarm_msgs/StrainGauges); not set = none'),
    'sensors.strain.distance': Param(SENSOR_DEFAULTS['strain.distance'], float_range(lo=0.0, lo_open=True, hi=1.0),
                                     'm, distance c of a gauge from the neutral axis (strain = c w\'\'), unless its '
                                     'description gives one'),
    'sensors.strain.noise': Param(SENSOR_DEFAULTS['strain.noise'], float_range(lo=0.0, hi=1.0),
                                  'strain (m/m), std of the Gaussian noise per sample'),
    'sensors.strain.bias': Param(DERIVED, float_list(lo=-1.0, hi=1.0),
                                 'strain (m/m), constant offset per gauge (or one for all); not set = zeros'),
    'sensors.strain.bandwidth': Param(SENSOR_DEFAULTS['strain.bandwidth'], float_range(lo=0.0, hi=1e5),
                                      'Hz, first-order low-pass of the amplifier; 0 = none'),
    'sensors.strain.rate': Param(SENSOR_DEFAULTS['strain.rate'], float_range(lo=MIN_RATE, hi=MAX_LOOP_RATE),
                                 'Hz, at most loop_rate (lockstep: the control rate publish_rates.state)'),
    'sensors.accelerometer.enabled': Param(False, boolean(),
                                           'tip accelerometer (specific force in the tip frame) on /flexarm/tip_imu '
                                           '(sensor_msgs/Imu, linear acceleration only)'),
    'sensors.accelerometer.noise_density': Param(SENSOR_DEFAULTS['accelerometer.noise_density'],
                                                 float_range(lo=0.0, hi=100.0), 'm/s^2/sqrt(Hz), white noise density'),
    'sensors.accelerometer.bandwidth': Param(SENSOR_DEFAULTS['accelerometer.bandwidth'], float_range(lo=0.0, hi=1e5),
                                             'Hz, first-order low-pass; 0 = none'),
    'sensors.accelerometer.range': Param(SENSOR_DEFAULTS['accelerometer.range'],
                                         float_range(lo=0.0, lo_open=True, hi=1e4),
                                         'm/s^2, readings saturate at +-range (16 g)'),
    'sensors.accelerometer.rate': Param(SENSOR_DEFAULTS['accelerometer.rate'],
                                        float_range(lo=MIN_RATE, hi=MAX_LOOP_RATE),
                                        'Hz, at most loop_rate (lockstep: the control rate publish_rates.state)'),
})

HEADER = """Parameters of the flexarm plant node (flexarm_sim `plant`), generated from flexarm_sim/plant/config.py.
  ros2 run flexarm_sim plant --ros-args --params-file config/plant.yaml [-p arm:=slewing_beam]
Every value is validated at start (the node exits naming the bad parameter); [runtime] ones can be changed with
`ros2 param set /plant <name> <value>` (also validated). `[]` = not set: the value named in the comment."""


def derived_values(values: dict, model) -> dict:
    """The values of the DERIVED parameters for this arm (what "not set" means)."""
    n, nm = model.n_joints, int(model.mode_index.size)
    return {'initial.position': [0.0] * n, 'initial.velocity': [0.0] * n,
            'initial.modal_position': [0.0] * nm, 'initial.modal_velocity': [0.0] * nm,
            'servo.kp': [0.0] * n, 'servo.kv': [0.0] * n,
            'effort_limits': [float(j.effort_limit) for j in model.spec.joints],
            'sensors.strain.gauges': [], 'sensors.strain.bias': [], **hold_gain_values(values, model)}


def hold_gain_values(values: dict, model) -> dict:
    """The watchdog hold's gains in force (plant/servo.py hold_gains where not set)."""
    if values['watchdog.hold_kp'] is not DERIVED and values['watchdog.hold_kv'] is not DERIVED:
        return {'watchdog.hold_kp': list(values['watchdog.hold_kp']), 'watchdog.hold_kv': list(values['watchdog.hold_kv'])}
    from .servo import hold_gains
    kp, kv = hold_gains(model)
    return {'watchdog.hold_kp': [float(x) for x in kp] if values['watchdog.hold_kp'] is DERIVED
            else list(values['watchdog.hold_kp']),
            'watchdog.hold_kv': [float(x) for x in kv] if values['watchdog.hold_kv'] is DERIVED
            else list(values['watchdog.hold_kv'])}


def check_against_arm(values: dict, model):
    """Rules across parameters and against the arm: array lengths, effort limits at most the arm file's, publish
    rates at most the loop rate, the lock-step control period, the servo. ConfigError naming the parameter."""
    n, nm = model.n_joints, int(model.mode_index.size)
    for name, k in (('initial.position', n), ('initial.velocity', n), ('initial.modal_position', nm),
                    ('initial.modal_velocity', nm), ('effort_limits', n), ('watchdog.hold_kp', n),
                    ('watchdog.hold_kv', n)):
        v = values[name]
        if v is not DERIVED and len(v) != k:
            raise ConfigError(name, f'expected {k} values for arm {model.spec.name!r}, got {len(v)}')
    lim = values['effort_limits']
    if lim is not DERIVED:
        for j, (x, js) in enumerate(zip(lim, model.spec.joints)):
            if not math.isfinite(x) or x > js.effort_limit:
                raise ConfigError(f'effort_limits[{j}]', f'{x:g} N m exceeds the arm file\'s limit of joint '
                                                          f'{js.name} ({js.effort_limit:g} N m): limits can only be '
                                                          'tightened')
    rate = values['loop_rate']
    for name in ('publish_rates.joint_states', 'publish_rates.state', 'publish_rates.clock'):
        if values[name] > rate:
            raise ConfigError(name, f'{values[name]:g} Hz exceeds loop_rate ({rate:g} Hz)')
    reach = max([abs(x) for js in model.spec.joints for x in js.position_limits if math.isfinite(x)], default=0.0)
    if values['divergence.max_abs_position'] < reach:
        raise ConfigError('divergence.max_abs_position', f'{values["divergence.max_abs_position"]:g} is below the '
                                                         f'arm\'s joint limits ({reach:g} rad): a joint within them '
                                                         'would count as diverged')
    speed = max([js.velocity_limit for js in model.spec.joints if math.isfinite(js.velocity_limit)], default=0.0)
    if values['divergence.max_abs_velocity'] < speed:
        raise ConfigError('divergence.max_abs_velocity', f'{values["divergence.max_abs_velocity"]:g} is below the '
                                                         f'arm\'s velocity limits ({speed:g} rad/s)')
    state_rate = values['publish_rates.state']
    if values['time_mode'] != 'lockstep' and state_rate > 0 and values['command_timeout'] < 2.0 / state_rate:
        raise ConfigError('command_timeout', f'{values["command_timeout"]:g} s is shorter than two state periods '
                                             f'({2.0 / state_rate:g} s at publish_rates.state {state_rate:g} Hz): the '
                                             'watchdog would fire between the commands that answer the states')
    if values['time_mode'] == 'lockstep':
        s = values['publish_rates.state']
        ratio = rate / s if s > 0 else math.inf
        if not (s > 0 and abs(ratio - round(ratio)) < 1e-9):
            raise ConfigError('publish_rates.state', f'lockstep: the control rate ({s:g} Hz) must divide loop_rate '
                                                     f'({rate:g} Hz) into whole steps')
    check_sensors(values, model)
    if values['servo.enabled']:
        if values['time_mode'] == 'lockstep':
            raise ConfigError('servo.enabled', 'not available in lockstep (position commands are not stamped)')
        for name in ('servo.kp', 'servo.kv'):
            v = values[name]
            if v is DERIVED or len(v) != n:
                raise ConfigError(name, f'servo.enabled needs {n} values, got '
                                        f'{"none" if v is DERIVED else len(v)}')


def check_sensors(values: dict, model):
    """The sensor models fit the arm (gauge descriptions, biases) and the rates: at most loop_rate; in lockstep every
    sensor is sampled at the control instants, so its rate must be the control rate."""
    from ..sensors import SensorConfig
    cfg = SensorConfig.from_values(model, values)
    rate = values['loop_rate']
    for name, on in (('sensors.strain.rate', bool(cfg.gauges)), ('sensors.accelerometer.rate', cfg.accelerometer)):
        if not on:
            continue
        if values[name] > rate:
            raise ConfigError(name, f'{values[name]:g} Hz exceeds loop_rate ({rate:g} Hz)')
        if values['time_mode'] == 'lockstep' and values[name] != values['publish_rates.state']:
            raise ConfigError(name, f'lockstep samples every sensor at the control instants: set it to '
                                    f'publish_rates.state ({values["publish_rates.state"]:g} Hz)')
    return cfg


def resolved(values: dict, model) -> dict:
    """`values` with every DERIVED parameter replaced by its value for this arm."""
    d = derived_values(values, model)
    return {k: (d[k] if v is DERIVED else v) for k, v in values.items()}


def render() -> str:
    return TABLE.render_yaml(HEADER)


if __name__ == '__main__':
    sys.stdout.write(render())
