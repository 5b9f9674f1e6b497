"""Linearization along a trajectory (no ROS): the Jacobians a planner or a time-varying design needs, in one call.

For samples k of a trajectory (z_k, zd_k, tau_k) of J(z) z'' = R(z, z', tau):
    acceleration_jacobians: dz''/dz, dz''/dz', dz''/dtau at the listed samples (forward differences of the
        forward dynamics, kernels.forward_dynamics; step eps (1 + |x|) per coordinate);
    tip_jacobians: d p_tip / dz of the deformed tip of the last link (kernels.link_frames, central differences).
The continuous Jacobians give the state-space model x' = A x + B u of the deviations, x = (dz, dz'),
A = [[0, I], [dz''/dz, dz''/dz']], B = [[0], [dz''/dtau]] — `state_space_along`.

Sensitivities to torque parameters (`propagate`): with the sampled deviation model x_(k+1) = Phi_i x_k + Gamma_i u_k
(i: the linearization sample in force at k, every `stride` samples) and a torque u_k = sum_b Bm[k, b] p_b given by a
banded basis (at most 4 nonzero per row, columns b0[k] .. b0[k] + 3: `banded`), S_k = dx_k / dp (2N, nb n) follows
S_(k+1) = Phi_i S_k + Gamma_i dU_k/dp, and the tip rows are C_i S_k[:N].
"""
from __future__ import annotations

import numpy as np

from . import kernels
from .kernels import KERNEL_LONG, kernel


@kernel(**KERNEL_LONG)
def acceleration_jacobians(d, ws, Z, ZD, TAU, idx, eps, zp, vp, tp, a0, a1, Az, Av, Bt):
    """Az[i] = dz''/dz, Av[i] = dz''/dz', Bt[i] = dz''/dtau at sample idx[i] (forward differences). Scratch:
    zp, vp (N,), tp (n,), a0, a1 (N,). False if the mass matrix is not positive definite somewhere."""
    N = Z.shape[1]
    n = TAU.shape[1]
    for i in range(idx.shape[0]):
        k = idx[i]
        for c in range(N):
            zp[c] = Z[k, c]
            vp[c] = ZD[k, c]
        for c in range(n):
            tp[c] = TAU[k, c]
        if not kernels.forward_dynamics(d, ws, zp, vp, tp, a0):
            return False
        for c in range(N):
            h = eps * (1.0 + abs(zp[c]))
            zp[c] += h
            if not kernels.forward_dynamics(d, ws, zp, vp, tp, a1):
                return False
            zp[c] = Z[k, c]
            for r in range(N):
                Az[i, r, c] = (a1[r] - a0[r]) / h
            h = eps * (1.0 + abs(vp[c]))
            vp[c] += h
            if not kernels.forward_dynamics(d, ws, zp, vp, tp, a1):
                return False
            vp[c] = ZD[k, c]
            for r in range(N):
                Av[i, r, c] = (a1[r] - a0[r]) / h
        for c in range(n):
            h = eps * (1.0 + abs(tp[c]))
            tp[c] += h
            if not kernels.forward_dynamics(d, ws, zp, vp, tp, a1):
                return False
            tp[c] = TAU[k, c]
            for r in range(N):
                Bt[i, r, c] = (a1[r] - a0[r]) / h
    return True


@kernel(**KERNEL_LONG)
def tip_jacobians(d, Z, idx, eps, zp, RF, pL, RE, pE, C):
    """C[i] = d p_tip / dz (3, N) at sample idx[i] (central differences); scratch zp (N,) and the frames."""
    N = Z.shape[1]
    last = d.n_joints - 1
    for i in range(idx.shape[0]):
        k = idx[i]
        for c in range(N):
            zp[c] = Z[k, c]
        for c in range(N):
            h = eps * (1.0 + abs(zp[c]))
            zp[c] = Z[k, c] + h
            kernels.link_frames(d, zp, RF, pL, RE, pE)
            for r in range(3):
                C[i, r, c] = pE[last, r]
            zp[c] = Z[k, c] - h
            kernels.link_frames(d, zp, RF, pL, RE, pE)
            for r in range(3):
                C[i, r, c] = (C[i, r, c] - pE[last, r]) / (2.0 * h)
            zp[c] = Z[k, c]


@kernel(**KERNEL_LONG)
def tip_positions(d, Z, RF, pL, RE, pE, out):
    """out[k] = deformed tip position of the last link at Z[k]."""
    last = d.n_joints - 1
    for k in range(Z.shape[0]):
        kernels.link_frames(d, Z[k], RF, pL, RE, pE)
        for r in range(3):
            out[k, r] = pE[last, r]


@kernel(**KERNEL_LONG)
def propagate(Phi, Gam, C, stride, b0, bw, N, q_index, q_rows, keep_rows, S, S2, rows_tip, rows_q, rows_keep):
    """Forward sensitivity propagation (module docstring). q_rows: samples whose joint rows go to rows_q; keep_rows:
    samples whose position rows S_k[:N] go to rows_keep. S, S2: scratch (2N, P). Sizes from the arrays."""
    K1 = rows_tip.shape[0]
    nx = S.shape[0]
    P = S.shape[1]
    n = Gam.shape[2]
    m = Phi.shape[0]
    for r in range(nx):
        for c in range(P):
            S[r, c] = 0.0
    iq = 0
    ik = 0
    for k in range(K1):
        i = min(k // stride, m - 1)
        for a in range(3):
            for c in range(P):
                s = 0.0
                for r in range(N):
                    s += C[i, a, r] * S[r, c]
                rows_tip[k, a, c] = s
        if iq < q_rows.shape[0] and q_rows[iq] == k:
            for j in range(n):
                for c in range(P):
                    rows_q[iq, j, c] = S[q_index[j], c]
            iq += 1
        if ik < keep_rows.shape[0] and keep_rows[ik] == k:
            for r in range(N):
                for c in range(P):
                    rows_keep[ik, r, c] = S[r, c]
            ik += 1
        if k == K1 - 1:
            break
        for r in range(nx):
            for c in range(P):
                s = 0.0
                for l in range(nx):
                    s += Phi[i, r, l] * S[l, c]
                S2[r, c] = s
        for r in range(nx):
            for c in range(P):
                S[r, c] = S2[r, c]
        for w in range(bw.shape[1]):
            b = b0[k] + w
            wt = bw[k, w]
            if wt == 0.0:
                continue
            for j in range(n):
                c = b * n + j
                for r in range(nx):
                    S[r, c] += wt * Gam[i, r, j]


def banded(Bm):
    """(b0 (K,), weights (K, 4)): the nonzero columns of each row of a cubic B-spline basis matrix."""
    K, nb = Bm.shape
    b0 = np.zeros(K, dtype=np.int64)
    bw = np.zeros((K, 4))
    for k in range(K):
        nz = np.nonzero(Bm[k])[0]
        if nz.size:
            b0[k] = min(int(nz[0]), nb - 4) if nb >= 4 else 0
            for b in nz:
                bw[k, b - b0[k]] = Bm[k, b]
    return b0, bw


def warm_up(model):
    """Compile (or load) every kernel of this module with the argument types its callers use."""
    N, n = model.n_coords, model.n_joints
    Z = np.zeros((3, N))
    idx = np.arange(3, dtype=np.int64)
    state_space_along(model, Z, Z, np.zeros((3, n)), idx)
    tip_jacobians_along(model, Z, idx)
    tip_path(model, Z)
    relative_deflections(model, Z)
    nx, P, K = 2 * N, 4 * n, 3
    propagate(np.zeros((1, nx, nx)), np.zeros((1, nx, n)), np.zeros((1, 3, N)), 1, np.zeros(K, np.int64),
              np.zeros((K, 4)), N, np.asarray(model.q_index, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64),
              np.zeros((nx, P)), np.zeros((nx, P)), np.zeros((K, 3, P)), np.zeros((1, n, P)), np.zeros((0, N, P)))


@kernel(**KERNEL_LONG)
def tip_deflections_rows(d, Z, out):
    """out[k, j] = tip deflection of link j in its link frame at Z[k] (kernels.tip_deflections)."""
    for k in range(Z.shape[0]):
        kernels.tip_deflections(d, Z[k], out[k])


def relative_deflections(model, Z):
    """(K, n): every link's |tip deflection| / length at every row of Z (0 for rigid links)."""
    Z = _rows(np.atleast_2d(Z))
    out = np.zeros((Z.shape[0], model.n_joints, 3))
    tip_deflections_rows(model.data, Z, out)
    L = np.array([js.link.length for js in model.spec.joints])
    return np.linalg.norm(out, axis=2) / np.where(L > 0, L, np.inf)


def _frames(model):
    n = model.n_joints
    return np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3))


def _rows(a):
    return np.require(a, float, ('C', 'W'))


def state_space_along(model, Z, ZD, TAU, idx, eps=1e-7, workspace=None):
    """(A (m, 2N, 2N), B (m, 2N, n)) of the deviations about samples idx of (Z, ZD, TAU) (see the module)."""
    N, n = model.n_coords, model.n_joints
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    m = idx.size
    Az, Av, Bt = np.zeros((m, N, N)), np.zeros((m, N, N)), np.zeros((m, N, n))
    ws = workspace if workspace is not None else model.workspace()
    ok = acceleration_jacobians(model.data, ws, _rows(Z), _rows(ZD), _rows(TAU), idx, float(eps),
                                np.zeros(N), np.zeros(N), np.zeros(n), np.zeros(N), np.zeros(N), Az, Av, Bt)
    if not ok:
        raise FloatingPointError('mass matrix not positive definite along the trajectory')
    A = np.zeros((m, 2 * N, 2 * N))
    A[:, :N, N:] = np.eye(N)
    A[:, N:, :N] = Az
    A[:, N:, N:] = Av
    B = np.zeros((m, 2 * N, n))
    B[:, N:, :] = Bt
    return A, B


def tip_jacobians_along(model, Z, idx, eps=1e-7):
    """(m, 3, N): d p_tip / dz at samples idx of Z."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    C = np.zeros((idx.size, 3, model.n_coords))
    tip_jacobians(model.data, _rows(Z), idx, float(eps), np.zeros(model.n_coords), *_frames(model), C)
    return C


def tip_path(model, Z):
    """(K, 3): the deformed tip position at every row of Z."""
    Z = _rows(np.atleast_2d(Z))
    out = np.zeros((Z.shape[0], 3))
    tip_positions(model.data, Z, *_frames(model), out)
    return out
