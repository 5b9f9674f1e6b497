"""A geometrically exact reference for planar flexible arms, independent of the assumed-modes model.

Each flexible link (length L, E I, mu) is a chain of rigid pieces joined by torsional springs: N elements of
length h = L/N, the bending of element i lumped at its centre s_i = (i - 1/2) h into a spring of stiffness EI/h
(midpoint rule: second-order accurate in h). So a link is N + 1 rigid pieces: [0, h/2] fixed to the joint's
hub, N - 1 pieces of length h, and [L - h/2, L] which carries the next joint (and the payload on the last link).
Inextensible, no small-angle assumption anywhere: arbitrary rotations of the pieces (the "geometrically exact"
large-deflection limit of the Euler-Bernoulli beam as N grows). The mass of each piece is its own (mu times its
length, centre of mass in its middle, rotary inertia mu l^3 / 12).

Dynamics: Featherstone's articulated-body algorithm for a planar serial chain of revolute joints (motor joints
with the input torque, spring joints with -k theta - c thetadot), O(bodies) per evaluation; classical RK4 at a
fixed step. Planar motion only (in the base x-y plane); in-plane gravity is not supported (the arms used have
gravity along -z, normal to the motion).

This file shares no code with flexarm_sim.model: it reads the physical data of an ArmSpec (lengths, E I, mu,
hubs, payload) and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass
class Chain:
    """Arrays of the serial chain of rigid bodies (body i's joint connects it to body i - 1)."""

    joint_pos: np.ndarray    # (B, 2) position of body i's joint in body i-1's frame (base frame for i = 0)
    mass: np.ndarray         # (B,)
    com: np.ndarray          # (B, 2) centre of mass in the body frame (origin at its joint)
    inertia: np.ndarray      # (B,) rotary inertia about the centre of mass
    motor: np.ndarray        # (B,) index of the motor joint (input torque), or -1 for a spring joint
    spring_k: np.ndarray     # (B,) torsional stiffness of spring joints
    spring_c: np.ndarray     # (B,) damping of spring joints
    tip: np.ndarray          # (2,) end point of the last body in its frame
    motor_body: np.ndarray   # (n_joints,) body index of each motor joint
    link_tip_body: np.ndarray   # (n_joints,) body index of each link's tip piece

    @property
    def n_bodies(self):
        return self.mass.size


def chain_from_spec(spec, n_elements, damping_c=0.0):
    """The chain of a planar ArmSpec with n_elements elements per flexible link (rigid links: one body)."""
    if not spec.planar:
        raise ValueError('planar arms only')
    if np.linalg.norm(np.asarray(spec.gravity)[:2]) > 0:
        raise ValueError('in-plane gravity is not supported')
    jp, mass, com, inertia, motor, k, c = [], [], [], [], [], [], []
    motor_body, tip_body = [], []
    next_joint = np.zeros(2)         # where the next motor joint sits in the current last body's frame
    n = spec.n_joints
    for j, js in enumerate(spec.joints):
        link = js.link
        L, mu = link.length, link.linear_density
        flexible = link.n_in_plane > 0
        N = n_elements if flexible else 1
        h = L / N
        # root body: the hub (in F_j, at the joint) + the extra mass (in L_j = F_j for planar arms) + [0, h/2]
        first = h / 2 if flexible else L
        parts = [(js.hub.mass, js.hub.com[:2], js.hub.inertia[2, 2]),
                 (link.extra.mass, link.extra.com[:2], link.extra.inertia[2, 2]),
                 (mu * first, np.array([first / 2, 0.0]), mu * first ** 3 / 12)]
        if not flexible and j == n - 1:
            parts.append((spec.payload.mass, np.array([L, 0.0]) + spec.payload.com[:2], spec.payload.inertia[2, 2]))
        M, C, I = _combine(parts)
        motor_body.append(len(mass))
        jp.append(next_joint.copy())
        mass.append(M)
        com.append(C)
        inertia.append(I + js.reflected_rotor_inertia)
        motor.append(j)
        k.append(0.0)
        c.append(0.0)
        if flexible:
            for i in range(1, N + 1):
                last = i == N
                length = h / 2 if last else h
                parts = [(mu * length, np.array([length / 2, 0.0]), mu * length ** 3 / 12)]
                if last and j == n - 1:
                    parts.append((spec.payload.mass, np.array([length, 0.0]) + spec.payload.com[:2],
                                  spec.payload.inertia[2, 2]))
                M, C, I = _combine(parts)
                # joint i at the element centre: h/2 along the root piece, h along the full pieces
                jp.append(np.array([first if i == 1 else h, 0.0]))
                mass.append(M)
                com.append(C)
                inertia.append(I)
                motor.append(-1)
                k.append(link.EI_z / h)
                c.append(damping_c)
            next_joint = np.array([h / 2, 0.0])
        else:
            next_joint = np.array([L, 0.0])
        tip_body.append(len(mass) - 1)
    return Chain(np.array(jp), np.array(mass), np.array(com), np.array(inertia), np.array(motor, dtype=np.int64),
                 np.array(k), np.array(c), next_joint.copy(), np.array(motor_body, dtype=np.int64),
                 np.array(tip_body, dtype=np.int64))


def _combine(parts):
    """(mass, com, rotary inertia about the com) of rigid parts given as (mass, com (2,), inertia about own com)."""
    M = sum(p[0] for p in parts)
    if M <= 0:
        return 0.0, np.zeros(2), sum(p[2] for p in parts)
    C = sum(p[0] * np.asarray(p[1], float) for p in parts) / M
    I = sum(p[2] + p[0] * float(np.sum((np.asarray(p[1], float) - C) ** 2)) for p in parts)
    return M, C, I


# ---------------------------------------------------------------------------------------------- dynamics


@njit(cache=True)
def _aba(jpos, mass, com, inertia, motor, kk, cc, q, qd, tau, qdd, X, v, cb, IA, pA, U, Dinv, u, Ia, pa, Xf):
    """Articulated-body algorithm (planar): joint accelerations qdd of the chain. Planar spatial vectors
    (omega, vx, vy) in body coordinates at the body's joint."""
    B = q.shape[0]
    vp0 = 0.0
    vp1 = 0.0
    vp2 = 0.0
    for i in range(B):
        cth, sth = np.cos(q[i]), np.sin(q[i])
        rx, ry = jpos[i, 0], jpos[i, 1]
        # X: parent motion -> body motion
        X[i, 0] = sth * rx - cth * ry
        X[i, 1] = sth * ry + cth * rx
        X[i, 2] = cth
        X[i, 3] = sth
        w = vp0 + qd[i]
        vx = X[i, 0] * vp0 + cth * vp1 + sth * vp2
        vy = X[i, 1] * vp0 - sth * vp1 + cth * vp2
        v[i, 0], v[i, 1], v[i, 2] = w, vx, vy
        cb[i, 0], cb[i, 1], cb[i, 2] = 0.0, vy * qd[i], -vx * qd[i]
        m = mass[i]
        cx, cy = com[i, 0], com[i, 1]
        I0 = inertia[i] + m * (cx * cx + cy * cy)
        IA[i, 0, 0], IA[i, 0, 1], IA[i, 0, 2] = I0, -m * cy, m * cx
        IA[i, 1, 0], IA[i, 1, 1], IA[i, 1, 2] = -m * cy, m, 0.0
        IA[i, 2, 0], IA[i, 2, 1], IA[i, 2, 2] = m * cx, 0.0, m
        h1 = -m * cy * w + m * vx
        h2 = m * cx * w + m * vy
        # v x* h
        pA[i, 0] = vx * h2 - vy * h1
        pA[i, 1] = -w * h2
        pA[i, 2] = w * h1
        vp0, vp1, vp2 = w, vx, vy
    for i in range(B - 1, -1, -1):
        if motor[i] >= 0:
            t = tau[motor[i]]
        else:
            t = -kk[i] * q[i] - cc[i] * qd[i]
        U[i, 0], U[i, 1], U[i, 2] = IA[i, 0, 0], IA[i, 1, 0], IA[i, 2, 0]
        Dinv[i] = 1.0 / U[i, 0]
        u[i] = t - pA[i, 0]
        if i == 0:
            break
        # articulated inertia and bias passed to the parent: Ia = IA - U U^T / D, pa = pA + Ia c + U u / D
        for r in range(3):
            for s in range(3):
                Ia[r, s] = IA[i, r, s] - U[i, r] * U[i, s] * Dinv[i]
        for r in range(3):
            pa[r] = (pA[i, r] + Ia[r, 0] * cb[i, 0] + Ia[r, 1] * cb[i, 1] + Ia[r, 2] * cb[i, 2]
                     + U[i, r] * u[i] * Dinv[i])
        # X^T Ia X and X^T pa into the parent; X = [[1,0,0],[x0, c, s],[x1, -s, c]]
        Xf[0, 0], Xf[0, 1], Xf[0, 2] = 1.0, 0.0, 0.0
        Xf[1, 0], Xf[1, 1], Xf[1, 2] = X[i, 0], X[i, 2], X[i, 3]
        Xf[2, 0], Xf[2, 1], Xf[2, 2] = X[i, 1], -X[i, 3], X[i, 2]
        p = i - 1
        for r in range(3):
            for s in range(3):
                acc = 0.0
                for a in range(3):
                    for b in range(3):
                        acc += Xf[a, r] * Ia[a, b] * Xf[b, s]
                IA[p, r, s] += acc
            pA[p, r] += Xf[0, r] * pa[0] + Xf[1, r] * pa[1] + Xf[2, r] * pa[2]
    ap0 = 0.0
    ap1 = 0.0
    ap2 = 0.0
    for i in range(B):
        a0 = ap0 + cb[i, 0]
        a1 = X[i, 0] * ap0 + X[i, 2] * ap1 + X[i, 3] * ap2 + cb[i, 1]
        a2 = X[i, 1] * ap0 - X[i, 3] * ap1 + X[i, 2] * ap2 + cb[i, 2]
        qdd[i] = (u[i] - (U[i, 0] * a0 + U[i, 1] * a1 + U[i, 2] * a2)) * Dinv[i]
        ap0, ap1, ap2 = a0 + qdd[i], a1, a2


@njit(cache=True)
def _tip(jpos, tipvec, q, body, end):
    """Position (x, y) of point `end` (body frame) of body `body`, and that body's angle."""
    ang = 0.0
    x = 0.0
    y = 0.0
    for i in range(body + 1):
        c, s = np.cos(ang), np.sin(ang)
        x += c * jpos[i, 0] - s * jpos[i, 1]
        y += s * jpos[i, 0] + c * jpos[i, 1]
        ang += q[i]
    c, s = np.cos(ang), np.sin(ang)
    return x + c * end[0] - s * end[1], y + s * end[0] + c * end[1], ang


@njit(cache=True)
def _run(jpos, mass, com, inertia, motor, kk, cc, tipvec, q, qd, taus, dt, substeps, record_every, out_tip, out_q):
    """RK4 with `substeps` steps per control period dt under the sampled torques taus (K, n) (zero-order hold);
    records the chain's end point and the joint angles every `record_every` periods."""
    B = q.shape[0]
    X = np.zeros((B, 4))
    v = np.zeros((B, 3))
    cb = np.zeros((B, 3))
    IA = np.zeros((B, 3, 3))
    pA = np.zeros((B, 3))
    U = np.zeros((B, 3))
    Dinv = np.zeros(B)
    u = np.zeros(B)
    k1 = np.zeros(B)
    k2 = np.zeros(B)
    k3 = np.zeros(B)
    k4 = np.zeros(B)
    qs = np.zeros(B)
    vs = np.zeros(B)
    Ia = np.zeros((3, 3))
    pa = np.zeros(3)
    Xf = np.zeros((3, 3))
    h = dt / substeps
    K = taus.shape[0]
    r = 0
    for k in range(K + 1):
        if k % record_every == 0:
            x, y, _ = _tip(jpos, tipvec, q, B - 1, tipvec)
            out_tip[r, 0], out_tip[r, 1] = x, y
            out_q[r, :] = q
            r += 1
        if k == K:
            break
        tau = taus[k]
        for _ in range(substeps):
            _aba(jpos, mass, com, inertia, motor, kk, cc, q, qd, tau, k1, X, v, cb, IA, pA, U, Dinv, u, Ia, pa, Xf)
            for i in range(B):
                qs[i] = q[i] + 0.5 * h * qd[i]
                vs[i] = qd[i] + 0.5 * h * k1[i]
            _aba(jpos, mass, com, inertia, motor, kk, cc, qs, vs, tau, k2, X, v, cb, IA, pA, U, Dinv, u, Ia, pa, Xf)
            for i in range(B):
                qs[i] = q[i] + 0.5 * h * (qd[i] + 0.5 * h * k1[i])
                vs[i] = qd[i] + 0.5 * h * k2[i]
            _aba(jpos, mass, com, inertia, motor, kk, cc, qs, vs, tau, k3, X, v, cb, IA, pA, U, Dinv, u, Ia, pa, Xf)
            for i in range(B):
                qs[i] = q[i] + h * (qd[i] + 0.5 * h * k2[i])
                vs[i] = qd[i] + h * k3[i]
            _aba(jpos, mass, com, inertia, motor, kk, cc, qs, vs, tau, k4, X, v, cb, IA, pA, U, Dinv, u, Ia, pa, Xf)
            for i in range(B):
                q[i] += h * (qd[i] + h / 6.0 * (k1[i] + k2[i] + k3[i]))
                qd[i] += h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
    return r


def max_spring_frequency(chain):
    """An upper bound of the chain's highest natural frequency (rad/s) at rest. In absolute piece angles th the
    mass matrix is at least diag(I_c) (each piece's rotary inertia about its centre of mass; the translational
    part is positive semidefinite) and the spring energy sum k_i (th_i - th_{i-1})^2 / 2 is at most
    sum (k_i + k_{i+1}) th_i^2, so omega^2 <= max_i 2 (k_i + k_{i+1}) / I_c,i (Rayleigh quotient)."""
    k = np.where(chain.motor < 0, chain.spring_k, 0.0)
    k_next = np.append(k[1:], 0.0)
    I_c = np.maximum(chain.inertia, 1e-300)
    return float(np.sqrt(np.max(2.0 * (k + k_next) / I_c)))


def simulate_chain(chain, T, dt, taus, q0=None, qd0=None, substeps=None, record_dt=None):
    """Run the chain for T seconds under taus (K, n_joints) sampled every dt. Returns (t, tip (K', 2), q (K', B)).
    substeps default: RK4 at 2 / max_spring_frequency (inside RK4's stability limit 2.8 / w for every mode)."""
    B = chain.n_bodies
    q = np.zeros(B) if q0 is None else np.array(q0, float)
    qd = np.zeros(B) if qd0 is None else np.array(qd0, float)
    K = int(round(T / dt))
    taus = np.ascontiguousarray(np.broadcast_to(taus, (K, len(chain.motor_body))), dtype=float)
    if substeps is None:
        substeps = max(1, int(np.ceil(dt * max_spring_frequency(chain) / 2.0)))
    rec = 1 if record_dt is None else max(1, int(round(record_dt / dt)))
    n_rec = K // rec + 1
    tip = np.zeros((n_rec, 2))
    qs = np.zeros((n_rec, B))
    r = _run(chain.joint_pos, chain.mass, chain.com, chain.inertia, chain.motor, chain.spring_k, chain.spring_c,
             chain.tip, q, qd, taus, dt, substeps, rec, tip, qs)
    return np.arange(r) * dt * rec, tip[:r], qs[:r]


def chain_energy(chain, q, qd):
    """Kinetic + spring energy of the chain (independent of the ABA: from the bodies' velocities)."""
    ang = 0.0
    x = y = 0.0
    vx = vy = 0.0
    w = 0.0
    T = 0.0
    V = 0.0
    for i in range(chain.n_bodies):
        c, s = np.cos(ang), np.sin(ang)
        rx, ry = chain.joint_pos[i]
        dx, dy = c * rx - s * ry, s * rx + c * ry
        x, y = x + dx, y + dy
        vx, vy = vx - w * dy, vy + w * dx
        ang += q[i]
        w += qd[i]
        c, s = np.cos(ang), np.sin(ang)
        cx, cy = chain.com[i]
        gx, gy = c * cx - s * cy, s * cx + c * cy
        ux, uy = vx - w * gy, vy + w * gx
        T += 0.5 * chain.mass[i] * (ux * ux + uy * uy) + 0.5 * chain.inertia[i] * w * w
        if chain.motor[i] < 0:
            V += 0.5 * chain.spring_k[i] * q[i] ** 2
    return T + V
