"""Modules loaded on first use: ``kernels = lazy_module(__package__ + '.kernels')`` binds a module whose code (and
numba with it) runs at the first attribute read, so importing the model's numerics costs no compiler.

The standard library's lazy loader (``importlib.util.LazyLoader``); the module is registered in ``sys.modules`` and on
its package, so a later plain import gets the same object.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """The module *name*, its code run at the first attribute access (at once if it is imported already)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition('.')
    if parent:
        setattr(sys.modules[parent], child, module)
    return module
