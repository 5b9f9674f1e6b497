"""Rigid limit: with all modes removed the model is a rigid arm; its inverse dynamics equals an
independent recursive Newton-Euler algorithm (RNEA) written here, for spatial 3- and 6-joint arms
with gravity (Lee et al. 1982 and Newton-Euler give the same torques, seed 002)."""
import os

import numpy as np
import pytest

from flexarm_sim.model import arm_from_dict, load_arm, load_model, rigid_limit
from flexarm_sim.arms import shipped_arms_dir

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = shipped_arms_dir()


def _rot(axis, a):
    c, s = np.cos(a), np.sin(a)
    if axis == 'x':
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def rnea(spec, q, qd, qdd):
    """Joint torques of the rigid arm by Newton-Euler (world-frame vectors)."""
    n = spec.n_joints
    g = spec.gravity
    R = spec.base_transform[:3, :3]
    p = spec.base_transform[:3, 3]
    w = np.zeros(3)
    wd = np.zeros(3)
    a = -g.copy()                       # acceleration of the current frame origin, gravity folded in
    axes, origins, bodies = [], [], []  # bodies: (mass, com (world), I about com (world), a_com, w, wd)
    for j, js in enumerate(spec.joints):
        zax = R[:, 2]
        axes.append(zax)
        origins.append(p.copy())
        w_new = w + zax * qd[j]
        wd = wd + zax * qdd[j] + np.cross(w, zax * qd[j])
        w = w_new
        RF = R @ _rot('z', js.angle_offset + q[j])
        # rigid pieces of body j: hub (at F origin), rod (along x of L), extra mass (in L)
        pL = p + RF[:, 2] * js.offset
        link = js.link
        m_rod = link.linear_density * link.length
        pieces = [(js.hub.mass, p + RF @ js.hub.com, RF @ js.hub.inertia @ RF.T)]
        rod_I = m_rod * link.length ** 2 / 12 * np.diag([0, 1, 1]) + link.polar_density * link.length * np.diag(
            [1, 0, 0])
        pieces.append((m_rod, pL + RF[:, 0] * link.length / 2, RF @ rod_I @ RF.T))
        pieces.append((link.extra.mass, pL + RF @ link.extra.com, RF @ link.extra.inertia @ RF.T))
        pE = pL + RF[:, 0] * link.length
        if j == n - 1:
            pay = spec.payload
            pieces.append((pay.mass, pE + RF @ pay.com, RF @ pay.inertia @ RF.T))
        for mass, c, Ic in pieces:
            r = c - p
            a_c = a + np.cross(wd, r) + np.cross(w, np.cross(w, r))
            bodies.append((j, mass, c, Ic, a_c, w.copy(), wd.copy()))
        # move to the next joint origin
        r = pE - p
        a = a + np.cross(wd, r) + np.cross(w, np.cross(w, r))
        R, p = RF @ _rot('x', js.twist), pE
    tau = np.zeros(n)
    # backward: torque at joint j = axis . sum over bodies outboard of (moment about joint origin)
    for j in range(n):
        o = origins[j]
        moment = np.zeros(3)
        for (jb, mass, c, Ic, a_c, wb, wdb) in bodies:
            if jb < j:
                continue
            f = mass * a_c
            moment += np.cross(c - o, f) + Ic @ wdb + np.cross(wb, Ic @ wb)
        tau[j] = axes[j] @ moment
    return tau


def six_joint_arm():
    """Book's 6-joint example geometry (rigid here), PUMA-like twists, gravity, full inertias."""
    rng = np.random.default_rng(7)
    twists = [np.pi / 2, 0.0, np.pi / 2, -np.pi / 2, np.pi / 2, 0.0]
    offsets = [0.66, 0.15, 0.0, 0.43, 0.0, 0.06]
    lengths = [0.0, 0.43, 0.02, 0.0, 0.0, 0.0]
    joints = []
    for j in range(6):
        A = rng.normal(size=(3, 3))
        joints.append({'name': f'j{j + 1}', 'twist': twists[j], 'offset': offsets[j],
                       'angle_offset': 0.1 * j,
                       'hub': {'mass': 1.0 + j, 'com': (0.05 * rng.normal(size=3)).tolist(),
                               'inertia': (0.01 * (A @ A.T + np.eye(3))).tolist()},
                       'link': {'length': lengths[j], 'linear_density': 3.0 if lengths[j] else 0.0,
                                'extra_mass': {'mass': 0.5, 'com': (0.05 * rng.normal(size=3)).tolist(),
                                               'inertia': (0.002 * np.eye(3)).tolist()}}})
    return arm_from_dict({'name': 'six_r', 'gravity': [0, 0, -9.81], 'joints': joints,
                          'payload': {'mass': 1.5, 'com': [0.0, 0.0, 0.05], 'inertia': [0.003, 0.003, 0.002]}})


CASES = {
    'rigid_puma3': lambda: load_arm(os.path.join(ARMS, 'rigid_puma3.yaml')),
    'spatial_3r_rigid': lambda: rigid_limit(load_arm(os.path.join(ARMS, 'spatial_3r.yaml'))),
    'six_joint': six_joint_arm,
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_rigid_inverse_dynamics_equals_newton_euler(name):
    spec = CASES[name]()
    model = load_model(spec)
    assert model.n_coords == model.n_joints          # no flexible coordinates in the rigid limit
    rng = np.random.default_rng(5)
    # within the joint limits: beyond them the arm's hard stops push (the rigid-body algorithm has none)
    lo = np.array([max(-np.pi, j.position_limits[0]) for j in spec.joints])
    hi = np.array([min(np.pi, j.position_limits[1]) for j in spec.joints])
    for _ in range(5):
        q = rng.uniform(lo, hi)
        qd = rng.normal(size=spec.n_joints)
        qdd = rng.normal(size=spec.n_joints)
        tau_model = model.inverse_dynamics(q, qd, qdd)
        tau_rnea = rnea(spec, q, qd, qdd)
        assert np.allclose(tau_model, tau_rnea, rtol=1e-10, atol=1e-10 * np.abs(tau_rnea).max())


def test_forward_dynamics_inverts_newton_euler():
    spec = six_joint_arm()
    model = load_model(spec)
    rng = np.random.default_rng(6)
    q, qd, tau = rng.normal(size=6), rng.normal(size=6), rng.normal(size=6)
    qdd = model.accelerations(q, qd, tau)
    assert np.allclose(rnea(spec, q, qd, qdd), tau, atol=1e-10)
