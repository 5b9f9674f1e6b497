"""Modules loaded on first use: ``kernels = lazy_module(__package__ + '.kernels')`` binds a stand-in whose first
attribute read imports the module (and numba with it), so importing the model's numerics costs no compiler.

The stand-in imports through ``importlib.import_module``, whose module locks make a second thread wait for the
module to be complete (the standard library's LazyLoader marks a module loaded before its code has run, so on
Python 3.11 a second thread could read a half-built module); a failed import raises again at the next use.
"""
from __future__ import annotations

import importlib
import sys


class _LazyModule:
    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        """Only for a name not read before: it is then kept on the stand-in, so later reads are plain attribute
        lookups (the step API reads the kernels at every step)."""
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        value = getattr(module, attr)
        setattr(self, attr, value)
        return value

    def __repr__(self):
        return f'<lazy module {self._name!r}{" (loaded)" if self._module is not None else ""}>'


def lazy_module(name: str):
    """The module *name* if it is imported already, else a stand-in that imports it at the first attribute read."""
    return sys.modules.get(name) or _LazyModule(name)
