"""One joint on the servo bus: its parameters (JOINT_TABLE, the bridge node's ``joints.<joint>.<key>``) and
:class:`JointServoConfig`, the one shape of a joint's servo configuration that the bus, the bridge's core and node
and the emulator use, its defaults and its validation the table's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from flexarm_sim.common.params import ConfigError, Param, ParamTable, choice, float_range, integer, number

from . import control_table as ct

JOINT_MODES = ('current', 'current_position')


def _pair(value, name):
    if isinstance(value, (str, bytes)) or not hasattr(value, '__iter__'):
        raise ConfigError(name, f'expected [low, high], got {value!r}')
    v = [number(x, f'{name}[{i}]') for i, x in enumerate(value)]
    if len(v) != 2 or not v[0] < v[1]:
        raise ConfigError(name, f'expected [low, high] with low < high, got {v}')
    return (v[0], v[1])


_pair.text = '[low, high], low < high'


def _direction(value, name):
    v = integer()(value, name)
    if v not in (1, -1):
        raise ConfigError(name, f'must be 1 or -1, got {v}')
    return v


_direction.text = '1 | -1'


JOINT_TABLE = ParamTable('joints.<joint>', {
    'servo_id': Param(None, integer(lo=0, hi=252), 'Dynamixel ID (0-252)'),
    'mode': Param('current', choice(JOINT_MODES),
                  'current (torque control, /effort_controller/commands) | current_position '
                  '(servo-side PD, /position_controller/commands)'),
    'torque_constant': Param(1.78, float_range(lo=0.0, lo_open=True, hi=100.0), 'N m/A at the servo horn'),
    'gear_ratio': Param(1.0, float_range(lo=0.0, lo_open=True, hi=1000.0), 'external reduction horn -> joint'),
    'direction': Param(1, _direction, '+1 / -1 (joint sign relative to the servo)'),
    'zero_offset': Param(0.0, float_range(lo=-100.0, hi=100.0), 'rad, joint angle when the servo reads 0'),
    'position_limits': Param((-math.pi, math.pi), _pair, 'rad [low, high], joint side'),
    'velocity_limit': Param(5.0, float_range(lo=0.0, lo_open=True, hi=1000.0), 'rad/s, joint side'),
    'current_limit': Param(1.0, float_range(lo=0.0, lo_open=True, hi=20.0), 'A, motor side (<= model maximum)'),
    'effort_limit': Param(0.0, float_range(lo=0.0, hi=1000.0),
                          'N m, joint side; 0 = current_limit x torque_constant x gear_ratio'),
})


def _default(key):
    return JOINT_TABLE.params[key].default


@dataclass
class JointServoConfig:
    """A joint's servo: its id, operating mode and the conversions joint <-> servo (JOINT_TABLE's keys and defaults;
    each value is checked by the table at construction: ConfigError naming ``joints.<name>.<key>``).
    effort_limit 0 stands for what current_limit allows (BridgeConfig sets the bound the bus can apply)."""
    name: str
    servo_id: int
    mode: str = _default('mode')
    torque_constant: float = _default('torque_constant')     # N m/A at the servo horn
    gear_ratio: float = _default('gear_ratio')               # external reduction horn -> joint
    direction: int = _default('direction')                   # +1 / -1
    zero_offset: float = _default('zero_offset')             # rad, joint angle at servo count 0
    position_limits: tuple = _default('position_limits')     # rad (low, high), joint side
    velocity_limit: float = _default('velocity_limit')       # rad/s, joint side
    current_limit: float = _default('current_limit')         # A, motor side
    effort_limit: float = _default('effort_limit')           # N m, joint side (0: current_limit's)

    def __post_init__(self):
        for key, p in JOINT_TABLE.params.items():
            setattr(self, key, p.check(getattr(self, key), f'joints.{self.name}.{key}'))

    @property
    def mode_value(self) -> int:
        return ct.MODE_BY_NAME[self.mode]
