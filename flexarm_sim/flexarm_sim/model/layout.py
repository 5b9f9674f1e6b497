"""ArmLayout: where everything lives in the generalized coordinates of one arm (as MuJoCo's declared state
layout) — the one object every consumer of a state reads (plant, controllers, estimator, bridge, recorder, URDF).

z = [q_1, delta_1,1 .. delta_1,m1, q_2, delta_2,1 .., ...] (Book's ordering); zd likewise.
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
        for a in (q_index, mode_index):
            a.setflags(write=False)
        return cls(model.spec.name, arm_id, tuple(model.spec.joint_names), int(model.n_joints),
                   int(model.n_coords), q_index, mode_index, tuple(links))

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


def link_name(joint_name: str) -> str:
    """The name of the link a joint drives (FlexState.links, URDF link frames)."""
    return joint_name + '_link'


def joints_only_layout(joint_names, arm_name: str = '') -> ArmLayout:
    """The layout of a source that knows joints only (the hardware bridge: no modal coordinates)."""
    n = len(joint_names)
    q_index = np.arange(n, dtype=np.int64)
    mode_index = np.zeros(0, dtype=np.int64)
    for a in (q_index, mode_index):
        a.setflags(write=False)
    links = tuple(LinkLayout(j, link_name(name), slice(j + 1, j + 1), 0, ()) for j, name in enumerate(joint_names))
    return ArmLayout(arm_name, '', tuple(joint_names), n, n, q_index, mode_index, links)


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
