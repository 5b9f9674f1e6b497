"""Parameters of the ``hardware_bridge`` node: names, defaults, validation (no ROS).

YAML form (nested keys become dotted ROS parameter names, e.g. ``joints.shoulder.servo_id``)::

    hardware_bridge:
      ros__parameters:
        port: /dev/ttyUSB0
        baud_rate: 1000000
        model: XM430-W350
        loop_rate: 250.0
        arm: deluca_two_link               # the arm the servos drive: its arm_id confirms ~/enable
        command_timeout: 0.2
        watchdog_action: torque_off        # or hold_position
        bus_watchdog: 0.1                  # s: each servo stops itself when no instruction reaches it this long
        fault_after_errors: 3              # failed reads in a row -> fault (torque off)
        fault_window: {errors: 10, period: 1.0}   # or this many failed reads within period s
        reconnect: {initial_delay: 0.1, max_delay: 1.0, multiplier: 2.0}
        joint_names: [shoulder, elbow]     # joint order of /joint_states and of the commands
        joints:
          shoulder: {servo_id: 1, mode: current, torque_constant: 1.78, ...}
          elbow:    {servo_id: 2, ...}

The parameters are one table per node, the project's mechanism (flexarm_sim.common.params): TABLE for the bridge
and JOINT_TABLE (joint.py) for each joint, expanded by `table_for(joint_names)` into ``joints.<joint>.<key>`` entries; the
node declares that table (flexarm_sim.ros.parameters.NodeParams). ``BridgeConfig.from_mapping(flat)`` validates a
flat ``{dotted name: value}`` mapping and the rules across parameters, and raises :class:`ConfigError` naming the
offending parameter; unknown names are errors (typos must not silently fall back to a default).
flexarm_bringup/config/hardware_bridge.yaml is generated from the tables (an example with two joints).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from flexarm_sim.common.params import (ConfigError, Param, ParamTable, boolean, choice, float_range, ignored,
                                       integer, number, string)

from . import control_table as ct
from .joint import JOINT_TABLE, JointServoConfig
from .serial_link import BAUD_RATES
from .servo_bus import ServoBusConfig, current_limit_raw

WATCHDOG_ACTIONS = ('torque_off', 'hold_position')
_string = string()


def _names(value, name):
    if isinstance(value, (str, bytes)) or not hasattr(value, '__iter__'):
        raise ConfigError(name, f'expected a list of joint names, got {value!r}')
    out = [_string(v, f'{name}[{i}]') for i, v in enumerate(value)]
    if not out:
        raise ConfigError(name, 'at least one joint is required')
    if len(set(out)) != len(out):
        raise ConfigError(name, f'duplicate joint names: {out}')
    for n in out:
        if '.' in n or '/' in n:
            raise ConfigError(name, f'joint name {n!r} must not contain "." or "/"')
    return out


_names.text = 'list of joint names (no "." or "/")'


def _bus_watchdog(value, name):
    v = number(value, name)
    if v == 0.0:
        return 0.0
    unit, top = ct.BUS_WATCHDOG_UNIT_S, ct.BUS_WATCHDOG_MAX * ct.BUS_WATCHDOG_UNIT_S
    k = round(v / unit)
    if not unit - 1e-9 <= v <= top + 1e-9 or abs(v - k * unit) > 1e-6:
        raise ConfigError(name, f'expected 0 or {unit:g}..{top:g} s in steps of {unit:g} s (the servo counts '
                                f'20 ms units, 1..{ct.BUS_WATCHDOG_MAX}), got {value!r}')
    return k * unit


_bus_watchdog.text = '0, or 0.02..2.54 in steps of 0.02'


def _frame(value, name):
    if not isinstance(value, str):
        raise ConfigError(name, f'expected a string, got {value!r}')
    return value


_frame.text = 'string'


TABLE = ParamTable('hardware_bridge', {
    'port': Param('/dev/ttyUSB0', _string, 'serial device (prefer a /dev/serial/by-id/... link)'),
    'baud_rate': Param(1000000, integer(choices=BAUD_RATES), 'bus baud rate; must match every servo'),
    'model': Param('XM430-W350', choice(tuple(sorted(ct.MODELS))), 'servo model (units, current limit)'),
    'loop_rate': Param(250.0, float_range(lo=10.0, hi=1000.0), 'Hz, read+write cycles per second (200-500 typical)'),
    'realtime_priority': Param(0, integer(lo=0, hi=99),
                               'SCHED_FIFO priority of the read+write loop thread where permitted (CAP_SYS_NICE or '
                               'an rtprio limit; refused -> warning); 50 suits real servos (above the controllers\' '
                               'state threads, 40). 0 = normal scheduling, the default: with the servo emulator on '
                               'the same CPU a FIFO bridge starves it (the emulated-servo tests: 4 of 5 runs failed '
                               'at 50, none of 4 at 0)'),
    'arm': Param('deluca_two_link', _string,
                 'arm description the servos drive (a shipped arm or a YAML path; its joints must be joint_names): '
                 'its arm_id must be given to ~/enable and tags /flexarm/state'),
    'bus_watchdog': Param(0.1, _bus_watchdog,
                          's: every servo\'s own Bus Watchdog (98), armed at ~/enable: a servo whose torque is on '
                          'stops by itself when no instruction reaches it for this long (dead link, killed or hung '
                          'bridge); >= 4 loop periods; 0 = not used (firmware before v38: the servos then keep '
                          'the last current when the host dies)'),
    'command_timeout': Param(0.2, float_range(lo=0.0, lo_open=True, hi=10.0),
                             's without a valid command while enabled -> watchdog action'),
    'watchdog_action': Param('torque_off', choice(WATCHDOG_ACTIONS),
                             'torque_off (latched: needs ~/enable) | hold_position (until the next command)'),
    'hold_gains.kp': Param(2.0, float_range(lo=0.0), 'N m/rad, bridge-side hold for current-mode joints'),
    'hold_gains.kd': Param(0.2, float_range(lo=0.0), 'N m s/rad, bridge-side hold for current-mode joints'),
    'read_timeout': Param(0.0, float_range(lo=0.0, hi=1.0),
                          's per SYNC_READ reply; 0 = wire time + 2 USB latency timers + 2 ms (~34 ms)'),
    'fault_after_errors': Param(3, integer(lo=1, hi=1000),
                                'consecutive failed reads (timeout/CRC) that make a fault; 1 = any'),
    'fault_window.errors': Param(10, integer(lo=0, hi=100000),
                                 'failed reads within fault_window.period that make a fault (0 = no window rule)'),
    'fault_window.period': Param(1.0, float_range(lo=0.0, lo_open=True, hi=3600.0),
                                 's, the sliding window of fault_window.errors'),
    'hardware_status_period': Param(ct.HARDWARE_STATUS_PERIOD, integer(lo=0, hi=100000),
                                    'cycles between Hardware Error Status polls (0 = only on alert bit)'),
    'reconnect.initial_delay': Param(0.1, float_range(lo=0.0, lo_open=True, hi=60.0), 's before the first attempt'),
    'reconnect.max_delay': Param(1.0, float_range(lo=0.0, lo_open=True, hi=3600.0),
                                 's, back-off cap (reconnect within about this long of the servos answering)'),
    'reconnect.multiplier': Param(2.0, float_range(lo=1.0, hi=10.0), 'back-off growth per failed attempt'),
    'reconnect.max_attempts': Param(0, integer(lo=0), 'give up after this many failed attempts (0 = never)'),
    'prompt_write': Param(True, boolean(),
                          'write a command as soon as it answers the published reading (within half a period) '
                          'instead of at the next cycle: one period less delay in the loop'),
    'diagnostics_period': Param(1.0, float_range(lo=0.05, hi=60.0), 's between /diagnostics messages'),
    'frame_id': Param('', _frame, 'header.frame_id of /joint_states'),
    'joint_names': Param(None, _names, 'joint order of /joint_states and of the command arrays (required)'),
})

PARAMETERS = TABLE.params
JOINT_PARAMETERS = JOINT_TABLE.params


def table_for(joint_names) -> ParamTable:
    """The bridge's whole table for these joints: TABLE + joints.<joint>.<key> for each joint."""
    params = dict(TABLE.params)
    for jn in joint_names:
        params.update({f'joints.{jn}.{k}': p for k, p in JOINT_TABLE.params.items()})
    return ParamTable('hardware_bridge', params)


@dataclass
class BridgeConfig:
    values: Dict[str, object]
    joints: List[JointServoConfig] = field(default_factory=list)

    def __getitem__(self, name):
        return self.values[name]

    @property
    def names(self) -> List[str]:
        return [j.name for j in self.joints]

    @classmethod
    def from_mapping(cls, mapping: dict) -> 'BridgeConfig':
        vals = {k: p.default for k, p in PARAMETERS.items()}
        per_joint: Dict[str, Dict[str, object]] = {}
        for name, value in mapping.items():
            if ignored(name) or value is None:          # None: not set (rcl) -> the default / required
                continue
            if name.startswith('joints.'):
                parts = name.split('.')
                if len(parts) != 3 or parts[2] not in JOINT_PARAMETERS:
                    raise ConfigError(name, 'unknown joint parameter (expected joints.<joint>.<one of '
                                      + ', '.join(JOINT_PARAMETERS) + '>)')
                per_joint.setdefault(parts[1], {})[parts[2]] = value
                continue
            if name not in PARAMETERS:
                raise ConfigError(name, 'unknown parameter (typo?)')
            vals[name] = PARAMETERS[name].check(value, name)
        if vals['joint_names'] is None:
            raise ConfigError('joint_names', 'required: the list of joints (joint order of the commands)')
        names = vals['joint_names']
        for extra in sorted(set(per_joint) - set(names)):
            raise ConfigError(f'joints.{extra}', f'joint {extra!r} is not listed in joint_names')
        model = ct.get_model(vals['model'])
        joints = []
        for jn in names:
            given = per_joint.get(jn, {})
            jv = {}
            for key, p in JOINT_PARAMETERS.items():
                pname = f'joints.{jn}.{key}'
                if key in given:
                    jv[key] = p.check(given[key], pname)
                elif p.default is None:
                    raise ConfigError(pname, 'required')
                else:
                    jv[key] = p.default
            max_a = model.current_limit_max_a
            if jv['current_limit'] > max_a + 1e-9:
                raise ConfigError(f'joints.{jn}.current_limit',
                                  f'{jv["current_limit"]:g} A exceeds the {model.name} maximum {max_a:.3f} A')
            requested = jv['effort_limit']
            jc = JointServoConfig(name=jn, **jv)
            # the bound the bus can actually apply: the current limit rounded down to LSB
            bus_max = current_limit_raw(jc, model) * model.current_amp_per_lsb * jc.torque_constant * jc.gear_ratio
            if bus_max <= 0:
                raise ConfigError(f'joints.{jn}.current_limit', 'rounds down to 0 LSB')
            jc.effort_limit = bus_max if requested == 0 else min(requested, bus_max)
            joints.append(jc)
        ids = [j.servo_id for j in joints]
        if len(set(ids)) != len(ids):
            raise ConfigError('joints', f'duplicate servo ids: {ids}')
        if vals['reconnect.max_delay'] < vals['reconnect.initial_delay']:
            raise ConfigError('reconnect.max_delay', 'must be >= reconnect.initial_delay')
        wd, period = vals['bus_watchdog'], 1.0 / vals['loop_rate']
        if wd and wd < 4 * period - 1e-9:
            raise ConfigError('bus_watchdog', f'{wd:g} s is shorter than 4 loop periods ({4 * period:g} s at '
                                              f'loop_rate {vals["loop_rate"]:g} Hz): one late cycle would stop '
                                              'the servos')
        return cls(vals, joints)

    @property
    def bus_watchdog_units(self) -> int:
        """bus_watchdog in the servo's 20 ms units (0 = not used)."""
        return int(round(self['bus_watchdog'] / ct.BUS_WATCHDOG_UNIT_S))

    def arm_identity(self):
        """(resolved path, arm_id) of the `arm` parameter (flexarm_sim.arms, the one resolver); ConfigError naming
        `arm` if it cannot be found or loaded, or if its joints are not the bridge's joint_names."""
        from flexarm_sim.arms import arm_id, resolve_arm
        from flexarm_sim.model import ArmSpecError, load_arm
        path = resolve_arm(self['arm'], 'arm')
        try:
            spec = load_arm(path)
        except (ArmSpecError, ValueError, OSError) as e:
            raise ConfigError('arm', f'{path}: {e}') from e
        joints = list(spec.joint_names)
        if joints != self.names:
            raise ConfigError('arm', f'{self["arm"]!r} has joints {joints}, the bridge drives {self.names} '
                                     '(joint_names): set arm to the description of the arm on these servos')
        return path, arm_id(path, spec.name)

    def bus_config(self) -> ServoBusConfig:
        rt = self.values['read_timeout']
        return ServoBusConfig(port=self['port'], baudrate=self['baud_rate'],
                              joints=list(self.joints), model=self['model'],
                              read_timeout=rt if rt > 0 else None,
                              hw_status_period=self['hardware_status_period'],
                              bus_watchdog=self.bus_watchdog_units)


def load_yaml(path: str, node_name: str = 'hardware_bridge', overrides=None) -> BridgeConfig:
    """Validate a ``<node>: ros__parameters:`` YAML file without ROS (tests, tools), with *overrides*
    ({dotted name: value}, what a launch file adds) applied."""
    import yaml
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    params = None
    for key in (node_name, '/' + node_name, '/**'):
        if isinstance(doc.get(key), dict) and 'ros__parameters' in doc[key]:
            params = doc[key]['ros__parameters']
            break
    if params is None:
        raise ConfigError(node_name, f'{path}: no "{node_name}: ros__parameters:" section')
    return BridgeConfig.from_mapping({**flatten(params), **(overrides or {})})


def flatten(d: dict, prefix: str = '') -> dict:
    out = {}
    for k, v in d.items():
        key = f'{prefix}{k}'
        if isinstance(v, dict):
            out.update(flatten(v, key + '.'))
        else:
            out[key] = v
    return out
