"""The one FlexState codec: arrays of an ArmLayout <-> flexarm_msgs/FlexState.

Encoding (the plant; the hardware bridge, joints only): `FlexStateEncoder` refills one preallocated message in
place — array fields by buffer assignment, the end-effector and energy outputs from one numba call
(outputs.state_outputs) — about 10x cheaper than building a message per state; publish before the next fill.

Decoding (controllers, state estimator, flex_joint_states, the runner): `decode_state(msg, layout)` with one
tolerance rule: the state must be of this arm (a non-empty arm_id equal to the layout's; joint names, when
given, the layout's — in another order they are matched by name), every value finite, one position and velocity per joint; its links are
matched by name and each flexible link must bring exactly its modal coordinates and rates — except a state with
no link entries at all (the hardware bridge measures joints only), which decodes with zero modal coordinates and
`has_modes` False. Anything else raises ValueError saying what does not fit.
"""
from __future__ import annotations

import array
import math
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import Point, Pose, Quaternion, Twist, Vector3

from flexarm_msgs.msg import FlexState, LinkDeflection

from ..plant.outputs import EE_P, EE_Q, EE_RIGID, EE_V, EE_W, EN_EL, EN_GR, EN_KIN, StateOutputs


def _f64_view(arr):
    """Writable float64 numpy view of an array.array('d') message field (same memory: no copy per message)."""
    return np.frombuffer(arr, dtype=np.float64)


def _zeros(n):
    return array.array('d', bytes(8 * n))


class FlexStateEncoder:
    def __init__(self, layout, frame_id: str, outputs=None):
        """outputs: the plant's ArmOutputs (links' tip deflections, end effector, energies), or None for a state
        of joints only."""
        n = layout.n_joints
        self.layout = layout
        self.qi = np.asarray(layout.q_index)
        self.calc = StateOutputs(outputs.model) if outputs is not None else None
        self.msg = msg = FlexState()
        msg.header.frame_id = frame_id
        msg.arm_id = layout.arm_id
        msg.joint_names = list(layout.joint_names)
        msg.position, msg.velocity, msg.effort = _zeros(n), _zeros(n), _zeros(n)
        self._q, self._qd, self._tau = _f64_view(msg.position), _f64_view(msg.velocity), _f64_view(msg.effort)
        self._links = []
        lds = []
        for info in (outputs.links if outputs is not None else ()):
            ld = LinkDeflection()
            ld.link_name = info.name
            ld.mode_plane = info.planes
            ld.frequencies = info.freqs_hz
            ld.mode_tip_displacement = info.mode_tip_displacement
            ld.modal_position, ld.modal_velocity = _zeros(info.n_modes), _zeros(info.n_modes)
            ld.tip_deflection = Vector3(check_fields=False)
            ld.tip_rotation = Vector3(check_fields=False)
            lds.append(ld)
            self._links.append((info, ld, _f64_view(ld.modal_position), _f64_view(ld.modal_velocity),
                                ld.tip_deflection, ld.tip_rotation))
        msg.links = lds
        pose = Pose(check_fields=False)
        pose.position, pose.orientation = Point(check_fields=False), Quaternion(check_fields=False)
        pose.orientation.w = 1.0
        tw = Twist(check_fields=False)
        tw.linear, tw.angular = Vector3(check_fields=False), Vector3(check_fields=False)
        msg.end_effector_pose, msg.end_effector_twist = pose, tw
        msg.end_effector_rigid_position = Point(check_fields=False)
        self._pos, self._ori = pose.position, pose.orientation
        self._lin, self._ang, self._rig = tw.linear, tw.angular, msg.end_effector_rigid_position
        self._stamp = msg.header.stamp

    def fill(self, z, zd, tau, step: int, t_ns: int) -> FlexState:
        msg = self.msg
        t_ns = int(t_ns)
        self._stamp.sec, self._stamp.nanosec = t_ns // 1_000_000_000, t_ns % 1_000_000_000
        msg.step = int(step)
        self._q[:] = z[self.qi]
        self._qd[:] = zd[self.qi]
        self._tau[:] = tau
        for info, ld, mp, mv, td, tr in self._links:
            dl = z[info.slice]
            mp[:] = dl
            mv[:] = zd[info.slice]
            td.x, td.y, td.z = (info.phi_tip @ dl).tolist()
            tr.x, tr.y, tr.z = (info.theta_tip @ dl).tolist()
            ld.elastic_energy = 0.5 * float(dl @ info.stiffness @ dl)
        if self.calc is not None:
            o = self.calc.compute(z, zd).tolist()
            p, q, v, w, r = self._pos, self._ori, self._lin, self._ang, self._rig
            p.x, p.y, p.z = o[EE_P:EE_P + 3]
            q.x, q.y, q.z, q.w = o[EE_Q:EE_Q + 4]
            v.x, v.y, v.z = o[EE_V:EE_V + 3]
            w.x, w.y, w.z = o[EE_W:EE_W + 3]
            r.x, r.y, r.z = o[EE_RIGID:EE_RIGID + 3]
            msg.kinetic_energy, msg.elastic_energy, msg.gravity_energy = o[EN_KIN], o[EN_EL], o[EN_GR]
        return msg


@dataclass
class DecodedState:
    z: np.ndarray
    zd: np.ndarray
    tau: np.ndarray          # the effort in the message (zeros if it has none)
    t: float                 # s, header stamp
    stamp_ns: int
    step: int
    has_modes: bool          # False: joints only (modal coordinates set to zero)


def stamp_seconds(stamp) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def decode_state(msg, layout) -> DecodedState:
    """(z, zd, ...) of `layout` from a FlexState; ValueError naming what does not fit (module docstring)."""
    n = layout.n_joints
    if msg.arm_id and layout.arm_id and msg.arm_id != layout.arm_id:
        raise ValueError(f'state of arm {msg.arm_id!r}, this node runs {layout.arm_id!r}')
    order = None
    if len(msg.joint_names) and tuple(msg.joint_names) != tuple(layout.joint_names):
        if sorted(msg.joint_names) != sorted(layout.joint_names):
            raise ValueError(f'joints {list(msg.joint_names)}, the arm has {list(layout.joint_names)}')
        index = {name: i for i, name in enumerate(msg.joint_names)}
        order = [index[name] for name in layout.joint_names]
    if len(msg.position) != n or len(msg.velocity) != n:
        raise ValueError(f'{len(msg.position)} positions / {len(msg.velocity)} velocities, the arm has {n} joints')
    if len(msg.effort) not in (0, n):
        raise ValueError(f'{len(msg.effort)} efforts, the arm has {n} joints')
    z, zd = np.zeros(layout.n_coords), np.zeros(layout.n_coords)
    qi = layout.q_index
    q, qd = np.asarray(msg.position, dtype=float), np.asarray(msg.velocity, dtype=float)
    z[qi] = q if order is None else q[order]
    zd[qi] = qd if order is None else qd[order]
    has_modes = len(msg.links) > 0
    if has_modes:
        by_name = {lk.link_name: lk for lk in msg.links}
        for lk in layout.flexible_links:
            m = by_name.get(lk.name)
            if m is None:
                raise ValueError(f'no modal data for {lk.name}')
            if len(m.modal_position) != lk.n_modes or len(m.modal_velocity) != lk.n_modes:
                raise ValueError(f'{lk.name}: {len(m.modal_position)} modal coordinates, the arm has {lk.n_modes}')
            z[lk.modes] = m.modal_position
            zd[lk.modes] = m.modal_velocity
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(zd))):
        raise ValueError('non-finite value')
    tau = np.asarray(msg.effort, dtype=float) if len(msg.effort) else np.zeros(n)
    if order is not None and len(msg.effort):
        tau = tau[order]
    if not np.all(np.isfinite(tau)):
        raise ValueError('non-finite effort')
    st = msg.header.stamp
    t = stamp_seconds(st)
    if not math.isfinite(t):
        raise ValueError('bad stamp')
    return DecodedState(z, zd, tau, t, int(st.sec) * 1_000_000_000 + int(st.nanosec), int(msg.step), has_modes)
