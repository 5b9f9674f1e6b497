"""The dynamics kernel against an independent brute-force computation of the same mechanics.

The test builds the deformed-arm kinematics itself (positions of quadrature points along every link,
rigid-body frames of hubs, attachments and payload) with plain complex-capable numpy, and obtains all
Jacobians by complex-step differentiation (exact to rounding). From them:

* mass matrix  J = sum_points m J_p^T J_p + sum_rigid (m J_c^T J_c + J_w^T R I R^T J_w) (+ torsional section
  inertia, reflected rotor inertia),
* velocity terms from the Christoffel symbols of that J (finite differences of J),
* gravity and elastic forces as minus the gradient of the potential energy (complex step).

The kernel computes these by a different route (per-body quasi-velocity equations with precomputed modal
integrals, recursive Jacobians and bias accelerations), with a different quadrature rule.

Geometric nonlinearity (on unless the arm file says `geometric_nonlinearity: false`): every point of a
flexible link is pulled back along the link by u(eta) = -1/2 int_0^eta |w'(s)|^2 ds (the inextensible neutral
axis, to second order). The brute force evaluates that integral itself, per point, with its own Gauss rule on
[0, eta] from the mode shapes' slopes, and puts the points there; everything else follows as above. The strain
energy is that of the curvature of those points' line, kappa^2 = |r' x r''|^2 to fourth order, per bending
plane: EI_z kappa_z^2 + EI_y kappa_y^2 with kappa_z = (r' x r'')_z, kappa_y = -(r' x r'')_y, r = (eta + u, w_y, w_z).
"""
import numpy as np
import pytest

from flexarm_sim.model import arm_from_dict, load_model
from flexarm_sim.model.link_modes import TORSION
from flexarm_sim.arms import resolve_arm


# ------------------------------------------------------------------------------------------ test arms


def random_spatial_arm(seed=3):
    """A 3-joint spatial arm exercising everything: twists, offsets, both bending planes, torsion,
    hub COM offsets and full inertias, extra masses, payload COM offset, gravity. Undamped, no friction."""
    rng = np.random.default_rng(seed)

    def inertia(scale):
        A = rng.normal(size=(3, 3))
        return (scale * (A @ A.T + 0.5 * np.eye(3))).tolist()

    joints = []
    specs = [(0.4, 0.3, 0.2, {'in_plane': 2, 'out_of_plane': 1, 'torsion': 1}),
             (0.0, -0.7, 0.6, {'in_plane': 1, 'out_of_plane': 2}),
             (0.1, 1.1, 0.5, {'in_plane': 2, 'torsion': 1})]
    for j, (offset, twist, length, modes) in enumerate(specs):
        joints.append({
            'name': f'j{j}', 'offset': offset, 'twist': twist, 'angle_offset': 0.2 * j,
            'hub': {'mass': 0.3 + 0.2 * j, 'com': rng.normal(size=3).tolist(), 'inertia': inertia(0.01)},
            'rotor_inertia': 0.002 * (j + 1), 'gear_ratio': 2.0,
            'link': {'length': length, 'linear_density': 0.4 + 0.1 * j, 'EI_z': 3.0 + j, 'EI_y': 5.0 - j,
                     'GJ': 2.0, 'polar_density': 1e-3, 'modes': modes,
                     'boundary': 'clamped_mass' if j != 1 else 'clamped_free',
                     'extra_mass': {'mass': 0.2, 'com': (0.1 * rng.normal(size=3)).tolist(),
                                    'inertia': inertia(0.002)}},
        })
    return arm_from_dict({
        'name': 'random_spatial', 'gravity': [0.3, -1.2, -9.81], 'joints': joints,
        'payload': {'mass': 0.25, 'com': [0.05, -0.02, 0.03], 'inertia': inertia(0.001)},
        'base': {'xyz': [0.1, 0.2, 0.3], 'rpy': [0.1, -0.2, 0.3]},
    })


def deluca():
    return load_model(resolve_arm('deluca_two_link'))


# ------------------------------------------------------------------------------------------ brute force


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    o, l = np.zeros_like(a), np.ones_like(a)
    return np.array([[c, -s, o], [s, c, o], [o, o, l]])


def _ry(a):
    c, s = np.cos(a), np.sin(a)
    o, l = np.zeros_like(a), np.ones_like(a)
    return np.array([[c, o, s], [o, l, o], [-s, o, c]])


def _rx(a):
    c, s = np.cos(a), np.sin(a)
    o, l = np.zeros_like(a), np.ones_like(a)
    return np.array([[l, o, o], [o, c, -s], [o, s, c]])


class BruteForce:
    """Independent kinematics + energy of the deformed arm described by model.spec and model.link_modes."""

    def __init__(self, model, n_seg=24, n_gp=12):
        self.model = model
        self.spec = model.spec
        x, w = np.polynomial.legendre.leggauss(n_gp)
        self.quad = []
        for js in self.spec.joints:
            L = js.link.length
            h = L / n_seg
            eta = (np.arange(n_seg)[:, None] * h + (x[None, :] + 1) * h / 2).ravel()
            self.quad.append((eta, np.tile(w * h / 2, n_seg)))
        lm = model.link_modes
        self.phi = [lm[j].displacement(self.quad[j][0]) for j in range(len(lm))]       # (m,3,q)
        self.theta = [lm[j].rotation(self.quad[j][0]) for j in range(len(lm))]
        self.phi_tip = [lm[j].displacement([js.link.length])[:, :, 0] for j, js in enumerate(self.spec.joints)]
        self.th_tip = [lm[j].rotation([js.link.length])[:, :, 0] for j, js in enumerate(self.spec.joints)]
        # foreshortening: G_kl(eta) = int_0^eta w_k' w_l' ds (same bending plane), at the points and the tip
        on = self.spec.geometric_nonlinearity
        self.G = [self._slope_products(lm[j], self.quad[j][0]) if on else None for j in range(len(lm))]
        self.G_tip = [self._slope_products(lm[j], [js.link.length])[:, :, 0] if on else None
                      for j, js in enumerate(self.spec.joints)]

    @staticmethod
    def _slope_products(modes, etas, n=48):
        """(m, m, len(etas)) Gauss-Legendre (n points on [0, eta]) integrals of the bending slopes' products."""
        m = modes.n_modes
        etas = np.asarray(etas, dtype=float)
        x, w = np.polynomial.legendre.leggauss(n)
        s = (etas[:, None] * (x[None, :] + 1) / 2).ravel()
        slopes = np.zeros((m, 3, s.size))               # d phi / d eta, built from the solver's shapes
        k = 0
        for plane, src in modes.sources:
            nk = src.n_modes
            if plane != TORSION:
                slopes[k:k + nk, 1 + plane] = src.dw(s) * modes.scale[k:k + nk, None]
            k += nk
        slopes = slopes.reshape(m, 3, etas.size, n)
        return np.einsum('qp,kiqp,liqp->klq', etas[:, None] * w[None, :] / 2, slopes, slopes)

    def kinematics(self, z):
        """Returns (points: list of (positions (q,3), masses (q,)), rigid: list of (R, com, mass, Icom),
        torsion: list of (omega_axis_fn data)). z may be complex."""
        spec, model = self.spec, self.model
        R = spec.base_transform[:3, :3].astype(z.dtype)
        p = spec.base_transform[:3, 3].astype(z.dtype)
        points, rigid, sections = [], [], []
        for j, js in enumerate(spec.joints):
            qi = model.q_index[j]
            m = model.link_modes[j].n_modes
            delta = z[qi + 1:qi + 1 + m]
            RF = R @ _rz(js.angle_offset + z[qi])
            rigid.append((RF, p + RF @ js.hub.com, js.hub.mass, js.hub.inertia))
            pL = p + RF[:, 2] * js.offset
            eta, wq = self.quad[j]
            rho = np.zeros((3, eta.size), dtype=z.dtype)
            rho[0] = eta
            if m:
                rho = rho + np.einsum('k,kiq->iq', delta, self.phi[j])
                if self.G[j] is not None:
                    rho[0] = rho[0] - 0.5 * np.einsum('k,klq,l->q', delta, self.G[j], delta)
            points.append(((pL[:, None] + RF @ rho).T, js.link.linear_density * wq))
            ex = js.link.extra
            rigid.append((RF, pL + RF @ ex.com, ex.mass, ex.inertia))
            if js.link.polar_density > 0:      # section inertia about the link axis (all links)
                thx = self.theta[j][:, 0, :] if m else np.zeros((0, eta.size))
                sections.append((j, RF, js.link.polar_density * wq, thx))
            rtip = np.array([js.link.length, 0, 0], dtype=z.dtype)
            th = np.zeros(3, dtype=z.dtype)
            if m:
                rtip = rtip + delta @ self.phi_tip[j]
                th = th + delta @ self.th_tip[j]
                if self.G_tip[j] is not None:
                    rtip[0] = rtip[0] - 0.5 * delta @ self.G_tip[j] @ delta
            RE = RF @ _rz(th[2]) @ _ry(th[1]) @ _rx(th[0])
            pE = pL + RF @ rtip
            if j == len(spec.joints) - 1:
                pay = spec.payload
                rigid.append((RE, pE + RE @ pay.com, pay.mass, pay.inertia))
            R, p = RE @ _rx(js.twist), pE
        return points, rigid, sections

    def _jacobians(self, z, h=1e-30):
        N = z.size
        base = self.kinematics(z.astype(complex))
        cols = []
        for k in range(N):
            zc = z.astype(complex)
            zc[k] += 1j * h
            cols.append(self.kinematics(zc))
        return base, cols, h

    def mass_matrix(self, z):
        model = self.model
        N = z.size
        (pts0, rig0, sec0), cols, h = self._jacobians(z)
        J = np.zeros((N, N))
        for b, (P0, mq) in enumerate(pts0):
            Jp = np.stack([cols[k][0][b][0].imag / h for k in range(N)], axis=-1)    # (q,3,N)
            J += np.einsum('q,qik,qil->kl', mq, Jp, Jp)
        for b, (R0, c0, mass, Ic) in enumerate(rig0):
            R0 = R0.real
            Jc = np.stack([cols[k][1][b][1].imag / h for k in range(N)], axis=-1)
            Jw = np.zeros((3, N))
            for k in range(N):
                W = (cols[k][1][b][0].imag / h) @ R0.T
                Jw[:, k] = [W[2, 1], W[0, 2], W[1, 0]]
            J += mass * Jc.T @ Jc + Jw.T @ (R0 @ Ic @ R0.T) @ Jw
        for s, (j, RF, jw, thx) in enumerate(sec0):
            # T = 1/2 int rhoIp (omega_L . x_L + sum_k deltadot_k theta_x,k(eta))^2 (torsional section inertia)
            RF = RF.real
            Jw = np.zeros((3, N))
            for k in range(N):
                W = (cols[k][2][s][1].imag / h) @ RF.T
                Jw[:, k] = [W[2, 1], W[0, 2], W[1, 0]]
            qi = model.q_index[j]
            m = model.link_modes[j].n_modes
            a = np.repeat((RF[:, 0] @ Jw)[None, :], jw.size, axis=0)                 # (q, N)
            a[:, qi + 1:qi + 1 + m] += thx.T.real
            J += np.einsum('q,qk,ql->kl', jw, a, a)
        for j, js in enumerate(self.spec.joints):
            qi = model.q_index[j]
            J[qi, qi] += js.reflected_rotor_inertia
        return J

    def potential(self, z):
        """Gravity + elastic potential energy at z (complex-capable)."""
        model = self.model
        g = self.spec.gravity
        pts, rig, _ = self.kinematics(z)
        V = 0.0
        for P, mq in pts:
            V = V - mq @ (P @ g)
        for R, c, mass, _ in rig:
            V = V - mass * (c @ g)
        for j, js in enumerate(self.spec.joints):
            lm = model.link_modes[j]
            if not lm.n_modes:
                continue
            qi = model.q_index[j]
            delta = z[qi + 1:qi + 1 + lm.n_modes]
            eta, wq = self.quad[j]
            k = 0
            for plane, src in lm.sources:
                n = src.n_modes
                sc = lm.scale[k:k + n]
                if plane == TORSION:
                    strain = src.dw(eta) * sc[:, None]
                    rig_ = js.link.GJ
                else:
                    strain = src.d2w(eta) * sc[:, None]
                    rig_ = js.link.EI_z if plane == 0 else js.link.EI_y
                curv = delta[k:k + n] @ strain
                V = V + 0.5 * rig_ * (wq @ (curv * curv))
                k += n
            if self.spec.geometric_nonlinearity:
                V = V + self._curvature_correction(j, js, delta)
        return V

    def _curvature_correction(self, j, js, delta):
        """1/2 int EI_p (kappa_p^2 - w_p''^2) over the bending planes, kappa from r' x r'' with r' = (1 + u', w'),
        u' = -|w'|^2 / 2, r'' = (-w'.w'', w''), to fourth order in delta (complex-capable)."""
        lm = self.model.link_modes[j]
        eta, wq = self.quad[j]
        k = 0
        w1 = [0.0, 0.0]
        w2 = [0.0, 0.0]
        for plane, src in lm.sources:
            n = src.n_modes
            if plane != TORSION:
                sc = lm.scale[k:k + n]
                w1[plane] = w1[plane] + delta[k:k + n] @ (src.dw(eta) * sc[:, None])
                w2[plane] = w2[plane] + delta[k:k + n] @ (src.d2w(eta) * sc[:, None])
            k += n
        wy1, wz1 = w1
        wy2, wz2 = w2
        up = -0.5 * (wy1 * wy1 + wz1 * wz1)                   # u'
        upp = -(wy1 * wy2 + wz1 * wz2)                         # u''
        # r' x r'' with r' = (1 + u', wy', wz'), r'' = (u'', wy'', wz'')
        cz = (1 + up) * wy2 - wy1 * upp
        cy = wz1 * upp - (1 + up) * wz2
        # keep the fourth-order part of kappa^2 - w''^2 (the exact |r'|^-6 and fifth order drop out)
        ez = cz * cz - wy2 * wy2
        ey = cy * cy - wz2 * wz2
        ez = ez - (up * up * wy2 * wy2 + wy1 * wy1 * upp * upp - 2 * up * wy2 * wy1 * upp)   # sixth order
        ey = ey - (up * up * wz2 * wz2 + wz1 * wz1 * upp * upp - 2 * up * wz2 * wz1 * upp)
        return 0.5 * (js.link.EI_z * (wq @ ez) + js.link.EI_y * (wq @ ey))

    def potential_force(self, z, h=1e-30):
        N = z.size
        out = np.zeros(N)
        for k in range(N):
            zc = z.astype(complex)
            zc[k] += 1j * h
            out[k] = -self.potential(zc).imag / h
        return out

    def velocity_terms(self, z, zd, eps=1e-6):
        """h(z, zd) = C(z, zd) zd from the Christoffel symbols of the brute-force mass matrix."""
        N = z.size
        dJ = np.zeros((N, N, N))     # dJ[:, :, k] = dJ/dz_k
        for k in range(N):
            e = np.zeros(N)
            e[k] = eps
            dJ[:, :, k] = (self.mass_matrix(z + e) - self.mass_matrix(z - e)) / (2 * eps)
        # h_i = sum_jk (dJ_ij/dz_k - 1/2 dJ_jk/dz_i) zd_j zd_k
        return np.einsum('ijk,j,k->i', dJ, zd, zd) - 0.5 * np.einsum('jki,j,k->i', dJ, zd, zd)


def random_state(model, rng, defl=0.02):
    z = rng.normal(size=model.n_coords) * defl
    z[model.q_index] = rng.uniform(-3.0, 3.0, model.n_joints)      # inside the joint stops (|q| <= 3.14159)
    zd = rng.normal(size=model.n_coords)
    zd[model.mode_index] *= 0.1
    return z, zd


def linear(spec):
    """The same arm with the transverse-only (linear) kinematics."""
    from dataclasses import replace
    return replace(spec, geometric_nonlinearity=False)


MODELS = {
    'deluca': deluca,
    'deluca_linear': lambda: load_model(linear(deluca().spec)),
    'random_spatial': lambda: load_model(random_spatial_arm()),
}


@pytest.fixture(scope='module', params=sorted(MODELS))
def arm(request):
    model = MODELS[request.param]()
    return model, BruteForce(model)


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_mass_matrix_equals_brute_force_and_is_spd(arm):
    model, bf = arm
    rng = np.random.default_rng(11)
    for _ in range(3):
        z, _ = random_state(model, rng)
        J = model.mass_matrix(z)
        Jbf = bf.mass_matrix(z)
        assert np.allclose(J, J.T, rtol=0, atol=1e-14 * np.abs(J).max())
        assert np.linalg.eigvalsh(J).min() > 0
        assert _rel(J, Jbf) < 1e-8, _rel(J, Jbf)


def test_velocity_terms_are_the_christoffel_symbols_of_the_mass_matrix(arm):
    model, bf = arm
    rng = np.random.default_rng(12)
    z, zd = random_state(model, rng)
    zero = np.zeros(model.n_coords)
    h_model = -(model.rhs(z, zd) - model.rhs(z, zero))          # undamped, frictionless arms
    h_bf = bf.velocity_terms(z, zd)
    assert _rel(h_model, h_bf) < 1e-7, _rel(h_model, h_bf)      # measured ~1e-9 (finite differences of J)


def test_gravity_and_elastic_forces_are_minus_the_potential_gradient(arm):
    model, bf = arm
    rng = np.random.default_rng(13)
    for _ in range(2):
        z, _ = random_state(model, rng)
        f_model = model.rhs(z, np.zeros(model.n_coords))
        f_bf = bf.potential_force(z)
        assert _rel(f_model, f_bf) < 1e-9, _rel(f_model, f_bf)
        e = model.energies(z, np.zeros(model.n_coords))
        assert e['elastic'] + e['gravity'] == pytest.approx(bf.potential(z), rel=1e-9, abs=1e-12)


def test_kinetic_energy_matches_brute_force(arm):
    model, bf = arm
    rng = np.random.default_rng(14)
    z, zd = random_state(model, rng)
    T = model.energies(z, zd)['kinetic']
    assert T == pytest.approx(0.5 * zd @ bf.mass_matrix(z) @ zd, rel=1e-9)


def test_joint_torque_enters_only_its_joint_row():
    model = load_model(random_spatial_arm())
    rng = np.random.default_rng(15)
    z, zd = random_state(model, rng)
    tau = rng.normal(size=model.n_joints)
    diff = model.rhs(z, zd, tau) - model.rhs(z, zd)
    expect = np.zeros(model.n_coords)
    expect[model.q_index] = tau
    assert np.allclose(diff, expect, atol=1e-12)


@pytest.mark.parametrize('make', [deluca, lambda: load_model(random_spatial_arm())], ids=['deluca', 'random_spatial'])
def test_foreshortening_terms_equal_brute_force(make):
    """What the geometric nonlinearity adds (nonlinear minus linear kinematics) to the mass matrix, the velocity
    terms and the potential forces, at deflections of ~10 % of the link lengths, against the brute force."""
    nl = make()
    lin = load_model(linear(nl.spec))
    bf_nl, bf_lin = BruteForce(nl), BruteForce(lin)
    rng = np.random.default_rng(21)
    z, zd = random_state(nl, rng, defl=0.05)
    zd[nl.mode_index] *= 10.0
    zero = np.zeros(nl.n_coords)
    dJ = nl.mass_matrix(z) - lin.mass_matrix(z)
    dJ_bf = bf_nl.mass_matrix(z) - bf_lin.mass_matrix(z)
    assert np.linalg.norm(dJ_bf) > 1e-3 * np.linalg.norm(bf_lin.mass_matrix(z))       # not a negligible effect
    assert _rel(dJ, dJ_bf) < 1e-7, _rel(dJ, dJ_bf)
    dh = -(nl.rhs(z, zd) - nl.rhs(z, zero)) + (lin.rhs(z, zd) - lin.rhs(z, zero))
    dh_bf = bf_nl.velocity_terms(z, zd) - bf_lin.velocity_terms(z, zd)
    assert _rel(dh, dh_bf) < 1e-6, _rel(dh, dh_bf)      # finite differences of J in the brute force: ~1e-8
    df = nl.rhs(z, zero) - lin.rhs(z, zero)
    df_bf = bf_nl.potential_force(z) - bf_lin.potential_force(z)
    if np.linalg.norm(df_bf) > 0:                        # gravity in the plane of bending (spatial arm)
        assert _rel(df, df_bf) < 1e-8, _rel(df, df_bf)
    # the tip: the foreshortened link is shorter by -1/2 delta^T G(l) delta along its axis
    assert np.allclose(nl.tip_pose(z)[1], bf_nl.kinematics(z)[1][-1][1] - bf_nl.kinematics(z)[1][-1][0]
                       @ nl.spec.payload.com, atol=1e-12)
