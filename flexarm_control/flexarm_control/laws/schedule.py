"""The gain-scheduling grid over the joint angles (no ROS): one owner for the cells of the modal LQR (laws/modal.py),
the safe mode's hold law (controller/safe_mode.py) and the state estimator's filter (estimation/filter.py).

A cell is keyed by its integer grid coordinates, `step` rad apart; joint angles are clipped to the position limits
(the schedule covers the workspace) and interpolated multilinearly between the corners of their cell.

A cyclic joint (flexarm_sim.model.cyclic_joints: joint 0 of an arm that turns about gravity's axis, or without
gravity) has the one grid coordinate 0: the arm's static equilibria and linearizations do not depend on its angle,
so its designs are made at one reference angle (`configuration`: 0, clipped into its limits) and serve at every
angle; the static equilibrium a design carries is moved to the angle it serves (`place`). A move then needs the cells
along the other joints only: the De Luca arm's 30 deg move of both joints visits 7 cells of the modal law instead of
19, and 3 of the hold law instead of 9 (test_schedule.py): fewer designs beside the move on a machine whose design
cache is empty (issue 28).
"""
from __future__ import annotations

import numpy as np

from flexarm_sim.model import cyclic_joints


def grid_corners(x):
    """[(cell key, weight)]: the corners of the grid cell containing x (grid units) with their multilinear
    interpolation weights, corners of zero weight left out."""
    lo = np.floor(x)
    frac = x - lo
    out = [((), 1.0)]
    for j in range(x.size):
        nxt = []
        for key, w in out:
            if 1.0 - frac[j] > 1e-12:
                nxt.append((key + (int(lo[j]),), w * (1.0 - frac[j])))
            if frac[j] > 1e-12:
                nxt.append((key + (int(lo[j]) + 1,), w * frac[j]))
        out = nxt
    return out


class ScheduleGrid:
    """The grid of `step` rad over the joint angles of `model` (module docstring); `cyclic` (n_joints bools) overrides
    the arm's cyclic joints (bench_schedule.py compares the full grid)."""

    def __init__(self, model, step, cyclic=None):
        self.step = float(step)
        lims = np.array([js.position_limits for js in model.spec.joints], dtype=float).reshape(-1, 2)
        self.lo = np.where(np.isfinite(lims[:, 0]), lims[:, 0], -1e3)
        self.hi = np.where(np.isfinite(lims[:, 1]), lims[:, 1], 1e3)
        self.cyclic = cyclic_joints(model.spec) if cyclic is None else np.asarray(cyclic, dtype=bool).copy()
        self.reference_angle = np.clip(0.0, self.lo, self.hi)    # where a cyclic joint's designs are made
        self._qi = np.asarray(model.q_index)

    def grid(self, q):
        """q in grid units, clipped to the joint limits; 0 on the cyclic joints."""
        x = np.clip(np.asarray(q, dtype=float), self.lo, self.hi) / self.step
        x[self.cyclic] = 0.0
        return x

    def corners(self, q):
        """[(cell key, weight)] of the cell containing q (grid_corners)."""
        return grid_corners(self.grid(q))

    def nearest(self, q):
        """The key of the grid point nearest q."""
        return tuple(int(k) for k in np.round(self.grid(q)))

    def configuration(self, key):
        """The joint angles a cell's design is made at (its grid point; the cyclic joints at their reference angle)."""
        q = np.array(key, dtype=float) * self.step
        q[self.cyclic] = self.reference_angle[self.cyclic]
        return q

    def place(self, z_eq, q):
        """z_eq, a design's static equilibrium (coordinates z), moved in place to the cyclic joints' angles of q
        (clipped to the limits); returned."""
        if self.cyclic.any():
            z_eq[self._qi[self.cyclic]] = np.clip(np.asarray(q, dtype=float), self.lo, self.hi)[self.cyclic]
        return z_eq
