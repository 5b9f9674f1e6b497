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
from numba import njit, typeof, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

# Floating-point freedoms of the kernels: reassociation, contraction (FMA), reciprocal, signed zeros; not 'nnan' /
# 'ninf' (callers check results for non-finite values, which those would let LLVM optimise away). Measured with
# bench/bench_dynamics.py --quick: De Luca forward dynamics 2.54 -> 2.16 us, RK4 step 11.5 -> 9.8 us.
FASTMATH = {'reassoc', 'contract', 'arcp', 'nsz'}

# Performance notes: fields of the KernelData / Workspace named tuples are unpacked into locals once per
# kernel call (every attribute access of an array in a named tuple costs an atomic reference-count
# update in numba), and the per-body helper is inlined and takes plain arrays.


@njit(cache=True, fastmath=FASTMATH)
def _cross(a0, a1, a2, b0, b1, b2):
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit(cache=True, fastmath=FASTMATH)
def _elastic_rotation(th0, th1, th2, Re, G):
    """Re = Rz(th_z) Ry(th_y) Rx(th_x); columns of G map (thdot_x, thdot_y, thdot_z) to the
    relative angular velocity in the parent (link) frame: G = [Rz Ry e_x, Rz e_y, e_z]."""
    cx, sx = np.cos(th0), np.sin(th0)
    cy, sy = np.cos(th1), np.sin(th1)
    cz, sz = np.cos(th2), np.sin(th2)
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


# ---------------------------------------------------------------------------------------------- one body


@njit(cache=True, fastmath=FASTMATH)
def _foreshortening(d, ws, j, m, ds, z, zd):
    """Contractions of the foreshortening integrals of link j (link_modes.py) with the state, into ws:

        fs_v[0] = Gbar delta, fs_v[1] = Gbar deltadot, fs_v[2, k] = d(a2 + a4)/d delta_k,
        fs_R[0, k, a] = sum_b C_kab delta_b e_b,  fs_R[1, k, a] = sum_b delta_b C_kba e_a,
        fs_R[2, l, k] = d h_l / d delta_k,  fs_F[k, a, l] = sum_b D_kalb delta_b,  fs_E = int mu g g^T,
        fs_hc[k] = (h_k y, z; d c/d delta_k y, z)

    with g = G delta, u = -delta^T G delta / 2, a2 = int 2 mu eta u, a4 = int mu u^2, c = int mu u w,
    h_k = int mu (g_k w + u phi_k) (e_b: the plane axis of mode b). Returns (U = int mu u, a2 + a4, c_y, c_z,
    Sdot_x, bias of S''_x) with Sdot_x = -g_bar . deltadot and the bias -deltadot^T Gbar deltadot."""
    G = d.fs_G[j]
    C = d.fs_C[j]
    D = d.fs_D[j]
    ax = d.mode_axis[j]
    v = ws.fs_v
    R = ws.fs_R
    F = ws.fs_F
    E = ws.fs_E
    hc = ws.fs_hc
    U = 0.0
    a24 = 0.0
    sdx = 0.0
    sddx = 0.0
    for k in range(m):
        gb = 0.0
        gbd = 0.0
        ge = 0.0
        for l in range(m):
            gb += G[0, k, l] * z[ds + l]
            gbd += G[0, k, l] * zd[ds + l]
            ge += G[1, k, l] * z[ds + l]
        dk = z[ds + k]
        v[0, k] = gb
        v[1, k] = gbd
        v[2, k] = -2.0 * ge
        U -= 0.5 * dk * gb
        a24 -= dk * ge
        sdx -= gb * zd[ds + k]
        sddx -= gbd * zd[ds + k]
    for k in range(m):
        for a in range(m):
            R[0, k, a, 1] = 0.0
            R[0, k, a, 2] = 0.0
            R[1, k, a, 1] = 0.0
            R[1, k, a, 2] = 0.0
            r2 = 0.0
            for b in range(m):
                R[0, k, a, ax[b]] += C[k, a, b] * z[ds + b]
                r2 += C[k, b, a] * z[ds + b]
            R[1, k, a, ax[a]] = r2
            for l in range(m):
                f = 0.0
                for b in range(m):
                    f += D[k, a, l, b] * z[ds + b]
                F[k, a, l] = f
    cy = 0.0
    cz = 0.0
    for k in range(m):
        dk = z[ds + k]
        q1y = 0.0
        q1z = 0.0
        q2y = 0.0
        q2z = 0.0
        da4 = 0.0
        for a in range(m):
            da = z[ds + a]
            q1y += da * R[0, k, a, 1]
            q1z += da * R[0, k, a, 2]
            q2y += da * R[1, a, k, 1]
            q2z += da * R[1, a, k, 2]
            R[2, k, a, 1] = R[0, k, a, 1] + R[1, k, a, 1] - R[1, a, k, 1]
            R[2, k, a, 2] = R[0, k, a, 2] + R[1, k, a, 2] - R[1, a, k, 2]
            e = 0.0
            f = 0.0
            for b in range(m):
                e += z[ds + b] * F[b, a, k]
                f += z[ds + b] * F[k, b, a]
            da4 += da * e
            E[k, a] = f
        v[2, k] += da4
        a24 += 0.25 * dk * da4
        cy -= 0.5 * dk * q2y
        cz -= 0.5 * dk * q2z
        hc[k, 0] = q1y - 0.5 * q2y
        hc[k, 1] = q1z - 0.5 * q2z
        hc[k, 2] = -q1y - 0.5 * q2y
        hc[k, 3] = -q1z - 0.5 * q2z
    return U, a24, cy, cz, sdx, sddx


@njit(cache=True, fastmath=FASTMATH)
def _body_terms(d, ws, b, j, R, Jv, Jw, v, om, a, al, ncol, z, zd, J, rhs, want_mass):
    """Add one body: J += Jb^T M_b Jb, rhs -= Jb^T F_b(z''=0), with Jb = [R^T Jv; R^T Jw; selector of
    the body's modal coordinates ds..ds+m]. Body b < n_joints is link b (its modes, hub, attachments);
    b = n_joints is the payload (rigid, in the elastic tip frame of link j). M_b(delta):

        M_b = [[M 1, -[S]x, P], [[S]x, I, H], [P^T, H^T, Mdd]],  P = dS/d delta,
        S = S0 + Phibar delta (+ e_x U),  I = I0 + sum_k delta_k I1_k + sum_kl delta_k delta_l I2_kl (+ I_fs),
        H_k = H0_k + sum_l delta_l H1_lk (+ e_x x h_k),  Mdd (+ int mu g g^T)

    (foreshortening terms in brackets, see _foreshortening). Generalized inertia force (Hamel):
    F_v = pdot + w x p, F_w = Ldot + w x L + v x p, F_delta = d/dt p_delta - dT/d delta.
    """
    n = d.n_joints
    A = ws.A
    Y = ws.Y
    Ak = ws.Ak
    Hm = ws.Hm
    P = ws.P
    if b < n:
        M = d.body_mass[b]
        S0 = d.body_S0[b]
        I0 = d.body_I0[b]
        m = d.n_modes[b]
        ds = d.q_index[b] + 1
        fs = d.fs_active[b]
    else:
        M = d.payload_mass
        S0 = d.payload_S
        I0 = d.payload_I0
        m = ncol - ncol
        ds = ncol
        fs = m > 0
    Phibar = d.body_Phibar[j]
    I1 = d.body_I1[j]
    I2 = d.body_I2[j]
    H0 = d.body_H0[j]
    H1 = d.body_H1[j]
    Mdd = d.body_Mdd[j]
    # body Jacobian rows (6 x ncol)
    for c in range(ncol):
        for i in range(3):
            A[i, c] = R[0, i] * Jv[0, c] + R[1, i] * Jv[1, c] + R[2, i] * Jv[2, c]
            A[3 + i, c] = R[0, i] * Jw[0, c] + R[1, i] * Jw[1, c] + R[2, i] * Jw[2, c]
    # body velocities and bias of their derivatives
    v0 = R[0, 0] * v[0] + R[1, 0] * v[1] + R[2, 0] * v[2]
    v1 = R[0, 1] * v[0] + R[1, 1] * v[1] + R[2, 1] * v[2]
    v2 = R[0, 2] * v[0] + R[1, 2] * v[1] + R[2, 2] * v[2]
    w0 = R[0, 0] * om[0] + R[1, 0] * om[1] + R[2, 0] * om[2]
    w1 = R[0, 1] * om[0] + R[1, 1] * om[1] + R[2, 1] * om[2]
    w2 = R[0, 2] * om[0] + R[1, 2] * om[1] + R[2, 2] * om[2]
    c0, c1, c2 = _cross(w0, w1, w2, v0, v1, v2)
    av0 = R[0, 0] * a[0] + R[1, 0] * a[1] + R[2, 0] * a[2] - c0
    av1 = R[0, 1] * a[0] + R[1, 1] * a[1] + R[2, 1] * a[2] - c1
    av2 = R[0, 2] * a[0] + R[1, 2] * a[1] + R[2, 2] * a[2] - c2
    aw0 = R[0, 0] * al[0] + R[1, 0] * al[1] + R[2, 0] * al[2]
    aw1 = R[0, 1] * al[0] + R[1, 1] * al[1] + R[2, 1] * al[2]
    aw2 = R[0, 2] * al[0] + R[1, 2] * al[1] + R[2, 2] * al[2]
    # configuration-dependent integrals: S, P, I, H, and A_k = dI/d delta_k (= I1_k + 2 sum_l delta_l I2_kl)
    S0_, S1_, S2_ = S0[0], S0[1], S0[2]
    Sd0 = 0.0
    Sd1 = 0.0
    Sd2 = 0.0
    I00, I01, I02 = I0[0, 0], I0[0, 1], I0[0, 2]
    I11, I12, I22 = I0[1, 1], I0[1, 2], I0[2, 2]
    for k in range(m):
        dk = z[ds + k]
        ddk = zd[ds + k]
        P[0, k] = Phibar[0, k]
        P[1, k] = Phibar[1, k]
        P[2, k] = Phibar[2, k]
        S0_ += Phibar[0, k] * dk
        S1_ += Phibar[1, k] * dk
        S2_ += Phibar[2, k] * dk
        Sd0 += Phibar[0, k] * ddk
        Sd1 += Phibar[1, k] * ddk
        Sd2 += Phibar[2, k] * ddk
        for i in range(3):
            for jj in range(i, 3):
                bb = 0.0
                for l in range(m):
                    bb += I2[k, l, i, jj] * z[ds + l]
                Ak[k, i, jj] = I1[k, i, jj] + 2.0 * bb
                Ak[k, jj, i] = Ak[k, i, jj]
        # I += delta_k (I1_k + B_k) = delta_k (A_k + I1_k) / 2
        I00 += 0.5 * dk * (Ak[k, 0, 0] + I1[k, 0, 0])
        I01 += 0.5 * dk * (Ak[k, 0, 1] + I1[k, 0, 1])
        I02 += 0.5 * dk * (Ak[k, 0, 2] + I1[k, 0, 2])
        I11 += 0.5 * dk * (Ak[k, 1, 1] + I1[k, 1, 1])
        I12 += 0.5 * dk * (Ak[k, 1, 2] + I1[k, 1, 2])
        I22 += 0.5 * dk * (Ak[k, 2, 2] + I1[k, 2, 2])
        for i in range(3):
            h = H0[i, k]
            for l in range(m):
                h += H1[l, k, i] * z[ds + l]
            Hm[i, k] = h
    sddx = 0.0
    if fs:
        # foreshortening: S_x += U, I += (a2 + a4) diag(0,1,1) - (e_x c^T + c e_x^T), H_k += e_x x h_k,
        # P_k -= e_x (Gbar delta)_k, and the same in A_k
        U, a24, cy, cz, sdx, sddx = _foreshortening(d, ws, j, m, ds, z, zd)
        fv = ws.fs_v
        hc = ws.fs_hc
        S0_ += U
        Sd0 += sdx
        I11 += a24
        I22 += a24
        I01 -= cy
        I02 -= cz
        for k in range(m):
            P[0, k] -= fv[0, k]
            Hm[1, k] -= hc[k, 1]
            Hm[2, k] += hc[k, 0]
            Ak[k, 1, 1] += fv[2, k]
            Ak[k, 2, 2] += fv[2, k]
            Ak[k, 0, 1] -= hc[k, 2]
            Ak[k, 1, 0] -= hc[k, 2]
            Ak[k, 0, 2] -= hc[k, 3]
            Ak[k, 2, 0] -= hc[k, 3]
    Id00 = 0.0
    Id01 = 0.0
    Id02 = 0.0
    Id11 = 0.0
    Id12 = 0.0
    Id22 = 0.0
    for k in range(m):
        ddk = zd[ds + k]
        Id00 += ddk * Ak[k, 0, 0]
        Id01 += ddk * Ak[k, 0, 1]
        Id02 += ddk * Ak[k, 0, 2]
        Id11 += ddk * Ak[k, 1, 1]
        Id12 += ddk * Ak[k, 1, 2]
        Id22 += ddk * Ak[k, 2, 2]
    # momenta P = M_b nu: p (linear), L (angular)
    c0, c1, c2 = _cross(w0, w1, w2, S0_, S1_, S2_)
    p0 = M * v0 + c0 + Sd0          # P deltadot = Sdot
    p1 = M * v1 + c1 + Sd1
    p2 = M * v2 + c2 + Sd2
    c0, c1, c2 = _cross(S0_, S1_, S2_, v0, v1, v2)
    L0 = c0 + I00 * w0 + I01 * w1 + I02 * w2
    L1 = c1 + I01 * w0 + I11 * w1 + I12 * w2
    L2 = c2 + I02 * w0 + I12 * w1 + I22 * w2
    for k in range(m):
        ddk = zd[ds + k]
        L0 += Hm[0, k] * ddk
        L1 += Hm[1, k] * ddk
        L2 += Hm[2, k] * ddk
    # inertia force F = M_b nudot_bias + Mdot nu + gyroscopic - dT/d delta
    c0, c1, c2 = _cross(aw0, aw1, aw2, S0_, S1_, S2_)
    e0, e1, e2 = _cross(w0, w1, w2, Sd0, Sd1, Sd2)
    g0, g1, g2 = _cross(w0, w1, w2, p0, p1, p2)
    fp0 = M * av0 + c0 + e0 + g0 + sddx       # + Pdot deltadot = -e_x deltadot^T Gbar deltadot
    fp1 = M * av1 + c1 + e1 + g1
    fp2 = M * av2 + c2 + e2 + g2
    c0, c1, c2 = _cross(S0_, S1_, S2_, av0, av1, av2)
    e0, e1, e2 = _cross(Sd0, Sd1, Sd2, v0, v1, v2)
    g0, g1, g2 = _cross(w0, w1, w2, L0, L1, L2)
    h0, h1, h2 = _cross(v0, v1, v2, p0, p1, p2)
    fL0 = c0 + I00 * aw0 + I01 * aw1 + I02 * aw2 + e0 + Id00 * w0 + Id01 * w1 + Id02 * w2 + g0 + h0
    fL1 = c1 + I01 * aw0 + I11 * aw1 + I12 * aw2 + e1 + Id01 * w0 + Id11 * w1 + Id12 * w2 + g1 + h1
    fL2 = c2 + I02 * aw0 + I12 * aw1 + I22 * aw2 + e2 + Id02 * w0 + Id12 * w1 + Id22 * w2 + g2 + h2
    for l in range(m):            # Hdot delta_dot, Hdot_l = sum_k deltadot_k dH_l/d delta_k
        dl = zd[ds + l]
        for k in range(m):
            dk = zd[ds + k]
            fL0 += dk * H1[k, l, 0] * dl
            fL1 += dk * H1[k, l, 1] * dl
            fL2 += dk * H1[k, l, 2] * dl
            if fs:                # e_x x dh_lk with dh_lk = d h_l / d delta_k
                dh = ws.fs_R
                fL1 -= dk * dh[2, l, k, 2] * dl
                fL2 += dk * dh[2, l, k, 1] * dl
    for c in range(ncol):
        rhs[c] -= (A[0, c] * fp0 + A[1, c] * fp1 + A[2, c] * fp2
                   + A[3, c] * fL0 + A[4, c] * fL1 + A[5, c] * fL2)
    for k in range(m):
        # P^T nudot_v + H^T nudot_w + Hdot^T w (+ Pdot^T v + Mdd_dot deltadot) - dT/d delta_k
        fd = (P[0, k] * av0 + P[1, k] * av1 + P[2, k] * av2
              + Hm[0, k] * aw0 + Hm[1, k] * aw1 + Hm[2, k] * aw2)
        hd0 = 0.0
        hd1 = 0.0
        hd2 = 0.0
        hk0 = 0.0
        hk1 = 0.0
        hk2 = 0.0
        for l in range(m):
            dl = zd[ds + l]
            hd0 += dl * H1[l, k, 0]      # Hdot_k
            hd1 += dl * H1[l, k, 1]
            hd2 += dl * H1[l, k, 2]
            hk0 += dl * H1[k, l, 0]      # dH/d delta_k . deltadot
            hk1 += dl * H1[k, l, 1]
            hk2 += dl * H1[k, l, 2]
        fd += hd0 * w0 + hd1 * w1 + hd2 * w2
        c0, c1, c2 = _cross(w0, w1, w2, P[0, k], P[1, k], P[2, k])
        dT = (v0 * c0 + v1 * c1 + v2 * c2
              + 0.5 * (w0 * (Ak[k, 0, 0] * w0 + Ak[k, 0, 1] * w1 + Ak[k, 0, 2] * w2)
                       + w1 * (Ak[k, 1, 0] * w0 + Ak[k, 1, 1] * w1 + Ak[k, 1, 2] * w2)
                       + w2 * (Ak[k, 2, 0] * w0 + Ak[k, 2, 1] * w1 + Ak[k, 2, 2] * w2))
              + w0 * hk0 + w1 * hk1 + w2 * hk2)
        if fs:
            dh = ws.fs_R
            F = ws.fs_F
            gbd = ws.fs_v[1, k]
            fd -= v0 * gbd                          # Pdot_k^T v
            dT -= v0 * gbd                          # v . (dP/d delta_k deltadot)
            for l in range(m):
                dl = zd[ds + l]
                # Hdot_k = sum_l deltadot_l e_x x dh_kl;  dH_l/d delta_k deltadot_l = e_x x dh_lk
                fd += dl * (w2 * dh[2, k, l, 1] - w1 * dh[2, k, l, 2])
                dT += dl * (w2 * dh[2, l, k, 1] - w1 * dh[2, l, k, 2])
                for mm in range(m):
                    dmm = zd[ds + mm]
                    fd += dl * dmm * (F[k, l, mm] + F[mm, l, k])    # Mdd_dot deltadot
                    dT += dl * dmm * F[l, k, mm]                    # 1/2 deltadot^T dMdd/d delta_k deltadot
        rhs[ds + k] -= fd - dT
    if want_mass:
        # Y = M11 A with M11 = [[M 1, -[S]x], [[S]x, I]]
        for c in range(ncol):
            x0, x1, x2 = A[0, c], A[1, c], A[2, c]
            y0, y1, y2 = A[3, c], A[4, c], A[5, c]
            c0, c1, c2 = _cross(y0, y1, y2, S0_, S1_, S2_)         # -[S]x y = y x S
            Y[0, c] = M * x0 + c0
            Y[1, c] = M * x1 + c1
            Y[2, c] = M * x2 + c2
            c0, c1, c2 = _cross(S0_, S1_, S2_, x0, x1, x2)
            Y[3, c] = c0 + I00 * y0 + I01 * y1 + I02 * y2
            Y[4, c] = c1 + I01 * y0 + I11 * y1 + I12 * y2
            Y[5, c] = c2 + I02 * y0 + I12 * y1 + I22 * y2
        for r in range(ncol):
            for c in range(r, ncol):
                J[r, c] += (A[0, r] * Y[0, c] + A[1, r] * Y[1, c] + A[2, r] * Y[2, c]
                            + A[3, r] * Y[3, c] + A[4, r] * Y[4, c] + A[5, r] * Y[5, c])
        for k in range(m):
            for c in range(ds):            # the body's own frame does not move with its modes
                J[c, ds + k] += (P[0, k] * A[0, c] + P[1, k] * A[1, c] + P[2, k] * A[2, c]
                                 + Hm[0, k] * A[3, c] + Hm[1, k] * A[4, c] + Hm[2, k] * A[5, c])
            for l in range(k, m):
                J[ds + k, ds + l] += Mdd[k, l]
                if fs:
                    J[ds + k, ds + l] += ws.fs_E[k, l]


# ---------------------------------------------------------------------------------------------- the dynamics


@njit(cache=True, fastmath=FASTMATH)
def dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass):
    """Fill J (symmetric, if want_mass) and rhs = R(z, z', tau) of J z'' = R.

    The one large kernel: the other kernels call it through `call_dynamics_terms` (by its address), so its
    code is compiled and optimised once, not again inside every caller."""
    n = d.n_joints
    N = d.n_coords
    q_index = d.q_index
    n_modes = d.n_modes
    angle_offset = d.angle_offset
    offset = d.offset
    length = d.length
    twist = d.twist
    gravity = d.gravity
    phi_tip = d.phi_tip
    theta_tip = d.theta_tip
    body_active = d.body_active
    fs_active = d.fs_active
    fs_G = d.fs_G
    stiffness = d.stiffness
    damping = d.damping
    viscous = d.viscous
    coulomb = d.coulomb
    rotor = d.rotor_inertia
    stop = d.joint_stop
    vc = d.coulomb_velocity
    Rt = ws.Rt
    Jwt = ws.Jwt
    Jvt = ws.Jvt
    RF = ws.RF
    RE = ws.RE
    Re = ws.Re
    G = ws.G
    Jv = ws.Jv
    Jw = ws.Jw
    pt = ws.pt
    omt = ws.omt
    vt = ws.vt
    alt = ws.alt
    at = ws.at
    om = ws.om
    v = ws.v
    al = ws.al
    a = ws.a
    gt = ws.fs_v[3]

    for i in range(N):
        rhs[i] = 0.0
    if want_mass:
        for i in range(N):
            for j in range(N):
                J[i, j] = 0.0
    for i in range(3):
        for j in range(3):
            Rt[i, j] = d.base_R[i, j]
        pt[i] = d.base_p[i]
        omt[i] = 0.0
        vt[i] = 0.0
        alt[i] = 0.0
        at[i] = -gravity[i]       # gravity as an upward acceleration of the base
    for i in range(3):
        for c in range(N):
            Jwt[i, c] = 0.0
            Jvt[i, c] = 0.0
    for j in range(n):
        qj = q_index[j]
        ds = qj + 1
        m = n_modes[j]
        ncol = ds + m
        ang = angle_offset[j] + z[qj]
        cq, sq = np.cos(ang), np.sin(ang)
        # F_j = Tip_{j-1} Rz(ang), rotating about z of Tip_{j-1}
        for i in range(3):
            RF[i, 0] = Rt[i, 0] * cq + Rt[i, 1] * sq
            RF[i, 1] = -Rt[i, 0] * sq + Rt[i, 1] * cq
            RF[i, 2] = Rt[i, 2]
        z0, z1, z2 = Rt[0, 2], Rt[1, 2], Rt[2, 2]
        qd = zd[qj]
        c0, c1, c2 = _cross(omt[0], omt[1], omt[2], z0, z1, z2)
        om[0] = omt[0] + z0 * qd
        om[1] = omt[1] + z1 * qd
        om[2] = omt[2] + z2 * qd
        al[0] = alt[0] + c0 * qd
        al[1] = alt[1] + c1 * qd
        al[2] = alt[2] + c2 * qd
        # L_j = F_j Tz(d_j): origin offset r = d_j z
        dj = offset[j]
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
        for c in range(qj):
            Jw[0, c] = Jwt[0, c]
            Jw[1, c] = Jwt[1, c]
            Jw[2, c] = Jwt[2, c]
            g0, g1, g2 = _cross(Jwt[0, c], Jwt[1, c], Jwt[2, c], r0, r1, r2)
            Jv[0, c] = Jvt[0, c] + g0
            Jv[1, c] = Jvt[1, c] + g1
            Jv[2, c] = Jvt[2, c] + g2
        Jw[0, qj] = z0
        Jw[1, qj] = z1
        Jw[2, qj] = z2
        g0, g1, g2 = _cross(z0, z1, z2, r0, r1, r2)
        Jv[0, qj] = g0
        Jv[1, qj] = g1
        Jv[2, qj] = g2
        for c in range(ds, ncol):
            for i in range(3):
                Jw[i, c] = 0.0
                Jv[i, c] = 0.0
        # link body j (with its hub and rigid attachments), in L_j (rotation RF)
        if body_active[j]:
            _body_terms(d, ws, j, j, RF, Jv, Jw, v, om, a, al, ncol, z, zd, J, rhs, want_mass)
        # elastic tip of link j: rho = l e_x + Phi_tip delta (- 1/2 delta^T G_tip delta e_x),
        # rotation Re(th), th = Theta_tip delta
        rho0 = length[j]
        rho1 = 0.0
        rho2 = 0.0
        rd0_ = 0.0
        rd1_ = 0.0
        rd2_ = 0.0
        th0 = 0.0
        th1 = 0.0
        th2 = 0.0
        td0 = 0.0
        td1 = 0.0
        td2 = 0.0
        for k in range(m):
            dk = z[ds + k]
            ddk = zd[ds + k]
            rho0 += phi_tip[j, 0, k] * dk
            rho1 += phi_tip[j, 1, k] * dk
            rho2 += phi_tip[j, 2, k] * dk
            rd0_ += phi_tip[j, 0, k] * ddk
            rd1_ += phi_tip[j, 1, k] * ddk
            rd2_ += phi_tip[j, 2, k] * ddk
            th0 += theta_tip[j, 0, k] * dk
            th1 += theta_tip[j, 1, k] * dk
            th2 += theta_tip[j, 2, k] * dk
            td0 += theta_tip[j, 0, k] * ddk
            td1 += theta_tip[j, 1, k] * ddk
            td2 += theta_tip[j, 2, k] * ddk
        bx = 0.0                  # bias of the tip's relative acceleration along x: -deltadot^T G_tip deltadot
        fs = fs_active[j]
        if fs:
            for k in range(m):
                g = 0.0
                gd = 0.0
                for l in range(m):
                    g += fs_G[j, 2, k, l] * z[ds + l]
                    gd += fs_G[j, 2, k, l] * zd[ds + l]
                gt[k] = g
                rho0 -= 0.5 * z[ds + k] * g
                rd0_ -= g * zd[ds + k]
                bx -= gd * zd[ds + k]
        r0 = RF[0, 0] * rho0 + RF[0, 1] * rho1 + RF[0, 2] * rho2
        r1 = RF[1, 0] * rho0 + RF[1, 1] * rho1 + RF[1, 2] * rho2
        r2 = RF[2, 0] * rho0 + RF[2, 1] * rho1 + RF[2, 2] * rho2
        rd0 = RF[0, 0] * rd0_ + RF[0, 1] * rd1_ + RF[0, 2] * rd2_
        rd1 = RF[1, 0] * rd0_ + RF[1, 1] * rd1_ + RF[1, 2] * rd2_
        rd2 = RF[2, 0] * rd0_ + RF[2, 1] * rd1_ + RF[2, 2] * rd2_
        _elastic_rotation(th0, th1, th2, Re, G)
        # relative angular velocity G thd (link axes) and its bias derivative Gdot thd:
        # d/dt(Rz e_y) = thd_z e_z x (Rz e_y); d/dt(Rz Ry e_x) = (thd_z e_z + thd_y Rz e_y) x (Rz Ry e_x)
        wl0 = G[0, 0] * td0 + G[0, 1] * td1
        wl1 = G[1, 0] * td0 + G[1, 1] * td1
        wl2 = G[2, 0] * td0 + td2
        h0, h1, h2 = _cross(0.0, 0.0, td2, G[0, 1], G[1, 1], G[2, 1])
        k0, k1, k2 = _cross(G[0, 1] * td1, G[1, 1] * td1, td2, G[0, 0], G[1, 0], G[2, 0])
        gl0 = td1 * h0 + td0 * k0
        gl1 = td1 * h1 + td0 * k1
        gl2 = td1 * h2 + td0 * k2
        wr0 = RF[0, 0] * wl0 + RF[0, 1] * wl1 + RF[0, 2] * wl2
        wr1 = RF[1, 0] * wl0 + RF[1, 1] * wl1 + RF[1, 2] * wl2
        wr2 = RF[2, 0] * wl0 + RF[2, 1] * wl1 + RF[2, 2] * wl2
        gd0 = RF[0, 0] * gl0 + RF[0, 1] * gl1 + RF[0, 2] * gl2
        gd1 = RF[1, 0] * gl0 + RF[1, 1] * gl1 + RF[1, 2] * gl2
        gd2 = RF[2, 0] * gl0 + RF[2, 1] * gl1 + RF[2, 2] * gl2
        # tip velocity and bias accelerations (world)
        c0, c1, c2 = _cross(om[0], om[1], om[2], r0, r1, r2)
        vt[0] = v[0] + c0 + rd0
        vt[1] = v[1] + c1 + rd1
        vt[2] = v[2] + c2 + rd2
        e0, e1, e2 = _cross(al[0], al[1], al[2], r0, r1, r2)
        f0, f1, f2 = _cross(om[0], om[1], om[2], c0, c1, c2)
        g0, g1, g2 = _cross(om[0], om[1], om[2], rd0, rd1, rd2)
        at[0] = a[0] + e0 + f0 + 2.0 * g0 + RF[0, 0] * bx
        at[1] = a[1] + e1 + f1 + 2.0 * g1 + RF[1, 0] * bx
        at[2] = a[2] + e2 + f2 + 2.0 * g2 + RF[2, 0] * bx
        h0, h1, h2 = _cross(om[0], om[1], om[2], wr0, wr1, wr2)
        alt[0] = al[0] + h0 + gd0
        alt[1] = al[1] + h1 + gd1
        alt[2] = al[2] + h2 + gd2
        omt[0] = om[0] + wr0
        omt[1] = om[1] + wr1
        omt[2] = om[2] + wr2
        pt[0] = pL0 + r0
        pt[1] = pL1 + r1
        pt[2] = pL2 + r2
        # tip Jacobians
        for c in range(ds):
            g0, g1, g2 = _cross(Jw[0, c], Jw[1, c], Jw[2, c], r0, r1, r2)
            Jvt[0, c] = Jv[0, c] + g0
            Jvt[1, c] = Jv[1, c] + g1
            Jvt[2, c] = Jv[2, c] + g2
            Jwt[0, c] = Jw[0, c]
            Jwt[1, c] = Jw[1, c]
            Jwt[2, c] = Jw[2, c]
        for k in range(m):
            c = ds + k
            p0, p1, p2 = phi_tip[j, 0, k], phi_tip[j, 1, k], phi_tip[j, 2, k]
            if fs:
                p0 -= gt[k]
            t0 = G[0, 0] * theta_tip[j, 0, k] + G[0, 1] * theta_tip[j, 1, k]
            t1 = G[1, 0] * theta_tip[j, 0, k] + G[1, 1] * theta_tip[j, 1, k]
            t2 = G[2, 0] * theta_tip[j, 0, k] + theta_tip[j, 2, k]
            for i in range(3):
                Jvt[i, c] = RF[i, 0] * p0 + RF[i, 1] * p1 + RF[i, 2] * p2
                Jwt[i, c] = RF[i, 0] * t0 + RF[i, 1] * t1 + RF[i, 2] * t2
        # elastic tip rotation RE = RF Re
        for i in range(3):
            for k in range(3):
                RE[i, k] = RF[i, 0] * Re[0, k] + RF[i, 1] * Re[1, k] + RF[i, 2] * Re[2, k]
        if j == n - 1 and d.payload_active:
            _body_terms(d, ws, n, j, RE, Jvt, Jwt, vt, omt, at, alt, ncol, z, zd, J, rhs, want_mass)
        # Tip_j = ElasticTip_j Rx(twist_j)
        ca, sa = np.cos(twist[j]), np.sin(twist[j])
        for i in range(3):
            Rt[i, 0] = RE[i, 0]
            Rt[i, 1] = RE[i, 1] * ca + RE[i, 2] * sa
            Rt[i, 2] = -RE[i, 1] * sa + RE[i, 2] * ca
        # elastic and damping forces of link j
        for k in range(m):
            s = 0.0
            for l in range(m):
                s += stiffness[j, k, l] * z[ds + l] + damping[j, k, l] * zd[ds + l]
            rhs[ds + k] -= s
        # joint torque, friction, hard stops at the position limits; reflected rotor inertia on the diagonal
        rhs[qj] += tau[j] - viscous[j] * qd - coulomb[j] * np.tanh(qd / vc) + stop_torque(stop, j, z[qj], qd)
        if want_mass:
            J[qj, qj] += rotor[j]
    if want_mass:
        for r in range(N):
            for c in range(r):
                J[r, c] = J[c, r]


@njit(cache=True, fastmath=FASTMATH)
def stop_torque(stop, j, q, qd):
    """Torque of joint j's hard stops (rows of KernelData.joint_stop: lower, upper limit, stiffness k, damping c):
    a spring-damper that only pushes, -max(0, k p + c pdot) with the penetration p = q - upper (mirrored at the
    lower stop). Its spring energy is 1/2 k p^2 (stop_energy); the clamp to pushing never adds energy."""
    k = stop[j, 2]
    if k == 0.0:
        return 0.0
    p = q - stop[j, 1]
    if p > 0.0:
        f = k * p + stop[j, 3] * qd
        return -f if f > 0.0 else 0.0
    p = stop[j, 0] - q
    if p > 0.0:
        f = k * p - stop[j, 3] * qd
        return f if f > 0.0 else 0.0
    return 0.0


@njit(cache=True, fastmath=FASTMATH)
def stop_energy(stop, j, q):
    """Spring energy 1/2 k p^2 stored in joint j's hard stops at angle q."""
    p = max(q - stop[j, 1], stop[j, 0] - q, 0.0)
    return 0.5 * stop[j, 2] * p * p


# ---------------------------------------------------------------------------------------------- calling it


@intrinsic
def _call_address(typingctx, addr, d, ws, z, zd, tau, J, rhs, want_mass):
    """Call the compiled `dynamics_terms` whose entry point is at `addr` (numba's calling convention; the
    address was taken for these argument types, see `dynamics_address`)."""
    f8 = types.float64
    for name, ty, nd in (('z', z, 1), ('zd', zd, 1), ('tau', tau, 1), ('J', J, 2), ('rhs', rhs, 1)):
        if not (isinstance(ty, types.Array) and ty.dtype == f8 and ty.ndim == nd and ty.layout == 'C'):
            raise TypingError(f'dynamics: {name} must be a C-contiguous float64 array of {nd} dimension(s), '
                              f'got {ty}')
    args = (d, ws, z, zd, tau, J, rhs, types.boolean)
    sig = types.none(types.int64, *args)

    def codegen(context, builder, signature, llargs):
        fnty = context.call_conv.get_function_type(types.none, args)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        context.call_conv.call_function(builder, fn, types.none, args, llargs[1:])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True)
def call_dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass):
    """dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass) for use inside other kernels: an indirect call to its
    one compiled copy (address ws.dyn_addr, set by ArmModel.workspace), so that compiling a caller does not link
    in and re-optimise that code. Returns False (doing nothing) if the workspace carries no address."""
    if ws.dyn_addr == 0:
        return False
    _call_address(ws.dyn_addr, d, ws, z, zd, tau, J, rhs, want_mass)
    return True


def dynamics_address(d, ws) -> int:
    """Address of the compiled dynamics_terms for the types of (d, ws) (compiled, or loaded from numba's cache,
    on first use). The other arguments' types are fixed: C-contiguous float64 arrays and a bool."""
    a1 = types.float64[::1]
    sig = (typeof(d), typeof(ws), a1, a1, a1, types.float64[:, ::1], a1, types.boolean)
    dynamics_terms.compile(sig)
    cres = dynamics_terms.overloads[sig]
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


@njit(cache=True, fastmath=FASTMATH)
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


@njit(cache=True, fastmath=FASTMATH)
def forward_dynamics(d, ws, z, zd, tau, zdd):
    """z'' = J^-1 R. Returns False (and leaves zdd undefined) if J is not positive definite."""
    J = ws.J
    rhs = ws.rhs
    if not call_dynamics_terms(d, ws, z, zd, tau, J, rhs, True):
        return False
    return cholesky_solve(J, rhs, d.n_coords, ws.L, zdd)


# ---------------------------------------------------------------------------------------------- integrators


@njit(cache=True, fastmath=FASTMATH)
def rk4_step(d, ws, z, zd, tau, dt, substeps):
    """Advance (z, zd) in place by `substeps` classical RK4 steps of dt/substeps. False on failure."""
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
    vk2 = ws.vk2
    vk3 = ws.vk3
    vk4 = ws.vk4
    for _ in range(substeps):
        for i in range(N):
            z0[i] = z[i]
            v0[i] = zd[i]
        if not forward_dynamics(d, ws, z0, v0, tau, k1):
            return False
        for i in range(N):
            zs[i] = z0[i] + 0.5 * h * v0[i]
            vs[i] = v0[i] + 0.5 * h * k1[i]
            vk2[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k2):
            return False
        for i in range(N):
            zs[i] = z0[i] + 0.5 * h * vk2[i]
            vs[i] = v0[i] + 0.5 * h * k2[i]
            vk3[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k3):
            return False
        for i in range(N):
            zs[i] = z0[i] + h * vk3[i]
            vs[i] = v0[i] + h * k3[i]
            vk4[i] = vs[i]
        if not forward_dynamics(d, ws, zs, vs, tau, k4):
            return False
        for i in range(N):
            z[i] = z0[i] + h / 6.0 * (v0[i] + 2.0 * vk2[i] + 2.0 * vk3[i] + vk4[i])
            zd[i] = v0[i] + h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
    return True


@njit(cache=True, fastmath=FASTMATH)
def midpoint_step(d, ws, z, zd, tau, dt, substeps, tol, max_iter):
    """Implicit midpoint rule (symplectic, A-stable), simplified Newton on the stiff linear part.

    Unknown v1: residual J_m (v1 - v0) - h R(z_m, v_m), z_m = z0 + h/4 (v0 + v1), v_m = (v0 + v1)/2.
    Newton matrix S = J_m + h/2 (D + B) + h^2/4 K (modal stiffness K, modal damping D, viscous friction B),
    which captures the high-frequency elastic modes that limit explicit steps; the slow nonlinear
    terms converge by fixed point. Returns False if J is not PD or the iteration does not converge.
    """
    N = d.n_coords
    n = d.n_joints
    q_index = d.q_index
    n_modes = d.n_modes
    viscous = d.viscous
    stiffness = d.stiffness
    damping = d.damping
    h = dt / substeps
    z0 = ws.z0
    v0 = ws.v0
    zs = ws.zs
    vs = ws.vs
    v1 = ws.k1
    res = ws.k2
    dv = ws.k3
    S = ws.S
    J = ws.J
    rhs = ws.rhs
    L = ws.L
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
            if not call_dynamics_terms(d, ws, zs, vs, tau, J, rhs, True):
                return False
            for i in range(N):
                s = 0.0
                for j in range(N):
                    s += J[i, j] * (v1[j] - v0[j])
                    S[i, j] = J[i, j]
                res[i] = -(s - h * rhs[i])
            for j in range(n):
                qj = q_index[j]
                S[qj, qj] += 0.5 * h * viscous[j]
                m = n_modes[j]
                for k in range(m):
                    for l in range(m):
                        S[qj + 1 + k, qj + 1 + l] += 0.5 * h * damping[j, k, l] + 0.25 * h * h * stiffness[j, k, l]
            if not cholesky_solve(S, res, N, L, dv):
                return False
            nrm = 0.0
            ref = 0.0
            for i in range(N):
                v1[i] += dv[i]
                nrm += dv[i] * dv[i]
                ref += v1[i] * v1[i]
            if nrm <= tol * tol * ref or nrm < 1e-300:
                converged = True
                break
        if not converged:
            return False
        for i in range(N):
            z[i] = z0[i] + 0.5 * h * (v0[i] + v1[i])
            zd[i] = v1[i]
    return True


# ---------------------------------------------------------------------------------------------- kinematics, energy


@njit(cache=True, fastmath=FASTMATH)
def link_frames(d, z, RF, pL, RE, pE):
    """Frames of every link at configuration z: RF[j] (rotation of F_j = L_j), pL[j] (origin of L_j),
    RE[j], pE[j] (elastic tip frame of link j, before the twist)."""
    n = d.n_joints
    q_index = d.q_index
    n_modes = d.n_modes
    phi_tip = d.phi_tip
    theta_tip = d.theta_tip
    Rt = np.empty((3, 3))
    pt = np.empty(3)
    Re = np.empty((3, 3))
    G = np.empty((3, 3))
    rho = np.empty(3)
    th = np.empty(3)
    for i in range(3):
        for k in range(3):
            Rt[i, k] = d.base_R[i, k]
        pt[i] = d.base_p[i]
    for j in range(n):
        qj = q_index[j]
        ds = qj + 1
        m = n_modes[j]
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
                s += phi_tip[j, i, k] * z[ds + k]
                t += theta_tip[j, i, k] * z[ds + k]
            rho[i] = s
            th[i] = t
        rho[0] += d.length[j]
        if d.fs_active[j]:             # axial foreshortening of the tip: -1/2 delta^T G_tip delta
            for k in range(m):
                for l in range(m):
                    rho[0] -= 0.5 * z[ds + k] * d.fs_G[j, 2, k, l] * z[ds + l]
        for i in range(3):
            pE[j, i] = pL[j, i] + RF[j, i, 0] * rho[0] + RF[j, i, 1] * rho[1] + RF[j, i, 2] * rho[2]
        _elastic_rotation(th[0], th[1], th[2], Re, G)
        for i in range(3):
            for k in range(3):
                RE[j, i, k] = RF[j, i, 0] * Re[0, k] + RF[j, i, 1] * Re[1, k] + RF[j, i, 2] * Re[2, k]
        ca, sa = np.cos(d.twist[j]), np.sin(d.twist[j])
        for i in range(3):
            Rt[i, 0] = RE[j, i, 0]
            Rt[i, 1] = RE[j, i, 1] * ca + RE[j, i, 2] * sa
            Rt[i, 2] = -RE[j, i, 1] * sa + RE[j, i, 2] * ca
            pt[i] = pE[j, i]


@njit(cache=True, fastmath=FASTMATH)
def potential_energies(d, z, RF, pL, RE, pE):
    """(elastic, gravity) potential energy at z. Elastic: the links' strain energy 1/2 delta^T K delta and the
    joint stops' springs; gravity: V = -g . sum_b (M_b p_b + R_b S_b(delta))."""
    link_frames(d, z, RF, pL, RE, pE)
    g = d.gravity
    elastic = 0.0
    grav = 0.0
    for j in range(d.n_joints):
        ds = d.q_index[j] + 1
        m = d.n_modes[j]
        elastic += stop_energy(d.joint_stop, j, z[d.q_index[j]])
        U = 0.0
        if d.fs_active[j]:             # S_x += int mu u = -1/2 delta^T Gbar delta
            for k in range(m):
                for l in range(m):
                    U -= 0.5 * z[ds + k] * d.fs_G[j, 0, k, l] * z[ds + l]
        for k in range(m):
            for l in range(m):
                elastic += 0.5 * z[ds + k] * d.stiffness[j, k, l] * z[ds + l]
        for i in range(3):
            s = d.body_S0[j, i] + (U if i == 0 else 0.0)
            for k in range(m):
                s += d.body_Phibar[j, i, k] * z[ds + k]
            for r in range(3):
                grav -= g[r] * RF[j, r, i] * s
            grav -= g[i] * d.body_mass[j] * pL[j, i]
    n = d.n_joints - 1
    if d.payload_active:
        for i in range(3):
            grav -= g[i] * d.payload_mass * pE[n, i]
            for r in range(3):
                grav -= g[r] * RE[n, r, i] * d.payload_S[i]
    return elastic, grav


# ---------------------------------------------------------------------------------------------- limits, validity


@njit(cache=True, fastmath=FASTMATH)
def stops_within_reach(d, z, zd, dt):
    """True if some joint with a hard stop is in it or may reach it within dt (2 |qdot| dt + 0.02 rad): the
    steps where the plant resolves the stop's stiffness with more sub-steps."""
    stop = d.joint_stop
    for j in range(d.n_joints):
        if stop[j, 2] > 0.0:
            q = z[d.q_index[j]]
            reach = 2.0 * abs(zd[d.q_index[j]]) * dt + 0.02
            if q + reach >= stop[j, 1] or q - reach <= stop[j, 0]:
                return True
    return False


@njit(cache=True, fastmath=FASTMATH)
def tip_deflections(d, z, out):
    """Tip deflection of every link in its link frame, metres (rotations for torsion not included):
    out[j] = Phi_tip delta (- 1/2 delta^T G_tip delta e_x with foreshortening)."""
    for j in range(d.n_joints):
        ds = d.q_index[j] + 1
        m = d.n_modes[j]
        for i in range(3):
            s = 0.0
            for k in range(m):
                s += d.phi_tip[j, i, k] * z[ds + k]
            out[j, i] = s
        if d.fs_active[j]:
            for k in range(m):
                for l in range(m):
                    out[j, 0] -= 0.5 * z[ds + k] * d.fs_G[j, 2, k, l] * z[ds + l]


@njit(cache=True, fastmath=FASTMATH)
def limit_checks(d, z, zd, velocity_limit, velocity_count, contact_count, penetration):
    """After a step: count joints beyond their velocity limit (velocity_count) and in their hard stop
    (contact_count), store the penetration beyond the position limits, and return the largest tip deflection
    over link length of the flexible links (the model's validity measure)."""
    stop = d.joint_stop
    for j in range(d.n_joints):
        q = z[d.q_index[j]]
        if abs(zd[d.q_index[j]]) > velocity_limit[j]:
            velocity_count[j] += 1
        p = max(q - stop[j, 1], stop[j, 0] - q, 0.0)
        penetration[j] = p
        if p > 0.0:
            contact_count[j] += 1
    worst = 0.0
    for j in range(d.n_joints):
        m = d.n_modes[j]
        if m == 0 or d.length[j] <= 0.0:
            continue
        ds = d.q_index[j] + 1
        s2 = 0.0
        for i in range(3):
            s = 0.0
            for k in range(m):
                s += d.phi_tip[j, i, k] * z[ds + k]
            if i == 0 and d.fs_active[j]:
                for k in range(m):
                    for l in range(m):
                        s -= 0.5 * z[ds + k] * d.fs_G[j, 2, k, l] * z[ds + l]
            s2 += s * s
        r = np.sqrt(s2) / d.length[j]
        if r > worst:
            worst = r
    return worst
