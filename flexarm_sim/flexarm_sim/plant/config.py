"""Plant parameters: names, defaults, validation (no ROS).

Every parameter of the `plant` node is listed in PARAMETERS with its default, a validator and whether
it may change at run time (`ros2 param set`). `validate(name, value)` coerces a value (ints accepted
where floats are expected) or raises ConfigError naming the parameter; `PlantConfig.from_mapping`
validates a whole set (start-up) including cross-parameter rules. The YAML form is

    plant:
      ros__parameters:
        arm: deluca_two_link
        loop_rate: 1000.0
        publish_rates: {state: 100.0}
        ...

(nested keys become dotted parameter names, e.g. `publish_rates.state`). See
flexarm_bringup/config/plant.yaml for the documented defaults.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..params import ConfigError, boolean, choice, float_list, float_range, integer, number, string

TIME_MODES = ('realtime', 'simtime', 'lockstep')
INTEGRATORS = ('rk4', 'midpoint')


@dataclass(frozen=True)
class Param:
    default: object
    check: object
    runtime: bool
    doc: str


PARAMETERS = {
    'arm': Param('deluca_two_link', string(), False,
                 'arm description: a YAML path, or the name of a file in flexarm_bringup/config/arms'),
    'time_mode': Param('realtime', choice(TIME_MODES), False,
                       'realtime | simtime | lockstep (see the plant node docstring)'),
    'loop_rate': Param(1000.0, float_range(lo=0.0, lo_open=True, hi=50000.0), False,
                       'Hz: integration steps per second of simulated time (dt = 1/loop_rate)'),
    'integrator': Param('rk4', choice(INTEGRATORS), False, 'rk4 | midpoint (implicit, stiffly stable)'),
    'substeps': Param(0, integer(lo=0, hi=1000), False,
                      'integration sub-steps per loop step; 0 = automatic (RK4: keep h <= 0.5 x largest '
                      'stable RK4 step of the arm; midpoint: 1)'),
    'real_time_factor': Param(1.0, float_range(lo=0.0, hi=1000.0), True,
                              'simtime only: simulated seconds per wall second; 0 = as fast as possible'),
    'initial.position': Param([], float_list(), False, 'rad, one per joint; empty = zeros'),
    'initial.velocity': Param([], float_list(), False, 'rad/s, one per joint; empty = zeros'),
    'initial.modal_position': Param([], float_list(), False,
                                    'modal coordinates of all flexible links in arm order; empty = zeros'),
    'initial.modal_velocity': Param([], float_list(), False, 'modal rates; empty = zeros'),
    'wait_for_command': Param(False, boolean(), False,
                              'realtime/simtime: hold the arm (no integration, state at the idle rate) until the '
                              'first valid torque command, so a gravity-loaded arm does not fall before its '
                              'controller is up'),
    'servo.enabled': Param(False, boolean(), False,
                           'plant-side position servo on every joint (plant/servo.py): torque = effort command + '
                           'kp (q_c - q) + kv (qdot_c - qdot) at every integration sub-step, q_c (and qdot_c) '
                           'from /position_controller/commands; not in lockstep'),
    'servo.kp': Param([], float_list(lo=0.0), False, 'N m/rad per joint (required with servo.enabled)'),
    'servo.kv': Param([], float_list(lo=0.0), False, 'N m s/rad per joint (required with servo.enabled)'),
    'command_timeout': Param(0.5, float_range(lo=0.0, lo_open=True, hi=3600.0), True,
                             's (simulated time): no valid command for this long -> zero torque'),
    'effort_limits': Param([], float_list(lo=0.0, lo_open=True, allow_inf=True), True,
                           'N m per joint, overrides the arm file limits; empty = the arm file values'),
    'publish_rates.joint_states': Param(1000.0, float_range(lo=0.0), True,
                                        'Hz (simulated time), capped at loop_rate; 0 = off'),
    'publish_rates.state': Param(100.0, float_range(lo=0.0), True, 'Hz, /flexarm/state; 0 = off (lockstep: every step)'),
    'publish_rates.markers': Param(30.0, float_range(lo=0.0), True, 'Hz, /flexarm/markers; 0 = off'),
    'publish_rates.diagnostics': Param(1.0, float_range(lo=0.0, lo_open=True), True, 'Hz (wall clock), /diagnostics'),
    'publish_rates.clock': Param(1000.0, float_range(lo=0.0, lo_open=True), True,
                                 'Hz (simulated time), /clock in simtime and lockstep modes'),
    'frame_ids.base': Param('base_link', string(), False, 'frame of /flexarm/state poses and of the markers'),
    'max_catchup_steps': Param(5, integer(lo=0, hi=1000), True,
                               'realtime: late steps run back to back up to this many periods behind; '
                               'beyond, missed periods are skipped and counted'),
    'timing.spin_us': Param(150.0, float_range(lo=0.0, hi=10000.0), False,
                            'realtime/simtime: sleep to the deadline minus this, then busy-wait (us; 0 = sleep only)'),
    'timing.realtime_priority': Param(50, integer(lo=0, hi=99), False,
                                      'realtime mode: SCHED_FIFO priority of the timing-loop thread (1..99; needs '
                                      'CAP_SYS_NICE or an rtprio limit; refused -> warning, normal scheduling); '
                                      '0 = do not change'),
    'divergence.max_abs_position': Param(1.0e4, float_range(lo=0.0, lo_open=True, allow_inf=True), True,
                                         'bound on |z| (rad, m); beyond it the plant stops as diverged'),
    'divergence.max_abs_velocity': Param(1.0e5, float_range(lo=0.0, lo_open=True, allow_inf=True), True,
                                         'bound on |dz/dt|'),
    'markers.centerline_points': Param(20, integer(lo=2, hi=1000), False, 'samples per link centre line'),
    'markers.trail_length': Param(300, integer(lo=0, hi=100000), True, 'end-effector trail points (0 = no trail)'),
    'lockstep.republish_period': Param(0.5, float_range(lo=0.0, lo_open=True), True,
                                       's (wall): lockstep re-sends the current state while waiting'),
}

RUNTIME = frozenset(k for k, p in PARAMETERS.items() if p.runtime)


def validate(name: str, value):
    """Coerced value of one parameter, or ConfigError naming it."""
    if name not in PARAMETERS:
        raise ConfigError(name, 'unknown parameter')
    return PARAMETERS[name].check(value, name)


def defaults() -> dict:
    return {k: (list(p.default) if isinstance(p.default, list) else p.default) for k, p in PARAMETERS.items()}


@dataclass
class PlantConfig:
    """All plant parameters, validated; dotted names become attribute-free dict access via .values."""

    values: dict = field(default_factory=defaults)

    def __getitem__(self, name):
        return self.values[name]

    @classmethod
    def from_mapping(cls, mapping: dict, ignore_unknown_prefixes=('qos_overrides.',)) -> 'PlantConfig':
        vals = defaults()
        for name, value in mapping.items():
            if name in ('use_sim_time', 'start_type_description_service') or name.startswith(ignore_unknown_prefixes):
                continue
            vals[name] = validate(name, value)
        return cls(vals)

    def with_changes(self, changes: dict) -> 'PlantConfig':
        """Validated copy with run-time changes applied; read-only parameters are rejected."""
        vals = dict(self.values)
        for name, value in changes.items():
            if name not in PARAMETERS:
                raise ConfigError(name, 'unknown parameter')
            if name not in RUNTIME:
                raise ConfigError(name, 'read-only at run time (restart the plant to change it)')
            vals[name] = validate(name, value)
        return PlantConfig(vals)

    def check_against_arm(self, n_joints: int, n_modal: int):
        """Cross-checks that need the arm: array lengths."""
        for name, n in (('initial.position', n_joints), ('initial.velocity', n_joints),
                        ('initial.modal_position', n_modal), ('initial.modal_velocity', n_modal)):
            if len(self.values[name]) not in (0, n):
                raise ConfigError(name, f'expected {n} values (or none), got {len(self.values[name])}')
        lim = self.values['effort_limits']
        if len(lim) not in (0, n_joints):
            raise ConfigError('effort_limits', f'expected {n_joints} values (or none), got {len(lim)}')
        if self.values['servo.enabled']:
            if self.values['time_mode'] == 'lockstep':
                raise ConfigError('servo.enabled', 'not available in lockstep (position commands are not stamped)')
            for name in ('servo.kp', 'servo.kv'):
                if len(self.values[name]) != n_joints:
                    raise ConfigError(name, f'servo.enabled needs {n_joints} values, got {len(self.values[name])}')
