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

import math
from dataclasses import dataclass, field

TIME_MODES = ('realtime', 'simtime', 'lockstep')
INTEGRATORS = ('rk4', 'midpoint')


class ConfigError(ValueError):
    """An invalid parameter value; .name is the parameter's (dotted) name."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"invalid parameter '{name}': {reason}")
        self.name = name
        self.reason = reason


# ----------------------------------------------------------------------------- validators
def _number(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f'expected a number, got {value!r}')
    v = float(value)
    if math.isnan(v):
        raise ConfigError(name, 'must not be NaN')
    return v


def _float(lo=None, hi=None, lo_open=False, allow_inf=False):
    def check(value, name):
        v = _number(value, name)
        if math.isinf(v) and not allow_inf:
            raise ConfigError(name, f'must be finite, got {v}')
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise ConfigError(name, f'must be {">" if lo_open else ">="} {lo:g}, got {v:g}')
        if hi is not None and v > hi:
            raise ConfigError(name, f'must be <= {hi:g}, got {v:g}')
        return v
    return check


def _int(lo=None, hi=None):
    def check(value, name):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(name, f'expected an integer, got {value!r}')
        if lo is not None and value < lo:
            raise ConfigError(name, f'must be >= {lo}, got {value}')
        if hi is not None and value > hi:
            raise ConfigError(name, f'must be <= {hi}, got {value}')
        return int(value)
    return check


def _choice(choices):
    def check(value, name):
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(name, f'must be one of {", ".join(choices)}; got {value!r}')
        return value
    return check


def _bool():
    def check(value, name):
        if not isinstance(value, bool):
            raise ConfigError(name, f'expected true or false, got {value!r}')
        return value
    return check


def _string(nonempty=True):
    def check(value, name):
        if not isinstance(value, str) or (nonempty and not value.strip()):
            raise ConfigError(name, f'expected a non-empty string, got {value!r}')
        return value
    return check


def _float_list(lo=None, lo_open=False, allow_inf=False):
    def check(value, name):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            # A ROS parameter that is an empty list may arrive as an empty byte/bool array.
            try:
                value = list(value)
            except TypeError:
                raise ConfigError(name, f'expected a list of numbers, got {value!r}') from None
        out = []
        item = _float(lo=lo, lo_open=lo_open, allow_inf=allow_inf)
        for i, x in enumerate(value):
            out.append(item(x, f'{name}[{i}]'))
        return out
    return check


@dataclass(frozen=True)
class Param:
    default: object
    check: object
    runtime: bool
    doc: str


PARAMETERS = {
    'arm': Param('deluca_two_link', _string(), False,
                 'arm description: a YAML path, or the name of a file in flexarm_bringup/config/arms'),
    'time_mode': Param('realtime', _choice(TIME_MODES), False,
                       'realtime | simtime | lockstep (see the plant node docstring)'),
    'loop_rate': Param(1000.0, _float(lo=0.0, lo_open=True, hi=50000.0), False,
                       'Hz: integration steps per second of simulated time (dt = 1/loop_rate)'),
    'integrator': Param('rk4', _choice(INTEGRATORS), False, 'rk4 | midpoint (implicit, stiffly stable)'),
    'substeps': Param(0, _int(lo=0, hi=1000), False,
                      'integration sub-steps per loop step; 0 = automatic (RK4: keep h <= 0.5 x largest '
                      'stable RK4 step of the arm; midpoint: 1)'),
    'real_time_factor': Param(1.0, _float(lo=0.0, hi=1000.0), True,
                              'simtime only: simulated seconds per wall second; 0 = as fast as possible'),
    'initial.position': Param([], _float_list(), False, 'rad, one per joint; empty = zeros'),
    'initial.velocity': Param([], _float_list(), False, 'rad/s, one per joint; empty = zeros'),
    'initial.modal_position': Param([], _float_list(), False,
                                    'modal coordinates of all flexible links in arm order; empty = zeros'),
    'initial.modal_velocity': Param([], _float_list(), False, 'modal rates; empty = zeros'),
    'wait_for_command': Param(False, _bool(), False,
                              'realtime/simtime: hold the arm (no integration, state at the idle rate) until the '
                              'first valid torque command, so a gravity-loaded arm does not fall before its '
                              'controller is up'),
    'command_timeout': Param(0.5, _float(lo=0.0, lo_open=True, hi=3600.0), True,
                             's (simulated time): no valid command for this long -> zero torque'),
    'effort_limits': Param([], _float_list(lo=0.0, lo_open=True, allow_inf=True), True,
                           'N m per joint, overrides the arm file limits; empty = the arm file values'),
    'publish_rates.joint_states': Param(1000.0, _float(lo=0.0), True,
                                        'Hz (simulated time), capped at loop_rate; 0 = off'),
    'publish_rates.state': Param(100.0, _float(lo=0.0), True, 'Hz, /flexarm/state; 0 = off (lockstep: every step)'),
    'publish_rates.markers': Param(30.0, _float(lo=0.0), True, 'Hz, /flexarm/markers; 0 = off'),
    'publish_rates.diagnostics': Param(1.0, _float(lo=0.0, lo_open=True), True, 'Hz (wall clock), /diagnostics'),
    'publish_rates.clock': Param(1000.0, _float(lo=0.0, lo_open=True), True,
                                 'Hz (simulated time), /clock in simtime and lockstep modes'),
    'frame_ids.base': Param('base_link', _string(), False, 'frame of /flexarm/state poses and of the markers'),
    'max_catchup_steps': Param(5, _int(lo=0, hi=1000), True,
                               'realtime: late steps run back to back up to this many periods behind; '
                               'beyond, missed periods are skipped and counted'),
    'timing.spin_us': Param(150.0, _float(lo=0.0, hi=10000.0), False,
                            'realtime/simtime: sleep to the deadline minus this, then busy-wait (us; 0 = sleep only)'),
    'timing.realtime_priority': Param(50, _int(lo=0, hi=99), False,
                                      'realtime mode: SCHED_FIFO priority of the timing-loop thread (1..99; needs '
                                      'CAP_SYS_NICE or an rtprio limit; refused -> warning, normal scheduling); '
                                      '0 = do not change'),
    'divergence.max_abs_position': Param(1.0e4, _float(lo=0.0, lo_open=True, allow_inf=True), True,
                                         'bound on |z| (rad, m); beyond it the plant stops as diverged'),
    'divergence.max_abs_velocity': Param(1.0e5, _float(lo=0.0, lo_open=True, allow_inf=True), True,
                                         'bound on |dz/dt|'),
    'markers.centerline_points': Param(20, _int(lo=2, hi=1000), False, 'samples per link centre line'),
    'markers.trail_length': Param(300, _int(lo=0, hi=100000), True, 'end-effector trail points (0 = no trail)'),
    'lockstep.republish_period': Param(0.5, _float(lo=0.0, lo_open=True), True,
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
