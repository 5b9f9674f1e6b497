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
        # the curvature's quartic strain energy 1/2 K4 . delta^4 (geometric nonlinearity; link_modes), as an
        # (m^2, m^2) matrix on delta (x) delta
        self.quartic = (np.ascontiguousarray(d.fs_K4[j][:m, :m, :m, :m].reshape(m * m, m * m))
                        if d.fs_active[j] else None)
        per_mode = []
        for k, p in enumerate(self.planes):
            if p == IN_PLANE:
                per_mode.append(self.phi_tip[1, k])
            elif p == OUT_OF_PLANE:
                per_mode.append(self.phi_tip[2, k])
            else:
                per_mode.append(self.theta_tip[0, k])
        self.mode_tip_displacement = [float(x) for x in per_mode]

    def elastic_energy(self, dl) -> float:
        """Strain energy of the link at modal coordinates dl: 1/2 dl K dl (+ 1/2 K4 . dl^4 with the geometric
        nonlinearity)."""
        e = 0.5 * float(dl @ self.stiffness @ dl)
        if self.quartic is not None:
            dd = np.outer(dl, dl).ravel()
            e += 0.5 * float(dd @ self.quartic @ dd)
        return e


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
        return (dl, zd[info.slice], info.phi_tip @ dl, info.theta_tip @ dl, info.elastic_energy(dl))

    # ------------------------------------------------------------------ kinematics
    def frames(self, z):
        kernels.link_frames(self.data, np.require(z, float, ('C', 'W')), self._RF, self._pL, self._RE, self._pE)
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


# layout of the flat vector filled by `state_outputs`
EE_P, EE_Q, EE_V, EE_W, EE_RIGID, EN_KIN, EN_EL, EN_GR, N_STATE_OUT = 0, 3, 7, 10, 13, 16, 17, 18, 19


@kernels.kernel(**kernels.INTERNAL)
def _quat_xyzw(R, out, o):
    """Unit quaternion (x, y, z, w), w >= 0, of R into out[o:o+4] (Shepperd; as quaternion_xyzw)."""
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        x, y, z, w = (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        x, y, z, w = 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s, (R[2, 1] - R[1, 2]) / s
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        x, y, z, w = (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s, (R[0, 2] - R[2, 0]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        x, y, z, w = (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s, (R[1, 0] - R[0, 1]) / s
    if w < 0:
        x, y, z, w = -x, -y, -z, -w
    nrm = np.sqrt(x * x + y * y + z * z + w * w)
    out[o], out[o + 1], out[o + 2], out[o + 3] = x / nrm, y / nrm, z / nrm, w / nrm


@kernels.kernel(**kernels.KERNEL_NO_NRT)
def state_outputs(d, ws, z, zd, h, mode_index, zt, RF, pL, RE, pE, J, rhs, tau0, Rp, Rm, out):
    """All end-effector and energy outputs of /flexarm/state in one call, into out (layout EE_*, EN_*): deformed tip
    position and quaternion, its linear and angular velocity (central difference along zd with step h, as
    ArmOutputs.end_effector), the rigid tip position, kinetic / elastic / gravity energy. No allocation."""
    N = z.shape[0]
    nl = RE.shape[0] - 1
    # frames at z + h zd, z - h zd (velocity by central difference) and z with the modes zeroed (rigid tip)
    for variant in range(3):
        for i in range(N):
            zt[i] = z[i] + h * zd[i] if variant == 0 else (z[i] - h * zd[i] if variant == 1 else z[i])
        if variant == 2:
            for i in range(mode_index.shape[0]):
                zt[mode_index[i]] = 0.0
        kernels.link_frames(d, zt, RF, pL, RE, pE)
        for i in range(3):
            if variant == 0:
                out[EE_V + i] = pE[nl, i]
                for k in range(3):
                    Rp[i, k] = RE[nl, i, k]
            elif variant == 1:
                out[EE_V + i] = (out[EE_V + i] - pE[nl, i]) / (2 * h)
                for k in range(3):
                    Rm[i, k] = RE[nl, i, k]
            else:
                out[EE_RIGID + i] = pE[nl, i]
    # w = vee(log(Rp Rm^T)) / 2h
    tr = 0.0
    for i in range(3):
        tr += Rp[i, 0] * Rm[i, 0] + Rp[i, 1] * Rm[i, 1] + Rp[i, 2] * Rm[i, 2]
    c = min(1.0, max(-1.0, 0.5 * (tr - 1.0)))
    ang = np.arccos(c)
    f = 0.5 if ang < 1e-8 else ang / (2.0 * np.sin(ang))
    for i in range(3):
        a_, b_ = (i + 1) % 3, (i + 2) % 3      # (D[b, a] - D[a, b]) with D = Rp Rm^T
        dba = Rp[b_, 0] * Rm[a_, 0] + Rp[b_, 1] * Rm[a_, 1] + Rp[b_, 2] * Rm[a_, 2]
        dab = Rp[a_, 0] * Rm[b_, 0] + Rp[a_, 1] * Rm[b_, 1] + Rp[a_, 2] * Rm[b_, 2]
        out[EE_W + i] = f * (dba - dab) / (2 * h)
    # energies (potential_energies leaves the frames of z in RF..pE: the deformed tip pose)
    el, gr = kernels.potential_energies(d, z, RF, pL, RE, pE)
    for i in range(3):
        out[EE_P + i] = pE[nl, i]
        for k in range(3):
            Rp[i, k] = RE[nl, i, k]
    _quat_xyzw(Rp, out, EE_Q)
    out[EN_KIN] = kernels.kinetic_energy(d, ws, z, zd, tau0, J, rhs)
    out[EN_EL] = el
    out[EN_GR] = gr


class StateOutputs:
    """Scratch arrays for `state_outputs` of one model (one instance per thread)."""

    def __init__(self, model):
        n, N = model.n_joints, model.n_coords
        self.model = model
        self.data = model.data
        self.ws = model.workspace()
        self.mode_index = np.ascontiguousarray(model.mode_index, dtype=np.int64)
        self.zt = np.zeros(N)
        self.RF, self.pL, self.RE, self.pE = np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3))
        self.J, self.rhs, self.tau0 = np.zeros((N, N)), np.zeros(N), np.zeros(n)
        self.Rp, self.Rm = np.zeros((3, 3)), np.zeros((3, 3))
        self.out = np.zeros(N_STATE_OUT)

    def compute(self, z, zd, h=1e-6):
        state_outputs(self.data, self.ws, z, zd, h, self.mode_index, self.zt, self.RF, self.pL, self.RE, self.pE,
                      self.J, self.rhs, self.tau0, self.Rp, self.Rm, self.out)
        return self.out
