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
from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock
from numba.core.errors import TypingError
from numba.extending import intrinsic

# Floating-point freedoms of the kernels: reassociation, contraction (FMA), reciprocal, signed zeros; not 'nnan' /
# 'ninf' (callers check results for non-finite values, which those would let LLVM optimise away). Measured with
# bench/bench_dynamics.py --quick: De Luca forward dynamics 2.54 -> 2.16 us, RK4 step 11.5 -> 9.8 us.
FASTMATH = {'reassoc', 'contract', 'arcp', 'nsz'}

# Compilation options. Every kernel: cache=True, and no C-callable (cfunc) wrapper, which numba would otherwise
# compile for each (we call kernels by their numba entry point). Kernels that never allocate run without the
# NRT (_nrt=False): no reference counting of the ~90 arrays in (KernelData, Workspace) at every call (measured:
# RK4 step of the De Luca arm 25 -> 10 us). Kernels only called from other kernels have no CPython wrapper
# either (that wrapper unboxes every array of the tuples and costs ~1 s of compilation per kernel).
KERNEL = dict(cache=True, fastmath=FASTMATH, no_cfunc_wrapper=True)                # called from Python, allocates
KERNEL_NO_NRT = dict(KERNEL, _nrt=False)                                           # called from Python
INTERNAL = dict(KERNEL, _nrt=False, no_cpython_wrapper=True)                       # called from kernels only

# LLVM options while compiling the kernels: -O2 without the loop vectorizer. Their loops run 2-6 times (modes,
# joints, axes), where vectorized loops only add set-up code. Measured (bench_compile / bench_dynamics): the cold
# compile of dynamics_terms ~11 -> ~9 s CPU, and faster kernels (De Luca forward dynamics 2.57 -> 2.25 us).
COMPILE_OPT = 2
COMPILE_LOOP_VECTORIZE = 0


def kernel(**options):
    """numba.njit(**options) whose compilations (and those of the kernels it calls) run with COMPILE_OPT and
    COMPILE_LOOP_VECTORIZE; numba's global settings are restored afterwards (under numba's compiler lock)."""
    def decorate(fn):
        dispatcher = njit(**options)(fn)
        compile_default = dispatcher.compile

        def compile(sig):
            with global_compiler_lock:
                saved = numba_config.OPT, numba_config.LOOP_VECTORIZE
                numba_config.OPT = numba_config._OptLevel(COMPILE_OPT)
                numba_config.LOOP_VECTORIZE = COMPILE_LOOP_VECTORIZE
                try:
                    return compile_default(sig)
                finally:
                    numba_config.OPT, numba_config.LOOP_VECTORIZE = saved

        dispatcher.compile = compile
        return dispatcher
    return decorate


@kernel(**INTERNAL)
def _cross(a0, a1, a2, b0, b1, b2):
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@kernel(**INTERNAL)
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


# ---------------------------------------------------------------------------------------------- the dynamics


@kernel(**KERNEL_NO_NRT)
def dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass):
    """Fill J (symmetric, if want_mass) and rhs = R(z, z', tau) of J z'' = R.

    Two passes: the kinematic recursion along the chain stores every body's frame data (rotation, Jacobians,
    velocities, bias accelerations) and adds the joint and elastic forces; then each body adds its terms:
    J += Jb^T M_b Jb, rhs -= Jb^T F_b(z''=0), Jb = [R^T Jv; R^T Jw; selector of the body's modal coordinates].
    Bodies: link j with its hub and attachments (in L_j), then the payload (rigid, in the elastic tip frame of
    the last link). With P = dS/d delta,

        M_b = [[M 1, -[S]x, P], [[S]x, I, H], [P^T, H^T, Mdd]],
        S = S0 + Phibar delta (+ e_x U),  I = I0 + sum_k delta_k I1_k + sum_kl delta_k delta_l I2_kl (+ I_fs),
        H_k = H0_k + sum_l delta_l H1_lk (+ e_x x h_k),  Mdd (+ int mu g g^T),

    the bracketed terms from the foreshortening (link_modes.py): with g = G delta, u = -delta^T G delta / 2,
    U = int mu u, I_fs = (a2 + a4) diag(0, 1, 1) - (e_x c^T + c e_x^T), a2 = int 2 mu eta u, a4 = int mu u^2,
    c = int mu u w, h_k = int mu (g_k w + u phi_k), all polynomials in delta from the integrals Gbar, Geta, C, D.
    Generalized inertia force (Hamel): F_v = pdot + w x p, F_w = Ldot + w x L + v x p,
    F_delta = d/dt p_delta - dT/d delta.

    The one large kernel: the other kernels call it through `call_dynamics_terms` (by its address), so its
    code is compiled and optimised once, not again inside every caller. Every array is taken out of the
    tuples once and indexed in full (no views: each would cost reference counting in the loops)."""
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
    body_mass = d.body_mass
    body_S0 = d.body_S0
    body_I0 = d.body_I0
    body_Phibar = d.body_Phibar
    body_I1 = d.body_I1
    body_I2 = d.body_I2
    body_H0 = d.body_H0
    body_H1 = d.body_H1
    body_Mdd = d.body_Mdd
    payload_S = d.payload_S
    payload_I0 = d.payload_I0
    fs_active = d.fs_active
    fs_G = d.fs_G
    fs_C = d.fs_C
    fs_D = d.fs_D
    mode_axis = d.mode_axis
    mode_plane = d.mode_plane
    stiffness = d.stiffness
    damping = d.damping
    viscous = d.viscous
    coulomb = d.coulomb
    rotor = d.rotor_inertia
    stop = d.joint_stop
    vc = d.coulomb_velocity
    Rt = ws.M33[0]
    Jwt = ws.J3N[0]
    Jvt = ws.J3N[1]
    RF = ws.M33[1]
    RE = ws.M33[2]
    Re = ws.M33[3]
    G = ws.M33[4]
    Jv = ws.J3N[2]
    Jw = ws.J3N[3]
    pt = ws.V3[0]
    omt = ws.V3[1]
    vt = ws.V3[2]
    alt = ws.V3[3]
    at = ws.V3[4]
    om = ws.V3[5]
    v = ws.V3[6]
    al = ws.V3[7]
    a = ws.V3[8]
    BR = ws.BR
    BJv = ws.BJ[0]
    BJw = ws.BJ[1]
    Bkin = ws.Bkin
    A = ws.B6[0]
    Y = ws.B6[1]
    Ak = ws.Ak
    Hm = ws.HP[0]
    P = ws.HP[1]
    fv = ws.fs_v
    hc = ws.fs_hc
    fR = ws.fs_R
    F = ws.fs_F
    E = ws.fs_W[2]
    W = ws.fs_W[0]
    V = ws.fs_W[1]

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
    # ------------------------------------------------------------------ pass 1: kinematics along the chain
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
        # link body j's frame data (L_j) for pass 2
        for i in range(3):
            for k in range(3):
                BR[j, i, k] = RF[i, k]
            Bkin[j, 0, i] = v[i]
            Bkin[j, 1, i] = om[i]
            Bkin[j, 2, i] = a[i]
            Bkin[j, 3, i] = al[i]
            for c in range(ncol):
                BJv[j, i, c] = Jv[i, c]
                BJw[j, i, c] = Jw[i, c]
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
                fv[3, k] = g
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
                p0 -= fv[3, k]
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
        if j == n - 1:            # the payload's frame data: the elastic tip's
            for i in range(3):
                for k in range(3):
                    BR[n, i, k] = RE[i, k]
                Bkin[n, 0, i] = vt[i]
                Bkin[n, 1, i] = omt[i]
                Bkin[n, 2, i] = at[i]
                Bkin[n, 3, i] = alt[i]
                for c in range(ncol):
                    BJv[n, i, c] = Jvt[i, c]
                    BJw[n, i, c] = Jwt[i, c]
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
    # ------------------------------------------------------------------ pass 2: the bodies
    for b in range(n + 1):
        if b < n:
            if not body_active[b]:
                continue
            j = b
            M = body_mass[b]
            S0_, S1_, S2_ = body_S0[b, 0], body_S0[b, 1], body_S0[b, 2]
            I00, I01, I02 = body_I0[b, 0, 0], body_I0[b, 0, 1], body_I0[b, 0, 2]
            I11, I12, I22 = body_I0[b, 1, 1], body_I0[b, 1, 2], body_I0[b, 2, 2]
            m = n_modes[b]
            ds = q_index[b] + 1
            fs = fs_active[b]
        else:
            if not d.payload_active:
                continue
            j = n - 1
            M = d.payload_mass
            S0_, S1_, S2_ = payload_S[0], payload_S[1], payload_S[2]
            I00, I01, I02 = payload_I0[0, 0], payload_I0[0, 1], payload_I0[0, 2]
            I11, I12, I22 = payload_I0[1, 1], payload_I0[1, 2], payload_I0[2, 2]
            m = 0
            ds = N
            fs = False
        ncol = ds + m
        # body Jacobian rows (6 x ncol)
        for c in range(ncol):
            for i in range(3):
                A[i, c] = BR[b, 0, i] * BJv[b, 0, c] + BR[b, 1, i] * BJv[b, 1, c] + BR[b, 2, i] * BJv[b, 2, c]
                A[3 + i, c] = BR[b, 0, i] * BJw[b, 0, c] + BR[b, 1, i] * BJw[b, 1, c] + BR[b, 2, i] * BJw[b, 2, c]
        # body velocities and bias of their derivatives (Bkin rows: v, omega, a, alpha in world axes)
        v0 = BR[b, 0, 0] * Bkin[b, 0, 0] + BR[b, 1, 0] * Bkin[b, 0, 1] + BR[b, 2, 0] * Bkin[b, 0, 2]
        v1 = BR[b, 0, 1] * Bkin[b, 0, 0] + BR[b, 1, 1] * Bkin[b, 0, 1] + BR[b, 2, 1] * Bkin[b, 0, 2]
        v2 = BR[b, 0, 2] * Bkin[b, 0, 0] + BR[b, 1, 2] * Bkin[b, 0, 1] + BR[b, 2, 2] * Bkin[b, 0, 2]
        w0 = BR[b, 0, 0] * Bkin[b, 1, 0] + BR[b, 1, 0] * Bkin[b, 1, 1] + BR[b, 2, 0] * Bkin[b, 1, 2]
        w1 = BR[b, 0, 1] * Bkin[b, 1, 0] + BR[b, 1, 1] * Bkin[b, 1, 1] + BR[b, 2, 1] * Bkin[b, 1, 2]
        w2 = BR[b, 0, 2] * Bkin[b, 1, 0] + BR[b, 1, 2] * Bkin[b, 1, 1] + BR[b, 2, 2] * Bkin[b, 1, 2]
        c0, c1, c2 = _cross(w0, w1, w2, v0, v1, v2)
        av0 = BR[b, 0, 0] * Bkin[b, 2, 0] + BR[b, 1, 0] * Bkin[b, 2, 1] + BR[b, 2, 0] * Bkin[b, 2, 2] - c0
        av1 = BR[b, 0, 1] * Bkin[b, 2, 0] + BR[b, 1, 1] * Bkin[b, 2, 1] + BR[b, 2, 1] * Bkin[b, 2, 2] - c1
        av2 = BR[b, 0, 2] * Bkin[b, 2, 0] + BR[b, 1, 2] * Bkin[b, 2, 1] + BR[b, 2, 2] * Bkin[b, 2, 2] - c2
        aw0 = BR[b, 0, 0] * Bkin[b, 3, 0] + BR[b, 1, 0] * Bkin[b, 3, 1] + BR[b, 2, 0] * Bkin[b, 3, 2]
        aw1 = BR[b, 0, 1] * Bkin[b, 3, 0] + BR[b, 1, 1] * Bkin[b, 3, 1] + BR[b, 2, 1] * Bkin[b, 3, 2]
        aw2 = BR[b, 0, 2] * Bkin[b, 3, 0] + BR[b, 1, 2] * Bkin[b, 3, 1] + BR[b, 2, 2] * Bkin[b, 3, 2]
        # configuration-dependent integrals: S, P, I, H, and A_k = dI/d delta_k (= I1_k + 2 sum_l delta_l I2_kl)
        Sd0 = 0.0
        Sd1 = 0.0
        Sd2 = 0.0
        for k in range(m):
            dk = z[ds + k]
            ddk = zd[ds + k]
            P[0, k] = body_Phibar[j, 0, k]
            P[1, k] = body_Phibar[j, 1, k]
            P[2, k] = body_Phibar[j, 2, k]
            S0_ += P[0, k] * dk
            S1_ += P[1, k] * dk
            S2_ += P[2, k] * dk
            Sd0 += P[0, k] * ddk
            Sd1 += P[1, k] * ddk
            Sd2 += P[2, k] * ddk
            for i in range(3):
                for jj in range(i, 3):
                    bb = 0.0
                    for l in range(m):
                        bb += body_I2[j, k, l, i, jj] * z[ds + l]
                    Ak[k, i, jj] = body_I1[j, k, i, jj] + 2.0 * bb
                    Ak[k, jj, i] = Ak[k, i, jj]
            # I += delta_k (I1_k + B_k) = delta_k (A_k + I1_k) / 2
            I00 += 0.5 * dk * (Ak[k, 0, 0] + body_I1[j, k, 0, 0])
            I01 += 0.5 * dk * (Ak[k, 0, 1] + body_I1[j, k, 0, 1])
            I02 += 0.5 * dk * (Ak[k, 0, 2] + body_I1[j, k, 0, 2])
            I11 += 0.5 * dk * (Ak[k, 1, 1] + body_I1[j, k, 1, 1])
            I12 += 0.5 * dk * (Ak[k, 1, 2] + body_I1[j, k, 1, 2])
            I22 += 0.5 * dk * (Ak[k, 2, 2] + body_I1[j, k, 2, 2])
            for i in range(3):
                h = body_H0[j, i, k]
                for l in range(m):
                    h += body_H1[j, l, k, i] * z[ds + l]
                Hm[i, k] = h
        sddx = 0.0
        if fs:
            # foreshortening. fv[0] = Gbar delta, fv[1] = Gbar deltadot, fv[2, k] = d(a2 + a4)/d delta_k;
            # fR[0, k, a] = sum_b C_kab delta_b e_b, fR[1, k, a] = sum_b delta_b C_kba e_a (e: the mode's plane
            # axis), fR[2, l, k] = d h_l / d delta_k; F[k, a, l] = sum_b D_kalb delta_b; E = int mu g g^T;
            # hc[k] = (h_k y, z; d c/d delta_k y, z)
            # (G couples only modes of one bending plane: mode_plane[j, k] = [first, end) of k's plane's modes)
            U = 0.0
            a24 = 0.0
            for k in range(m):
                gb = 0.0
                gbd = 0.0
                ge = 0.0
                for l in range(mode_plane[j, k, 0], mode_plane[j, k, 1]):
                    gb += fs_G[j, 0, k, l] * z[ds + l]
                    gbd += fs_G[j, 0, k, l] * zd[ds + l]
                    ge += fs_G[j, 1, k, l] * z[ds + l]
                dk = z[ds + k]
                fv[0, k] = gb
                fv[1, k] = gbd
                fv[2, k] = -2.0 * ge
                U -= 0.5 * dk * gb
                a24 -= dk * ge
                Sd0 -= gb * zd[ds + k]
                sddx -= gbd * zd[ds + k]
            for k in range(m):
                for aa in range(m):
                    fR[0, k, aa, 1] = 0.0
                    fR[0, k, aa, 2] = 0.0
                    fR[1, k, aa, 1] = 0.0
                    fR[1, k, aa, 2] = 0.0
            for k in range(m):
                p0, p1 = mode_plane[j, k, 0], mode_plane[j, k, 1]
                for aa in range(m):
                    r2 = 0.0
                    for bb_ in range(p0, p1):
                        r2 += fs_C[j, k, bb_, aa] * z[ds + bb_]
                    fR[1, k, aa, mode_axis[j, aa]] = r2
                for aa in range(p0, p1):          # C_kab, D_kalb vanish unless a is in k's plane
                    for bb_ in range(m):
                        fR[0, k, aa, mode_axis[j, bb_]] += fs_C[j, k, aa, bb_] * z[ds + bb_]
                    for l in range(m):
                        f = 0.0
                        for bb_ in range(mode_plane[j, l, 0], mode_plane[j, l, 1]):
                            f += fs_D[j, k, aa, l, bb_] * z[ds + bb_]
                        F[k, aa, l] = f
            for k in range(m):           # E = int mu g g^T (symmetric) = sum_b delta_b F[k, b, a]
                for aa in range(k, m):
                    f = 0.0
                    for bb_ in range(mode_plane[j, k, 0], mode_plane[j, k, 1]):
                        f += z[ds + bb_] * F[k, bb_, aa]
                    E[k, aa] = f
                    E[aa, k] = f
            cy = 0.0
            cz = 0.0
            for k in range(m):
                dk = z[ds + k]
                q1y = 0.0
                q1z = 0.0
                q2y = 0.0
                q2z = 0.0
                da4 = 0.0                    # d a4 / d delta_k = -2 int mu u g_k = sum_a delta_a E[k, a]
                for aa in range(m):
                    da = z[ds + aa]
                    q1y += da * fR[0, k, aa, 1]
                    q1z += da * fR[0, k, aa, 2]
                    q2y += da * fR[1, aa, k, 1]
                    q2z += da * fR[1, aa, k, 2]
                    fR[2, k, aa, 1] = fR[0, k, aa, 1] + fR[1, k, aa, 1] - fR[1, aa, k, 1]
                    fR[2, k, aa, 2] = fR[0, k, aa, 2] + fR[1, k, aa, 2] - fR[1, aa, k, 2]
                    da4 += da * E[k, aa]
                fv[2, k] += da4
                a24 += 0.25 * dk * da4
                cy -= 0.5 * dk * q2y
                cz -= 0.5 * dk * q2z
                hc[k, 0] = q1y - 0.5 * q2y
                hc[k, 1] = q1z - 0.5 * q2z
                hc[k, 2] = -q1y - 0.5 * q2y
                hc[k, 3] = -q1z - 0.5 * q2z
            # deltadot contractions of F (only the entries that do not vanish are read):
            # W[k, l] = sum_mm F[k, l, mm] deltadot_mm (l in k's plane), V[mm, k] = sum_l deltadot_l F[mm, l, k]
            for k in range(m):
                for l in range(mode_plane[j, k, 0], mode_plane[j, k, 1]):
                    w_ = 0.0
                    for mm in range(m):
                        w_ += F[k, l, mm] * zd[ds + mm]
                    W[k, l] = w_
                for mm in range(m):
                    v_ = 0.0
                    for l in range(mode_plane[j, mm, 0], mode_plane[j, mm, 1]):
                        v_ += zd[ds + l] * F[mm, l, k]
                    V[mm, k] = v_
            # S_x += U, I += (a2 + a4) diag(0,1,1) - (e_x c^T + c e_x^T), H_k += e_x x h_k,
            # P_k -= e_x (Gbar delta)_k, and the same in A_k
            S0_ += U
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
        # momenta: p (linear), L (angular)
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
                fL0 += dk * body_H1[j, k, l, 0] * dl
                fL1 += dk * body_H1[j, k, l, 1] * dl
                fL2 += dk * body_H1[j, k, l, 2] * dl
        if fs:                        # e_x x sum_lk deltadot_k dh_lk deltadot_l, dh_lk = d h_l / d delta_k
            for l in range(m):
                dl = zd[ds + l]
                for k in range(m):
                    fL1 -= zd[ds + k] * fR[2, l, k, 2] * dl
                    fL2 += zd[ds + k] * fR[2, l, k, 1] * dl
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
                hd0 += dl * body_H1[j, l, k, 0]      # Hdot_k
                hd1 += dl * body_H1[j, l, k, 1]
                hd2 += dl * body_H1[j, l, k, 2]
                hk0 += dl * body_H1[j, k, l, 0]      # dH/d delta_k . deltadot
                hk1 += dl * body_H1[j, k, l, 1]
                hk2 += dl * body_H1[j, k, l, 2]
            fd += hd0 * w0 + hd1 * w1 + hd2 * w2
            c0, c1, c2 = _cross(w0, w1, w2, P[0, k], P[1, k], P[2, k])
            dT = (v0 * c0 + v1 * c1 + v2 * c2
                  + 0.5 * (w0 * (Ak[k, 0, 0] * w0 + Ak[k, 0, 1] * w1 + Ak[k, 0, 2] * w2)
                           + w1 * (Ak[k, 1, 0] * w0 + Ak[k, 1, 1] * w1 + Ak[k, 1, 2] * w2)
                           + w2 * (Ak[k, 2, 0] * w0 + Ak[k, 2, 1] * w1 + Ak[k, 2, 2] * w2))
                  + w0 * hk0 + w1 * hk1 + w2 * hk2)
            if fs:
                gbd = fv[1, k]
                fd -= v0 * gbd                          # Pdot_k^T v
                dT -= v0 * gbd                          # v . (dP/d delta_k deltadot)
                for l in range(m):
                    dl = zd[ds + l]
                    # Hdot_k = sum_l deltadot_l e_x x dh_kl;  dH_l/d delta_k deltadot_l = e_x x dh_lk
                    fd += dl * (w2 * fR[2, k, l, 1] - w1 * fR[2, k, l, 2] + V[l, k])   # + Mdd_dot deltadot ...
                    dT += dl * (w2 * fR[2, l, k, 1] - w1 * fR[2, l, k, 2])
                for l in range(mode_plane[j, k, 0], mode_plane[j, k, 1]):
                    dl = zd[ds + l]
                    fd += dl * W[k, l]                  # ... sum_l,mm deltadot_l deltadot_mm (F_klmm + F_mmlk)
                    dT += dl * W[l, k]                  # 1/2 deltadot^T dMdd/d delta_k deltadot
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
                    J[ds + k, ds + l] += body_Mdd[j, k, l]
                    if fs:
                        J[ds + k, ds + l] += E[k, l]
    if want_mass:
        for r in range(N):
            for c in range(r):
                J[r, c] = J[c, r]


@kernel(**INTERNAL)
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


@kernel(**INTERNAL)
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


@kernel(**INTERNAL)
def call_dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass):
    """dynamics_terms(d, ws, z, zd, tau, J, rhs, want_mass) for use inside other kernels: an indirect call to its
    one compiled copy (address ws.dyn_addr, set by ArmModel.workspace), so that compiling a caller does not link
    in and re-optimise that code. Returns False (doing nothing) if the workspace carries no address."""
    if ws.dyn_addr == 0:
        return False
    _call_address(ws.dyn_addr, d, ws, z, zd, tau, J, rhs, want_mass)
    return True


@intrinsic
def _call_rk4(typingctx, addr, d, ws, z, zd, tau, dt, substeps):
    """rk4_step at address addr (see step_addresses); returns its bool."""
    args = (d, ws, z, zd, tau, types.float64, types.int64)
    sig = types.boolean(types.int64, *args)

    def codegen(context, builder, signature, llargs):
        fnty = context.call_conv.get_function_type(types.boolean, args)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        _, res = context.call_conv.call_function(builder, fn, types.boolean, args, llargs[1:])
        return res

    return sig, codegen


@intrinsic
def _call_midpoint(typingctx, addr, d, ws, z, zd, tau, dt, substeps, tol, max_iter):
    """midpoint_step at address addr (see step_addresses); returns its bool."""
    args = (d, ws, z, zd, tau, types.float64, types.int64, types.float64, types.int64)
    sig = types.boolean(types.int64, *args)

    def codegen(context, builder, signature, llargs):
        fnty = context.call_conv.get_function_type(types.boolean, args)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        _, res = context.call_conv.call_function(builder, fn, types.boolean, args, llargs[1:])
        return res

    return sig, codegen


@kernel(**INTERNAL)
def call_step(d, ws, z, zd, tau, dt, substeps, midpoint, tol, max_iter):
    """rk4_step or midpoint_step for use inside other kernels (simulation loops), through the addresses in
    ws.step_addr (step_addresses): their code is not compiled again into the caller. False on failure or if
    the workspace carries no address."""
    if midpoint:
        if ws.step_addr[1] == 0:
            return False
        return _call_midpoint(ws.step_addr[1], d, ws, z, zd, tau, dt, substeps, tol, max_iter)
    if ws.step_addr[0] == 0:
        return False
    return _call_rk4(ws.step_addr[0], d, ws, z, zd, tau, dt, substeps)


def _address(dispatcher, sig) -> int:
    dispatcher.compile(sig)
    cres = dispatcher.overloads[sig]
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


def step_addresses(d, ws, methods=('rk4', 'midpoint')):
    """Store the addresses of the compiled rk4_step and/or midpoint_step for the types of (d, ws) in
    ws.step_addr (compiling them, or loading them from numba's cache, on first use)."""
    a1 = types.float64[::1]
    base = (typeof(d), typeof(ws), a1, a1, a1, types.float64, types.int64)
    if 'rk4' in methods:
        ws.step_addr[0] = _address(rk4_step, base)
    if 'midpoint' in methods:
        ws.step_addr[1] = _address(midpoint_step, base + (types.float64, types.int64))


def dynamics_address(d, ws) -> int:
    """Address of the compiled dynamics_terms for the types of (d, ws) (compiled, or loaded from numba's cache,
    on first use). The other arguments' types are fixed: C-contiguous float64 arrays and a bool."""
    a1 = types.float64[::1]
    return _address(dynamics_terms, (typeof(d), typeof(ws), a1, a1, a1, types.float64[:, ::1], a1, types.boolean))


@kernel(**INTERNAL)
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


@kernel(**KERNEL_NO_NRT)
def forward_dynamics(d, ws, z, zd, tau, zdd):
    """z'' = J^-1 R. Returns False (and leaves zdd undefined) if J is not positive definite."""
    J = ws.NN[0]
    rhs = ws.VN[0]
    if not call_dynamics_terms(d, ws, z, zd, tau, J, rhs, True):
        return False
    return cholesky_solve(J, rhs, d.n_coords, ws.NN[1], zdd)


# ---------------------------------------------------------------------------------------------- integrators


@kernel(**KERNEL_NO_NRT)
def rk4_step(d, ws, z, zd, tau, dt, substeps):
    """Advance (z, zd) in place by `substeps` classical RK4 steps of dt/substeps. False on failure.

    Stage s evaluates the dynamics at (z0 + c_s h v_s-1, v_s = v0 + c_s h a_s-1), c = (0, 1/2, 1/2, 1), and
    accumulates the weights (1, 2, 2, 1)/6; one call site of the dynamics (small compiled code)."""
    N = d.n_coords
    h = dt / substeps
    z0 = ws.VN[1]
    v0 = ws.VN[2]
    zs = ws.VN[3]
    vs = ws.VN[4]
    acc = ws.VN[5]
    dz = ws.VN[6]
    dv = ws.VN[7]
    for _ in range(substeps):
        for i in range(N):
            z0[i] = z[i]
            v0[i] = zd[i]
            zs[i] = z[i]
            vs[i] = zd[i]
            dz[i] = 0.0
            dv[i] = 0.0
        for stage in range(4):
            if not forward_dynamics(d, ws, zs, vs, tau, acc):
                return False
            w = 1.0 if stage == 0 or stage == 3 else 2.0
            c = h if stage == 2 else 0.5 * h
            for i in range(N):
                dz[i] += w * vs[i]
                dv[i] += w * acc[i]
                if stage < 3:
                    zs[i] = z0[i] + c * vs[i]
                    vs[i] = v0[i] + c * acc[i]
        for i in range(N):
            z[i] = z0[i] + h / 6.0 * dz[i]
            zd[i] = v0[i] + h / 6.0 * dv[i]
    return True


@kernel(**KERNEL_NO_NRT)
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
    z0 = ws.VN[1]
    v0 = ws.VN[2]
    zs = ws.VN[3]
    vs = ws.VN[4]
    v1 = ws.VN[5]
    res = ws.VN[6]
    dv = ws.VN[7]
    S = ws.NN[2]
    J = ws.NN[0]
    rhs = ws.VN[0]
    L = ws.NN[1]
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


@kernel(**KERNEL_NO_NRT)
def link_frames(d, z, RF, pL, RE, pE):
    """Frames of every link at configuration z: RF[j] (rotation of F_j = L_j), pL[j] (origin of L_j),
    RE[j], pE[j] (elastic tip frame of link j, before the twist). No allocation."""
    n = d.n_joints
    q_index = d.q_index
    n_modes = d.n_modes
    phi_tip = d.phi_tip
    theta_tip = d.theta_tip
    for j in range(n):
        qj = q_index[j]
        ds = qj + 1
        m = n_modes[j]
        ang = d.angle_offset[j] + z[qj]
        cq, sq = np.cos(ang), np.sin(ang)
        if j == 0:
            ca, sa = 1.0, 0.0
        else:
            ca, sa = np.cos(d.twist[j - 1]), np.sin(d.twist[j - 1])
        for i in range(3):
            # Tip_{j-1} = ElasticTip_{j-1} Rx(twist_{j-1}) (the base for j = 0), then F_j = Tip_{j-1} Rz(ang)
            if j == 0:
                t0, t1, t2 = d.base_R[i, 0], d.base_R[i, 1], d.base_R[i, 2]
                p = d.base_p[i]
            else:
                t0 = RE[j - 1, i, 0]
                t1 = RE[j - 1, i, 1] * ca + RE[j - 1, i, 2] * sa
                t2 = -RE[j - 1, i, 1] * sa + RE[j - 1, i, 2] * ca
                p = pE[j - 1, i]
            RF[j, i, 0] = t0 * cq + t1 * sq
            RF[j, i, 1] = -t0 * sq + t1 * cq
            RF[j, i, 2] = t2
            pL[j, i] = p + t2 * d.offset[j]
        rho0 = d.length[j]
        rho1 = 0.0
        rho2 = 0.0
        th0 = 0.0
        th1 = 0.0
        th2 = 0.0
        for k in range(m):
            dk = z[ds + k]
            rho0 += phi_tip[j, 0, k] * dk
            rho1 += phi_tip[j, 1, k] * dk
            rho2 += phi_tip[j, 2, k] * dk
            th0 += theta_tip[j, 0, k] * dk
            th1 += theta_tip[j, 1, k] * dk
            th2 += theta_tip[j, 2, k] * dk
        if d.fs_active[j]:             # axial foreshortening of the tip: -1/2 delta^T G_tip delta
            for k in range(m):
                for l in range(m):
                    rho0 -= 0.5 * z[ds + k] * d.fs_G[j, 2, k, l] * z[ds + l]
        # elastic tip rotation Re = Rz(th2) Ry(th1) Rx(th0) (as _elastic_rotation), RE = RF Re
        cx, sx = np.cos(th0), np.sin(th0)
        cy, sy = np.cos(th1), np.sin(th1)
        cz, sz = np.cos(th2), np.sin(th2)
        e00, e01, e02 = cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx
        e10, e11, e12 = sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx
        e20, e21, e22 = -sy, cy * sx, cy * cx
        for i in range(3):
            r0, r1, r2 = RF[j, i, 0], RF[j, i, 1], RF[j, i, 2]
            pE[j, i] = pL[j, i] + r0 * rho0 + r1 * rho1 + r2 * rho2
            RE[j, i, 0] = r0 * e00 + r1 * e10 + r2 * e20
            RE[j, i, 1] = r0 * e01 + r1 * e11 + r2 * e21
            RE[j, i, 2] = r0 * e02 + r1 * e12 + r2 * e22


@kernel(**KERNEL_NO_NRT)
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


@kernel(**INTERNAL)
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


@kernel(**INTERNAL)
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


@kernel(**INTERNAL)
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
