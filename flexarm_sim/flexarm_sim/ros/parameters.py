"""A ParamTable (flexarm_sim.common.params) declared on an rclpy node: the one parameter adapter of every node.

    params = NodeParams(node, TABLE)          # declares the table; unknown overrides -> ConfigError
    ...load the arm...
    params.resolve({'initial.position': [...]})    # DERIVED parameters: the file's value if set, else this
    params.on_change(apply)                   # `ros2 param set`: validated by the table, then apply(values, names)

Declared with dynamic typing (an int in a YAML file is accepted for a float parameter), read-only unless the
table marks the parameter as changeable at run time (rclpy then refuses `ros2 param set` with its own message).
"""
from __future__ import annotations

import fnmatch
import os
import re
import sys

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from ..common.commands import clip
from ..common.params import DERIVED, ConfigError, ParamTable, ignored
from ..compat.rclpy_private import parameter_overrides


def _ros_value(v):
    return list(v) if isinstance(v, (list, tuple)) else v


class NodeParams:
    def __init__(self, node, table: ParamTable):
        self.node = node
        self.table = table
        overrides = dict(parameter_overrides(node))
        for name in overrides:
            if not ignored(name) and name not in table:
                raise ConfigError(name, f'unknown parameter of node {node.get_name()} (typo?)')
        self.values = {}
        self._pending = []
        for name, p in table.params.items():
            if p.default is DERIVED:
                ov = overrides.get(name)
                self.values[name] = table.validate(name, None if ov is None else ov.value)
                self._pending.append(name)
                continue
            param = node.declare_parameter(name, _ros_value(p.default), self._descriptor(p))
            self.values[name] = table.validate(name, param.value)

    @staticmethod
    def _descriptor(p):
        return ParameterDescriptor(description=p.describe(), read_only=not p.runtime, dynamic_typing=True)

    def __getitem__(self, name):
        return self.values[name]

    def resolve(self, derived: dict):
        """Declare the DERIVED parameters with the value in force: the file's where it set one, else derived[name]
        (validated by the table like any value)."""
        overrides = parameter_overrides(self.node)
        for name in self._pending:
            v = self.values[name]
            if v is DERIVED:
                v = self.table.validate(name, derived[name])
            overrides.pop(name, None)            # a not-set override must not replace the value in force
            self.node.declare_parameter(name, _ros_value(v), self._descriptor(self.table[name]))
            self.values[name] = v
        self._pending = []

    def on_change(self, apply):
        """Run-time changes: validated by the table, then `apply(new_values, changed_names)`, which may raise
        ConfigError for rules across parameters; a refused change leaves every value as it was."""
        def callback(params):
            changes = {p.name: p.value for p in params if not ignored(p.name)}
            if not changes:
                return SetParametersResult(successful=True)
            try:
                new = self.table.with_changes(self.values, changes)
                apply(new, set(changes))
            except ConfigError as e:
                return SetParametersResult(successful=False, reason=clip(str(e)))
            except Exception as e:  # noqa: BLE001 - a value the table accepts that the node cannot use: refused
                reason = clip(f'{", ".join(sorted(changes))}: could not be applied ({e!r}); nothing changed')
                self.node.get_logger().error(f'parameter change refused: {reason}')
                return SetParametersResult(successful=False, reason=reason)
            self.values = new
            return SetParametersResult(successful=True)
        self.node.add_on_set_parameters_callback(callback)


# ---------------------------------------------------------------------------------------- parameter files
def _key_regex(key: str) -> re.Pattern:
    """rcl's node-name keys of a parameter file: fully qualified or relative names, `*` = one token,
    `**` = any number of tokens."""
    if not key.startswith('/'):
        key = '/' + key
    out = ''
    for tok in key.split('/')[1:]:
        if tok == '**':
            out += '(/[^/]+)*'
        else:
            out += '/' + fnmatch.translate(tok).replace('\\Z', '').replace('(?s:', '(?:').replace('.*', '[^/]*')
    return re.compile('^' + out + '$')


def params_files(argv) -> list:
    """Paths given with --params-file in the ROS arguments of argv."""
    out = []
    argv = list(argv or [])
    for i, a in enumerate(argv[:-1]):
        if a == '--params-file':
            out.append(argv[i + 1])
    return out


def sections_for(path: str, fqn: str):
    """(matching keys, all keys) of a parameter file for the node with fully qualified name fqn."""
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError):
        return None, []
    keys = [str(k) for k in data] if isinstance(data, dict) else []
    return [k for k in keys if _key_regex(k).match(fqn)], keys


def warn_unmatched_params_files(node, argv=None):
    """Warn, naming both, for every --params-file without a section for this node (its values are not applied)."""
    fqn = node.get_fully_qualified_name()
    for path in params_files(sys.argv if argv is None else argv):
        match, keys = sections_for(path, fqn)
        if match is None or match:
            continue
        node.get_logger().warning(
            f'parameter file {os.path.abspath(path)} has no section for node {fqn} (its sections: '
            f'{", ".join(keys) or "none"}); none of its values apply to this node')
