"""Plain-numpy implementation of the arm dynamics J(z) z'' = R(z, z', tau) (reference and benchmark baseline).

Same formulation as kernels.py (per-body quasi-velocity Kane/Hamel equations over the modal integrals of
link_modes.py, see its module docstring), written in array form: per joint the world Jacobians are (3, N)
arrays updated with vectorized cross products, each body's Jacobian is a (6+m, N) array, M_b(delta) and
its derivatives come from einsums over the integrals in `model.data`. No numba; Python loops run only over
joints/bodies. Use it to cross-check the kernels and to measure the numba speed-up.

    from flexarm_sim.model import dynamics_numpy as dn
    J, R = dn.mass_matrix_and_rhs(model.data, z, zd, tau)
    zdd = dn.forward_dynamics(model.data, z, zd, tau)
"""
from __future__ import annotations

import numpy as np

__all__ = ['mass_matrix_and_rhs', 'forward_dynamics', 'rk4_step', 'body_mass_matrix']


def _cross(a, b):
    """a x b for 3-vectors or (3, N) column stacks (broadcasting); much cheaper than np.cross on tiny arrays."""
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _skew(s):
    """[s]x, the cross-product matrix."""
    return np.array([[0.0, -s[2], s[1]], [s[2], 0.0, -s[0]], [-s[1], s[0], 0.0]])


def _rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot_y(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rot_x(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _spatial_rigid(M, S, I):
    """6x6 inertia of a rigid body about its frame origin in (v, omega) body coordinates."""
    Sx = _skew(S)
    out = np.zeros((6, 6))
    out[(0, 1, 2), (0, 1, 2)] = M
    out[:3, 3:] = Sx.T
    out[3:, :3] = Sx
    out[3:, 3:] = I
    return out


def _ex_cross(h):
    """e_x x h for 3-vectors stacked along the first axis: (3, ...) -> (3, ...)."""
    return np.array([np.zeros_like(h[0]), -h[2], h[1]])


def body_mass_matrix(d, b, delta):
    """M_b(delta) ((6+m) x (6+m)) of link body b and dM_b/d delta_k stacked as (m, 6+m, 6+m).

    With foreshortening (d.fs_active[b], link_modes.py): S_x += -delta^T Gbar delta / 2, P = dS/d delta,
    I += (a2 + a4) diag(0, 1, 1) - (e_x c^T + c e_x^T), H_k += e_x x h_k, Mdd += int mu g g^T."""
    m = delta.size
    Phi = d.body_Phibar[b, :, :m]                       # (3, m)
    S = d.body_S0[b] + Phi @ delta
    I1 = d.body_I1[b, :m]                               # (m, 3, 3)
    I2 = d.body_I2[b, :m, :m]                           # (m, m, 3, 3)
    H1 = d.body_H1[b, :m, :m]                           # (m, m, 3): H1[l, k] = int mu phi_l x phi_k
    I = d.body_I0[b] + np.einsum('kij,k->ij', I1, delta) + np.einsum('klij,k,l->ij', I2, delta, delta)
    H = d.body_H0[b, :, :m] + np.einsum('lki,l->ik', H1, delta)
    Mdd = d.body_Mdd[b, :m, :m].copy()
    P = Phi.copy()
    dA = I1 + 2.0 * np.einsum('klij,l->kij', I2, delta)         # dI / d delta_k
    dH = H1.transpose(0, 2, 1).copy()                          # dH[k][:, l] = dH_l / d delta_k
    dP = np.zeros((m, 3, m))                                   # dP[k][:, l] = dP_l / d delta_k
    dMdd = np.zeros((m, m, m))
    if m and d.fs_active[b]:
        Gbar, Geta = d.fs_G[b, 0, :m, :m], d.fs_G[b, 1, :m, :m]
        D = d.fs_D[b, :m, :m, :m, :m]
        Cv = np.zeros((m, m, m, 3))                            # C_abk along the plane axis of mode k
        Cv[:, :, np.arange(m), d.mode_axis[b, :m]] = d.fs_C[b, :m, :m, :m]
        ex = np.array([1.0, 0.0, 0.0])
        ortho = np.diag([0.0, 1.0, 1.0])
        gb = Gbar @ delta
        S = S + ex * (-0.5 * delta @ gb)
        P = Phi - np.outer(ex, gb)
        a24 = -delta @ Geta @ delta + 0.25 * np.einsum('abcd,a,b,c,d->', D, delta, delta, delta, delta)
        c = -0.5 * np.einsum('abki,a,b,k->i', Cv, delta, delta, delta)
        I = I + a24 * ortho - (np.outer(ex, c) + np.outer(c, ex))
        h = np.einsum('kabi,a,b->ik', Cv, delta, delta) - 0.5 * np.einsum('abki,a,b->ik', Cv, delta, delta)
        H = H + _ex_cross(h)
        Mdd = Mdd + np.einsum('kalb,a,b->kl', D, delta, delta)
        da24 = -2.0 * Geta @ delta + np.einsum('abkc,a,b,c->k', D, delta, delta, delta)
        dc = (-np.einsum('kabi,a,b->ki', Cv, delta, delta) - 0.5 * np.einsum('abki,a,b->ki', Cv, delta, delta))
        dA = dA + da24[:, None, None] * ortho - (np.einsum('i,kj->kij', ex, dc) + np.einsum('ki,j->kij', dc, ex))
        dh = (np.einsum('lkai,a->lki', Cv, delta) + np.einsum('laki,a->lki', Cv, delta)
              - np.einsum('kali,a->lki', Cv, delta))            # dh[l, k] = d h_l / d delta_k
        dH = dH + _ex_cross(dh.transpose(2, 1, 0)).transpose(1, 0, 2)
        dP[:, 0, :] = -Gbar.T
        dMdd = np.einsum('lkma,a->klm', D, delta) + np.einsum('lamk,a->klm', D, delta)
    Mb = np.zeros((6 + m, 6 + m))
    Mb[:6, :6] = _spatial_rigid(d.body_mass[b], S, I)
    Mb[:3, 6:] = P
    Mb[3:6, 6:] = H
    Mb[6:, :3] = P.T
    Mb[6:, 3:6] = H.T
    Mb[6:, 6:] = Mdd
    dM = np.zeros((m, 6 + m, 6 + m))
    if m:
        # d[S]x/d delta_k = [P_k]x ; dI/d delta_k = dA_k ; dH[:, l]/d delta_k ; dP, dMdd (foreshortening)
        sk = np.zeros((m, 3, 3))
        sk[:, 0, 1], sk[:, 0, 2], sk[:, 1, 2] = -P[2], P[1], -P[0]
        sk -= sk.transpose(0, 2, 1)
        dM[:, 3:6, :3] = sk
        dM[:, :3, 3:6] = sk.transpose(0, 2, 1)
        dM[:, 3:6, 3:6] = dA
        dM[:, 3:6, 6:] = dH
        dM[:, 6:, 3:6] = dH.transpose(0, 2, 1)
        dM[:, :3, 6:] = dP
        dM[:, 6:, :3] = dP.transpose(0, 2, 1)
        dM[:, 6:, 6:] = dMdd
    return Mb, dM


def _body_terms(R, Jv, Jw, v, om, a, al, Mb, dM, mode_cols, zd):
    """(Jb^T Mb Jb, Jb^T F_b(z''=0)) of one body with frame rotation R and world kinematics."""
    m = len(mode_cols)
    N = Jv.shape[1]
    Jb = np.zeros((6 + m, N))
    Jb[:3] = R.T @ Jv
    Jb[3:6] = R.T @ Jw
    if m:
        Jb[6 + np.arange(m), mode_cols] = 1.0
    vb, ob = R.T @ v, R.T @ om
    nu = np.concatenate([vb, ob, zd[mode_cols]])
    nud = np.concatenate([R.T @ a - _cross(ob, vb), R.T @ al, np.zeros(m)])
    P = Mb @ nu
    F = Mb @ nud
    if m:
        dd = nu[6:]
        F += np.einsum('k,kij,j->i', dd, dM, nu)                     # Mdot nu
        F[6:] -= 0.5 * np.einsum('i,kij,j->k', nu, dM, nu)          # - dT/d delta
    F[:3] += _cross(ob, P[:3])
    F[3:6] += _cross(ob, P[3:6]) + _cross(vb, P[:3])
    return Jb.T @ Mb @ Jb, Jb.T @ F


def mass_matrix_and_rhs(d, z, zd, tau, want_mass=True):
    """J(z) (N x N, or None) and R(z, z', tau) of J z'' = R for KernelData d (model.data)."""
    z = np.asarray(z, dtype=float)
    zd = np.asarray(zd, dtype=float)
    tau = np.asarray(tau, dtype=float)
    n, N = d.n_joints, d.n_coords
    J = np.zeros((N, N))
    rhs = np.zeros(N)
    # state of the previous tip frame (world): rotation, Jacobians, velocities, bias accelerations
    Rt = np.array(d.base_R, dtype=float)
    Jvt, Jwt = np.zeros((3, N)), np.zeros((3, N))
    vt, omt = np.zeros(3), np.zeros(3)
    at, alt = -np.asarray(d.gravity, dtype=float), np.zeros(3)        # gravity as a base acceleration
    for j in range(n):
        qj = int(d.q_index[j])
        m = int(d.n_modes[j])
        cols = np.arange(qj + 1, qj + 1 + m)
        delta, deltad = z[cols], zd[cols]
        qd = zd[qj]
        # joint j: F_j = Tip_{j-1} Rz(angle_offset + q)
        RF = Rt @ _rot_z(d.angle_offset[j] + z[qj])
        axis = Rt[:, 2]
        om = omt + axis * qd
        al = alt + _cross(omt, axis) * qd
        Jw = Jwt.copy()
        Jw[:, qj] = axis
        # L_j = F_j Tz(offset)
        r = axis * d.offset[j]
        v = vt + _cross(om, r)
        a = at + _cross(al, r) + _cross(om, _cross(om, r))
        Jv = Jvt + _cross(Jw, r)
        if d.body_active[j]:
            Mb, dM = body_mass_matrix(d, j, delta)
            Jj, Fj = _body_terms(RF, Jv, Jw, v, om, a, al, Mb, dM, cols, zd)
            J += Jj
            rhs -= Fj
        # elastic tip of link j in the link frame: position rho, small rotation angles th (Rz Ry Rx)
        phi_tip, theta_tip = d.phi_tip[j, :, :m], d.theta_tip[j, :, :m]
        bias = np.zeros(3)                                   # relative acceleration of the tip at z'' = 0
        if m and d.fs_active[j]:                             # tip foreshortening -1/2 delta^T G_tip delta e_x
            Gt = d.fs_G[j, 2, :m, :m]
            phi_tip = phi_tip - np.outer([1.0, 0.0, 0.0], Gt @ delta)     # d rho / d delta
            bias[0] = -deltad @ Gt @ deltad
        rho = d.phi_tip[j, :, :m] @ delta + np.array([d.length[j], 0.0, 0.0])
        if m and d.fs_active[j]:
            rho[0] -= 0.5 * delta @ Gt @ delta
        rhod = phi_tip @ deltad
        th, thd = theta_tip @ delta, theta_tip @ deltad
        Rz, Ry, Rx = _rot_z(th[2]), _rot_y(th[1]), _rot_x(th[0])
        ex, ey, ez = np.eye(3)
        g_x, g_y = Rz @ Ry @ ex, Rz @ ey
        G = np.column_stack([g_x, g_y, ez])                  # relative angular velocity = G thd (link axes)
        Gd_thd = thd[1] * _cross(thd[2] * ez, g_y) + thd[0] * _cross(thd[2] * ez + thd[1] * g_y, g_x)
        rw, rdw = RF @ rho, RF @ rhod
        wr = RF @ (G @ thd)
        # tip kinematics (world)
        vt = v + _cross(om, rw) + rdw
        at = a + _cross(al, rw) + _cross(om, _cross(om, rw)) + 2.0 * _cross(om, rdw) + RF @ bias
        omt = om + wr
        alt = al + _cross(om, wr) + RF @ Gd_thd
        Jvt = Jv + _cross(Jw, rw)
        Jwt = Jw.copy()
        if m:
            Jvt[:, cols] = RF @ phi_tip
            Jwt[:, cols] = RF @ (G @ theta_tip)
        RE = RF @ Rz @ Ry @ Rx
        if j == n - 1 and d.payload_active:
            Mp = _spatial_rigid(d.payload_mass, d.payload_S, d.payload_I0)
            Jp, Fp = _body_terms(RE, Jvt, Jwt, vt, omt, at, alt, Mp, None, cols[:0], zd)
            J += Jp
            rhs -= Fp
        Rt = RE @ _rot_x(d.twist[j])
        # elastic and damping forces, joint torque, friction, rotor inertia
        if m:
            rhs[cols] -= d.stiffness[j, :m, :m] @ delta + d.damping[j, :m, :m] @ deltad
            if d.fs_active[j]:                                   # quartic curvature energy 1/2 K4 . delta^4
                rhs[cols] -= 2.0 * np.einsum('kbce,b,c,e->k', d.fs_K4[j, :m, :m, :m, :m], delta, delta, delta)
        rhs[qj] += tau[j] - d.viscous[j] * qd - d.coulomb[j] * np.tanh(qd / d.coulomb_velocity)
        lo, hi, ks, cs = d.joint_stop[j]
        if ks > 0 and z[qj] > hi:                                      # hard stops (kernels.stop_torque)
            rhs[qj] -= max(0.0, ks * (z[qj] - hi) + cs * qd)
        elif ks > 0 and z[qj] < lo:
            rhs[qj] += max(0.0, ks * (lo - z[qj]) - cs * qd)
        J[qj, qj] += d.rotor_inertia[j]
    return (0.5 * (J + J.T) if want_mass else None), rhs


def forward_dynamics(d, z, zd, tau):
    """z'' = J^-1 R (numpy LAPACK solve)."""
    J, rhs = mass_matrix_and_rhs(d, z, zd, tau)
    return np.linalg.solve(J, rhs)


def rk4_step(d, z, zd, tau, dt, substeps=1):
    """Classical RK4 on (z, z'); returns the new (z, zd) (inputs untouched)."""
    h = dt / substeps
    z, zd = np.array(z, dtype=float), np.array(zd, dtype=float)
    for _ in range(substeps):
        k1 = forward_dynamics(d, z, zd, tau)
        v2 = zd + 0.5 * h * k1
        k2 = forward_dynamics(d, z + 0.5 * h * zd, v2, tau)
        v3 = zd + 0.5 * h * k2
        k3 = forward_dynamics(d, z + 0.5 * h * v2, v3, tau)
        v4 = zd + h * k3
        k4 = forward_dynamics(d, z + h * v3, v4, tau)
        z = z + h / 6.0 * (zd + 2.0 * v2 + 2.0 * v3 + v4)
        zd = zd + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return z, zd
