"""The immutable numeric model of an arm (Model/Data split, as Pinocchio's Model/Data).

`ArmModel.from_spec(spec)` solves the link modes (clamped-mass boundary conditions from the outboard
bodies at the nominal configuration), computes the modal integrals once, and packs everything into a
`KernelData` named tuple of plain arrays for the numba kernels. `Workspace` holds the scratch arrays the
kernels write into; one per thread of use.

`from_spec` re-validates the spec (spec.check_arm), turns any mode-solver failure into an ArmSpecError naming
the link, and refuses a model whose arrays are not finite or whose mass matrix at the nominal configuration is
not safely positive definite (spec.MIN_MASS_EIGEN_RATIO): a loaded model can always be integrated there.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from . import dynamics_numpy
from .lazy import lazy_module
from .link_modes import OUT_OF_PLANE, TORSION, link_integrals, solve_link_modes
from .spec import MIN_MASS_EIGEN_RATIO, ArmSpec, ArmSpecError, check_arm, load_arm

kernels = lazy_module(__package__ + '.kernels')   # numba loads at the first kernel call, not at import

KernelData = namedtuple('KernelData', [
    'n_joints', 'n_coords', 'q_index', 'n_modes', 'angle_offset', 'offset', 'length', 'twist',
    'base_R', 'base_p', 'gravity',
    'body_active', 'body_mass', 'body_S0', 'body_I0', 'body_Phibar', 'body_I1', 'body_I2', 'body_H0',
    'body_H1', 'body_Mdd', 'phi_tip', 'theta_tip', 'stiffness', 'damping',
    'payload_active', 'payload_mass', 'payload_S', 'payload_I0',
    'viscous', 'coulomb', 'coulomb_velocity', 'rotor_inertia',
    'fs_active', 'fs_G', 'fs_C', 'fs_D', 'fs_K4', 'mode_axis', 'mode_plane', 'joint_stop',
])

Workspace = namedtuple('Workspace', [
    'NN',      # (3, N, N): mass matrix J, Cholesky factor L, Newton matrix S
    'VN',      # (8, N): rhs, then the integrators' scratch (rk4: z0, v0, zs, vs, acc, dz, dv; gauss: K1, K2, Zs, Vs, T)
    'J3N',     # (4, 3, N): Jacobians: previous tip (angular, linear), link (linear, angular)
    'B6',      # (2, 6, N): body Jacobian A and M11 A
    'Ak',      # (mmax, 3, 3): dI / d delta_k
    'HP',      # (2, 3, mmax): H(delta), P(delta)
    'BR', 'BJ', 'Bkin',     # per body (n + 1): rotation, Jacobians (linear, angular), (v, omega, a, alpha)
    'fs_v', 'fs_hc', 'fs_W',     # foreshortening contractions (kernels.dynamics_terms)
    'step_addr',  # (3,) int64: addresses of rk4_step, midpoint_step, gauss_step (simulation loops; kernels.step_addresses)
    'dyn_addr',   # address of the compiled dynamics_terms (kernels.call_dynamics_terms)
])

# Coulomb friction is smoothed as f_c tanh(qdot / COULOMB_VELOCITY) (rad/s).
COULOMB_VELOCITY = 1e-2

# Hard stops at the joint position limits (kernels.stop_torque). Defaults when the arm file gives no
# limits.stop_stiffness / stop_damping (joint_stops): the stiffest of
#   - holding the joint's effort limit within STOP_PENETRATION_AT_EFFORT (static),
#   - stopping everything outboard (its rigid inertia about the joint, J_jj of the mass matrix at the nominal
#     configuration) arriving at the joint's velocity limit within STOP_PENETRATION_AT_SPEED (energy),
#   - ringing at STOP_FREQUENCY_HZ on J_jj (when the joint has neither limit);
# damping ratio STOP_DAMPING_RATIO on the joint's high-frequency inertia J_hf (joint_hf_inertia: what the stop
# decelerates at once, links free), which keeps the contact a well-damped oscillator that the sub-step rule
# resolves; the outboard arm's bounce is damped less (its inertia is larger).
STOP_PENETRATION_AT_EFFORT = np.deg2rad(1.0)
STOP_PENETRATION_AT_SPEED = np.deg2rad(5.0)
STOP_FREQUENCY_HZ = 10.0
STOP_DAMPING_RATIO = 0.5
# joint_stop's position limits of a joint without limits: the largest double (no angle reaches it)
NO_LIMIT = float(np.finfo(np.float64).max)


def _skew_sq(c):
    """[c]x^T [c]x = |c|^2 I - c c^T (parallel-axis term per unit mass)."""
    c = np.asarray(c, float)
    return c @ c * np.eye(3) - np.outer(c, c)


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rigid_frames(spec: ArmSpec, q):
    """Undeformed frames at joint angles q: lists of (R_F, p_F), (R_L, p_L), (R_E, p_E) per joint."""
    R = spec.base_transform[:3, :3].copy()
    p = spec.base_transform[:3, 3].copy()
    F, L, E = [], [], []
    for j, js in enumerate(spec.joints):
        RF = R @ _rz(js.angle_offset + q[j])
        F.append((RF, p.copy()))
        pL = p + RF[:, 2] * js.offset
        L.append((RF, pL))
        pE = pL + RF[:, 0] * js.link.length
        E.append((RF, pE))
        R, p = RF @ _rx(js.twist), pE
    return F, L, E


def _spec_error(spec, path, msg) -> ArmSpecError:
    """ArmSpecError in arm_from_dict's format: source, then '<path>: <msg>'."""
    return ArmSpecError(f"invalid arm description in {spec.source}:\n  {path}: {msg}")


def _solve_link(spec, j, tip_mass, tip_inertia):
    """Modes and modal integrals of link j; any solver failure becomes an ArmSpecError naming the link."""
    link = spec.joints[j].link
    try:
        with np.errstate(over='raise', invalid='raise', divide='raise'):
            lm = solve_link_modes(link, tip_mass, tip_inertia)
            return lm, link_integrals(link, lm)
    except ArmSpecError as e:    # ModeSolverError: says what failed, not where
        raise _spec_error(spec, f'joints[{j}].link', e) from None
    except (ArithmeticError, ValueError, RuntimeError, np.linalg.LinAlgError) as e:
        raise _spec_error(spec, f'joints[{j}].link', f'mode solver failed ({type(e).__name__}: {e})') from e


def _check_model(spec, data):
    """ArmSpecError unless every array of `data` is finite and the mass matrix at the nominal configuration
    (no deflection) is positive definite with eigenvalue ratio >= MIN_MASS_EIGEN_RATIO (checked with the
    plain-numpy dynamics: no numba compile at load time)."""
    n = data.n_joints
    for name, arr in zip(data._fields, data):
        a = np.asarray(arr)
        if a.dtype.kind == 'f' and not np.all(np.isfinite(a)):
            bad = np.argwhere(~np.isfinite(a))[0]
            where = f'joints[{bad[0]}]' if a.ndim and a.shape[0] == n else 'arm'
            raise _spec_error(spec, where, f'model data {name} not finite (overflow): values out of scale')
    z = np.zeros(data.n_coords)
    z[data.q_index] = spec.nominal_configuration
    with np.errstate(all='ignore'):
        J, R = dynamics_numpy.mass_matrix_and_rhs(data, z, np.zeros_like(z), np.zeros(n))
    if not (np.all(np.isfinite(J)) and np.all(np.isfinite(R))):
        raise _spec_error(spec, 'arm', 'mass matrix or gravity/elastic forces at the nominal configuration '
                                       'not finite: values out of scale')
    lam, vec = np.linalg.eigh(0.5 * (J + J.T))
    if not lam[0] > MIN_MASS_EIGEN_RATIO * lam[-1]:
        k = int(np.argmax(np.abs(vec[:, 0])))                # the coordinate the weak direction moves
        j = int(np.searchsorted(data.q_index, k, side='right')) - 1
        what = ('its joint angle: no inertia about the axis? (hub.inertia, rotor_inertia or a body off the axis)'
                if k == data.q_index[j] else
                f'its modal coordinate {k - data.q_index[j] - 1}: link too light or short for what it carries?')
        raise _spec_error(spec, f'joints[{j}]', f'mass matrix at the nominal configuration singular or '
                          f'ill-conditioned (eigenvalues {lam[0]:.3g} .. {lam[-1]:.3g}, ratio below '
                          f'{MIN_MASS_EIGEN_RATIO:g}); its weakest direction moves mostly {what}')


def _link_rigid_body(js):
    """Mass, first moment and inertia about the L_j origin of link j's rod + hub + extra (undeformed)."""
    link = js.link
    m_rod = link.linear_density * link.length
    M = m_rod + js.hub.mass + link.extra.mass
    S = np.array([m_rod * link.length / 2.0, 0.0, 0.0])
    I = m_rod * link.length ** 2 / 3.0 * np.diag([0.0, 1.0, 1.0]) + link.polar_density * link.length * np.diag(
        [1.0, 0.0, 0.0])
    c_hub = js.hub.com + np.array([0.0, 0.0, -js.offset])
    S = S + js.hub.mass * c_hub + link.extra.mass * link.extra.com
    I = I + js.hub.inertia + js.hub.mass * _skew_sq(c_hub) + link.extra.inertia + link.extra.mass * _skew_sq(
        link.extra.com)
    return M, S, I


def outboard_tip_bodies(spec: ArmSpec):
    """For each link: (mass, (3,) rotary inertia about its tip about the x, y, z link axes) of everything
    outboard, at the nominal configuration (De Luca & Siciliano's clamped-mass boundary conditions)."""
    q = spec.nominal_configuration
    F, L, E = rigid_frames(spec, q)
    bodies = []   # (mass, world com, world inertia about com)
    for j, js in enumerate(spec.joints):
        M, S, I0 = _link_rigid_body(js)
        R, p = L[j]
        if M > 0:
            c = S / M
            Ic = I0 - M * _skew_sq(c)
            bodies.append((j, M, p + R @ c, R @ Ic @ R.T))
    pay = spec.payload
    if pay.mass > 0 or np.any(pay.inertia):
        R, p = E[-1]
        bodies.append((spec.n_joints, pay.mass, p + R @ pay.com, R @ pay.inertia @ R.T))
    out = []
    for i in range(spec.n_joints):
        R, p = E[i]
        Mt, It = 0.0, np.zeros((3, 3))
        for (j, M, c, Ic) in bodies:
            if j > i:
                Mt += M
                It += Ic + M * _skew_sq(c - p)
        It = R.T @ It @ R
        out.append((Mt, np.diag(It).copy()))
    return out


def joint_stops(spec: ArmSpec, data) -> np.ndarray:
    """Rows (lower, upper, stiffness, damping) of every joint's hard stops (KernelData.joint_stop); stiffness 0
    where the joint has no position limits. Defaults (see STOP_*) use the joint's high-frequency inertia at the
    nominal configuration, from the numpy dynamics (no kernel compile while loading a model)."""
    from . import dynamics_numpy
    n = spec.n_joints
    out = np.zeros((n, 4))
    z = np.zeros(data.n_coords)
    z[data.q_index] = spec.nominal_configuration
    J, _ = dynamics_numpy.mass_matrix_and_rhs(data, z, np.zeros(data.n_coords), np.zeros(n))
    qi = data.q_index
    J_hf = 1.0 / np.diag(np.linalg.inv(J))[qi]
    J_out = np.diag(J)[qi]
    for j, js in enumerate(spec.joints):
        lo, hi = js.position_limits
        if not (np.isfinite(lo) and np.isfinite(hi)):      # no stops; limits stored finite (every array is)
            out[j, :2] = -NO_LIMIT, NO_LIMIT
            continue
        out[j, :2] = lo, hi
        k = js.stop_stiffness
        if k is None:
            ks = []
            if np.isfinite(js.effort_limit):
                ks.append(js.effort_limit / STOP_PENETRATION_AT_EFFORT)
            if np.isfinite(js.velocity_limit):
                ks.append(J_out[j] * (js.velocity_limit / STOP_PENETRATION_AT_SPEED) ** 2)
            k = max(ks) if ks else J_out[j] * (2.0 * np.pi * STOP_FREQUENCY_HZ) ** 2
        c = js.stop_damping
        if c is None:
            c = 2.0 * STOP_DAMPING_RATIO * np.sqrt(k * J_hf[j])
        out[j, 2:] = k, c
    return out


class ArmModel:
    """Immutable model of one arm: spec, link modes, modal integrals and kernel data."""

    def __init__(self, spec: ArmSpec, data: KernelData, link_modes, integrals):
        self.spec = spec
        self.data = data
        self.link_modes = tuple(link_modes)
        self.integrals = tuple(integrals)
        self.n_joints = spec.n_joints
        self.n_coords = data.n_coords
        self.q_index = data.q_index.copy()
        self.joint_names = spec.joint_names
        self.mode_index = np.concatenate(
            [np.arange(q + 1, q + 1 + m) for q, m in zip(data.q_index, data.n_modes)]).astype(np.int64) \
            if data.n_coords > self.n_joints else np.zeros(0, np.int64)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_yaml(cls, path) -> 'ArmModel':
        return cls.from_spec(load_arm(path))

    @classmethod
    def from_spec(cls, spec: ArmSpec) -> 'ArmModel':
        check_arm(spec)
        n = spec.n_joints
        tips = outboard_tip_bodies(spec)
        modes, integ = [], []
        for j, js in enumerate(spec.joints):
            Mt, Jt = tips[j]
            lm, it = _solve_link(spec, j, Mt, Jt)
            modes.append(lm)
            integ.append(it)
        n_modes = np.array([lm.n_modes for lm in modes], dtype=np.int64)
        mmax = max(1, int(n_modes.max()) if n else 1)
        q_index = np.zeros(n, dtype=np.int64)
        N = 0
        for j in range(n):
            q_index[j] = N
            N += 1 + n_modes[j]

        def zeros(*shape):
            return np.zeros(shape)

        body_mass, body_S0, body_I0 = zeros(n), zeros(n, 3), zeros(n, 3, 3)
        body_Phibar, body_H0 = zeros(n, 3, mmax), zeros(n, 3, mmax)
        body_I1, body_I2 = zeros(n, mmax, 3, 3), zeros(n, mmax, mmax, 3, 3)
        body_H1, body_Mdd = zeros(n, mmax, mmax, 3), zeros(n, mmax, mmax)
        phi_tip, theta_tip = zeros(n, 3, mmax), zeros(n, 3, mmax)
        stiffness, damping = zeros(n, mmax, mmax), zeros(n, mmax, mmax)
        body_active = np.zeros(n, dtype=np.bool_)
        fs_active = np.zeros(n, dtype=np.bool_)
        fs_G, fs_C, fs_D = zeros(n, 3, mmax, mmax), zeros(n, mmax, mmax, mmax), zeros(n, mmax, mmax, mmax, mmax)
        fs_K4 = zeros(n, mmax, mmax, mmax, mmax)
        mode_axis = np.ones((n, mmax), dtype=np.int64)
        mode_plane = np.zeros((n, mmax, 2), dtype=np.int64)    # [first, end) of each mode's bending plane
        for j, js in enumerate(spec.joints):
            it, m = integ[j], n_modes[j]
            # rigid attachments (hub at F_j origin = L_j origin - offset z; extra mass in L_j)
            c_hub = js.hub.com + np.array([0.0, 0.0, -js.offset])
            ex = js.link.extra
            body_mass[j] = it.mass + js.hub.mass + ex.mass
            body_S0[j] = it.S0 + js.hub.mass * c_hub + ex.mass * ex.com
            body_I0[j] = (it.I0 + js.hub.inertia + js.hub.mass * _skew_sq(c_hub) + ex.inertia
                          + ex.mass * _skew_sq(ex.com))
            body_active[j] = body_mass[j] > 0 or np.any(body_I0[j]) or m > 0
            if m:
                body_Phibar[j, :, :m] = it.Phibar
                body_H0[j, :, :m] = it.H0
                body_I1[j, :m] = it.I1
                body_I2[j, :m, :m] = it.I2
                body_H1[j, :m, :m] = it.H1
                body_Mdd[j, :m, :m] = it.Mdd
                phi_tip[j, :, :m] = it.phi_tip
                theta_tip[j, :, :m] = it.theta_tip
                stiffness[j, :m, :m] = it.stiffness
                planes = np.array(modes[j].planes)
                mode_axis[j, :m] = np.where(planes == OUT_OF_PLANE, 2, 1)
                for k in range(m):
                    same = np.nonzero(planes == planes[k])[0]
                    mode_plane[j, k] = (same[0], same[-1] + 1) if planes[k] != TORSION else (k, k)
                bending = np.any(planes != TORSION)
                if spec.geometric_nonlinearity and bending and js.link.length > 0:
                    fs_active[j] = True
                    fs_G[j, 0, :m, :m] = it.fs_Gbar
                    fs_G[j, 1, :m, :m] = it.fs_Geta
                    fs_G[j, 2, :m, :m] = it.fs_Gtip
                    fs_C[j, :m, :m, :m] = it.fs_C
                    fs_D[j, :m, :m, :m, :m] = it.fs_D
                    fs_K4[j, :m, :m, :m, :m] = it.fs_K4
                zeta = js.link.damping_ratio
                zeta = np.broadcast_to(zeta if zeta.size else np.zeros(1), (m,)) if zeta.size <= 1 else zeta
                lm = modes[j]
                # modal damping 2 zeta omega times the modal mass of the scaled modes (= scale^2)
                damping[j, :m, :m] = np.diag(2.0 * zeta * lm.omega * lm.scale ** 2)
        pay = spec.payload
        payload_active = bool(pay.mass > 0 or np.any(pay.inertia))
        data = KernelData(
            n_joints=n, n_coords=N, q_index=q_index, n_modes=n_modes,
            angle_offset=np.array([js.angle_offset for js in spec.joints]),
            offset=np.array([js.offset for js in spec.joints]),
            length=np.array([js.link.length for js in spec.joints]),
            twist=np.array([js.twist for js in spec.joints]),
            base_R=np.ascontiguousarray(spec.base_transform[:3, :3]),
            base_p=np.ascontiguousarray(spec.base_transform[:3, 3]),
            gravity=np.array(spec.gravity, dtype=float),
            body_active=body_active, body_mass=body_mass, body_S0=body_S0, body_I0=body_I0,
            body_Phibar=body_Phibar, body_I1=body_I1, body_I2=body_I2, body_H0=body_H0, body_H1=body_H1,
            body_Mdd=body_Mdd, phi_tip=phi_tip, theta_tip=theta_tip, stiffness=stiffness, damping=damping,
            payload_active=payload_active, payload_mass=float(pay.mass),
            payload_S=pay.mass * np.array(pay.com, dtype=float),
            payload_I0=np.array(pay.inertia + pay.mass * _skew_sq(pay.com), dtype=float),
            viscous=np.array([js.viscous for js in spec.joints]),
            coulomb=np.array([js.coulomb for js in spec.joints]),
            coulomb_velocity=COULOMB_VELOCITY,
            rotor_inertia=np.array([js.reflected_rotor_inertia for js in spec.joints]),
            fs_active=fs_active, fs_G=fs_G, fs_C=fs_C, fs_D=fs_D, fs_K4=fs_K4, mode_axis=mode_axis,
            mode_plane=mode_plane,
            joint_stop=np.zeros((n, 4)),
        )
        _check_model(spec, data)          # (before joint_stops, which inverts the mass matrix)
        data = data._replace(joint_stop=joint_stops(spec, data))
        if not np.all(np.isfinite(data.joint_stop)):
            raise _spec_error(spec, 'arm', 'hard stops (joint_stop) not finite: values out of scale')
        for arr in data:
            if isinstance(arr, np.ndarray):
                arr.setflags(write=False)
        return cls(spec, data, modes, integ)

    def workspace(self) -> Workspace:
        """Fresh scratch arrays for the kernels (allocate once, reuse every step), with the address of the compiled
        dynamics (compiles it, or loads it from numba's cache, on first use in the process)."""
        N = self.n_coords
        mmax = self.data.body_Phibar.shape[2]
        n = self.n_joints
        e = np.zeros
        if not n:
            return None
        ws = Workspace(
            NN=e((3, N, N)), VN=e((8, N)), J3N=e((4, 3, N)), B6=e((2, 6, N)),
            Ak=e((mmax, 3, 3)), HP=e((2, 3, mmax)), BR=e((n + 1, 3, 3)), BJ=e((2, n + 1, 3, N)),
            Bkin=e((n + 1, 4, 3)), fs_v=e((8, mmax)), fs_hc=e((mmax, 4)), fs_W=e((3, mmax, mmax)),
            step_addr=np.zeros(3, dtype=np.int64), dyn_addr=0,
        )
        return ws._replace(dyn_addr=kernels.dynamics_address(self.data, ws))

    # ------------------------------------------------------------------ convenience (allocating) API
    def zero_state(self):
        return np.zeros(self.n_coords), np.zeros(self.n_coords)

    def _ws(self):
        ws = getattr(self, '_api_ws', None)
        if ws is None:
            ws = self.workspace()
            self._api_ws = ws
        return ws

    def _arrays(self, z, zd=None, tau=None):
        # contiguous and writable: the kernels are compiled (and precompiled) for writable arrays; a read-only one
        # (the arm description's, e.g. its nominal configuration, which the controllers' gain rules evaluate) was a
        # second specialisation, compiled on first use: 6 s of a controller's first start after `make setup`
        z = np.require(z, float, ('C', 'W'))
        zd = np.zeros(self.n_coords) if zd is None else np.require(zd, float, ('C', 'W'))
        tau = np.zeros(self.n_joints) if tau is None else np.require(tau, float, ('C', 'W'))
        if z.shape != (self.n_coords,) or zd.shape != (self.n_coords,) or tau.shape != (self.n_joints,):
            raise ValueError(f'expected z, zd of length {self.n_coords} and tau of length {self.n_joints}')
        return z, zd, tau

    def mass_matrix(self, z) -> np.ndarray:
        """J(z), (N, N)."""
        z, zd, tau = self._arrays(z)
        ws = self._ws()
        J = np.zeros((self.n_coords, self.n_coords))
        rhs = np.zeros(self.n_coords)
        kernels.dynamics_terms(self.data, ws, z, zd, tau, J, rhs, True)
        return J

    def rhs(self, z, zd, tau=None) -> np.ndarray:
        """R(z, zd, tau) of J z'' = R: input torque minus velocity, gravity, elastic, damping, friction terms."""
        z, zd, tau = self._arrays(z, zd, tau)
        J = np.zeros((self.n_coords, self.n_coords))
        rhs = np.zeros(self.n_coords)
        kernels.dynamics_terms(self.data, self._ws(), z, zd, tau, J, rhs, False)
        return rhs

    def accelerations(self, z, zd, tau=None) -> np.ndarray:
        """z'' from the forward dynamics."""
        z, zd, tau = self._arrays(z, zd, tau)
        zdd = np.zeros(self.n_coords)
        if not kernels.forward_dynamics(self.data, self._ws(), z, zd, tau, zdd):
            raise FloatingPointError('mass matrix not positive definite')
        return zdd

    def inverse_dynamics(self, z, zd, zdd) -> np.ndarray:
        """Generalized forces J z'' - R(z, zd, 0): joint rows are the torques that produce zdd."""
        z, zd, _ = self._arrays(z, zd)
        return self.mass_matrix(z) @ np.asarray(zdd, float) - self.rhs(z, zd)

    def frames(self, z):
        """(RF, pL, RE, pE): per link the rotation of its frame, its origin, and its deformed tip frame."""
        z = np.require(z, float, ('C', 'W'))          # writable: the one compiled signature (_arrays)
        n = self.n_joints
        RF, pL, RE, pE = np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3))
        kernels.link_frames(self.data, z, RF, pL, RE, pE)
        return RF, pL, RE, pE

    def tip_pose(self, z):
        """(R, p) of the deformed tip of the last link in the base (world) frame."""
        RF, pL, RE, pE = self.frames(z)
        return RE[-1], pE[-1]

    def energies(self, z, zd):
        """dict(kinetic, elastic, gravity, total) in J."""
        z, zd, _ = self._arrays(z, zd)
        J = self.mass_matrix(z)
        n = self.n_joints
        el, gr = kernels.potential_energies(self.data, z, np.zeros((n, 3, 3)), np.zeros((n, 3)),
                                            np.zeros((n, 3, 3)), np.zeros((n, 3)))
        kin = 0.5 * zd @ J @ zd
        return {'kinetic': kin, 'elastic': el, 'gravity': gr, 'total': kin + el + gr}

    def centerline(self, z, j, n_points=20):
        """Points (n_points, 3) along the deformed neutral axis of link j, base frame."""
        RF, pL, _, _ = self.frames(z)
        lm = self.link_modes[j]
        eta = np.linspace(0.0, self.spec.joints[j].link.length, n_points)
        rho = np.zeros((3, n_points))
        rho[0] = eta
        if lm.n_modes:
            q = self.q_index[j]
            rho += np.einsum('k,kiq->iq', z[q + 1:q + 1 + lm.n_modes], lm.displacement(eta))
        return (pL[j][:, None] + RF[j] @ rho).T
