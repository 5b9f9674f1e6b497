"""flexarm_sim/compat: each non-public API flexarm relies on (rclpy, numba) is exercised for real
by its module's check(), which must pass on the versions installed here; a broken assumption gives a CompatError
naming the library, its version and the attribute; and no module outside compat/ touches those internals."""
import os
import re
import types

import pytest

from flexarm_sim.compat import CompatError, numba_private, rclpy_private

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SOURCES = ('flexarm_sim/flexarm_sim', 'flexarm_control/flexarm_control', 'flexarm_bringup/flexarm_bringup')
PRIVATE = re.compile(r'_parameter_overrides|implementation_singleton|_OptLevel|numba\.core\.config|call_conv|'
                     r'get_pointer_to_function|\.is_using|tx_time_per_byte|take_message|import dynamixel_sdk|'
                     r'global_compiler_lock')


def test_rclpy_assumptions_hold():
    rclpy_private.check()


def test_numba_assumptions_hold():
    numba_private.check()


def test_a_broken_assumption_names_library_version_and_attribute():
    with pytest.raises(CompatError, match=r"Node\._parameter_overrides .* of rclpy \d[\w.]*, .*NoneType"):
        rclpy_private.parameter_overrides(types.SimpleNamespace())
    with pytest.raises(CompatError, match=r"Dispatcher\.overloads.* of numba \d[\w.]*, "):
        numba_private.entry_address(types.SimpleNamespace(overloads={}), ('float64',))


def test_no_module_outside_compat_uses_the_internals():
    found, files = [], 0
    for top in SOURCES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != '__pycache__']
            if os.path.relpath(dirpath, ROOT).startswith(os.path.join('flexarm_sim', 'flexarm_sim', 'compat')):
                continue
            for f in filenames:
                if f.endswith('.py'):
                    files += 1
                    path = os.path.join(dirpath, f)
                    for n, line in enumerate(open(path, encoding='utf-8'), 1):
                        if PRIVATE.search(line.split('#')[0]):
                            found.append(f'{os.path.relpath(path, ROOT)}:{n}: {line.strip()}')
    assert files > 100 and not found, '\n'.join(found)
