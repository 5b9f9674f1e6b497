"""URDF of a flexarm arm with each flexible link split into rigid pieces joined by virtual joints.

Why: rviz's RobotModel display and robot_state_publisher only know rigid links. With virtual joints whose
angles follow the modal coordinates (node `flex_joint_states`), the standard URDF route shows the bending
arm. (The plant's /flexarm/markers MarkerArray is the other route and needs no URDF.)

Discretisation (K = `segments`): link j of length l is divided into K cells of length h = l/K. A virtual
joint sits at the *centre* of each cell, one per bending/torsion axis that the link has modes in:
``<joint>_flex<s>_z`` (in-plane bending, about z of the link frame), ``_y`` (out-of-plane, about y),
``_x`` (torsion, about x), s = 1..K, in that order (z, then y, then x — the order of the model's
elastic rotation Rz Ry Rx). The angle of the virtual joint of cell s about axis a is the difference of
the section rotations at the ends of the cell,

    angle(s, a) = sum_k delta_k [theta_k,a(s h) - theta_k,a((s - 1) h)],

with theta_k the rotation field of mode k (`LinkModes.rotation`), so the rigid piece after the joint has
the section rotation at the cell end: the tip piece has exactly the model's tip rotation (for one axis;
to first order for several), and each piece of length h is centred on the node where its rotation is
sampled — a midpoint rule, so the centre-line position error is O(h^2) in bending plus the
second-order foreshortening that the (linear) assumed-modes kinematics leaves out. There are K + 1
rigid pieces: ``<joint>_link`` ([0, h/2], the link frame L_j itself), ``<joint>_seg<s>`` (s = 1..K-1,
[(s-1/2)h, (s+1/2)h]) and ``<joint>_seg<K>`` ([l - h/2, l]); joints of one cell about several axes are
chained through massless ``<joint>_flex<s>_<a>_frame`` links. Virtual joints are ``continuous``
(revolute without limits): the model, not a stop, bounds the deflection. Rigid links (no modes) are one
piece; K = 0 makes every link rigid (real joints only). For Timoshenko/FE modes the section rotation differs from the centre-line slope by the shear
angle; the chain then follows the section rotations (small difference for slender links).

Other frames: ``base_link`` (the arm base frame, the plant's default frame id), real joints
``<joint>`` (revolute about z, limits from the arm file; ``continuous`` for a joint the arm file gives no position
limits, as urdfdom — robot_state_publisher, Pinocchio — refuses infinite bounds; origin Tip_{j-1} Rx(twist_{j-1})
Rz(angle_offset_j) Tz(offset_j), so the child ``<joint>_link`` is the link frame L_j),
``<joint>_tip`` (the elastic tip frame of link j, before the twist). Masses and inertias: rod pieces
lumped per piece (rho (b - a), rod inertia about the piece COM), the hub on ``<joint>_link``, the link's
extra rigid mass on the piece containing its COM, the payload on the last ``_tip`` link.
"""
from __future__ import annotations

import math
import os
import sys
from xml.sax.saxutils import quoteattr

import numpy as np

from flexarm_sim.arms import resolve_arm

AXES = {0: ('z', 2), 1: ('y', 1), 2: ('x', 0)}      # mode plane -> (axis letter, rotation component)
AXIS_ORDER = (0, 1, 2)                              # z, y, x


# ------------------------------------------------------------------------------ arm lookup
def load(arm):
    """ArmModel from a model, a spec, a path or an arm name."""
    from flexarm_sim.model import ArmModel, ArmSpec, load_model
    if isinstance(arm, ArmModel):
        return arm
    if isinstance(arm, ArmSpec):
        return load_model(arm)
    return load_model(resolve_arm(os.fspath(arm)))


# ------------------------------------------------------------------------------ small geometry helpers
def _rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def _rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def matrix_to_rpy(R):
    """URDF rpy (fixed axes x, y, z: R = Rz(yaw) Ry(pitch) Rx(roll))."""
    R = np.asarray(R, float)
    sp = -R[2, 0]
    pitch = math.asin(max(-1.0, min(1.0, sp)))
    if abs(math.cos(pitch)) > 1e-9:
        roll = math.atan2(R[2, 1], R[2, 2])
        yaw = math.atan2(R[1, 0], R[0, 0])
    else:                                          # gimbal lock: put everything in yaw
        roll = 0.0
        yaw = math.atan2(-R[0, 1], R[1, 1])
    return roll, pitch, yaw


def rpy_to_matrix(rpy):
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _skew_sq(c):
    c = np.asarray(c, float)
    return c @ c * np.eye(3) - np.outer(c, c)


def _combine(bodies):
    """[(mass, com (3,), inertia about com (3,3))] -> one body (mass, com, inertia about com)."""
    M = sum(m for m, _, _ in bodies)
    if M <= 0:
        I = sum((I for _, _, I in bodies), np.zeros((3, 3)))
        return 0.0, np.zeros(3), I
    c = sum(m * np.asarray(cc, float) for m, cc, _ in bodies) / M
    I = np.zeros((3, 3))
    for m, cc, Ic in bodies:
        I += np.asarray(Ic, float) + m * _skew_sq(np.asarray(cc, float) - c)
    return M, c, I


# ------------------------------------------------------------------------------ virtual joint mapping
class FlexJointMap:
    """Names of the URDF's movable joints and their angles from joint angles + modal coordinates.

    `joint_names`: real joints in arm order, then every link's virtual joints (cell 1..K, axes z, y, x).
    `positions(q, deltas)`: q (n,), deltas = per joint an array of its link's modal coordinates (or one
    flat array of all modal coordinates in arm order) -> angles (len(joint_names),).
    `positions_from_z(z)`: same from the model's generalized coordinates.
    """

    def __init__(self, arm, segments=8):
        model = load(arm)
        if int(segments) < 0:
            raise ValueError('segments must be >= 0 (0: rigid links, no virtual joints)')
        self.model = model
        self.segments = K = int(segments)
        spec = model.spec
        self.real_names = list(spec.joint_names)
        self.virtual_names = []
        self.link_axes = []          # per joint: list of plane ids present (in AXIS_ORDER)
        self.matrices = []           # per joint: (n_virtual_j, m_j) matrix or None
        for js, lm in zip(spec.joints, model.link_modes):
            m = lm.n_modes
            planes = [p for p in AXIS_ORDER if p in tuple(lm.planes)] if m and K and js.link.length > 0 else []
            self.link_axes.append(planes)
            if not planes:
                self.matrices.append(None)
                continue
            x = np.linspace(0.0, js.link.length, K + 1)
            rot = np.asarray(lm.rotation(x), float)          # (m, 3, K+1)
            rows = []
            for s in range(K):
                for p in planes:
                    comp = AXES[p][1]
                    rows.append(rot[:, comp, s + 1] - rot[:, comp, s])
                    self.virtual_names.append(f'{js.name}_flex{s + 1}_{AXES[p][0]}')
            self.matrices.append(np.array(rows))
        self.joint_names = self.real_names + self.virtual_names
        self.n_modes = [lm.n_modes for lm in model.link_modes]

    def split_modal(self, modal):
        """Flat modal coordinates (all links, arm order) -> per-joint arrays."""
        modal = np.asarray(modal, float).ravel()
        if modal.size != sum(self.n_modes):
            raise ValueError(f'expected {sum(self.n_modes)} modal coordinates, got {modal.size}')
        out, i = [], 0
        for m in self.n_modes:
            out.append(modal[i:i + m])
            i += m
        return out

    def virtual_positions(self, deltas):
        per_link = isinstance(deltas, (list, tuple)) and len(deltas) == len(self.n_modes) and \
            all(np.ndim(d) == 1 for d in deltas)
        if not per_link:
            deltas = self.split_modal(deltas)
        out = []
        for D, m, d in zip(self.matrices, self.n_modes, deltas):
            d = np.asarray(d, float).ravel()
            if d.size != m:
                raise ValueError(f'expected {m} modal coordinates for a link, got {d.size}')
            if D is not None:
                out.append(D @ d)
        return np.concatenate(out) if out else np.zeros(0)

    def positions(self, q, deltas):
        q = np.asarray(q, float).ravel()
        if q.size != len(self.real_names):
            raise ValueError(f'expected {len(self.real_names)} joint angles, got {q.size}')
        return np.concatenate([q, self.virtual_positions(deltas)])

    def positions_from_z(self, z):
        z = np.asarray(z, float)
        return self.positions(z[self.model.q_index], z[self.model.mode_index] if self.model.mode_index.size
                              else np.zeros(0))


# ------------------------------------------------------------------------------ URDF writer
def _f(v):
    v = float(v)
    return repr(v) if abs(v) > 1e-15 else '0'          # shortest text that round-trips exactly


def _vec(v):
    return ' '.join(_f(x) for x in v)


class _Doc:
    def __init__(self, name):
        self.lines = ['<?xml version="1.0"?>',
                      '<!-- generated by flexarm_bringup.urdf_gen (`flexarm urdf`); do not edit -->',
                      f'<robot name={quoteattr(name)}>']

    def add(self, text, indent=1):
        self.lines += ['  ' * indent + t for t in text.strip('\n').split('\n')]

    def text(self):
        return '\n'.join(self.lines + ['</robot>']) + '\n'


def _inertial_xml(mass, com, I):
    if mass <= 0:
        return ''
    return (f'<inertial>\n  <origin xyz="{_vec(com)}" rpy="0 0 0"/>\n  <mass value="{_f(mass)}"/>\n'
            f'  <inertia ixx="{_f(I[0, 0])}" ixy="{_f(I[0, 1])}" ixz="{_f(I[0, 2])}" iyy="{_f(I[1, 1])}" '
            f'iyz="{_f(I[1, 2])}" izz="{_f(I[2, 2])}"/>\n</inertial>')


def _cylinder_x(x0, length, radius, material):
    """Visual cylinder along +x from x0 (URDF cylinders are along z)."""
    if length <= 0:
        return ''
    return (f'<visual>\n  <origin xyz="{_f(x0 + length / 2)} 0 0" rpy="0 {_f(math.pi / 2)} 0"/>\n'
            f'  <geometry><cylinder radius="{_f(radius)}" length="{_f(length)}"/></geometry>\n'
            f'  <material name="{material}"/>\n</visual>')


def _cylinder_z(z0, z1, radius, material):
    length = abs(z1 - z0)
    if length <= 0:
        return ''
    return (f'<visual>\n  <origin xyz="0 0 {_f((z0 + z1) / 2)}" rpy="0 0 0"/>\n'
            f'  <geometry><cylinder radius="{_f(radius)}" length="{_f(length)}"/></geometry>\n'
            f'  <material name="{material}"/>\n</visual>')


def _link(doc, name, parts=()):
    body = '\n'.join(p for p in parts if p)
    if body:
        doc.add(f'<link name="{name}">')
        doc.add(body, 2)
        doc.add('</link>')
    else:
        doc.add(f'<link name="{name}"/>')


def _joint(doc, name, jtype, parent, child, xyz=(0, 0, 0), rpy=(0, 0, 0), axis=None, limit=None):
    doc.add(f'<joint name="{name}" type="{jtype}">')
    doc.add(f'<parent link="{parent}"/>\n<child link="{child}"/>\n<origin xyz="{_vec(xyz)}" rpy="{_vec(rpy)}"/>', 2)
    if axis is not None:
        doc.add(f'<axis xyz="{_vec(axis)}"/>', 2)
    if limit is not None:
        lo, hi, effort, vel = limit
        bounds = '' if lo is None else f'lower="{_f(lo)}" upper="{_f(hi)}" '
        doc.add(f'<limit {bounds}effort="{_f(effort)}" velocity="{_f(vel)}"/>', 2)
    doc.add('</joint>')


def _rod(js, a, b, x0):
    """(mass, com, inertia about com) of the rod section [a, b] in a piece frame whose origin is at x0."""
    link = js.link
    L = b - a
    m = link.linear_density * L
    Ic = np.diag([link.polar_density * L, m * L ** 2 / 12.0, m * L ** 2 / 12.0])
    return m, np.array([(a + b) / 2.0 - x0, 0.0, 0.0]), Ic


def generate_urdf(arm, segments=8, radius=0.01, name=None, base_frame='base_link') -> str:
    """URDF text of the arm (see the module docstring)."""
    model = load(arm)
    fmap = FlexJointMap(model, segments)
    spec = model.spec
    K = fmap.segments
    doc = _Doc(name or spec.name)
    doc.add('<material name="flexible"><color rgba="0.85 0.45 0.1 1"/></material>\n'
            '<material name="rigid"><color rgba="0.6 0.6 0.65 1"/></material>\n'
            '<material name="hub"><color rgba="0.2 0.2 0.25 1"/></material>\n'
            '<material name="payload"><color rgba="0.1 0.5 0.8 1"/></material>')
    _link(doc, base_frame)
    parent = base_frame
    T_prev = np.asarray(spec.base_transform, float)        # pose of the parent frame of joint 1's F frame
    for j, js in enumerate(spec.joints):
        link = js.link
        l = link.length
        planes = fmap.link_axes[j]
        flexible = bool(planes)
        # real joint: parent frame -> L_j = parent * Rz(angle_offset) * Tz(offset), axis z
        Rj = T_prev[:3, :3] @ _rz(js.angle_offset)
        pj = T_prev[:3, 3] + T_prev[:3, :3] @ np.array([0.0, 0.0, js.offset])
        lo, hi = js.position_limits
        child = f'{js.name}_link'
        # pieces: (name, start, end) along x of the link
        if flexible:
            h = l / K
            pieces = [(child, 0.0, h / 2)] + [(f'{js.name}_seg{s}', (s - 0.5) * h, min(l, (s + 0.5) * h))
                                              for s in range(1, K + 1)]
        else:
            pieces = [(child, 0.0, l)]
        # rigid bodies per piece, in the piece frame (origin at piece start, axes of the link frame)
        bodies = {p[0]: [] for p in pieces}
        for pname, a, b in pieces:
            if b > a and link.linear_density > 0:
                bodies[pname].append(_rod(js, a, b, a))
        if js.hub.mass > 0 or np.any(js.hub.inertia):
            bodies[child].append((js.hub.mass, js.hub.com + np.array([0.0, 0.0, -js.offset]), js.hub.inertia))
        ex = link.extra
        if ex.mass > 0 or np.any(ex.inertia):
            xc = float(ex.com[0])
            pname, a, _ = next(((pn, a, b) for pn, a, b in pieces if a <= xc <= b), pieces[-1 if xc > 0 else 0])
            bodies[pname].append((ex.mass, ex.com - np.array([a, 0.0, 0.0]), ex.inertia))
        material = 'flexible' if flexible else 'rigid'
        hub_visual = _cylinder_z(-js.offset - 2 * radius, -js.offset + 2 * radius, 2.0 * radius, 'hub')
        column = _cylinder_z(-js.offset, 0.0, radius, 'rigid') if js.offset else ''
        for pname, a, b in pieces:
            parts = [_inertial_xml(*_combine(bodies[pname])) if bodies[pname] else '',
                     _cylinder_x(0.0, b - a, radius, material)]
            if pname == child:
                parts += [hub_visual, column]
            _link(doc, pname, parts)
        if math.isfinite(lo) and math.isfinite(hi):
            _joint(doc, js.name, 'revolute', parent, child, pj, matrix_to_rpy(Rj), axis=(0, 0, 1),
                   limit=(lo, hi, js.effort_limit, js.velocity_limit))
        else:            # no position limits in the arm file: a joint that turns without end (urdfdom: no -inf)
            _joint(doc, js.name, 'continuous', parent, child, pj, matrix_to_rpy(Rj), axis=(0, 0, 1),
                   limit=(None, None, js.effort_limit, js.velocity_limit))
        cur, cur_x = child, 0.0
        if flexible:
            for s in range(1, K + 1):
                xc = (s - 0.5) * h
                for i, p in enumerate(planes):
                    letter, comp = AXES[p]
                    jname = f'{js.name}_flex{s}_{letter}'
                    nxt = f'{js.name}_seg{s}' if i == len(planes) - 1 else f'{jname}_frame'
                    if i < len(planes) - 1:
                        _link(doc, nxt)
                    axis = [0, 0, 0]
                    axis[comp] = 1
                    _joint(doc, jname, 'continuous', cur, nxt, (xc - cur_x, 0, 0), axis=axis)
                    cur, cur_x = nxt, xc
        tip = f'{js.name}_tip'
        tip_parts = []
        if j == spec.n_joints - 1:
            pay = spec.payload
            if pay.mass > 0 or np.any(pay.inertia):
                tip_parts.append(_inertial_xml(pay.mass, pay.com, pay.inertia))
                tip_parts.append(f'<visual>\n  <origin xyz="{_vec(pay.com)}" rpy="0 0 0"/>\n'
                                 f'  <geometry><sphere radius="{_f(2.5 * radius)}"/></geometry>\n'
                                 f'  <material name="payload"/>\n</visual>')
        _link(doc, tip, tip_parts)
        _joint(doc, f'{tip}_joint', 'fixed', cur, tip, (l - cur_x, 0, 0))
        parent = tip
        T_prev = np.eye(4)
        T_prev[:3, :3] = _rx(js.twist)
    return doc.text()


# ------------------------------------------------------------------------------ CLI
def add_arguments(p):
    p.add_argument('arm', help='arm description YAML (path, or the name of a shipped arm: flexarm_description/arms)')
    p.add_argument('-K', '--segments', type=int, default=8, help='rigid cells per flexible link (default 8; 0 = rigid links, '
                   'only the real joints, e.g. for hardware without a modal state)')
    p.add_argument('-o', '--output', metavar='URDF', help='write here (default: standard output)')
    p.add_argument('--radius', type=float, default=0.01, help='link radius of the visual cylinders, m')
    p.add_argument('--name', help='robot name (default: the arm name)')


def run(args):
    from flexarm_sim.common.params import ConfigError
    from flexarm_sim.model import ArmSpecError
    if args.segments < 0:
        print('flexarm urdf: -K must be >= 0', file=sys.stderr)
        return 2
    try:
        text = generate_urdf(args.arm, args.segments, radius=args.radius, name=args.name)
    except (ArmSpecError, ConfigError, OSError) as e:
        print(f'flexarm urdf: {e}', file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, 'w', encoding='utf-8') as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog='python -m flexarm_bringup.urdf_gen',
                                description='URDF of a flexarm arm with virtual joints for link deflection')
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == '__main__':
    sys.exit(main())
