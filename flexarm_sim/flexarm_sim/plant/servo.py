"""Plant-side joint position servo: the actuator as a finite-stiffness position loop (no ROS).

Naganathan's servo compliance (notes/seed_001_naganathan.md §2, eqs. 2.26-2.29): each joint's motor angle
follows a commanded position through a proportional gain k_p and rate feedback k_v, so the joint itself is
compliant. As a plant option the servo torque

    tau_j = tau_ff,j + k_p,j (q_c,j - q_j) + k_v,j (qdot_c,j - qdot_j),   clipped to the joint's effort limit

is evaluated at every integration sub-step (a drive-level loop, much faster than a controller over ROS),
with the commanded positions q_c (and rates qdot_c, zero unless given: eq. 2.26 vs 2.29) from
/position_controller/commands and tau_ff the (optional) effort command. The sub-step must resolve the velocity loop on the joint's inertia with the links free,
h <= J_hf / k_v (flexarm_control.laws.ServoCompliantActuator uses the same rule), so `substeps` is
chosen from the gains: a stiff servo on a light hub needs short steps.
"""
from __future__ import annotations

import math

import numpy as np

from ..model.linearize import largest_servo_step


def servo_substeps(model, kv, dt) -> int:
    """Equal sub-steps of dt that resolve the servo (largest_servo_step)."""
    h_max = largest_servo_step(model, kv)
    return 1 if not math.isfinite(h_max) else max(1, int(math.ceil(dt / h_max - 1e-9)))


class JointServo:
    def __init__(self, model, kp, kv, dt, effort_limit=None):
        n = model.n_joints
        self.kp = np.asarray(kp, dtype=float).ravel()
        self.kv = np.asarray(kv, dtype=float).ravel()
        for name, g in (('servo.kp', self.kp), ('servo.kv', self.kv)):
            if g.size != n or not np.all(np.isfinite(g)) or np.any(g < 0):
                raise ValueError(f'{name}: expected {n} finite values >= 0, got {g.tolist()}')
        self.qi = np.asarray(model.q_index)
        self.effort_limit = (np.full(n, np.inf) if effort_limit is None
                             else np.asarray(effort_limit, dtype=float) * np.ones(n))
        self.substeps = servo_substeps(model, self.kv, dt)
        self.q_c = np.zeros(n)
        self.qd_c = np.zeros(n)
        self._tau = np.zeros(n)

    def torque(self, z, zd, tau_ff):
        """Servo torque at the state (z, zd) (the array is reused)."""
        t = self._tau
        t[:] = tau_ff + self.kp * (self.q_c - z[self.qi]) + self.kv * (self.qd_c - zd[self.qi])
        np.clip(t, -self.effort_limit, self.effort_limit, out=t)
        return t
