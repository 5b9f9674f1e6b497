"""flexarm_control.planning — motion planning on the flexible model (no ROS): tip-path tracking by stable inversion."""
from .tip import Plan, PlanError, desired_tip_path, equilibrium_path, plan_move

__all__ = ['Plan', 'PlanError', 'desired_tip_path', 'equilibrium_path', 'plan_move']
