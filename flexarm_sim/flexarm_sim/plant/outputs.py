"""Quantities the plant publishes, computed from the state arrays (no ROS).

Per flexible link: modal coordinates/rates, tip deflection phi_tip @ delta and tip rotation
theta_tip @ delta in the link frame, strain energy 1/2 delta^T K delta. End effector: deformed tip pose
of the last link, its twist (central difference of the pose along the velocity), the rigid tip
position. Markers: deformed centre lines sampled from precomputed mode shapes, joint origins.
"""
from __future__ import annotations

import math

import numpy as np

from ..model import kernels

IN_PLANE, OUT_OF_PLANE, TORSION = 0, 1, 2


def quaternion_xyzw(R) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of a rotation matrix (Shepperd's method), w >= 0."""
    R = np.asarray(R, dtype=float)
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = np.array([(R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s])
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = np.array([0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s, (R[2, 1] - R[1, 2]) / s])
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = np.array([(R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s, (R[0, 2] - R[2, 0]) / s])
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = np.array([(R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s, (R[1, 0] - R[0, 1]) / s])
    if q[3] < 0:
        q = -q
    return q / np.linalg.norm(q)


def _vee_log(R) -> np.ndarray:
    """Rotation vector of R (small angles exact enough for a difference quotient)."""
    c = max(-1.0, min(1.0, 0.5 * (np.trace(R) - 1.0)))
    ang = math.acos(c)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if ang < 1e-8:
        return 0.5 * w
    return w * (ang / (2.0 * math.sin(ang)))


class LinkInfo:
    """Constant per-link data for messages."""

    def __init__(self, model, j):
        lm = model.link_modes[j]
        d = model.data
        m = lm.n_modes
        self.index = j
        self.name = model.spec.joints[j].name + '_link'
        self.n_modes = m
        self.planes = [int(p) for p in lm.planes]
        self.freqs_hz = [float(f) for f in lm.freqs_hz]
        self.slice = slice(int(d.q_index[j]) + 1, int(d.q_index[j]) + 1 + m)
        self.phi_tip = np.ascontiguousarray(d.phi_tip[j][:, :m])
        self.theta_tip = np.ascontiguousarray(d.theta_tip[j][:, :m])
        self.stiffness = np.ascontiguousarray(d.stiffness[j][:m, :m])
        per_mode = []
        for k, p in enumerate(self.planes):
            if p == IN_PLANE:
                per_mode.append(self.phi_tip[1, k])
            elif p == OUT_OF_PLANE:
                per_mode.append(self.phi_tip[2, k])
            else:
                per_mode.append(self.theta_tip[0, k])
        self.mode_tip_displacement = [float(x) for x in per_mode]


class ArmOutputs:
    """Derived quantities of an arm model; scratch arrays preallocated."""

    def __init__(self, model, centerline_points: int = 20):
        self.model = model
        self.data = model.data
        n = model.n_joints
        self.joint_names = list(model.spec.joint_names)
        self.links = [LinkInfo(model, j) for j in range(n) if model.link_modes[j].n_modes > 0]
        self._RF, self._pL = np.zeros((n, 3, 3)), np.zeros((n, 3))
        self._RE, self._pE = np.zeros((n, 3, 3)), np.zeros((n, 3))
        self._zr = np.zeros(model.n_coords)
        self.n_points = centerline_points
        self._eta, self._disp = [], []
        for j in range(n):
            L = model.spec.joints[j].link.length
            eta = np.linspace(0.0, L, centerline_points)
            lm = model.link_modes[j]
            self._eta.append(eta)
            self._disp.append(lm.displacement(eta) if lm.n_modes else np.zeros((0, 3, centerline_points)))

    # ------------------------------------------------------------------ per link
    def link_values(self, info: LinkInfo, z, zd):
        """(delta, delta_dot, tip_deflection(3), tip_rotation(3), elastic_energy)."""
        dl = z[info.slice]
        return (dl, zd[info.slice], info.phi_tip @ dl, info.theta_tip @ dl, 0.5 * float(dl @ info.stiffness @ dl))

    # ------------------------------------------------------------------ kinematics
    def frames(self, z):
        kernels.link_frames(self.data, np.ascontiguousarray(z, dtype=float), self._RF, self._pL, self._RE, self._pE)
        return self._RF, self._pL, self._RE, self._pE

    def end_effector(self, z, zd, h=1e-6):
        """(R, p, v, w, p_rigid): deformed tip pose, its linear/angular velocity, rigid tip position."""
        _, _, RE, pE = self.frames(z)
        R, p = RE[-1].copy(), pE[-1].copy()
        _, _, RE, pE = self.frames(z + h * zd)
        Rp, pp = RE[-1].copy(), pE[-1].copy()
        _, _, RE, pE = self.frames(z - h * zd)
        Rm, pm = RE[-1].copy(), pE[-1].copy()
        v = (pp - pm) / (2 * h)
        w = _vee_log(Rp @ Rm.T) / (2 * h)
        zr = self._zr
        zr[:] = 0.0
        zr[self.model.q_index] = z[self.model.q_index]
        _, _, _, pE = self.frames(zr)
        return R, p, v, w, pE[-1].copy()

    def energies(self, z, zd):
        return self.model.energies(z, zd)

    def geometry(self, z):
        """(joint origins (n,3), list of centre lines (n_points+1, 3) per link) in the base frame.

        Each centre line starts at its joint origin (so joint offsets are drawn) and follows the
        deformed neutral axis of the link."""
        RF, pL, _, pE = self.frames(z)
        n = self.model.n_joints
        joints = np.zeros((n, 3))
        lines = []
        prev = np.asarray(self.data.base_p, dtype=float)
        for j in range(n):
            joints[j] = prev
            rho = np.zeros((3, self.n_points))
            rho[0] = self._eta[j]
            lm_n = self._disp[j].shape[0]
            if lm_n:
                q = int(self.data.q_index[j])
                rho += np.einsum('k,kiq->iq', z[q + 1:q + 1 + lm_n], self._disp[j])
            pts = (pL[j][:, None] + RF[j] @ rho).T
            lines.append(np.vstack([prev[None, :], pts]))
            prev = pE[j].copy()
        return joints, lines, prev
