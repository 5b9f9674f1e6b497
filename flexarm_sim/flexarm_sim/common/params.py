"""One parameter-table mechanism for every flexarm node (no ROS).

A node's parameters are a `ParamTable`: name (dotted, as ROS flattens nested YAML keys) -> `Param` (default,
validator with its stated range, whether `ros2 param set` may change it, doc). The table is the single owner of
what a parameter means: the ROS adapter (flexarm_sim.ros.parameters) declares it on the node and validates every
start-up and run-time value with it, the shipped YAML files (`render_yaml`) and the README tables
(`render_markdown`) are generated from it (a test checks the shipped files are).

"Not set" (rcl's reading of an empty list `[]`, or a parameter absent from every file) has one meaning: the
default. A default may be `DERIVED`: the node computes the value from the arm description (the doc says how) and
declares the computed value, so `ros2 param get/dump` show what is in force and a dump loads back.

Validators coerce (ints accepted where floats are expected, integral floats where ints are; bools are never
numbers; NaN is never a value; infinity only where allowed) or raise ConfigError naming the parameter; each
carries `text`, its stated range for the docs.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass


class ConfigError(ValueError):
    """An invalid parameter value; .name is the parameter's (dotted) name, .reason the why."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"invalid parameter '{name}': {reason}")
        self.name = name
        self.reason = reason


class _Derived:
    def __repr__(self):
        return 'DERIVED'


DERIVED = _Derived()      # default computed by the node from the arm description


def _g(x):
    return f'{x:g}' if isinstance(x, float) else str(x)


class Check:
    """A validator: `check(value, name) -> coerced value` (ConfigError naming `name` otherwise); `text` states the
    accepted values."""

    text = ''

    def __call__(self, value, name):
        raise NotImplementedError


def number(value, name, allow_inf=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f'expected a number, got {value!r}')
    v = float(value)
    if math.isnan(v):
        raise ConfigError(name, 'must not be NaN')
    if math.isinf(v) and not allow_inf:
        raise ConfigError(name, f'must be finite, got {v}')
    return v


class float_range(Check):
    def __init__(self, lo=None, hi=None, lo_open=False, allow_inf=False):
        self.lo, self.hi, self.lo_open, self.allow_inf = lo, hi, lo_open, allow_inf
        parts = []
        if lo is not None:
            parts.append(f'{">" if lo_open else ">="} {_g(float(lo))}')
        if hi is not None:
            parts.append(f'<= {_g(float(hi))}')
        self.text = ', '.join(parts) if parts else 'a finite number'

    def __call__(self, value, name):
        v = number(value, name, self.allow_inf)
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            raise ConfigError(name, f'must be {">" if self.lo_open else ">="} {self.lo:g}, got {v:g}')
        if self.hi is not None and v > self.hi:
            raise ConfigError(name, f'must be <= {self.hi:g}, got {v:g}')
        return v


class off_or_range(float_range):
    """0 (off), or a number within [lo, hi]: a rate that may be switched off but is otherwise physical (5e-324 Hz
    passed "> 0" and made the plant divide by it: an infinite period)."""

    def __init__(self, lo, hi, zero='off'):
        super().__init__(lo=lo, hi=hi)
        self.zero = zero
        self.text = f'0 ({zero}) or [{_g(float(lo))}, {_g(float(hi))}]'

    def __call__(self, value, name):
        v = number(value, name)
        if v == 0.0:
            return 0.0
        if not self.lo <= v <= self.hi:
            raise ConfigError(name, f'must be 0 ({self.zero}) or within [{self.lo:g}, {self.hi:g}], got {v:g}')
        return v


class integer(Check):
    def __init__(self, lo=None, hi=None, choices=None):
        self.lo, self.hi, self.choices = lo, hi, choices
        self.text = ('one of ' + ', '.join(map(str, choices)) if choices is not None else
                     'integer' + (f' {lo}..{hi}' if lo is not None and hi is not None
                                  else f' >= {lo}' if lo is not None else f' <= {hi}' if hi is not None else ''))

    def __call__(self, value, name):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(name, f'expected an integer, got {value!r}')
        if self.choices is not None and value not in self.choices:
            raise ConfigError(name, f'must be one of {", ".join(map(str, self.choices))}; got {value}')
        if self.lo is not None and value < self.lo:
            raise ConfigError(name, f'must be >= {self.lo}, got {value}')
        if self.hi is not None and value > self.hi:
            raise ConfigError(name, f'must be <= {self.hi}, got {value}')
        return int(value)


class choice(Check):
    def __init__(self, choices):
        self.choices = tuple(choices)
        self.text = ' | '.join(self.choices)

    def __call__(self, value, name):
        if not isinstance(value, str) or value not in self.choices:
            raise ConfigError(name, f'must be one of {", ".join(self.choices)}; got {value!r}')
        return value


class string(Check):
    def __init__(self, nonempty=True):
        self.nonempty = nonempty
        self.text = 'non-empty string' if nonempty else 'string'

    def __call__(self, value, name):
        if not isinstance(value, str) or (self.nonempty and not value.strip()):
            raise ConfigError(name, f'expected a {self.text}, got {value!r}')
        return value


class boolean(Check):
    text = 'true | false'

    def __call__(self, value, name):
        if not isinstance(value, bool):
            raise ConfigError(name, f'expected true or false, got {value!r}')
        return value


class float_list(Check):
    """A list of numbers, each within the item range; `length` (int) fixes the count."""

    def __init__(self, lo=None, hi=None, lo_open=False, allow_inf=False, length=None, nonempty=False):
        self.item = float_range(lo=lo, hi=hi, lo_open=lo_open, allow_inf=allow_inf)
        self.length, self.nonempty = length, nonempty
        self.text = 'list of numbers' + (f' ({self.item.text})' if lo is not None or hi is not None else '')

    def __call__(self, value, name):
        if isinstance(value, (str, bytes)) or not hasattr(value, '__iter__'):
            raise ConfigError(name, f'expected a list of numbers, got {value!r}')
        out = [self.item(x, f'{name}[{i}]') for i, x in enumerate(value)]
        if self.length is not None and len(out) != self.length:
            raise ConfigError(name, f'expected {self.length} values, got {len(out)}')
        if self.nonempty and not out:
            raise ConfigError(name, 'expected at least one value')
        return out


class string_list(Check):
    """A list of non-empty strings (e.g. sensor descriptions)."""

    text = 'list of strings'

    def __call__(self, value, name):
        if isinstance(value, (str, bytes)) or not hasattr(value, '__iter__'):
            raise ConfigError(name, f'expected a list of strings, got {value!r}')
        out = []
        for i, x in enumerate(value):
            if not isinstance(x, str) or not x.strip():
                raise ConfigError(f'{name}[{i}]', f'expected a non-empty string, got {x!r}')
            out.append(x.strip())
        return out


@dataclass(frozen=True)
class Param:
    default: object           # a value, or DERIVED (the node computes it from the arm; `doc` says how)
    check: Check
    doc: str
    runtime: bool = False     # may change with `ros2 param set` (validated); otherwise read-only after start

    def describe(self) -> str:
        """The doc with the accepted values, as `ros2 param describe` shows it."""
        rng = f' [{self.check.text}]' if self.check.text else ''
        return self.doc + rng + ('' if self.runtime else ' (read-only at run time)')


IGNORED = frozenset(('use_sim_time', 'start_type_description_service'))
IGNORED_PREFIXES = ('qos_overrides.',)


def ignored(name: str) -> bool:
    """Parameters every rclpy node has (not part of any table)."""
    return name in IGNORED or name.startswith(IGNORED_PREFIXES)


class ParamTable:
    """The parameters of one node: an ordered mapping name -> Param, and validation of whole sets."""

    def __init__(self, node_name: str, params: dict, title: str = ''):
        self.node_name = node_name
        self.params = dict(params)
        self.title = title

    def __contains__(self, name):
        return name in self.params

    def __iter__(self):
        return iter(self.params)

    def __getitem__(self, name) -> Param:
        return self.params[name]

    @property
    def runtime(self) -> frozenset:
        return frozenset(k for k, p in self.params.items() if p.runtime)

    def validate(self, name, value):
        """Coerced value, DERIVED for a derived parameter that is not set, or ConfigError naming the parameter."""
        if name not in self.params:
            raise ConfigError(name, f'unknown parameter of {self.node_name} (typo?)')
        p = self.params[name]
        if value is None:                          # not set (rcl reads an empty list as not set)
            return _copy(p.default)
        return p.check(value, name)

    def defaults(self) -> dict:
        return {k: _copy(p.default) for k, p in self.params.items()}

    def from_mapping(self, mapping: dict) -> dict:
        """Validated values of every parameter: the defaults updated from `mapping` (dotted names; None = not
        set). Unknown names raise ConfigError (a typo must not silently fall back to a default)."""
        vals = self.defaults()
        for name, value in mapping.items():
            if ignored(name):
                continue
            vals[name] = self.validate(name, value)
        return vals

    def with_changes(self, values: dict, changes: dict) -> dict:
        """Validated copy of `values` with run-time changes applied; read-only parameters are refused."""
        out = dict(values)
        for name, value in changes.items():
            if ignored(name):
                continue
            if name not in self.params:
                raise ConfigError(name, f'unknown parameter of {self.node_name}')
            if not self.params[name].runtime:
                raise ConfigError(name, f'read-only at run time (restart {self.node_name} to change it)')
            if value is None:
                # PARAMETER_NOT_SET at run time: rclpy would undeclare the parameter, and every later set would fail
                # ("Invalid access to undeclared parameter(s)") until a restart
                raise ConfigError(name, 'cannot be unset at run time (PARAMETER_NOT_SET): give a value')
            v = self.validate(name, value)
            if v is DERIVED:
                raise ConfigError(name, 'expected a value')
            out[name] = v
        return out

    # ------------------------------------------------------------------ documentation generated from the table
    def render_yaml(self, header: str = '', values: dict | None = None) -> str:
        """A documented `<node>: ros__parameters:` file listing every parameter with its default (or `values`).
        DERIVED lists are written `[]` (rcl: not set), DERIVED scalars as a comment."""
        lines = [f'# {ln}'.rstrip() for ln in header.strip('\n').splitlines()] if header else []
        lines += [f'{self.node_name}:', '  ros__parameters:']
        written = []          # prefixes of nested sections already opened
        for name, p in self.params.items():
            parts = name.split('.')
            common = 0
            while common < min(len(written), len(parts) - 1) and written[common] == parts[common]:
                common += 1
            written = written[:common]
            for depth in range(common, len(parts) - 1):
                lines.append('    ' + '  ' * depth + parts[depth] + ':')
                written.append(parts[depth])
            indent = '    ' + '  ' * (len(parts) - 1)
            value = p.default if values is None else values.get(name, p.default)
            doc = p.doc + (f' [{p.check.text}]' if p.check.text else '') + (' [runtime]' if p.runtime else '')
            lines += textwrap.wrap(doc, width=max(40, 116 - len(indent)), initial_indent=indent + '# ',
                                   subsequent_indent=indent + '#   ')
            if value is DERIVED and not _is_list_param(p):
                lines.append(f'{indent}# {parts[-1]}:        (not set: derived, see above)')
            else:
                lines.append(f'{indent}{parts[-1]}: {_yaml_scalar([] if value is DERIVED else value)}')
        return '\n'.join(lines) + '\n'

    def render_markdown(self) -> str:
        """A markdown table: parameter, default, accepted values, run-time, meaning."""
        rows = ['| parameter | default | accepted | runtime | meaning |', '|---|---|---|---|---|']
        for name, p in self.params.items():
            d = 'derived' if p.default is DERIVED else _yaml_scalar(p.default)
            rows.append(f'| `{name}` | `{d}` | {p.check.text.replace("|", "/")} | {"yes" if p.runtime else ""} | '
                        f'{p.doc.replace("|", "/")} |')
        return '\n'.join(rows) + '\n'


def _copy(v):
    return list(v) if isinstance(v, list) else v


def _is_list_param(p: Param) -> bool:
    return isinstance(p.check, (float_list, string_list)) or isinstance(p.default, list)


def _yaml_scalar(v) -> str:
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, float):
        if not math.isfinite(v):
            return '.inf' if v > 0 else '-.inf'
        r = repr(v)
        # YAML 1.1 (PyYAML) reads '2e-06' as a string: a float in exponent form needs a mantissa with a dot
        return r.replace('e', '.0e', 1) if 'e' in r and '.' not in r else r
    if isinstance(v, (list, tuple)):
        return '[' + ', '.join(_yaml_scalar(x) for x in v) + ']'
    if isinstance(v, str):
        return v if v and v.strip() == v and _plain_ok(v) else repr(v).replace("'", "'")
    return str(v)


def _plain_ok(s: str) -> bool:
    """True if s reads back as the same string in YAML without quotes."""
    import yaml
    try:
        return yaml.safe_load(s) == s and ':' not in s and '#' not in s
    except yaml.YAMLError:
        return False


def nest(flat: dict) -> dict:
    """{'a.b': 1} -> {'a': {'b': 1}} (the YAML form of dotted parameter names)."""
    out = {}
    for k, v in flat.items():
        d = out
        parts = k.split('.')
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def flatten(d: dict, prefix: str = '') -> dict:
    """The inverse of `nest`."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + '.'))
        else:
            out[prefix + k] = v
    return out
