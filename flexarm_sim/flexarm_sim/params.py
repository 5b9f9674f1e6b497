"""Validators of node parameters, shared by the plant (plant/config.py) and the hardware bridge (no ROS).

Each factory returns `check(value, name) -> coerced value` that raises ConfigError naming the (dotted)
parameter. Ints are accepted where floats are expected, integral floats where ints are; bools are never
numbers; NaN is never a value; infinity only where allowed.
"""
from __future__ import annotations

import math


class ConfigError(ValueError):
    """An invalid parameter value; .name is the parameter's (dotted) name, .reason the why."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"invalid parameter '{name}': {reason}")
        self.name = name
        self.reason = reason


def number(value, name, allow_inf=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f'expected a number, got {value!r}')
    v = float(value)
    if math.isnan(v):
        raise ConfigError(name, 'must not be NaN')
    if math.isinf(v) and not allow_inf:
        raise ConfigError(name, f'must be finite, got {v}')
    return v


def float_range(lo=None, hi=None, lo_open=False, allow_inf=False):
    def check(value, name):
        v = number(value, name, allow_inf)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise ConfigError(name, f'must be {">" if lo_open else ">="} {lo:g}, got {v:g}')
        if hi is not None and v > hi:
            raise ConfigError(name, f'must be <= {hi:g}, got {v:g}')
        return v
    return check


def integer(lo=None, hi=None, choices=None):
    def check(value, name):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(name, f'expected an integer, got {value!r}')
        if choices is not None and value not in choices:
            raise ConfigError(name, f'must be one of {", ".join(map(str, choices))}; got {value}')
        if lo is not None and value < lo:
            raise ConfigError(name, f'must be >= {lo}, got {value}')
        if hi is not None and value > hi:
            raise ConfigError(name, f'must be <= {hi}, got {value}')
        return int(value)
    return check


def choice(choices):
    def check(value, name):
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(name, f'must be one of {", ".join(choices)}; got {value!r}')
        return value
    return check


def string(nonempty=True):
    def check(value, name):
        if not isinstance(value, str) or (nonempty and not value.strip()):
            raise ConfigError(name, f'expected a non-empty string, got {value!r}')
        return value
    return check


def boolean():
    def check(value, name):
        if not isinstance(value, bool):
            raise ConfigError(name, f'expected true or false, got {value!r}')
        return value
    return check


def float_list(lo=None, lo_open=False, allow_inf=False):
    item = float_range(lo=lo, lo_open=lo_open, allow_inf=allow_inf)

    def check(value, name):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            # A ROS parameter that is an empty list may arrive as an empty byte/bool array.
            try:
                value = list(value)
            except TypeError:
                raise ConfigError(name, f'expected a list of numbers, got {value!r}') from None
        return [item(x, f'{name}[{i}]') for i, x in enumerate(value)]
    return check
