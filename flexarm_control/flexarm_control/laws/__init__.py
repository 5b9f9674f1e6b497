"""Pure control laws for flexible arms (no ROS): references, input shaping, PD servo, modal LQR, computed torque.

Every law is a callable `tau = law(t, z, zd)` (the torque signature of flexarm_sim.model.simulate).
"""
from .base import ControlLaw, rigid_model_of
from .computed_torque import ComputedTorque
from .modal import ModalLQR, static_equilibrium
from .pd import PDServo, ServoCompliantActuator, naganathan_gains, reflected_inertia
from .reference import (BangBang, Hold, PointToPoint, ReferenceManager, TrajectoryReference, cycloidal, quintic,
                        trajectory_from_msg)
from .shaping import Shaper, ShapedReference, make_shaper, model_modes, zv, zvd

__all__ = ['ControlLaw', 'rigid_model_of', 'ComputedTorque', 'ModalLQR', 'static_equilibrium', 'PDServo',
           'ServoCompliantActuator', 'naganathan_gains', 'reflected_inertia', 'BangBang', 'Hold', 'PointToPoint',
           'ReferenceManager', 'TrajectoryReference', 'cycloidal', 'quintic', 'trajectory_from_msg', 'Shaper',
           'ShapedReference', 'make_shaper', 'model_modes', 'zv', 'zvd']
