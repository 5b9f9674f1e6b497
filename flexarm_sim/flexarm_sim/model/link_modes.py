"""Assumed modes of each link and the modal integrals the dynamics needs.

For link j the deformed neutral axis in its link frame L_j is

    rho(eta, delta) = eta e_x + sum_k delta_k phi_k(eta),      0 <= eta <= l_j,

with phi_k = (0, w_k, 0) for in-plane modes (bending about z, tip rotation theta_z = w_k'),
phi_k = (0, 0, w_k) for out-of-plane modes (about y, theta_y = -w_k') and phi_k = 0 with
theta_x = w_k for torsion modes (Book 1984, eqs 4 and 7; the slope/rotation signs follow his M_ij).

The kinetic energy of the link, with body velocities v, omega of L_j and modal rates deltadot, is
T = 1/2 int mu |v + omega x rho + sum deltadot_k phi_k|^2 d eta (+ the torsional section inertia),
so it needs only the integrals below (Book's C_i, C_ik, C_ikj of eqs 25-30 in vector form):

    mass = int mu,  S0 = int mu eta e_x,  I0 = int mu eta^2 (1 - e_x e_x^T)
    Phibar_k = int mu phi_k,  H0_k = int mu eta e_x x phi_k,  I1_k = -int mu eta (e_x phi_k^T + phi_k e_x^T)
    Q_kl = int mu phi_k phi_l^T  (gives H1_lk = int mu phi_l x phi_k, I2_kl and the modal mass)

Geometric nonlinearity (axial foreshortening). The neutral axis is inextensible, so a transverse
deflection pulls every point back along the link, to second order

    u(eta) = -1/2 int_0^eta |w'(s)|^2 ds = -1/2 delta^T G(eta) delta,   G_kl(eta) = int_0^eta phi_k' . phi_l' ds

(both bending planes; modes of different planes do not couple; torsion does not foreshorten), and
rho = (eta + u) e_x + Phi delta. The kinetic energy of these kinematics, taken exactly, needs the further
integrals (fs_*)

    Gbar = int mu G,  Geta = int mu eta G,  G_tip = G(l),
    C_abk = int mu G_ab w_k  (along the plane axis of mode k),  D_abcd = int mu G_ab G_cd,

from which kernels.py assembles S, I, H and the modal mass as polynomials in delta (degrees 2, 4, 3, 2).
This is the classic geometric (centrifugal) stiffening of rotating beams (Kane, Ryan & Banerjee 1987).
The same inextensible kinematics bend the centre line with the curvature of r = (eta + u, w_y, w_z):
kappa^2 = |r' x r''|^2 / |r'|^6, to fourth order in the bending plane p (y: EI_z, z: EI_y)

    kappa_p^2 = w_p''^2 (1 - |w'|^2) + 2 w_p'' w_p' (w' . w'')     (planar: w''^2 (1 + w'^2)),

so the strain energy 1/2 int EI_p kappa_p^2 adds the quartic V4 = 1/2 sum K4_abcd delta_a delta_b delta_c delta_d
(fs_K4, symmetrised): the geometric (curvature) stiffening of large bending, of the same order as the
foreshortening's inertial terms (Crespo da Silva & Glynn 1978; the rest of the curvature, about the link
axis, belongs to torsion and is not modelled). Both vanish in the linearization about rest.

Modes come from the clamped-mass eigenproblem (De Luca & Siciliano) with the tip mass and rotary
inertia of everything outboard at the nominal configuration, or clamped-free. They are scaled so that
the modal mass including the tip body equals the link mass (torsion: the link's polar inertia rho*Ip*l),
hence delta_k is a length (an angle for torsion) of the order of the tip deflection.

Integrals use composite Gauss-Legendre quadrature (N_SEGMENTS x N_POINTS points); for the smooth
mode shapes of up to 8 modes this is exact to ~1e-13 relative (test_link_modes checks a refined rule).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .beam_modes import clamped_mass_modes, torsion_modes
from .fe_beam import fe_bending_modes

IN_PLANE, OUT_OF_PLANE, TORSION = 0, 1, 2
N_SEGMENTS = 16
N_POINTS = 10


def quadrature(length: float, n_segments: int = N_SEGMENTS, n_points: int = N_POINTS):
    """Composite Gauss-Legendre nodes and weights on [0, length]."""
    x, w = np.polynomial.legendre.leggauss(n_points)
    h = length / n_segments
    starts = np.arange(n_segments) * h
    nodes = (starts[:, None] + (x[None, :] + 1.0) * 0.5 * h).ravel()
    weights = np.tile(w * 0.5 * h, n_segments)
    return nodes, weights


@dataclass(frozen=True)
class LinkModes:
    """The assumed modes of one link: shapes (scaled), frequencies and per-mode plane."""

    length: float
    planes: tuple                 # per mode: IN_PLANE, OUT_OF_PLANE or TORSION
    omega: np.ndarray             # rad/s, of the link alone with its boundary condition
    scale: np.ndarray             # factor applied to the unit-modal-mass shapes of the solver
    sources: tuple                # (plane, BendingModes) of the solver, in mode order groups
    tip_mass: float
    tip_inertia: np.ndarray       # (3,) outboard rotary inertia about the tip, x/y/z axes of L_j

    @property
    def n_modes(self) -> int:
        return len(self.planes)

    @property
    def freqs_hz(self) -> np.ndarray:
        return self.omega / (2.0 * np.pi)

    def _eval(self, eta, order):
        eta = np.atleast_1d(np.asarray(eta, dtype=float))
        out = []
        for _plane, src in self.sources:
            out.append(src.deriv(eta, order))
        w = np.concatenate(out, axis=0) if out else np.zeros((0, eta.size))
        return w * self.scale[:, None]

    def displacement(self, eta) -> np.ndarray:
        """phi_k(eta) in the link frame: shape (m, 3, len(eta))."""
        w = self._eval(eta, 0)
        phi = np.zeros((self.n_modes, 3, w.shape[1]))
        for k, plane in enumerate(self.planes):
            if plane == IN_PLANE:
                phi[k, 1] = w[k]
            elif plane == OUT_OF_PLANE:
                phi[k, 2] = w[k]
        return phi

    def rotation(self, eta) -> np.ndarray:
        """Small section rotation (theta_x, theta_y, theta_z) per unit delta_k: (m, 3, len(eta))."""
        w = self._eval(eta, 0)
        dw = self._eval(eta, 1)
        th = np.zeros((self.n_modes, 3, w.shape[1]))
        for k, plane in enumerate(self.planes):
            if plane == IN_PLANE:
                th[k, 2] = dw[k]
            elif plane == OUT_OF_PLANE:
                th[k, 1] = -dw[k]
            else:
                th[k, 0] = w[k]
        return th

    def slope(self, eta) -> np.ndarray:
        """d phi_k / d eta in the link frame: shape (m, 3, len(eta)); zero for torsion modes."""
        dw = self._eval(eta, 1)
        out = np.zeros((self.n_modes, 3, dw.shape[1]))
        for k, plane in enumerate(self.planes):
            if plane == IN_PLANE:
                out[k, 1] = dw[k]
            elif plane == OUT_OF_PLANE:
                out[k, 2] = dw[k]
        return out

    def strain_derivative(self, eta) -> np.ndarray:
        """Per mode the derivative that carries strain energy: w'' (bending) or w' (torsion); (m, len)."""
        d2 = self._eval(eta, 2)
        d1 = self._eval(eta, 1)
        return np.array([d1[k] if p == TORSION else d2[k] for k, p in enumerate(self.planes)]).reshape(
            self.n_modes, -1)


def solve_link_modes(link, tip_mass: float, tip_inertia) -> LinkModes:
    """Modes of one link (spec.LinkSpec) for the given outboard tip body.

    tip_inertia: (3,) rotary inertia about the tip point about the x (torsion), y (out-of-plane
    bending) and z (in-plane bending) axes of the link frame. Ignored for clamped_free links.
    """
    tip_inertia = np.asarray(tip_inertia, dtype=float)
    if link.boundary == 'clamped_free':
        tip_mass, tip_inertia = 0.0, np.zeros(3)
    planes, omegas, scales, sources = [], [], [], []
    mu, length = link.linear_density, link.length

    def bending(n, EI, J):
        if link.mode_solver == 'fem':
            return fe_bending_modes(length, link.fem_elements, EI, mu, n, tip_mass, J)
        return clamped_mass_modes(length, EI, mu, n, tip_mass, J)

    groups = ((IN_PLANE, link.n_in_plane, lambda n: bending(n, link.EI_z, tip_inertia[2])),
              (OUT_OF_PLANE, link.n_out_of_plane, lambda n: bending(n, link.EI_y, tip_inertia[1])),
              (TORSION, link.n_torsion,
               lambda n: torsion_modes(length, link.GJ, link.polar_density, n, tip_inertia[0])))
    for plane, n, solve in groups:
        if n == 0:
            continue
        src = solve(n)
        sources.append((plane, src))
        planes += [plane] * n
        omegas.append(src.omega)
        modal_mass = link.polar_density * length if plane == TORSION else mu * length
        scales.append(np.full(n, np.sqrt(modal_mass)))
    omega = np.concatenate(omegas) if omegas else np.zeros(0)
    scale = np.concatenate(scales) if scales else np.zeros(0)
    return LinkModes(length, tuple(planes), omega, scale, tuple(sources), float(tip_mass), tip_inertia.copy())


@dataclass(frozen=True)
class ModalIntegrals:
    """Constant integrals of one link body (see module docstring), about the L_j origin, L_j axes."""

    mass: float
    S0: np.ndarray          # (3,)
    I0: np.ndarray          # (3,3)
    Phibar: np.ndarray      # (3,m)
    H0: np.ndarray          # (3,m)
    I1: np.ndarray          # (m,3,3)
    I2: np.ndarray          # (m,m,3,3) symmetric in the mode indices
    H1: np.ndarray          # (m,m,3): H1[l,k] = int mu phi_l x phi_k
    Mdd: np.ndarray         # (m,m) modal mass matrix of the link's own distributed mass
    stiffness: np.ndarray   # (m,m) int EI w_k'' w_l'' (bending), int GJ w_k' w_l' (torsion)
    phi_tip: np.ndarray     # (3,m) tip displacement per unit delta
    theta_tip: np.ndarray   # (3,m) tip rotation per unit delta
    fs_Gbar: np.ndarray = None   # (m,m) int mu G            (foreshortening, see the module docstring)
    fs_Geta: np.ndarray = None   # (m,m) int mu eta G
    fs_Gtip: np.ndarray = None   # (m,m) G(l)
    fs_C: np.ndarray = None      # (m,m,m) int mu G_ab w_k (w_k: the mode's transverse shape)
    fs_D: np.ndarray = None      # (m,m,m,m) int mu G_ab G_cd
    fs_K4: np.ndarray = None     # (m,m,m,m) symmetrised quartic strain energy of the curvature, see above


def link_integrals(link, modes: LinkModes) -> ModalIntegrals:
    """Modal integrals of a uniform link with its modes, by composite Gauss-Legendre quadrature."""
    m = modes.n_modes
    length, mu = link.length, link.linear_density
    ex = np.array([1.0, 0.0, 0.0])
    if length > 0:
        eta, wq = quadrature(length)
    else:
        eta, wq = np.zeros(1), np.zeros(1)
    mw = mu * wq
    mass = mw.sum()
    S0 = ex * (mw * eta).sum()
    I0 = (mw * eta ** 2).sum() * (np.eye(3) - np.outer(ex, ex))
    phi = modes.displacement(eta) if m else np.zeros((0, 3, eta.size))      # (m,3,q)
    Phibar = np.einsum('q,kiq->ik', mw, phi)
    P = np.einsum('q,kiq->ik', mw * eta, phi)                                # int mu eta phi_k
    H0 = np.cross(ex[:, None], P, axis=0)
    I1 = -(np.einsum('i,jk->kij', ex, P) + np.einsum('ik,j->kij', P, ex))
    Q = np.einsum('q,kiq,ljq->klij', mw, phi, phi)                           # int mu phi_k phi_l^T
    trQ = np.einsum('klii->kl', Q)
    Mdd = trQ.copy()
    I2 = np.einsum('kl,ij->klij', trQ, np.eye(3)) - 0.5 * (Q + Q.transpose(0, 1, 3, 2))   # symmetric in k, l
    # H1[l,k] = int mu phi_l x phi_k ; (a x b)_i = eps_ijk a_j b_k
    eps = np.zeros((3, 3, 3))
    eps[0, 1, 2] = eps[1, 2, 0] = eps[2, 0, 1] = 1.0
    eps[0, 2, 1] = eps[2, 1, 0] = eps[1, 0, 2] = -1.0
    H1 = np.einsum('iab,lkab->lki', eps, Q)
    if m:
        theta = modes.rotation(eta)                                          # (m,3,q)
        # torsional section inertia rho*Ip: T += 1/2 int rhoIp (omega_x + sum deltadot_k theta_x,k)^2
        jw = link.polar_density * wq
        tx = theta[:, 0, :]
        I0 = I0 + jw.sum() * np.outer(ex, ex)
        H0 = H0 + np.outer(ex, tx @ jw)
        Mdd = Mdd + np.einsum('q,kq,lq->kl', jw, tx, tx)
        strain = modes.strain_derivative(eta)                                # (m,q)
        rig = np.array([link.GJ if p == TORSION else (link.EI_z if p == IN_PLANE else link.EI_y)
                        for p in modes.planes])
        stiffness = np.einsum('q,kq,lq->kl', wq, strain * rig[:, None], strain)
        planes = np.array(modes.planes)
        stiffness[planes[:, None] != planes[None, :]] = 0.0      # different planes do not couple
        phi_tip = modes.displacement([length])[:, :, 0].T
        theta_tip = modes.rotation([length])[:, :, 0].T
    else:
        I0 = I0 + link.polar_density * length * np.outer(ex, ex)
        stiffness = np.zeros((0, 0))
        phi_tip = np.zeros((3, 0))
        theta_tip = np.zeros((3, 0))
    fs = foreshortening_integrals(modes, mu, eta, wq)
    K4 = curvature_quartic(modes, link, eta, wq)
    return ModalIntegrals(mass, S0, I0, Phibar, H0, I1, I2, H1, Mdd, stiffness, phi_tip, theta_tip, *fs, K4)


def curvature_quartic(modes: LinkModes, link, eta, wq):
    """K4 (m,m,m,m), fully symmetric: V4 = 1/2 K4 . delta^4 is the fourth-order strain energy of the bending
    curvature, sum over the bending planes p of 1/2 int EI_p (kappa_p^2 - w_p''^2) (module docstring)."""
    from itertools import permutations
    m = modes.n_modes
    if m == 0 or modes.length <= 0:
        return np.zeros((m, m, m, m))
    d1 = modes.slope(eta)                            # (m, 3, q) phi'
    d2 = np.zeros_like(d1)                           # phi''
    w2 = modes._eval(eta, 2)
    for k, plane in enumerate(modes.planes):
        if plane == IN_PLANE:
            d2[k, 1] = w2[k]
        elif plane == OUT_OF_PLANE:
            d2[k, 2] = w2[k]
    EI = np.array([0.0, link.EI_z, link.EI_y])       # per displacement component y, z
    dot11 = np.einsum('aiq,biq->abq', d1, d1)        # phi_a' . phi_b'
    dot12 = np.einsum('aiq,biq->abq', d1, d2)        # phi_a' . phi_b''
    # 1/2 sum_p EI_p [2 w_p'' w_p' (w'.w'') - w_p''^2 |w'|^2] = 1/2 sum_abcd delta^4 K_abcd
    K = (2.0 * np.einsum('q,i,aiq,biq,cdq->abcd', wq, EI, d2, d1, dot12)
         - np.einsum('q,i,aiq,biq,cdq->abcd', wq, EI, d2, d2, dot11))
    return sum(K.transpose(p) for p in permutations(range(4))) / 24.0


def cumulative_slope_products(modes: LinkModes, nodes, n_segments: int = N_SEGMENTS, n_points: int = N_POINTS):
    """G(eta) = int_0^eta phi_k' . phi_l' ds at the given nodes (within [0, l]): shape (m, m, len(nodes)).

    Whole segments of the composite Gauss-Legendre rule up to the node's segment, plus a Gauss-Legendre rule
    on the part of that segment below the node."""
    m = modes.n_modes
    nodes = np.atleast_1d(np.asarray(nodes, dtype=float))
    if m == 0:
        return np.zeros((0, 0, nodes.size))
    L = modes.length
    h = L / n_segments
    x, w = np.polynomial.legendre.leggauss(n_points)
    seg_nodes = (np.arange(n_segments)[:, None] * h + (x[None, :] + 1.0) * 0.5 * h).ravel()
    sl = modes.slope(seg_nodes).reshape(m, 3, n_segments, n_points)
    seg_int = np.einsum('p,kisp,lisp->skl', w * 0.5 * h, sl, sl)                  # (S, m, m)
    before = np.concatenate([np.zeros((1, m, m)), np.cumsum(seg_int, axis=0)])    # G at segment starts
    s = np.clip(np.floor(nodes / h).astype(int), 0, n_segments - 1)
    a = s * h
    part = (nodes - a)                                                             # length below the node
    sub = (a[:, None] + (x[None, :] + 1.0) * 0.5 * part[:, None])                  # (q, P)
    slq = modes.slope(sub.ravel()).reshape(m, 3, nodes.size, n_points)
    G = before[s].transpose(1, 2, 0) + np.einsum('qp,kiqp,liqp->klq', (w[None, :] * 0.5 * part[:, None]), slq, slq)
    return G


def foreshortening_integrals(modes: LinkModes, mu: float, eta, wq):
    """(Gbar, Geta, Gtip, C, D) of the module docstring for a uniform link (mu), quadrature (eta, wq)."""
    m = modes.n_modes
    if m == 0 or modes.length <= 0:
        return (np.zeros((m, m)), np.zeros((m, m)), np.zeros((m, m)), np.zeros((m, m, m)), np.zeros((m, m, m, m)))
    G = cumulative_slope_products(modes, eta)                                      # (m, m, q)
    Gtip = cumulative_slope_products(modes, [modes.length])[:, :, 0]
    mw = mu * wq
    w = modes.displacement(eta).sum(axis=1)          # the one transverse component of each mode (0: torsion)
    Gbar = np.einsum('q,klq->kl', mw, G)
    Geta = np.einsum('q,klq->kl', mw * eta, G)
    C = np.einsum('q,abq,kq->abk', mw, G, w)
    D = np.einsum('q,abq,cdq->abcd', mw, G, G)
    return Gbar, Geta, Gtip, C, D
