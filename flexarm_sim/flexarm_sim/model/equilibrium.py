"""Static equilibrium of an arm held at given joint angles (no ROS): the deflections gravity (or any constant load)
produces and the joint torques that hold the arm there.

At rest (zd = 0, zdd = 0) the modal rows of J z'' = R(z, 0, tau) require R_delta(z) = 0: solved by Newton's method
with the linearized modal stiffness -dR_delta/d delta (exact for a linear elastic model, a few iterations with the
geometric terms); the joint rows then give the holding torque tau = -R_q(z, 0, 0).
"""
from __future__ import annotations

import numpy as np

from .linearize import linearize


def static_equilibrium(model, q, iterations=6):
    """(z_eq, tau_eq): deflections in static equilibrium at joint angles q and the holding joint torques."""
    N = model.n_coords
    qi, mi = np.asarray(model.q_index), np.asarray(model.mode_index)
    z = np.zeros(N)
    z[qi] = q
    zero_v, zero_t = np.zeros(N), np.zeros(model.n_joints)
    if mi.size:
        r = model.rhs(z, zero_v, zero_t)[mi]
        if np.max(np.abs(r)) > 0:
            K = linearize(model, z).stiffness[np.ix_(mi, mi)]
            for _ in range(iterations):
                z[mi] += np.linalg.solve(K, r)
                r = model.rhs(z, zero_v, zero_t)[mi]
                if np.max(np.abs(r)) < 1e-12 * (1 + np.max(np.abs(np.diag(K)))):
                    break
    tau = -model.rhs(z, zero_v, zero_t)[qi]
    return z, tau
