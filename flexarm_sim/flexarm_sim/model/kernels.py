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

from ..compat.numba_private import call_through_address, compile_settings, compiler_lock, entry_address

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
# Kernels that run long (a whole simulated run, derivatives along a trajectory, a sensitivity propagation: tens of
# ms each) on scratch arrays of their caller's own release the GIL: a controller's state thread keeps answering while
# its planner thread runs them (holding it, a plan stalled the states for up to 104 ms, p99 33 ms, and the plant's
# command watchdog fired during planning in real time). Only kernels whose every argument is the caller's (never a
# model's shared convenience workspace) may have it.
KERNEL_LONG = dict(KERNEL_NO_NRT, nogil=True)                                      # called from Python, no GIL

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
            with compiler_lock(), compile_settings(COMPILE_OPT, COMPILE_LOOP_VECTORIZE):
                return compile_default(sig)

        dispatcher.compile = compile
        return dispatcher
    return decorate


@kernel(**INTERNAL)
def _cross(a0, a1, a2, b0, b1, b2):
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


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
    code is compiled and optimised once, not again inside every caller. It runs without NRT (no reference
    counting of the arrays it touches); 3-vectors and rotations are scalar locals (every array access costs
    numba ~70 lines of LLVM IR, hence compile time)."""
    n = d.n_joints
    N = d.n_coords
    q_index = d.q_index
    n_modes = d.n_modes
    angle_offset = d.angle_offset
    offset = d.offset
    length = d.length
    twist = d.twist
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
    fs_K4 = d.fs_K4
    mode_axis = d.mode_axis
    mode_plane = d.mode_plane
    stiffness = d.stiffness
    damping = d.damping
    viscous = d.viscous
    coulomb = d.coulomb
    rotor = d.rotor_inertia
    stop = d.joint_stop
    vc = d.coulomb_velocity
    Jwt = ws.J3N[0]
    Jvt = ws.J3N[1]
    Jv = ws.J3N[2]
    Jw = ws.J3N[3]
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
    T = ws.fs_W[0]
    Td = ws.fs_W[1]
    E = ws.fs_W[2]

    for i in range(N):
        rhs[i] = 0.0
        Jwt[0, i] = 0.0
        Jwt[1, i] = 0.0
        Jwt[2, i] = 0.0
        Jvt[0, i] = 0.0
        Jvt[1, i] = 0.0
        Jvt[2, i] = 0.0
    if want_mass:
        for i in range(N):
            for j in range(N):
                J[i, j] = 0.0
    # the previous tip frame (the base for joint 0): rotation t.., position p., its omega, v, alpha, a
    bR = d.base_R
    t00, t01, t02 = bR[0, 0], bR[0, 1], bR[0, 2]
    t10, t11, t12 = bR[1, 0], bR[1, 1], bR[1, 2]
    t20, t21, t22 = bR[2, 0], bR[2, 1], bR[2, 2]
    px, py, pz = d.base_p[0], d.base_p[1], d.base_p[2]
    otx, oty, otz = 0.0, 0.0, 0.0
    vtx, vty, vtz = 0.0, 0.0, 0.0
    ltx, lty, ltz = 0.0, 0.0, 0.0
    # gravity as an upward acceleration of the base
    atx, aty, atz = -d.gravity[0], -d.gravity[1], -d.gravity[2]
    # ------------------------------------------------------------------ pass 1: kinematics along the chain
    for j in range(n):
        qj = q_index[j]
        ds = qj + 1
        m = n_modes[j]
        ncol = ds + m
        phi_j = phi_tip[j]          # per-link views (no reference counting: the kernel runs without NRT)
        theta_j = theta_tip[j]
        ang = angle_offset[j] + z[qj]
        cq, sq = np.cos(ang), np.sin(ang)
        # F_j = Tip_{j-1} Rz(ang), rotating about z of Tip_{j-1}: rotation f..
        f00, f01, f02 = t00 * cq + t01 * sq, -t00 * sq + t01 * cq, t02
        f10, f11, f12 = t10 * cq + t11 * sq, -t10 * sq + t11 * cq, t12
        f20, f21, f22 = t20 * cq + t21 * sq, -t20 * sq + t21 * cq, t22
        z0, z1, z2 = t02, t12, t22
        qd = zd[qj]
        c0, c1, c2 = _cross(otx, oty, otz, z0, z1, z2)
        ox, oy, oz = otx + z0 * qd, oty + z1 * qd, otz + z2 * qd
        lx, ly, lz = ltx + c0 * qd, lty + c1 * qd, ltz + c2 * qd
        # L_j = F_j Tz(d_j): origin offset r = d_j z
        dj = offset[j]
        r0, r1, r2 = z0 * dj, z1 * dj, z2 * dj
        pLx, pLy, pLz = px + r0, py + r1, pz + r2
        c0, c1, c2 = _cross(ox, oy, oz, r0, r1, r2)
        vx, vy, vz = vtx + c0, vty + c1, vtz + c2
        e0, e1, e2 = _cross(lx, ly, lz, r0, r1, r2)
        g0, g1, g2 = _cross(ox, oy, oz, c0, c1, c2)
        ax, ay, az = atx + e0 + g0, aty + e1 + g1, atz + e2 + g2
        for c in range(qj):
            Jw[0, c] = Jwt[0, c]
            Jw[1, c] = Jwt[1, c]
            Jw[2, c] = Jwt[2, c]
            g0, g1, g2 = _cross(Jwt[0, c], Jwt[1, c], Jwt[2, c], r0, r1, r2)
            Jv[0, c] = Jvt[0, c] + g0
            Jv[1, c] = Jvt[1, c] + g1
            Jv[2, c] = Jvt[2, c] + g2
        g0, g1, g2 = _cross(z0, z1, z2, r0, r1, r2)
        Jw[0, qj] = z0
        Jw[1, qj] = z1
        Jw[2, qj] = z2
        Jv[0, qj] = g0
        Jv[1, qj] = g1
        Jv[2, qj] = g2
        for c in range(ds, ncol):
            for i in range(3):
                Jw[i, c] = 0.0
                Jv[i, c] = 0.0
        # link body j's frame data (L_j) for pass 2
        _store_frame(BR, Bkin, j, f00, f01, f02, f10, f11, f12, f20, f21, f22,
                     vx, vy, vz, ox, oy, oz, ax, ay, az, lx, ly, lz)
        for c in range(ncol):
            for i in range(3):
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
            p0, p1, p2 = phi_j[0, k], phi_j[1, k], phi_j[2, k]
            h0, h1, h2 = theta_j[0, k], theta_j[1, k], theta_j[2, k]
            rho0 += p0 * dk
            rho1 += p1 * dk
            rho2 += p2 * dk
            rd0_ += p0 * ddk
            rd1_ += p1 * ddk
            rd2_ += p2 * ddk
            th0 += h0 * dk
            th1 += h1 * dk
            th2 += h2 * dk
            td0 += h0 * ddk
            td1 += h1 * ddk
            td2 += h2 * ddk
        bx = 0.0                  # bias of the tip's relative acceleration along x: -deltadot^T G_tip deltadot
        fs = fs_active[j]
        if fs:
            Gt = fs_G[j, 2]
            for k in range(m):
                g = 0.0
                gd = 0.0
                for l in range(m):
                    g += Gt[k, l] * z[ds + l]
                    gd += Gt[k, l] * zd[ds + l]
                fv[3, k] = g
                rho0 -= 0.5 * z[ds + k] * g
                rd0_ -= g * zd[ds + k]
                bx -= gd * zd[ds + k]
        r0 = f00 * rho0 + f01 * rho1 + f02 * rho2
        r1 = f10 * rho0 + f11 * rho1 + f12 * rho2
        r2 = f20 * rho0 + f21 * rho1 + f22 * rho2
        rd0 = f00 * rd0_ + f01 * rd1_ + f02 * rd2_
        rd1 = f10 * rd0_ + f11 * rd1_ + f12 * rd2_
        rd2 = f20 * rd0_ + f21 * rd1_ + f22 * rd2_
        # Re = Rz(th_z) Ry(th_y) Rx(th_x); the columns of G map (thdot_x, thdot_y, thdot_z) to the relative
        # angular velocity in the link frame: G = [Rz Ry e_x, Rz e_y, e_z]
        cx, sx = np.cos(th0), np.sin(th0)
        cy, sy = np.cos(th1), np.sin(th1)
        cz, sz = np.cos(th2), np.sin(th2)
        e00, e01, e02 = cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx
        e10, e11, e12 = sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx
        e20, e21, e22 = -sy, cy * sx, cy * cx
        G00, G10, G20 = cz * cy, sz * cy, -sy
        G01, G11 = -sz, cz
        # relative angular velocity G thd (link axes) and its bias derivative Gdot thd:
        # d/dt(Rz e_y) = thd_z e_z x (Rz e_y); d/dt(Rz Ry e_x) = (thd_z e_z + thd_y Rz e_y) x (Rz Ry e_x)
        wl0 = G00 * td0 + G01 * td1
        wl1 = G10 * td0 + G11 * td1
        wl2 = G20 * td0 + td2
        h0, h1, h2 = _cross(0.0, 0.0, td2, G01, G11, 0.0)
        k0, k1, k2 = _cross(G01 * td1, G11 * td1, td2, G00, G10, G20)
        gl0 = td1 * h0 + td0 * k0
        gl1 = td1 * h1 + td0 * k1
        gl2 = td1 * h2 + td0 * k2
        wr0 = f00 * wl0 + f01 * wl1 + f02 * wl2
        wr1 = f10 * wl0 + f11 * wl1 + f12 * wl2
        wr2 = f20 * wl0 + f21 * wl1 + f22 * wl2
        gd0 = f00 * gl0 + f01 * gl1 + f02 * gl2
        gd1 = f10 * gl0 + f11 * gl1 + f12 * gl2
        gd2 = f20 * gl0 + f21 * gl1 + f22 * gl2
        # tip velocity and bias accelerations (world)
        c0, c1, c2 = _cross(ox, oy, oz, r0, r1, r2)
        vtx, vty, vtz = vx + c0 + rd0, vy + c1 + rd1, vz + c2 + rd2
        e0, e1, e2 = _cross(lx, ly, lz, r0, r1, r2)
        g0, g1, g2 = _cross(ox, oy, oz, c0, c1, c2)
        h0, h1, h2 = _cross(ox, oy, oz, rd0, rd1, rd2)
        atx = ax + e0 + g0 + 2.0 * h0 + f00 * bx
        aty = ay + e1 + g1 + 2.0 * h1 + f10 * bx
        atz = az + e2 + g2 + 2.0 * h2 + f20 * bx
        h0, h1, h2 = _cross(ox, oy, oz, wr0, wr1, wr2)
        ltx, lty, ltz = lx + h0 + gd0, ly + h1 + gd1, lz + h2 + gd2
        otx, oty, otz = ox + wr0, oy + wr1, oz + wr2
        px, py, pz = pLx + r0, pLy + r1, pLz + r2
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
            p0, p1, p2 = phi_j[0, k], phi_j[1, k], phi_j[2, k]
            if fs:
                p0 -= fv[3, k]
            h0, h1, h2 = theta_j[0, k], theta_j[1, k], theta_j[2, k]
            s0 = G00 * h0 + G01 * h1
            s1 = G10 * h0 + G11 * h1
            s2 = G20 * h0 + h2
            Jvt[0, c] = f00 * p0 + f01 * p1 + f02 * p2
            Jvt[1, c] = f10 * p0 + f11 * p1 + f12 * p2
            Jvt[2, c] = f20 * p0 + f21 * p1 + f22 * p2
            Jwt[0, c] = f00 * s0 + f01 * s1 + f02 * s2
            Jwt[1, c] = f10 * s0 + f11 * s1 + f12 * s2
            Jwt[2, c] = f20 * s0 + f21 * s1 + f22 * s2
        # elastic tip rotation RE = RF Re
        E00 = f00 * e00 + f01 * e10 + f02 * e20
        E01 = f00 * e01 + f01 * e11 + f02 * e21
        E02 = f00 * e02 + f01 * e12 + f02 * e22
        E10 = f10 * e00 + f11 * e10 + f12 * e20
        E11 = f10 * e01 + f11 * e11 + f12 * e21
        E12 = f10 * e02 + f11 * e12 + f12 * e22
        E20 = f20 * e00 + f21 * e10 + f22 * e20
        E21 = f20 * e01 + f21 * e11 + f22 * e21
        E22 = f20 * e02 + f21 * e12 + f22 * e22
        if j == n - 1:            # the payload's frame data: the elastic tip's
            _store_frame(BR, Bkin, n, E00, E01, E02, E10, E11, E12, E20, E21, E22,
                         vtx, vty, vtz, otx, oty, otz, atx, aty, atz, ltx, lty, ltz)
            for c in range(ncol):
                for i in range(3):
                    BJv[n, i, c] = Jvt[i, c]
                    BJw[n, i, c] = Jwt[i, c]
        # Tip_j = ElasticTip_j Rx(twist_j)
        ca, sa = np.cos(twist[j]), np.sin(twist[j])
        t00, t01, t02 = E00, E01 * ca + E02 * sa, -E01 * sa + E02 * ca
        t10, t11, t12 = E10, E11 * ca + E12 * sa, -E11 * sa + E12 * ca
        t20, t21, t22 = E20, E21 * ca + E22 * sa, -E21 * sa + E22 * ca
        # elastic and damping forces of link j (with the curvature's quartic energy 1/2 K4 . delta^4)
        for k in range(m):
            s = 0.0
            for l in range(m):
                s += stiffness[j, k, l] * z[ds + l] + damping[j, k, l] * zd[ds + l]
            rhs[ds + k] -= s
        if fs:                  # - dV4/d delta_k = -2 sum_bce K4_kbce delta_b delta_c delta_e (K4 symmetric)
            for k in range(m):
                q4 = 0.0
                for b4 in range(m):
                    q3 = 0.0
                    for c4 in range(m):
                        q2 = 0.0
                        for e4 in range(m):
                            q2 += fs_K4[j, k, b4, c4, e4] * z[ds + e4]
                        q3 += q2 * z[ds + c4]
                    q4 += q3 * z[ds + b4]
                rhs[ds + k] -= 2.0 * q4
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
        # views of link j's integrals (no reference counting: the kernel runs without NRT)
        Phibar_j = body_Phibar[j]
        I1_j = body_I1[j]
        I2_j = body_I2[j]
        H0_j = body_H0[j]
        H1_j = body_H1[j]
        Mdd_j = body_Mdd[j]
        G_j = fs_G[j]
        C_j = fs_C[j]
        D_j = fs_D[j]
        ax_j = mode_axis[j]
        pl_j = mode_plane[j]
        Jv_b = BJv[b]
        Jw_b = BJw[b]
        r00, r01, r02, r10, r11, r12, r20, r21, r22, kvx, kvy, kvz, kox, koy, koz, kax, kay, kaz, klx, kly, klz = \
            _load_frame(BR, Bkin, b)
        # body Jacobian rows (6 x ncol): R^T Jv, R^T Jw
        for c in range(ncol):
            j0, j1, j2 = Jv_b[0, c], Jv_b[1, c], Jv_b[2, c]
            A[0, c] = r00 * j0 + r10 * j1 + r20 * j2
            A[1, c] = r01 * j0 + r11 * j1 + r21 * j2
            A[2, c] = r02 * j0 + r12 * j1 + r22 * j2
            j0, j1, j2 = Jw_b[0, c], Jw_b[1, c], Jw_b[2, c]
            A[3, c] = r00 * j0 + r10 * j1 + r20 * j2
            A[4, c] = r01 * j0 + r11 * j1 + r21 * j2
            A[5, c] = r02 * j0 + r12 * j1 + r22 * j2
        # body velocities and bias of their derivatives (R^T of the world v, omega, a, alpha)
        v0, v1, v2 = r00 * kvx + r10 * kvy + r20 * kvz, r01 * kvx + r11 * kvy + r21 * kvz, r02 * kvx + r12 * kvy + r22 * kvz
        w0, w1, w2 = r00 * kox + r10 * koy + r20 * koz, r01 * kox + r11 * koy + r21 * koz, r02 * kox + r12 * koy + r22 * koz
        c0, c1, c2 = _cross(w0, w1, w2, v0, v1, v2)
        av0 = r00 * kax + r10 * kay + r20 * kaz - c0
        av1 = r01 * kax + r11 * kay + r21 * kaz - c1
        av2 = r02 * kax + r12 * kay + r22 * kaz - c2
        aw0 = r00 * klx + r10 * kly + r20 * klz
        aw1 = r01 * klx + r11 * kly + r21 * klz
        aw2 = r02 * klx + r12 * kly + r22 * klz
        # configuration-dependent integrals: S, P, I, H, and A_k = dI/d delta_k (= I1_k + 2 sum_l delta_l I2_kl)
        Sd0 = 0.0
        Sd1 = 0.0
        Sd2 = 0.0
        for k in range(m):
            dk = z[ds + k]
            ddk = zd[ds + k]
            P[0, k] = Phibar_j[0, k]
            P[1, k] = Phibar_j[1, k]
            P[2, k] = Phibar_j[2, k]
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
                        bb += I2_j[k, l, i, jj] * z[ds + l]
                    Ak[k, i, jj] = I1_j[k, i, jj] + 2.0 * bb
                    Ak[k, jj, i] = Ak[k, i, jj]
            # I += delta_k (I1_k + B_k) = delta_k (A_k + I1_k) / 2
            I00 += 0.5 * dk * (Ak[k, 0, 0] + I1_j[k, 0, 0])
            I01 += 0.5 * dk * (Ak[k, 0, 1] + I1_j[k, 0, 1])
            I02 += 0.5 * dk * (Ak[k, 0, 2] + I1_j[k, 0, 2])
            I11 += 0.5 * dk * (Ak[k, 1, 1] + I1_j[k, 1, 1])
            I12 += 0.5 * dk * (Ak[k, 1, 2] + I1_j[k, 1, 2])
            I22 += 0.5 * dk * (Ak[k, 2, 2] + I1_j[k, 2, 2])
            for i in range(3):
                h = H0_j[i, k]
                for l in range(m):
                    h += H1_j[l, k, i] * z[ds + l]
                Hm[i, k] = h
        sddx = 0.0
        if fs:
            # Foreshortening (g = G delta, u = -delta^T G delta / 2; C_abk, D_abcd vanish unless a, b share a
            # bending plane, and c, d likewise: pl_j[k] = [first, end) of the modes of k's plane; e_k: the plane's
            # axis, y or z). With T_kl = sum_b delta_b C_kbl (C is symmetric in its first two indices):
            #   h_k = sum_b T_kb delta_b e_b - q2_k e_k / 2,  d c/d delta_k = -sum_b T_kb delta_b e_b - q2_k e_k / 2,
            #   q2_k = sum_a delta_a T_ak,  c = -sum_k delta_k q2_k e_k / 2,
            #   Hdot deltadot = e_x x s, s = sum_b delta_b qdd_b e_b, qdd_b = sum_ak deltadot_a deltadot_k C_akb,
            #   net H terms in F_delta_k: w . (e_x x x_k), x_k = 2 (sum_l deltadot_l T_kl e_l - sum_l deltadot_l T_lk e_k)
            #   (dh_l/d delta_k is symmetric but for 2 (T_kl e_l - T_lk e_k));
            #   Mdd += E, E_kl = sum_ab D_kalb delta_a delta_b = int mu g_k g_l, d a4/d delta_k = sum_l delta_l E_kl,
            #   net Mdd terms in F_delta_k: F2_k = sum_b delta_b sum_ml D_kbml deltadot_m deltadot_l (of
            #   Mdd_dot deltadot - 1/2 deltadot^T dMdd/d delta_k deltadot, two of the three contractions cancel).
            # fv rows: 0 Gbar delta, 1 Gbar deltadot, 2 d(a2 + a4)/d delta, 4-5 x_k (y, z), 6 F2, 7 qdd.
            U = 0.0
            a24 = 0.0
            for k in range(m):
                p0k, p1k = pl_j[k, 0], pl_j[k, 1]
                gb = 0.0
                gbd = 0.0
                ge = 0.0
                for l in range(p0k, p1k):
                    gb += G_j[0, k, l] * z[ds + l]
                    gbd += G_j[0, k, l] * zd[ds + l]
                    ge += G_j[1, k, l] * z[ds + l]
                dk = z[ds + k]
                fv[0, k] = gb
                fv[1, k] = gbd
                fv[2, k] = -2.0 * ge
                U -= 0.5 * dk * gb
                a24 -= dk * ge
                Sd0 -= gb * zd[ds + k]
                sddx -= gbd * zd[ds + k]
                f2 = 0.0
                for l in range(m):
                    t = 0.0
                    qq = 0.0
                    for bb_ in range(p0k, p1k):
                        t += z[ds + bb_] * C_j[k, bb_, l]
                        qq += zd[ds + bb_] * C_j[k, bb_, l]
                    T[k, l] = t
                    Td[k, l] = qq
                    e = 0.0
                    p0l, p1l = pl_j[l, 0], pl_j[l, 1]
                    for aa in range(p0k, p1k):
                        ea = 0.0
                        fa = 0.0
                        for bb_ in range(p0l, p1l):
                            dv = D_j[k, aa, l, bb_]
                            ea += dv * z[ds + bb_]
                            fa += dv * zd[ds + bb_]
                        e += z[ds + aa] * ea
                        f2 += z[ds + aa] * fa * zd[ds + l]
                    E[k, l] = e
                fv[6, k] = f2
            cy = 0.0
            cz = 0.0
            sy = 0.0
            sz = 0.0
            for k in range(m):
                dk = z[ds + k]
                eyk = 1.0 if ax_j[k] == 1 else 0.0
                q2 = 0.0
                qdd = 0.0
                q1y = 0.0
                q1z = 0.0
                uy = 0.0
                uz = 0.0
                vk = 0.0
                da4 = 0.0
                for l in range(m):
                    eyl = 1.0 if ax_j[l] == 1 else 0.0
                    dl = z[ds + l]
                    ddl = zd[ds + l]
                    q2 += dl * T[l, k]
                    qdd += ddl * Td[l, k]
                    q1y += T[k, l] * dl * eyl
                    q1z += T[k, l] * dl * (1.0 - eyl)
                    uy += ddl * T[k, l] * eyl
                    uz += ddl * T[k, l] * (1.0 - eyl)
                    vk += ddl * T[l, k]
                    da4 += dl * E[k, l]
                fv[2, k] += da4
                a24 += 0.25 * dk * da4
                cy -= 0.5 * dk * q2 * eyk
                cz -= 0.5 * dk * q2 * (1.0 - eyk)
                sy += dk * qdd * eyk
                sz += dk * qdd * (1.0 - eyk)
                hc[k, 0] = q1y - 0.5 * q2 * eyk
                hc[k, 1] = q1z - 0.5 * q2 * (1.0 - eyk)
                hc[k, 2] = -q1y - 0.5 * q2 * eyk
                hc[k, 3] = -q1z - 0.5 * q2 * (1.0 - eyk)
                fv[4, k] = 2.0 * (uy - vk * eyk)
                fv[5, k] = 2.0 * (uz - vk * (1.0 - eyk))
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
                fL0 += dk * H1_j[k, l, 0] * dl
                fL1 += dk * H1_j[k, l, 1] * dl
                fL2 += dk * H1_j[k, l, 2] * dl
        if fs:                        # Hdot deltadot = e_x x s (foreshortening)
            fL1 -= sz
            fL2 += sy
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
                hd0 += dl * H1_j[l, k, 0]      # Hdot_k
                hd1 += dl * H1_j[l, k, 1]
                hd2 += dl * H1_j[l, k, 2]
                hk0 += dl * H1_j[k, l, 0]      # dH/d delta_k . deltadot
                hk1 += dl * H1_j[k, l, 1]
                hk2 += dl * H1_j[k, l, 2]
            fd += hd0 * w0 + hd1 * w1 + hd2 * w2
            c0, c1, c2 = _cross(w0, w1, w2, P[0, k], P[1, k], P[2, k])
            dT = (v0 * c0 + v1 * c1 + v2 * c2
                  + 0.5 * (w0 * (Ak[k, 0, 0] * w0 + Ak[k, 0, 1] * w1 + Ak[k, 0, 2] * w2)
                           + w1 * (Ak[k, 1, 0] * w0 + Ak[k, 1, 1] * w1 + Ak[k, 1, 2] * w2)
                           + w2 * (Ak[k, 2, 0] * w0 + Ak[k, 2, 1] * w1 + Ak[k, 2, 2] * w2))
                  + w0 * hk0 + w1 * hk1 + w2 * hk2)
            if fs:                    # net foreshortening terms: w . (e_x x x_k) + F2_k (see above)
                fd += w2 * fv[4, k] - w1 * fv[5, k] + fv[6, k]
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
                    J[ds + k, ds + l] += Mdd_j[k, l]
                    if fs:
                        J[ds + k, ds + l] += E[k, l]
    if want_mass:
        for r in range(N):
            for c in range(r):
                J[r, c] = J[c, r]


@kernel(**INTERNAL)
def _store_frame(BR, Bkin, b, r00, r01, r02, r10, r11, r12, r20, r21, r22, vx, vy, vz, ox, oy, oz, ax, ay, az,
                 lx, ly, lz):
    """Body b's frame data for the body pass of dynamics_terms: rotation, and v, omega, a, alpha (world)."""
    BR[b, 0, 0], BR[b, 0, 1], BR[b, 0, 2] = r00, r01, r02
    BR[b, 1, 0], BR[b, 1, 1], BR[b, 1, 2] = r10, r11, r12
    BR[b, 2, 0], BR[b, 2, 1], BR[b, 2, 2] = r20, r21, r22
    Bkin[b, 0, 0], Bkin[b, 0, 1], Bkin[b, 0, 2] = vx, vy, vz
    Bkin[b, 1, 0], Bkin[b, 1, 1], Bkin[b, 1, 2] = ox, oy, oz
    Bkin[b, 2, 0], Bkin[b, 2, 1], Bkin[b, 2, 2] = ax, ay, az
    Bkin[b, 3, 0], Bkin[b, 3, 1], Bkin[b, 3, 2] = lx, ly, lz


@kernel(**INTERNAL)
def _load_frame(BR, Bkin, b):
    """The 21 scalars stored by _store_frame."""
    return (BR[b, 0, 0], BR[b, 0, 1], BR[b, 0, 2], BR[b, 1, 0], BR[b, 1, 1], BR[b, 1, 2],
            BR[b, 2, 0], BR[b, 2, 1], BR[b, 2, 2], Bkin[b, 0, 0], Bkin[b, 0, 1], Bkin[b, 0, 2],
            Bkin[b, 1, 0], Bkin[b, 1, 1], Bkin[b, 1, 2], Bkin[b, 2, 0], Bkin[b, 2, 1], Bkin[b, 2, 2],
            Bkin[b, 3, 0], Bkin[b, 3, 1], Bkin[b, 3, 2])


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
    return types.none(types.int64, *args), call_through_address(types.none, args)


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
    return types.boolean(types.int64, *args), call_through_address(types.boolean, args)


@intrinsic
def _call_midpoint(typingctx, addr, d, ws, z, zd, tau, dt, substeps, tol, max_iter):
    """midpoint_step at address addr (see step_addresses); returns its bool."""
    args = (d, ws, z, zd, tau, types.float64, types.int64, types.float64, types.int64)
    return types.boolean(types.int64, *args), call_through_address(types.boolean, args)


# Integrator codes of call_step / ws.step_addr (integrators.METHODS lists the names in this order).
RK4, MIDPOINT, GAUSS = 0, 1, 2


@kernel(**INTERNAL)
def call_step(d, ws, z, zd, tau, dt, substeps, method, tol, max_iter):
    """rk4_step, midpoint_step (tol, max_iter) or gauss_step, by method code (RK4, MIDPOINT, GAUSS), for use inside
    other kernels (simulation loops), through the addresses in ws.step_addr (step_addresses): their code is not
    compiled again into the caller. False on failure or if the workspace carries no address."""
    addr = ws.step_addr[method]
    if addr == 0:
        return False
    if method == MIDPOINT:
        return _call_midpoint(addr, d, ws, z, zd, tau, dt, substeps, tol, max_iter)
    return _call_rk4(addr, d, ws, z, zd, tau, dt, substeps)      # rk4_step and gauss_step share the signature


def _address(dispatcher, sig) -> int:
    dispatcher.compile(sig)
    return entry_address(dispatcher, sig)


def step_addresses(d, ws, methods=('rk4', 'midpoint', 'gauss')):
    """Store the addresses of the compiled rk4_step, midpoint_step and/or gauss_step for the types of (d, ws) in
    ws.step_addr[RK4 | MIDPOINT | GAUSS] (compiling them, or loading them from numba's cache, on first use)."""
    a1 = types.float64[::1]
    base = (typeof(d), typeof(ws), a1, a1, a1, types.float64, types.int64)
    if 'rk4' in methods:
        ws.step_addr[RK4] = _address(rk4_step, base)
    if 'midpoint' in methods:
        ws.step_addr[MIDPOINT] = _address(midpoint_step, base + (types.float64, types.int64))
    if 'gauss' in methods:
        ws.step_addr[GAUSS] = _address(gauss_step, base)


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
    J = ws.NN[0]
    L = ws.NN[1]
    rhs = ws.VN[0]
    for _ in range(substeps):
        for i in range(N):
            z0[i] = z[i]
            v0[i] = zd[i]
            zs[i] = z[i]
            vs[i] = zd[i]
            dz[i] = 0.0
            dv[i] = 0.0
        for stage in range(4):
            if not (call_dynamics_terms(d, ws, zs, vs, tau, J, rhs, True) and cholesky_solve(J, rhs, N, L, acc)):
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


# Two-stage Gauss-Legendre collocation (order 4): nodes c = 1/2 -+ sqrt(3)/6, weights b = (1/2, 1/2), Butcher
# matrix A (Hairer, Lubich & Wanner, Geometric Numerical Integration, II.1.3, Table 1.1). GAUSS_AA = A^2 and
# GAUSS_BA = b^T A carry the positions of the second-order form; the iteration stops when the stage accelerations'
# update moves the velocities by less than GAUSS_TOL of their scale (h^2 |dK|^2 <= tol^2 (|v0|^2 + h^2 |K|^2)).
_S3 = np.sqrt(3.0)
GAUSS_C = (0.5 - _S3 / 6.0, 0.5 + _S3 / 6.0)
GAUSS_A = ((0.25, 0.25 - _S3 / 6.0), (0.25 + _S3 / 6.0, 0.25))
_A = np.array(GAUSS_A)
GAUSS_AA = tuple(tuple(float(x) for x in row) for row in _A @ _A)
GAUSS_BA = tuple(float(x) for x in 0.5 * _A.sum(axis=0))
GAUSS_TOL = 1e-9
GAUSS_MAX_ITER = 30


@kernel(**KERNEL_NO_NRT)
def gauss_step(d, ws, z, zd, tau, dt, substeps):
    """Advance (z, zd) in place by `substeps` steps of the two-stage Gauss-Legendre method (order 4, symmetric,
    A-stable, symplectic for canonical systems): no numerical damping of any mode (|R(i w h)| = 1) and a relative
    frequency error (w h)^4 / 720 (integrators.GAUSS_STEP_LIMIT). Unknowns: the stage accelerations K_s,
    V_s = v0 + h sum_r A_sr K_r, Z_s = z0 + c_s h v0 + h^2 sum_r (A^2)_sr K_r, K_s = J(Z_s)^-1 R(Z_s, V_s); solved by
    fixed-point iteration from K_s = a(z0, v0), which contracts like (w h)^2 rho(A)^2 = (w h)^2 / 12 (0.03 per
    iteration at the rule's step). z1 = z0 + h v0 + h^2 sum_s (b A)_s K_s, v1 = v0 + h/2 (K_1 + K_2). False if J is not positive
    definite or the iteration does not converge."""
    N = d.n_coords
    h = dt / substeps
    J = ws.NN[0]
    L = ws.NN[1]
    rhs = ws.VN[0]
    K1 = ws.VN[1]
    K2 = ws.VN[2]
    Zs = ws.VN[3]
    Vs = ws.VN[4]
    T = ws.VN[5]
    for _ in range(substeps):
        if not (call_dynamics_terms(d, ws, z, zd, tau, J, rhs, True) and cholesky_solve(J, rhs, N, L, K1)):
            return False
        scale = 0.0
        for i in range(N):
            K2[i] = K1[i]
            scale += zd[i] * zd[i]
        converged = False
        for it in range(GAUSS_MAX_ITER):
            change = 0.0
            size = 0.0
            for s in range(2):
                a1 = GAUSS_A[s][0]
                a2 = GAUSS_A[s][1]
                b1 = GAUSS_AA[s][0]
                b2 = GAUSS_AA[s][1]
                c = GAUSS_C[s] * h
                for i in range(N):
                    Vs[i] = zd[i] + h * (a1 * K1[i] + a2 * K2[i])
                    Zs[i] = z[i] + c * zd[i] + h * h * (b1 * K1[i] + b2 * K2[i])
                if not (call_dynamics_terms(d, ws, Zs, Vs, tau, J, rhs, True) and cholesky_solve(J, rhs, N, L, T)):
                    return False
                K = K1 if s == 0 else K2
                for i in range(N):
                    dk = T[i] - K[i]
                    K[i] = T[i]
                    change += dk * dk
                    size += T[i] * T[i]
            if change * h * h <= GAUSS_TOL * GAUSS_TOL * (scale + size * h * h):
                converged = True
                break
        if not converged:
            return False
        for i in range(N):
            z[i] += h * zd[i] + h * h * (GAUSS_BA[0] * K1[i] + GAUSS_BA[1] * K2[i])
            zd[i] += 0.5 * h * (K1[i] + K2[i])
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
        # elastic tip rotation Re = Rz(th2) Ry(th1) Rx(th0) (as in dynamics_terms), RE = RF Re
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


@kernel(**INTERNAL)
def kinetic_energy(d, ws, z, zd, tau0, J, rhs):
    """T = 1/2 zd^T J(z) zd, the arm's kinetic energy (J: the mass matrix of dynamics_terms, filled here through
    call_dynamics_terms; rhs scratch, tau0 a zero torque). ArmModel.energies states the same with numpy."""
    call_dynamics_terms(d, ws, z, zd, tau0, J, rhs, True)
    N = z.shape[0]
    kin = 0.0
    for i in range(N):
        s = 0.0
        for c in range(N):
            s += J[i, c] * zd[c]
        kin += zd[i] * s
    return 0.5 * kin


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
        if d.fs_active[j]:             # S_x += int mu u = -1/2 delta^T Gbar delta; the curvature's V4
            for k in range(m):
                for l in range(m):
                    U -= 0.5 * z[ds + k] * d.fs_G[j, 0, k, l] * z[ds + l]
            for k in range(m):
                for b in range(m):
                    for c in range(m):
                        for e in range(m):
                            elastic += 0.5 * d.fs_K4[j, k, b, c, e] * z[ds + k] * z[ds + b] * z[ds + c] * z[ds + e]
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
