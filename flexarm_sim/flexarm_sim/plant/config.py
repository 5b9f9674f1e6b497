"""Parameters of the `plant` node: the table (flexarm_sim.common.params) and the rules that need the arm (no ROS).

config/plant.yaml is generated from TABLE (`python -m flexarm_sim.plant.config > plant.yaml`; a test checks the
shipped file is). Nested YAML keys are dotted parameter names (`publish_rates.state`). Run-time changes
(`ros2 param set /plant ...`) can only move a parameter within its stated range; the safety limits can only be
tightened (effort limits at most the arm file's).
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ..common.params import (DERIVED, ConfigError, Param, ParamTable, boolean, choice, float_list, float_range,
                             integer, string)

TIME_MODES = ('realtime', 'simtime', 'lockstep')
INTEGRATORS = ('rk4', 'midpoint')
MAX_LOOP_RATE = 50000.0

TABLE = ParamTable('plant', {
    'arm': Param('deluca_two_link', string(),
                 'arm description: a YAML path, or the name of a shipped arm (flexarm_sim/arms)'),
    'time_mode': Param('realtime', choice(TIME_MODES),
                       'realtime: wall-clock paced, stamps = sample instants on the ROS (wall) clock; simtime: '
                       '/clock from 0, paced by real_time_factor; lockstep: each control period waits for '
                       'flexarm_msgs/JointEffortCommand on /flexarm/effort_command (reproducible bit for bit)'),
    'loop_rate': Param(1000.0, float_range(lo=0.0, lo_open=True, hi=MAX_LOOP_RATE),
                       'Hz: integration steps per second of simulated time (dt = 1/loop_rate)'),
    'integrator': Param('rk4', choice(INTEGRATORS), 'rk4 | midpoint (implicit midpoint, stiffly stable)'),
    'substeps': Param(0, integer(lo=0, hi=1000),
                      'integration sub-steps per step; 0 = automatic (RK4 within its stable step)'),
    'real_time_factor': Param(1.0, float_range(lo=0.0, hi=1000.0),
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
    'servo.enabled': Param(False, boolean(),
                           'plant-side joint position servo (Naganathan): torque = effort command + kp (q_c - q) + '
                           'kv (qdot_c - qdot) at every sub-step, q_c (qdot_c) from /position_controller/commands; '
                           'not in lockstep'),
    'servo.kp': Param(DERIVED, float_list(lo=0.0, hi=1e6), 'N m/rad per joint; required with servo.enabled'),
    'servo.kv': Param(DERIVED, float_list(lo=0.0, hi=1e5), 'N m s/rad per joint; required with servo.enabled'),
    'command_timeout': Param(0.5, float_range(lo=0.0, lo_open=True, hi=3600.0),
                             's of plant time without a valid command -> zero torque', runtime=True),
    'effort_limits': Param(DERIVED, float_list(lo=0.0, lo_open=True),
                           'N m per joint, clamp limits, at most the arm file\'s; not set = the arm file\'s',
                           runtime=True),
    'publish_rates.joint_states': Param(1000.0, float_range(lo=0.0, hi=MAX_LOOP_RATE),
                                        'Hz (simulated time), at most loop_rate; 0 = off', runtime=True),
    'publish_rates.state': Param(500.0, float_range(lo=0.0, hi=MAX_LOOP_RATE),
                                 'Hz, /flexarm/state = the control rate (controllers answer every state; the '
                                 'controllers\' `rate` must equal it); at most loop_rate; lockstep: the control '
                                 'period, a divisor of loop_rate; 0 = off', runtime=True),
    'publish_rates.markers': Param(30.0, float_range(lo=0.0, hi=100.0), 'Hz, /flexarm/markers; 0 = off',
                                   runtime=True),
    'publish_rates.diagnostics': Param(1.0, float_range(lo=0.0, lo_open=True, hi=100.0),
                                       'Hz (wall clock), /diagnostics', runtime=True),
    'publish_rates.clock': Param(1000.0, float_range(lo=0.0, lo_open=True, hi=MAX_LOOP_RATE),
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
            'effort_limits': [float(j.effort_limit) for j in model.spec.joints]}


def check_against_arm(values: dict, model):
    """Rules across parameters and against the arm: array lengths, effort limits at most the arm file's, publish
    rates at most the loop rate, the lock-step control period, the servo. ConfigError naming the parameter."""
    n, nm = model.n_joints, int(model.mode_index.size)
    for name, k in (('initial.position', n), ('initial.velocity', n), ('initial.modal_position', nm),
                    ('initial.modal_velocity', nm), ('effort_limits', n)):
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
    if values['time_mode'] == 'lockstep':
        s = values['publish_rates.state']
        ratio = rate / s if s > 0 else math.inf
        if not (s > 0 and abs(ratio - round(ratio)) < 1e-9):
            raise ConfigError('publish_rates.state', f'lockstep: the control rate ({s:g} Hz) must divide loop_rate '
                                                     f'({rate:g} Hz) into whole steps')
    if values['servo.enabled']:
        if values['time_mode'] == 'lockstep':
            raise ConfigError('servo.enabled', 'not available in lockstep (position commands are not stamped)')
        for name in ('servo.kp', 'servo.kv'):
            v = values[name]
            if v is DERIVED or len(v) != n:
                raise ConfigError(name, f'servo.enabled needs {n} values, got '
                                        f'{"none" if v is DERIVED else len(v)}')


def resolved(values: dict, model) -> dict:
    """`values` with every DERIVED parameter replaced by its value for this arm."""
    d = derived_values(values, model)
    return {k: (d[k] if v is DERIVED else v) for k, v in values.items()}


def render() -> str:
    return TABLE.render_yaml(HEADER)


if __name__ == '__main__':
    sys.stdout.write(render())
