"""flexarm_sim.model — the pure numerical core (no ROS): arm description, modes, dynamics, integrators."""
from .arm_model import ArmModel
from .integrators import (ArmState, IntegrationError, SubstepError, auto_substeps, largest_stable_rk4_step,
                          step)
from .linearize import cyclic_joints, joint_hf_inertia, linearize, whole_arm_modes, zero_order_hold
from .simulate import SimulationResult, replay, simulate, validity_limit
from .spec import ArmSpec, ArmSpecError, arm_from_dict, conservative, load_arm, rigid_limit


def load_model(path_or_spec) -> ArmModel:
    """ArmModel from a YAML path or an ArmSpec."""
    if isinstance(path_or_spec, ArmSpec):
        return ArmModel.from_spec(path_or_spec)
    return ArmModel.from_yaml(path_or_spec)


__all__ = ['ArmModel', 'ArmState', 'IntegrationError', 'SubstepError', 'auto_substeps', 'validity_limit',
           'largest_stable_rk4_step', 'step', 'cyclic_joints', 'joint_hf_inertia', 'linearize', 'zero_order_hold',
           'whole_arm_modes', 'SimulationResult', 'simulate', 'replay', 'ArmSpec', 'ArmSpecError', 'arm_from_dict',
           'load_arm', 'rigid_limit', 'conservative', 'load_model']
