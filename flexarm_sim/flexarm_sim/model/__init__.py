"""flexarm_sim.model — the pure numerical core (no ROS): arm description, modes, dynamics, integrators.

Importing it loads no numba: the kernels load at their first call, and the whole-run API (``simulate``, ``replay``,
``SimulationResult``, ``validity_limit``: numba functions of their own) when it is first imported.
"""
from .arm_model import ArmModel
from .integrators import (ArmState, IntegrationError, SubstepError, auto_substeps, largest_stable_rk4_step,
                          step)
from .linearize import cyclic_joints, joint_hf_inertia, linearize, whole_arm_modes, zero_order_hold
from .spec import ArmSpec, ArmSpecError, arm_from_dict, conservative, load_arm, rigid_limit


_SIMULATION = ('SimulationResult', 'replay', 'simulate', 'validity_limit')


def __getattr__(name):
    if name in _SIMULATION:
        from . import simulation
        for n in _SIMULATION:
            globals()[n] = getattr(simulation, n)
        return globals()[name]
    raise AttributeError('module %r has no attribute %r' % (__name__, name))


def __dir__():
    return sorted(set(globals()) | set(_SIMULATION))


def load_model(path_or_spec) -> ArmModel:
    """ArmModel from a YAML path or an ArmSpec."""
    if isinstance(path_or_spec, ArmSpec):
        return ArmModel.from_spec(path_or_spec)
    return ArmModel.from_yaml(path_or_spec)


__all__ = ['ArmModel', 'ArmState', 'IntegrationError', 'SubstepError', 'auto_substeps', 'validity_limit',
           'largest_stable_rk4_step', 'step', 'cyclic_joints', 'joint_hf_inertia', 'linearize', 'zero_order_hold',
           'whole_arm_modes', 'SimulationResult', 'simulate', 'replay', 'ArmSpec', 'ArmSpecError', 'arm_from_dict',
           'load_arm', 'rigid_limit', 'conservative', 'load_model']
