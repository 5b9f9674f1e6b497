"""numba kernels of the flexible-arm dynamics: pure functions over plain arrays, no allocation.

Equations of motion J(z) z'' = R(z, z', tau) (Book 1984, eq 82) for z = [q_1, delta_1.., q_2, ...].

Formulation (equivalent to Book's recursive Lagrangian, derived from the same kinetic energy):
each joint j owns one body, link j with its hub and rigid attachments, described in its link frame
L_j by the modal integrals of link_modes.py; the payload is a rigid body in the elastic tip frame of
the last link. A body's kinetic energy is T_b = 1/2 nu^T M_b(delta) nu with the body quasi-velocity
nu = (v, omega, deltadot) (origin velocity and angular velocity in body axes, modal rates). Kane's /
Hamel's equations give its generalized inertia force

    F_v = d/dt p + omega x p,   F_w = d/dt L + omega x L + v x p,   F_d = d/dt p_d - dT/d delta,

with (p, L, p_d) = M_b nu, and with nu = Jb(z) z' the arm equations are
sum_b Jb^T F_b + K delta + D deltadot + friction = [tau; 0]. Hence

    J = sum_b Jb^T M_b Jb (+ reflected rotor inertia on the joint diagonal)
    R = [tau; 0] - sum_b Jb^T F_b(z'' = 0) - K delta - D deltadot - friction.

Gravity enters as an upward acceleration -g of the base (uniform field). Kinematics: joint j rotates
about z of the previous tip frame; L_j = F_j Tz(d_j); the elastic tip frame of link j sits at
rho(l_j) = l_j e_x + Phi_tip delta_j and is rotated by Rz(th_z) Ry(th_y) Rx(th_x), th = Theta_tip delta_j;
Tip_j = ElasticTip_j Rx(twist_j).

Workspace arrays are allocated once per model (ArmModel) and reused; the kernels write into them.
"""
import numpy as np
from numba import njit

# ---------------------------------------------------------------------------------------------- small 3-vector ops


@njit(cache=True, inline='always')
def _cross(a0, a1, a2, b0, b1, b2):
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit(cache=True)
def _matvec_t(R, v, out):
    """out = R^T v (3x3)."""
    for i in range(3):
        out[i] = R[0, i] * v[0] + R[1, i] * v[1] + R[2, i] * v[2]


@njit(cache=True)
def _matvec(R, v, out):
    for i in range(3):
        out[i] = R[i, 0] * v[0] + R[i, 1] * v[1] + R[i, 2] * v[2]


@njit(cache=True)
def _matmul3(A, B, out):
    for i in range(3):
        for j in range(3):
            out[i, j] = A[i, 0] * B[0, j] + A[i, 1] * B[1, j] + A[i, 2] * B[2, j]


@njit(cache=True)
def _elastic_rotation(th, Re, G):
    """Re = Rz(th_z) Ry(th_y) Rx(th_x); columns of G map (thdot_x, thdot_y, thdot_z) to the
    relative angular velocity in the parent (link) frame: G = [Rz Ry e_x, Rz e_y, e_z]."""
    cx, sx = np.cos(th[0]), np.sin(th[0])
    cy, sy = np.cos(th[1]), np.sin(th[1])
    cz, sz = np.cos(th[2]), np.sin(th[2])
    Re[0, 0] = cz * cy
    Re[0, 1] = cz * sy * sx - sz * cx
    Re[0, 2] = cz * sy * cx + sz * sx
    Re[1, 0] = sz * cy
    Re[1, 1] = sz * sy * sx + cz * cx
    Re[1, 2] = sz * sy * cx - cz * sx
    Re[2, 0] = -sy
    Re[2, 1] = cy * sx
    Re[2, 2] = cy * cx
    G[0, 0] = cz * cy
    G[1, 0] = sz * cy
    G[2, 0] = -sy
    G[0, 1] = -sz
    G[1, 1] = cz
    G[2, 1] = 0.0
    G[0, 2] = 0.0
    G[1, 2] = 0.0
    G[2, 2] = 1.0


# ---------------------------------------------------------------------------------------------- body terms


@njit(cache=True)
def _body_mass_matrix(d, b, delta, m, Mb):
    """M_b(delta) of body b (link body of joint b) into Mb[:6+m, :6+m]."""
    nb = 6 + m
    for i in range(nb):
        for j in range(nb):
            Mb[i, j] = 0.0
    M = d.body_mass[b]
    S0 = d.body_S0[b]
    S = np.empty(3)
    for i in range(3):
        S[i] = S0[i]
        for k in range(m):
            S[i] += d.body_Phibar[b, i, k] * delta[k]
    for i in range(3):
        Mb[i, i] = M
    # -[S]x in (v, omega) block, [S]x in (omega, v)
    Mb[0, 4] = S[2]
    Mb[0, 5] = -S[1]
    Mb[1, 3] = -S[2]
    Mb[1, 5] = S[0]
    Mb[2, 3] = S[1]
    Mb[2, 4] = -S[0]
    for i in range(3):
        for j in range(3):
            Mb[3 + j, i] = Mb[i, 3 + j]
    # I(delta)
    for i in range(3):
        for j in range(3):
            s = d.body_I0[b, i, j]
            for k in range(m):
                s += d.body_I1[b, k, i, j] * delta[k]
                for l in range(m):
                    s += d.body_I2[b, k, l, i, j] * delta[k] * delta[l]
            Mb[3 + i, 3 + j] = s
    for k in range(m):
        for i in range(3):
            Mb[i, 6 + k] = d.body_Phibar[b, i, k]
            Mb[6 + k, i] = d.body_Phibar[b, i, k]
            h = d.body_H0[b, i, k]
            for l in range(m):
                h += d.body_H1[b, l, k, i] * delta[l]
            Mb[3 + i, 6 + k] = h
            Mb[6 + k, 3 + i] = h
        for l in range(m):
            Mb[6 + k, 6 + l] = d.body_Mdd[b, k, l]


@njit(cache=True)
def _body_mass_derivative(d, b, delta, m, k, dM):
    """dM_b/d delta_k into dM[:6+m, :6+m]."""
    nb = 6 + m
    for i in range(nb):
        for j in range(nb):
            dM[i, j] = 0.0
    p0 = d.body_Phibar[b, 0, k]
    p1 = d.body_Phibar[b, 1, k]
    p2 = d.body_Phibar[b, 2, k]
    dM[0, 4] = p2
    dM[0, 5] = -p1
    dM[1, 3] = -p2
    dM[1, 5] = p0
    dM[2, 3] = p1
    dM[2, 4] = -p0
    for i in range(3):
        for j in range(3):
            dM[3 + j, i] = dM[i, 3 + j]
    for i in range(3):
        for j in range(3):
            s = d.body_I1[b, k, i, j]
            for l in range(m):
                s += 2.0 * d.body_I2[b, k, l, i, j] * delta[l]
            dM[3 + i, 3 + j] = s
    for l in range(m):
        for i in range(3):
            dM[3 + i, 6 + l] = d.body_H1[b, k, l, i]
            dM[6 + l, 3 + i] = d.body_H1[b, k, l, i]


@njit(cache=True)
def _rigid_mass_matrix(M, S, I0, Mb):
    """Spatial inertia of a rigid body about its frame origin (first moment S = M c, I0 about origin)."""
    for i in range(6):
        for j in range(6):
            Mb[i, j] = 0.0
    for i in range(3):
        Mb[i, i] = M
    Mb[0, 4] = S[2]
    Mb[0, 5] = -S[1]
    Mb[1, 3] = -S[2]
    Mb[1, 5] = S[0]
    Mb[2, 3] = S[1]
    Mb[2, 4] = -S[0]
    for i in range(3):
        for j in range(3):
            Mb[3 + j, i] = Mb[i, 3 + j]
            Mb[3 + i, 3 + j] = I0[i, j]


@njit(cache=True)
def _accumulate_body(R, Jv, Jw, v, om, a, al, ncol, ds, m, zd, Mb, ws, d, b, delta, J, rhs, want_mass):
    """Add body contributions: J += Jb^T Mb Jb and rhs -= Jb^T F_b(z''=0).

    R, Jv, Jw, v, om, a, al: body frame rotation, world Jacobians/velocities/bias accelerations.
    b >= 0: link body of joint b with modes delta (m of them at coordinates ds..ds+m); b < 0: rigid (Mb given).
    """
    nb = 6 + m
    Jb = ws.Jb
    X = ws.X
    vb = ws.v3a
    ob = ws.v3b
    tmp = ws.v3c
    # body Jacobian rows
    for c in range(ncol):
        for i in range(3):
            Jb[i, c] = R[0, i] * Jv[0, c] + R[1, i] * Jv[1, c] + R[2, i] * Jv[2, c]
            Jb[3 + i, c] = R[0, i] * Jw[0, c] + R[1, i] * Jw[1, c] + R[2, i] * Jw[2, c]
        for k in range(m):
            Jb[6 + k, c] = 0.0
    for k in range(m):
        Jb[6 + k, ds + k] = 1.0
    _matvec_t(R, v, vb)
    _matvec_t(R, om, ob)
    nu = ws.nu
    nud = ws.nud
    for i in range(3):
        nu[i] = vb[i]
        nu[3 + i] = ob[i]
    for k in range(m):
        nu[6 + k] = zd[ds + k]
    # bias of nu-dot: (R^T a - ob x vb, R^T al, 0)
    _matvec_t(R, a, tmp)
    c0, c1, c2 = _cross(ob[0], ob[1], ob[2], vb[0], vb[1], vb[2])
    nud[0] = tmp[0] - c0
    nud[1] = tmp[1] - c1
    nud[2] = tmp[2] - c2
    _matvec_t(R, al, tmp)
    nud[3] = tmp[0]
    nud[4] = tmp[1]
    nud[5] = tmp[2]
    for k in range(m):
        nud[6 + k] = 0.0
    if b >= 0:
        _body_mass_matrix(d, b, delta, m, Mb)
    F = ws.F
    P = ws.P
    for i in range(nb):
        s = 0.0
        sp = 0.0
        for j in range(nb):
            s += Mb[i, j] * nud[j]
            sp += Mb[i, j] * nu[j]
        F[i] = s
        P[i] = sp
    if b >= 0 and m > 0:
        dM = ws.dM
        for k in range(m):
            _body_mass_derivative(d, b, delta, m, k, dM)
            dk = nu[6 + k]
            quad = 0.0
            for i in range(nb):
                s = 0.0
                for j in range(nb):
                    s += dM[i, j] * nu[j]
                F[i] += dk * s              # Mdot nu
                quad += nu[i] * s
            F[6 + k] -= 0.5 * quad          # - dT/d delta_k
    # gyroscopic terms
    c0, c1, c2 = _cross(ob[0], ob[1], ob[2], P[0], P[1], P[2])
    F[0] += c0
    F[1] += c1
    F[2] += c2
    c0, c1, c2 = _cross(ob[0], ob[1], ob[2], P[3], P[4], P[5])
    e0, e1, e2 = _cross(vb[0], vb[1], vb[2], P[0], P[1], P[2])
    F[3] += c0 + e0
    F[4] += c1 + e1
    F[5] += c2 + e2
    for c in range(ncol):
        s = 0.0
        for i in range(nb):
            s += Jb[i, c] * F[i]
        rhs[c] -= s
    if want_mass:
        for i in range(nb):
            for c in range(ncol):
                s = 0.0
                for j in range(nb):
                    s += Mb[i, j] * Jb[j, c]
                X[i, c] = s
        for r in range(ncol):
            for c in range(r, ncol):
                s = 0.0
                for i in range(nb):
                    s += Jb[i, r] * X[i, c]
                J[r, c] += s


# ---------------------------------------------------------------------------------------------- the dynamics


@njit(cache=True)
def dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass):
    """Fill J (upper triangle mirrored) and rhs = R(z, z', tau) of J z'' = R."""
    n = d.n_joints
    N = d.n_coords
    for i in range(N):
        rhs[i] = 0.0
        if want_mass:
            for j in range(N):
                J[i, j] = 0.0
    Rt = ws.Rt
    pt = ws.pt
    Jwt = ws.Jwt
    Jvt = ws.Jvt
    omt = ws.omt
    vt = ws.vt
    alt = ws.alt
    at = ws.at
    RF = ws.RF
    RE = ws.RE
    Re = ws.Re
    G = ws.G
    Rx = ws.Rx
    for i in range(3):
        for j in range(3):
            Rt[i, j] = d.base_R[i, j]
        pt[i] = d.base_p[i]
        omt[i] = 0.0
        vt[i] = 0.0
        alt[i] = 0.0
        at[i] = -d.gravity[i]       # gravity as base acceleration
    for i in range(3):
        for c in range(N):
            Jwt[i, c] = 0.0
            Jvt[i, c] = 0.0
    Jv = ws.Jv
    Jw = ws.Jw
    om = ws.om
    v = ws.v
    al = ws.al
    a = ws.a
    th = ws.th
    thd = ws.thd
    for j in range(n):
        qj = d.q_index[j]
        ds = qj + 1
        m = d.n_modes[j]
        ncol = ds + m
        ang = d.angle_offset[j] + z[qj]
        cq, sq = np.cos(ang), np.sin(ang)
        # F_j = Tip_{j-1} Rz(ang)
        for i in range(3):
            RF[i, 0] = Rt[i, 0] * cq + Rt[i, 1] * sq
            RF[i, 1] = -Rt[i, 0] * sq + Rt[i, 1] * cq
            RF[i, 2] = Rt[i, 2]
        z0, z1, z2 = Rt[0, 2], Rt[1, 2], Rt[2, 2]
        qd = zd[qj]
        for i in range(3):
            om[i] = omt[i]
            al[i] = alt[i]
        om[0] += z0 * qd
        om[1] += z1 * qd
        om[2] += z2 * qd
        c0, c1, c2 = _cross(omt[0], omt[1], omt[2], z0, z1, z2)
        al[0] += c0 * qd
        al[1] += c1 * qd
        al[2] += c2 * qd
        for c in range(ncol):
            for i in range(3):
                Jw[i, c] = Jwt[i, c] if c < qj else 0.0
        Jw[0, qj] = z0
        Jw[1, qj] = z1
        Jw[2, qj] = z2
        # L_j = F_j Tz(d_j): origin offset r = d z
        dj = d.offset[j]
        r0, r1, r2 = z0 * dj, z1 * dj, z2 * dj
        pL0, pL1, pL2 = pt[0] + r0, pt[1] + r1, pt[2] + r2
        c0, c1, c2 = _cross(om[0], om[1], om[2], r0, r1, r2)
        v[0] = vt[0] + c0
        v[1] = vt[1] + c1
        v[2] = vt[2] + c2
        e0, e1, e2 = _cross(al[0], al[1], al[2], r0, r1, r2)
        f0, f1, f2 = _cross(om[0], om[1], om[2], c0, c1, c2)
        a[0] = at[0] + e0 + f0
        a[1] = at[1] + e1 + f1
        a[2] = at[2] + e2 + f2
        for c in range(ncol):
            if c <= qj:
                g0, g1, g2 = _cross(Jw[0, c], Jw[1, c], Jw[2, c], r0, r1, r2)
                Jv[0, c] = (Jvt[0, c] if c < qj else 0.0) + g0
                Jv[1, c] = (Jvt[1, c] if c < qj else 0.0) + g1
                Jv[2, c] = (Jvt[2, c] if c < qj else 0.0) + g2
            else:
                Jv[0, c] = 0.0
                Jv[1, c] = 0.0
                Jv[2, c] = 0.0
        delta = z[ds:ds + m]
        # link body j (attached to L_j, rotation RF)
        if d.body_active[j]:
            _accumulate_body(RF, Jv, Jw, v, om, a, al, ncol, ds, m, zd, ws.Mb, ws, d, j, delta, J, rhs,
                             want_mass)
        # elastic tip of link j
        for i in range(3):
            s = 0.0
            sd = 0.0
            t = 0.0
            td = 0.0
            for k in range(m):
                s += d.phi_tip[j, i, k] * z[ds + k]
                sd += d.phi_tip[j, i, k] * zd[ds + k]
                t += d.theta_tip[j, i, k] * z[ds + k]
                td += d.theta_tip[j, i, k] * zd[ds + k]
            ws.rho[i] = s
            ws.rhod[i] = sd
            th[i] = t
            thd[i] = td
        ws.rho[0] += d.length[j]
        _matvec(RF, ws.rho, ws.r)
        _matvec(RF, ws.rhod, ws.rd)
        r0, r1, r2 = ws.r[0], ws.r[1], ws.r[2]
        rd0, rd1, rd2 = ws.rd[0], ws.rd[1], ws.rd[2]
        _elastic_rotation(th, Re, G)
        # relative angular velocity (link axes) and its bias derivative G' thd
        wr0 = G[0, 0] * thd[0] + G[0, 1] * thd[1] + G[0, 2] * thd[2]
        wr1 = G[1, 0] * thd[0] + G[1, 1] * thd[1] + G[1, 2] * thd[2]
        wr2 = G[2, 0] * thd[0] + G[2, 1] * thd[1] + G[2, 2] * thd[2]
        # d/dt(Rz e_y) = thd_z e_z x (Rz e_y); d/dt(Rz Ry e_x) = (thd_z e_z + thd_y Rz e_y) x (Rz Ry e_x)
        h0, h1, h2 = _cross(0.0, 0.0, thd[2], G[0, 1], G[1, 1], G[2, 1])
        u0 = G[0, 1] * thd[1]
        u1 = G[1, 1] * thd[1]
        u2 = thd[2]
        k0, k1, k2 = _cross(u0, u1, u2, G[0, 0], G[1, 0], G[2, 0])
        gd0 = thd[1] * h0 + thd[0] * k0
        gd1 = thd[1] * h1 + thd[0] * k1
        gd2 = thd[1] * h2 + thd[0] * k2
        ws.tmp3[0] = wr0
        ws.tmp3[1] = wr1
        ws.tmp3[2] = wr2
        _matvec(RF, ws.tmp3, ws.wr)
        ws.tmp3[0] = gd0
        ws.tmp3[1] = gd1
        ws.tmp3[2] = gd2
        _matvec(RF, ws.tmp3, ws.gd)
        # tip position / velocity / bias acceleration
        c0, c1, c2 = _cross(om[0], om[1], om[2], r0, r1, r2)
        vt[0] = v[0] + c0 + rd0
        vt[1] = v[1] + c1 + rd1
        vt[2] = v[2] + c2 + rd2
        e0, e1, e2 = _cross(al[0], al[1], al[2], r0, r1, r2)
        f0, f1, f2 = _cross(om[0], om[1], om[2], c0, c1, c2)
        g0, g1, g2 = _cross(om[0], om[1], om[2], rd0, rd1, rd2)
        at[0] = a[0] + e0 + f0 + 2.0 * g0
        at[1] = a[1] + e1 + f1 + 2.0 * g1
        at[2] = a[2] + e2 + f2 + 2.0 * g2
        wr = ws.wr
        h0, h1, h2 = _cross(om[0], om[1], om[2], wr[0], wr[1], wr[2])
        alt[0] = al[0] + h0 + ws.gd[0]
        alt[1] = al[1] + h1 + ws.gd[1]
        alt[2] = al[2] + h2 + ws.gd[2]
        omt[0] = om[0] + wr[0]
        omt[1] = om[1] + wr[1]
        omt[2] = om[2] + wr[2]
        pt[0] = pL0 + r0
        pt[1] = pL1 + r1
        pt[2] = pL2 + r2
        for c in range(ncol):
            if c < ds:
                g0, g1, g2 = _cross(Jw[0, c], Jw[1, c], Jw[2, c], r0, r1, r2)
                Jvt[0, c] = Jv[0, c] + g0
                Jvt[1, c] = Jv[1, c] + g1
                Jvt[2, c] = Jv[2, c] + g2
                Jwt[0, c] = Jw[0, c]
                Jwt[1, c] = Jw[1, c]
                Jwt[2, c] = Jw[2, c]
            else:
                k = c - ds
                for i in range(3):
                    ws.tmp3[i] = d.phi_tip[j, i, k]
                _matvec(RF, ws.tmp3, ws.r)
                for i in range(3):
                    Jvt[i, c] = ws.r[i]
                for i in range(3):
                    ws.tmp3[i] = (G[i, 0] * d.theta_tip[j, 0, k] + G[i, 1] * d.theta_tip[j, 1, k]
                                  + G[i, 2] * d.theta_tip[j, 2, k])
                _matvec(RF, ws.tmp3, ws.r)
                for i in range(3):
                    Jwt[i, c] = ws.r[i]
        # elastic tip rotation RE = RF Re
        _matmul3(RF, Re, RE)
        if j == n - 1 and d.payload_active:
            _rigid_mass_matrix(d.payload_mass, d.payload_S, d.payload_I0, ws.Mb)
            _accumulate_body(RE, Jvt, Jwt, vt, omt, at, alt, ncol, ds, 0, zd, ws.Mb, ws, d, -1, delta, J, rhs,
                             want_mass)
        # Tip_j = ElasticTip_j Rx(twist_j)
        ca, sa = np.cos(d.twist[j]), np.sin(d.twist[j])
        for i in range(3):
            Rx[i, 0] = RE[i, 0]
            Rx[i, 1] = RE[i, 1] * ca + RE[i, 2] * sa
            Rx[i, 2] = -RE[i, 1] * sa + RE[i, 2] * ca
        for i in range(3):
            for k in range(3):
                Rt[i, k] = Rx[i, k]
        # elastic and damping forces of link j
        for k in range(m):
            s = 0.0
            for l in range(m):
                s += d.stiffness[j, k, l] * z[ds + l] + d.damping[j, k, l] * zd[ds + l]
            rhs[ds + k] -= s
        # joint torque, friction, rotor inertia
        rhs[qj] += tau[j] - d.viscous[j] * qd - d.coulomb[j] * np.tanh(qd / d.coulomb_velocity)
        if want_mass:
            J[qj, qj] += d.rotor_inertia[j]
    if want_mass:
        for r in range(N):
            for c in range(r):
                J[r, c] = J[c, r]


@njit(cache=True)
def cholesky_solve(A, b, N, L, x):
    """Solve A x = b for symmetric positive definite A (N x N) using workspace L. Returns False if not PD."""
    for j in range(N):
        s = A[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return False
        ljj = np.sqrt(s)
        L[j, j] = ljj
        for i in range(j + 1, N):
            t = A[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / ljj
    for i in range(N):
        t = b[i]
        for k in range(i):
            t -= L[i, k] * x[k]
        x[i] = t / L[i, i]
    for i in range(N - 1, -1, -1):
        t = x[i]
        for k in range(i + 1, N):
            t -= L[k, i] * x[k]
        x[i] = t / L[i, i]
    return True


@njit(cache=True)
def forward_dynamics(d, ws, z, zd, tau, zdd):
    """z'' = J^-1 R. Returns False (and leaves zdd undefined) if J is not positive definite."""
    dynamics_terms(d, ws, z, zd, tau, ws.J, ws.rhs, True)
    return cholesky_solve(ws.J, ws.rhs, d.n_coords, ws.L, zdd)


# ---------------------------------------------------------------------------------------------- integrators


@njit(cache=True)
def rk4_step(d, ws, z, zd, tau, dt, substeps):
    """Advance (z, zd) in place by substeps classical RK4 steps of dt/substeps. False on failure."""
    N = d.n_coords
    h = dt / substeps
    z0 = ws.z0
    v0 = ws.v0
    zs = ws.zs
    vs = ws.vs
    k1 = ws.k1
    k2 = ws.k2
    k3 = ws.k3
    k4 = ws.k4
    for _ in range(substeps):
        for i in range(N):
            z0[i] = z[i]
            v0[i] = zd[i]
        if not forward_dynamics(d, ws, z0, v0, tau, k1):
            return False
        for i in range(N):
            zs[i] = z0[i] + 0.5 * h * v0[i]
            vs[i] = v0[i] + 0.5 * h * k1[i]
        for i in range(N):
            ws.vk2[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k2):
            return False
        for i in range(N):
            zs[i] = z0[i] + 0.5 * h * ws.vk2[i]
            vs[i] = v0[i] + 0.5 * h * k2[i]
        for i in range(N):
            ws.vk3[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k3):
            return False
        for i in range(N):
            zs[i] = z0[i] + h * ws.vk3[i]
            vs[i] = v0[i] + h * k3[i]
        for i in range(N):
            ws.vk4[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k4):
            return False
        for i in range(N):
            z[i] = z0[i] + h / 6.0 * (v0[i] + 2.0 * ws.vk2[i] + 2.0 * ws.vk3[i] + ws.vk4[i])
            zd[i] = v0[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
    return True


@njit(cache=True)
def midpoint_step(d, ws, z, zd, tau, dt, substeps, tol, max_iter):
    """Implicit midpoint rule (symplectic, A-stable), simplified Newton on the stiff linear part.

    Unknown v1: residual J_m (v1 - v0) - h R(z_m, v_m), z_m = z0 + h/4 (v0 + v1), v_m = (v0 + v1)/2.
    Newton matrix S = J_m + h/2 (D + B) + h^2/4 K (modal stiffness K, modal damping D, viscous friction B),
    which captures the high-frequency elastic modes that limit explicit steps; the slow nonlinear
    terms converge by fixed point. Returns False if J is not PD or the iteration does not converge.
    """
    N = d.n_coords
    h = dt / substeps
    z0 = ws.z0
    v0 = ws.v0
    zs = ws.zs
    vs = ws.vs
    v1 = ws.k1
    res = ws.k2
    dv = ws.k3
    S = ws.S
    for _ in range(substeps):
        for i in range(N):
            z0[i] = z[i]
            v0[i] = zd[i]
            v1[i] = zd[i]
        converged = False
        for it in range(max_iter):
            for i in range(N):
                vs[i] = 0.5 * (v0[i] + v1[i])
                zs[i] = z0[i] + 0.5 * h * vs[i]
            dynamics_terms(d, ws, zs, vs, tau, ws.J, ws.rhs, True)
            for i in range(N):
                s = 0.0
                for j in range(N):
                    s += ws.J[i, j] * (v1[j] - v0[j])
                    S[i, j] = ws.J[i, j]
                res[i] = -(s - h * ws.rhs[i])
            for j in range(d.n_joints):
                qj = d.q_index[j]
                S[qj, qj] += 0.5 * h * d.viscous[j]
                m = d.n_modes[j]
                for k in range(m):
                    for l in range(m):
                        S[qj + 1 + k, qj + 1 + l] += (0.5 * h * d.damping[j, k, l]
                                                      + 0.25 * h * h * d.stiffness[j, k, l])
            if not cholesky_solve(S, res, N, ws.L, dv):
                return False
            nrm = 0.0
            ref = 0.0
            for i in range(N):
                v1[i] += dv[i]
                nrm += dv[i] * dv[i]
                ref += v1[i] * v1[i]
            if nrm <= tol * tol * (ref + 1e-300) or nrm < 1e-300:
                converged = True
                break
        if not converged:
            return False
        for i in range(N):
            z[i] = z0[i] + 0.5 * h * (v0[i] + v1[i])
            zd[i] = v1[i]
    return True


# ---------------------------------------------------------------------------------------------- kinematics, energy


@njit(cache=True)
def link_frames(d, z, RF, pL, RE, pE):
    """Frames of every link at configuration z: RF[j] (rotation of F_j = L_j), pL[j] (origin of L_j),
    RE[j], pE[j] (elastic tip frame of link j, before the twist)."""
    n = d.n_joints
    Rt = np.empty((3, 3))
    pt = np.empty(3)
    Re = np.empty((3, 3))
    G = np.empty((3, 3))
    th = np.empty(3)
    rho = np.empty(3)
    for i in range(3):
        for k in range(3):
            Rt[i, k] = d.base_R[i, k]
        pt[i] = d.base_p[i]
    for j in range(n):
        qj = d.q_index[j]
        ds = qj + 1
        m = d.n_modes[j]
        ang = d.angle_offset[j] + z[qj]
        cq, sq = np.cos(ang), np.sin(ang)
        for i in range(3):
            RF[j, i, 0] = Rt[i, 0] * cq + Rt[i, 1] * sq
            RF[j, i, 1] = -Rt[i, 0] * sq + Rt[i, 1] * cq
            RF[j, i, 2] = Rt[i, 2]
        for i in range(3):
            pL[j, i] = pt[i] + Rt[i, 2] * d.offset[j]
        for i in range(3):
            s = 0.0
            t = 0.0
            for k in range(m):
                s += d.phi_tip[j, i, k] * z[ds + k]
                t += d.theta_tip[j, i, k] * z[ds + k]
            rho[i] = s
            th[i] = t
        rho[0] += d.length[j]
        for i in range(3):
            pE[j, i] = pL[j, i] + RF[j, i, 0] * rho[0] + RF[j, i, 1] * rho[1] + RF[j, i, 2] * rho[2]
        _elastic_rotation(th, Re, G)
        for i in range(3):
            for k in range(3):
                RE[j, i, k] = RF[j, i, 0] * Re[0, k] + RF[j, i, 1] * Re[1, k] + RF[j, i, 2] * Re[2, k]
        ca, sa = np.cos(d.twist[j]), np.sin(d.twist[j])
        for i in range(3):
            Rt[i, 0] = RE[j, i, 0]
            Rt[i, 1] = RE[j, i, 1] * ca + RE[j, i, 2] * sa
            Rt[i, 2] = -RE[j, i, 1] * sa + RE[j, i, 2] * ca
            pt[i] = pE[j, i]


@njit(cache=True)
def potential_energies(d, z, RF, pL, RE, pE):
    """(elastic, gravity) potential energy at z. Gravity: V = -g . sum_b (M_b p_b + R_b S_b(delta))."""
    link_frames(d, z, RF, pL, RE, pE)
    elastic = 0.0
    grav = 0.0
    for j in range(d.n_joints):
        ds = d.q_index[j] + 1
        m = d.n_modes[j]
        for k in range(m):
            for l in range(m):
                elastic += 0.5 * z[ds + k] * d.stiffness[j, k, l] * z[ds + l]
        for i in range(3):
            s = d.body_S0[j, i]
            for k in range(m):
                s += d.body_Phibar[j, i, k] * z[ds + k]
            for r in range(3):
                grav -= d.gravity[r] * RF[j, r, i] * s
            grav -= d.gravity[i] * d.body_mass[j] * pL[j, i]
    n = d.n_joints - 1
    if d.payload_active:
        for i in range(3):
            grav -= d.gravity[i] * d.payload_mass * pE[n, i]
            for r in range(3):
                grav -= d.gravity[r] * RE[n, r, i] * d.payload_S[i]
    return elastic, grav
