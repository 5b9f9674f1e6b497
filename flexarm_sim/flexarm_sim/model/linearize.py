"""Linearization of the arm about a configuration, and the natural modes of the whole arm.

About an equilibrium (z0, zd = 0, tau0) the equations J(z) z'' = R(z, zd, tau) give
J0 dz'' + D_lin dz' + K_lin dz = B dtau with K_lin = -dR/dz, D_lin = -dR/dzd and B = dR/dtau, all by
central differences of the (exact) kernel terms. For free joints (tau = 0) the whole-arm directions solve the
symmetric generalized eigenproblem K_lin v = w^2 J0 v (undamped): w^2 > 0 an elastic mode of frequency w / 2 pi,
w^2 ~ 0 an unrestrained (rigid-body) direction, w^2 < 0 an unstable one diverging as exp(sqrt(-w^2) t).
Away from an equilibrium R(z0, 0, 0) != 0: adding the constant torque that holds the pose leaves K_lin unchanged
(B does not depend on z) and zeroes the joint rows of R, so the same eigenproblem describes the arm held there;
a residual left on the modal rows (links sagging under gravity) means the undeflected pose is not at rest even
held (the term (dJ/dz dz) z''0 is then missing). whole_arm_modes says which case applies (ArmModes.equilibrium,
holding_torque, residual_force).
`with_more_modes` / `mode_convergence`: the same directions with one more assumed mode per bending plane, index by
index (Rayleigh-Ritz: the refined w^2 can only fall), to tell converged frequencies from truncated ones.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.linalg


@dataclass(frozen=True)
class Linearization:
    z0: np.ndarray
    tau0: np.ndarray
    mass: np.ndarray        # J(z0)
    stiffness: np.ndarray   # K_lin = -dR/dz
    damping: np.ndarray     # D_lin = -dR/dzd
    input: np.ndarray       # B = dR/dtau, (N, n)

    def state_space(self):
        """(A, B) of x' = A x + B u with x = (dz, dzd)."""
        N = self.mass.shape[0]
        Jinv_K = np.linalg.solve(self.mass, self.stiffness)
        Jinv_D = np.linalg.solve(self.mass, self.damping)
        Jinv_B = np.linalg.solve(self.mass, self.input)
        A = np.block([[np.zeros((N, N)), np.eye(N)], [-Jinv_K, -Jinv_D]])
        B = np.vstack([np.zeros_like(Jinv_B), Jinv_B])
        return A, B


def cyclic_joints(spec, tol=1e-9) -> np.ndarray:
    """(n_joints,) bool: the joints whose angle is a cyclic coordinate of the arm - one its Lagrangian does not depend
    on (Goldstein, Classical Mechanics, sec. 2.6). Joint 0 is cyclic when gravity is zero or along its axis (the base
    frame's z, DH): turning the whole arm about that fixed axis changes neither its kinetic and strain energies nor its
    gravity potential, so a static equilibrium (but for that angle) and the linearization about it are the same at
    every angle of joint 0 (test_linearize.py checks it against linearizations at several angles). The axes of the
    later joints move with the arm; the hard stops act only beyond the position limits."""
    out = np.zeros(spec.n_joints, dtype=bool)
    if spec.n_joints:
        g = np.asarray(spec.gravity, dtype=float)
        axis = np.asarray(spec.base_transform, dtype=float)[:3, 2]
        norm = float(np.linalg.norm(g))
        out[0] = norm == 0.0 or float(np.linalg.norm(np.cross(axis, g))) <= tol * norm
    return out


def zero_order_hold(A, B, dt):
    """(Phi, Gamma) of x' = A x + B u sampled every dt with u held: Phi = e^{A dt}, Gamma = int_0^dt e^{As} ds B, both
    from one exponential of the block matrix [[A, B], [0, 0]] dt (Van Loan 1978). The one discretization of the
    package: the laws' designs, the estimator's prediction, the observability analysis."""
    A, B = np.asarray(A, dtype=float), np.asarray(B, dtype=float)
    nx, nu = B.shape
    M = np.zeros((nx + nu, nx + nu))
    M[:nx, :nx], M[:nx, nx:] = A, B
    E = scipy.linalg.expm(M * dt)
    return E[:nx, :nx], E[:nx, nx:]


def linearize(model, z0, tau0=None, eps=1e-6, coulomb_slope=False) -> Linearization:
    """Linearize J z'' = R about (z0, 0, tau0) by central differences of R.

    Coulomb friction, smoothed in the model as f_c tanh(qd / v_c) (arm_model.COULOMB_VELOCITY), has its steepest
    slope f_c / v_c exactly at qd = 0: a fictitious viscous damping ~100x a joint's real one, gone as soon as the
    joint moves faster than v_c (a calibrated De Luca file: elbow -4370 1/s in dqdd/dqd against -128 without it).
    Designs (gains, estimators, shapers, modes) take it out (the default): for them Coulomb friction is a bounded
    torque, not damping. coulomb_slope=True keeps it: the integration stiffness of the smoothed model (step sizes)."""
    N, n = model.n_coords, model.n_joints
    z0 = np.asarray(z0, dtype=float)
    tau0 = np.zeros(n) if tau0 is None else np.asarray(tau0, dtype=float)
    zd0 = np.zeros(N)
    K = np.zeros((N, N))
    D = np.zeros((N, N))
    B = np.zeros((N, n))
    for k in range(N):
        e = np.zeros(N)
        e[k] = eps
        K[:, k] = -(model.rhs(z0 + e, zd0, tau0) - model.rhs(z0 - e, zd0, tau0)) / (2 * eps)
        D[:, k] = -(model.rhs(z0, zd0 + e, tau0) - model.rhs(z0, zd0 - e, tau0)) / (2 * eps)
    for k in range(n):
        e = np.zeros(n)
        e[k] = 1.0
        B[:, k] = model.rhs(z0, zd0, tau0 + e) - model.rhs(z0, zd0, tau0)
    if not coulomb_slope:
        d = model.data
        for j, qj in enumerate(model.q_index):
            D[qj, qj] -= d.coulomb[j] / d.coulomb_velocity       # d/dqd of f_c tanh(qd / v_c) at qd = 0
    return Linearization(z0, tau0, model.mass_matrix(z0), K, D, B)


# whole_arm_modes: a direction is rigid (unrestrained) when |w^2| <= RIGID_RTOL * w_g^2 + EIGEN_RTOL * max |w^2|.
# w_g^2 = |g| max_j sqrt(M / J_jj) bounds the gravity stiffness per inertia of any joint (gravity_bound / J_jj: a
# pendulum g / r with the whole mass at the joint's radius of gyration); a gravity direction slower than 1e-3 of
# that rate (a period 1000x the fastest pendulum's) is called unrestrained, 1e4 above the central-difference noise
# of K (~1e-10 of the gravity forces at eps = 1e-6). The second term is the eigensolver's rounding.
RIGID_RTOL = 1e-6
EIGEN_RTOL = 1e-12
# A pose is an equilibrium when every row of R(z0, 0, 0) is within EQUILIBRIUM_RTOL of its gravity bound
# |g| sqrt(M J_ii) (rounding of the kernel's trigonometry is ~1e-16 of it).
EQUILIBRIUM_RTOL = 1e-9


@dataclass(frozen=True)
class ArmModes:
    """Undamped directions of the arm linearized at a pose (K v = w^2 J v), split by the sign of w^2.

    Stable part (w^2 >= 0) -- the fields callers have always used:
      frequencies_hz  ascending; the first n_rigid are the rigid-body (unrestrained) directions, reported as 0.0
      shapes          columns mass-normalised (v^T J v = 1), aligned with frequencies_hz
      n_rigid         directions with |w^2| <= rigid_tol (RIGID_RTOL: relative to the gravity scale, and the
                      eigensolver's rounding relative to max |w^2|)
    Unstable part (w^2 < 0: the direction grows as exp(lambda t), lambda = sqrt(-w^2)), never among the frequencies:
      unstable_rates  divergence rates lambda in 1/s, fastest first
      unstable_shapes columns mass-normalised, aligned with unstable_rates
    The pose:
      omega2          every eigenvalue w^2 in (rad/s)^2, ascending: unstable, rigid, elastic
      residual_force  R(z0, 0, 0) over all N coordinates: generalized force at rest with zero joint torque
                      (joint rows N m)
      holding_torque  the joint torques that cancel its joint rows: the static torque needed to hold the pose
      static_deflection  (N,) dz = K_dd^-1 R_d on the modal rows (joint entries 0): where the held links come to
                      rest, to first order (zero when the modal rows are in equilibrium)
      equilibrium     every row that is not held (all rows, or the modal rows with the joints locked) within
                      equilibrium_rtol of its gravity bound |g| sqrt(M J_ii). When False the directions are those
                      of the arm held at the pose by the constant holding_torque with undeflected links (a
                      residual on a modal row: the link sags there; the held pose is not an equilibrium either).
    """
    frequencies_hz: np.ndarray
    shapes: np.ndarray
    n_rigid: int
    unstable_rates: np.ndarray
    unstable_shapes: np.ndarray
    omega2: np.ndarray
    residual_force: np.ndarray
    holding_torque: np.ndarray
    static_deflection: np.ndarray
    equilibrium: bool
    rigid_tol: float
    equilibrium_rtol: float

    @property
    def elastic_frequencies_hz(self) -> np.ndarray:
        return self.frequencies_hz[self.n_rigid:]

    @property
    def n_unstable(self) -> int:
        return int(self.unstable_rates.size)

    @property
    def kinds(self) -> tuple:
        """'unstable', 'rigid' or 'elastic' for each entry of omega2."""
        n_u, n_r = self.n_unstable, self.n_rigid
        return tuple('unstable' if i < n_u else 'rigid' if i < n_u + n_r else 'elastic'
                     for i in range(self.omega2.size))


def total_mass(spec) -> float:
    """Mass of every body of the arm: link rods and attachments, hubs, payload [kg]."""
    return float(sum(js.link.mass + js.hub.mass for js in spec.joints) + spec.payload.mass)


def gravity_bound(model, J) -> np.ndarray:
    """|g| sqrt(M J_ii) per coordinate: an upper bound of the gravity generalized force on coordinate i at any pose.
    Q_i = sum_bodies int g . dr/dz_i dm, and by Cauchy-Schwarz |Q_i| <= |g| sqrt(M) sqrt(int |dr/dz_i|^2 dm)
    <= |g| sqrt(M J_ii) (J_ii also holds the rotary and rotor inertia)."""
    g = float(np.linalg.norm(model.spec.gravity))
    return g * np.sqrt(total_mass(model.spec) * np.clip(np.diag(J), 0.0, None))


def whole_arm_modes(model, q, free_joints=True, eps=1e-6, rigid_rtol=RIGID_RTOL,
                    equilibrium_rtol=EQUILIBRIUM_RTOL) -> ArmModes:
    """Undamped natural directions of the whole arm at joint angles q (deflections zero): K v = w^2 J v with
    K = -dR/dz (symmetric at rest: the Hessian of the potential energy) and J the mass matrix.

    free_joints: joints carry zero torque (rigid-body directions where gravity does not restrain them, unstable
    ones where it pulls away, e.g. an inverted pendulum: lambda = sqrt(m g c / I)); otherwise the joints are
    locked (joint coordinates removed). Directions with w^2 < 0 are reported as divergence rates, never as
    frequencies; whether the pose is an equilibrium is in `equilibrium` / `holding_torque` (ArmModes).
    """
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = np.asarray(q, dtype=float)
    lin = linearize(model, z0, eps=eps)
    J, K = lin.mass, 0.5 * (lin.stiffness + lin.stiffness.T)
    R0 = model.rhs(z0, np.zeros(model.n_coords), np.zeros(model.n_joints))
    qi = np.asarray(model.q_index)
    holding = np.linalg.solve(lin.input[qi], -R0[qi]) if qi.size else np.zeros(0)
    free_rows = np.arange(model.n_coords) if free_joints else np.asarray(model.mode_index, dtype=int)
    bound = gravity_bound(model, J)
    equilibrium = bool(np.all(np.abs(R0[free_rows]) <= equilibrium_rtol * bound[free_rows]))
    mi = np.asarray(model.mode_index, dtype=int)
    sag = np.zeros(model.n_coords)
    if mi.size and np.any(np.abs(R0[mi]) > equilibrium_rtol * bound[mi]):
        try:
            sag[mi] = np.linalg.solve(K[np.ix_(mi, mi)], R0[mi])
        except np.linalg.LinAlgError:
            sag[mi] = np.nan
    if not free_joints:
        keep = model.mode_index
        J, K = J[np.ix_(keep, keep)], K[np.ix_(keep, keep)]
    w2, V = scipy.linalg.eigh(K, J)
    qq = np.diag(lin.mass)[qi]
    w_g2 = float(np.max(bound[qi] / qq)) if qi.size else 0.0
    tol = rigid_rtol * w_g2 + EIGEN_RTOL * (float(np.max(np.abs(w2))) if w2.size else 0.0)
    n_u = int(np.sum(w2 < -tol))
    n_r = int(np.sum(np.abs(w2) <= tol))
    freqs = np.sqrt(np.clip(w2[n_u:], 0.0, None)) / (2 * np.pi)
    freqs[:n_r] = 0.0
    return ArmModes(frequencies_hz=freqs, shapes=V[:, n_u:], n_rigid=n_r,
                    unstable_rates=np.sqrt(-w2[:n_u]), unstable_shapes=V[:, :n_u], omega2=w2,
                    residual_force=R0, holding_torque=holding, static_deflection=sag, equilibrium=equilibrium,
                    rigid_tol=tol, equilibrium_rtol=equilibrium_rtol)


def with_more_modes(spec, extra=1):
    """The same arm with `extra` more assumed modes in every bending plane and torsion a flexible link already
    models (rigid links stay rigid): the next Ritz space, which contains the present one (same mode shapes, same
    clamped-mass tip bodies), so its w^2 are <= the present ones index by index (Cauchy interlacing). New modes
    take the damping ratio of the last mode of their plane; an FE link gets the elements the count needs.
    Raises ArmSpecError (naming the field) when the count leaves the schema's range."""
    from .spec import check_arm
    joints = []
    for js in spec.joints:
        L = js.link
        counts = (L.n_in_plane, L.n_out_of_plane, L.n_torsion)
        new = tuple(c + extra if c else 0 for c in counts)
        zeta, k = [], 0
        for c, c_new in zip(counts, new):
            block = list(L.damping_ratio[k:k + c])
            zeta += block + block[-1:] * (c_new - c)
            k += c
        fem = max(L.fem_elements, -(-max(new[0], new[1]) // 2)) if L.mode_solver == 'fem' else L.fem_elements
        joints.append(replace(js, link=replace(L, n_in_plane=new[0], n_out_of_plane=new[1], n_torsion=new[2],
                                               damping_ratio=np.array(zeta, dtype=float), fem_elements=fem)))
    out = replace(spec, joints=tuple(joints))
    if hasattr(spec, '_base_pose'):
        object.__setattr__(out, '_base_pose', spec._base_pose)
    return check_arm(out)


@dataclass(frozen=True)
class ModeConvergence:
    """Each direction of `coarse` against the same-index direction of `fine` (a model with more modes per link).

    omega2_coarse/omega2_fine: ascending eigenvalues (rad/s)^2, index-matched (len(omega2_coarse) entries).
    relative_change: for elastic directions f_coarse / f_fine - 1 (how far the coarse frequency lies above the
    refined one), for unstable ones lambda_coarse / lambda_fine - 1; inf where the refined direction changed kind;
    0 for rigid directions that stay rigid. converged: |relative_change| <= rtol."""
    omega2_coarse: np.ndarray
    omega2_fine: np.ndarray
    kinds: tuple
    relative_change: np.ndarray
    converged: np.ndarray
    rtol: float


def mode_convergence(coarse: ArmModes, fine: ArmModes, rtol=0.02) -> ModeConvergence:
    """Compare the directions of two models of one arm at one pose, the second with more modes per link."""
    n = coarse.omega2.size
    if fine.omega2.size < n:
        raise ValueError('the refined model has fewer directions than the coarse one')
    kc, kf = coarse.kinds, fine.kinds
    wc, wf = coarse.omega2, fine.omega2[:n]
    rc = np.zeros(n)
    for i in range(n):
        if kc[i] != kf[i]:
            rc[i] = np.inf
        elif kc[i] != 'rigid':
            rc[i] = np.sqrt(abs(wc[i]) / abs(wf[i])) - 1.0
    return ModeConvergence(wc, wf, kc, rc, np.abs(rc) <= rtol, rtol)


def joint_hf_inertia(model, q=None):
    """Effective inertia of each joint with the links free, 1 / diag(J^-1) (joint rows), at joint angles q
    (deflections zero; default the nominal configuration): what a joint torque accelerates above the elastic
    modes. A sampled or fast joint loop (velocity gain k_v) must be slow against it. Rigid arm: 1 / diag(J^-1)."""
    z = np.zeros(model.n_coords)
    z[model.q_index] = model.spec.nominal_configuration if q is None else q
    return 1.0 / np.diag(np.linalg.inv(model.mass_matrix(z)))[np.asarray(model.q_index)]


def largest_servo_step(model, kv) -> float:
    """Largest integration step (s) that resolves a joint servo's velocity loop: min_j J_hf,j / k_v,j (the held
    loop is then critically damped at worst); inf without rate feedback."""
    kv = np.asarray(kv, dtype=float)
    with np.errstate(divide='ignore'):
        return float(np.min(np.where(kv > 0, joint_hf_inertia(model) / kv, np.inf)))
