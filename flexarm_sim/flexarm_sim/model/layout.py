"""ArmLayout: where everything lives in the generalized coordinates of one arm (as MuJoCo's declared state
layout) — the one object every consumer of a state reads (plant, controllers, estimator, bridge, recorder, URDF).

z = [q_1, delta_1,1 .. delta_1,m1, q_2, delta_2,1 .., ...] (Book's ordering); zd likewise.

It also owns what a state of the arm may physically be (`implausible`), the bound every decoder of a received
state applies (ros/flexstate.py): a joint within its position limits widened by JOINT_MARGIN (beyond lies the hard
stop, whose penetration the arm model states in degrees), or within UNLIMITED_ANGLE without limits; a joint rate
within RATE_FACTOR x its velocity limit; each modal coordinate at most the amplitude that alone moves its link's
tip by the link's length (or twists it by one radian: a deflection far beyond the 15 % of the length the model
represents), its rate at most RATE_FACTOR x that amplitude x the mode's frequency. Anything beyond (q = 1e300) is
not a state of this arm, whoever sent it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinkLayout:
    index: int                 # joint / link number j
    name: str                  # '<joint name>_link'
    modes: slice               # its modal coordinates in z
    n_modes: int
    planes: tuple              # per mode: 0 in-plane, 1 out-of-plane, 2 torsion (LinkDeflection constants)


@dataclass(frozen=True)
class ArmLayout:
    arm_name: str
    arm_id: str                # '<name>:<hash>' of the resolved description ('' if unknown)
    joint_names: tuple
    n_joints: int
    n_coords: int
    q_index: np.ndarray        # (n,) positions of the joint angles in z
    mode_index: np.ndarray     # positions of all modal coordinates in z, arm order
    links: tuple               # LinkLayout per joint (every link, modes or not)
    z_lo: np.ndarray = None    # (n_coords,) plausible z (module docstring); None: only finite values are checked
    z_hi: np.ndarray = None
    zd_max: np.ndarray = None  # (n_coords,) plausible |zd|

    @classmethod
    def of(cls, model, arm_id: str = '') -> 'ArmLayout':
        q_index = np.asarray(model.q_index, dtype=np.int64).copy()
        links = []
        for j, js in enumerate(model.spec.joints):
            lm = model.link_modes[j]
            m = int(lm.n_modes)
            start = int(q_index[j]) + 1
            links.append(LinkLayout(j, link_name(js.name), slice(start, start + m), m,
                                    tuple(int(p) for p in lm.planes[:m]) if m else ()))
        mode_index = np.asarray(model.mode_index, dtype=np.int64).copy()
        z_lo, z_hi, zd_max = _plausible_bounds(model, q_index, links)
        for a in (q_index, mode_index, z_lo, z_hi, zd_max):
            a.setflags(write=False)
        return cls(model.spec.name, arm_id, tuple(model.spec.joint_names), int(model.n_joints),
                   int(model.n_coords), q_index, mode_index, tuple(links), z_lo, z_hi, zd_max)

    def implausible(self, z, zd) -> str:
        """'' if (z, zd) may be a state of this arm, else what is not (module docstring); the caller has checked
        that every value is finite."""
        if self.z_lo is None:
            return ''
        bad = (z < self.z_lo) | (z > self.z_hi)
        if bad.any():
            i = int(np.argmax(bad))
            return (f'implausible state: {self.coordinate_name(i)} = {z[i]:.6g} outside '
                    f'[{self.z_lo[i]:.6g}, {self.z_hi[i]:.6g}]')
        bad = np.abs(zd) > self.zd_max
        if bad.any():
            i = int(np.argmax(bad))
            return f'implausible state: rate of {self.coordinate_name(i)} = {zd[i]:.6g}, |.| > {self.zd_max[i]:.6g}'
        return ''

    def coordinate_name(self, i: int) -> str:
        """A readable name of z[i]: the joint's (rad) or '<link> mode k'."""
        hit = np.nonzero(self.q_index == i)[0]
        if hit.size:
            return f'joint {self.joint_names[int(hit[0])]} (rad)'
        for lk in self.links:
            if lk.modes.start <= i < lk.modes.stop:
                return f'{lk.name} mode {i - lk.modes.start + 1}'
        return f'z[{i}]'

    @property
    def link_names(self) -> tuple:
        return tuple(lk.name for lk in self.links)

    @property
    def flexible_links(self) -> tuple:
        """The links that have modal coordinates (the entries of FlexState.links, in this order)."""
        return tuple(lk for lk in self.links if lk.n_modes)

    @property
    def n_modes(self) -> int:
        return int(self.mode_index.size)

    def zeros(self):
        """(z, zd) at rest."""
        return np.zeros(self.n_coords), np.zeros(self.n_coords)

    def split(self, z):
        """(q, delta): joint angles and all modal coordinates of a coordinate vector."""
        z = np.asarray(z)
        return z[self.q_index], z[self.mode_index]

    def join(self, q, delta=None, out=None):
        """A coordinate vector from joint values and (optionally) modal values."""
        z = np.zeros(self.n_coords) if out is None else out
        z[self.q_index] = q
        if delta is not None and self.n_modes:
            z[self.mode_index] = delta
        return z


JOINT_MARGIN = 0.5          # rad beyond a joint's position limits (the hard stop's penetration is degrees)
UNLIMITED_ANGLE = 1000.0    # rad, a joint without position limits (~160 turns)
RATE_FACTOR = 10.0          # x the velocity limit (joints), x amplitude x frequency (modes)


def _plausible_bounds(model, q_index, links):
    """(z_lo, z_hi, zd_max) of the arm (module docstring)."""
    n = int(model.n_coords)
    z_lo, z_hi, zd_max = np.full(n, -np.inf), np.full(n, np.inf), np.full(n, np.inf)
    for j, js in enumerate(model.spec.joints):
        lo, hi = js.position_limits
        i = int(q_index[j])
        z_lo[i] = lo - JOINT_MARGIN if np.isfinite(lo) else -UNLIMITED_ANGLE
        z_hi[i] = hi + JOINT_MARGIN if np.isfinite(hi) else UNLIMITED_ANGLE
        zd_max[i] = RATE_FACTOR * js.velocity_limit
        lk = links[j]
        if not lk.n_modes:
            continue
        d = model.data
        omega = np.asarray(model.link_modes[j].omega, dtype=float)
        for k in range(lk.n_modes):
            reach = float(np.linalg.norm(d.phi_tip[j, :, k]))
            turn = float(np.linalg.norm(d.theta_tip[j, :, k]))
            amp = float(d.length[j]) / reach if reach > 0 else (1.0 / turn if turn > 0 else np.inf)
            m = lk.modes.start + k
            z_lo[m], z_hi[m] = -amp, amp
            zd_max[m] = RATE_FACTOR * amp * max(float(omega[k]), 1.0)
    return z_lo, z_hi, zd_max


def link_name(joint_name: str) -> str:
    """The name of the link a joint drives (FlexState.links, URDF link frames)."""
    return joint_name + '_link'


def joints_only_layout(joint_names, arm_name: str = '', arm_id: str = '') -> ArmLayout:
    """The layout of a source that knows joints only (the hardware bridge: no modal coordinates). Its states say
    which arm they are: arm_id (default 'joints:<name>,<name>...'; decoders accept them from any arm with these
    joints, ros/flexstate.check_arm)."""
    arm_id = arm_id or 'joints:' + ','.join(joint_names)
    n = len(joint_names)
    q_index = np.arange(n, dtype=np.int64)
    mode_index = np.zeros(0, dtype=np.int64)
    for a in (q_index, mode_index):
        a.setflags(write=False)
    links = tuple(LinkLayout(j, link_name(name), slice(j + 1, j + 1), 0, ()) for j, name in enumerate(joint_names))
    return ArmLayout(arm_name, arm_id, tuple(joint_names), n, n, q_index, mode_index, links)


def layout_difference(a, b) -> str:
    """'' if two arms (ArmModel or ArmLayout) lay out their coordinates alike (joint names, and per link the number
    of modes and their bending planes), else what differs: another arm with that layout (other lengths, stiffness,
    payload) can stand in for `a` where only the layout matters (a model-mismatch study)."""
    la = a if isinstance(a, ArmLayout) else ArmLayout.of(a)
    lb = b if isinstance(b, ArmLayout) else ArmLayout.of(b)
    if la.joint_names != lb.joint_names:
        return f'joints {list(lb.joint_names)} instead of {list(la.joint_names)}'
    for x, y in zip(la.links, lb.links):
        if (x.n_modes, x.planes) != (y.n_modes, y.planes):
            return (f'link {x.name} has {y.n_modes} modes (planes {list(y.planes)}) instead of {x.n_modes} '
                    f'(planes {list(x.planes)})')
    return ''
