"""The one FlexState codec: arrays of an ArmLayout <-> flexarm_msgs/FlexState.

Encoding (the plant; the hardware bridge, joints only): `FlexStateEncoder` writes the serialized message (CDR
bytes, cdr.py) in place — the end-effector and energy outputs from one numba call (outputs.state_outputs) — and
the node publishes the bytes (no per-field conversion inside rclpy).

Decoding (controllers, state estimator, flex_joint_states, the runner): `decode_state(msg, layout)` (a message
object) or `FlexStateDecoder(layout).decode(bytes)` (raw subscriptions; the same rule, read at the learnt offsets
once a message of the arm's shape has been accepted), with one
tolerance rule: the state must say which arm it is (an empty arm_id is refused) and be of this arm: its arm_id
equal to the layout's, or — another arm's id — with the same layout (the same joint names and, unless it carries
joints only, the same flexible links with the same number of modes each: a perturbed plant under a nominally
designed controller, `flexarm run --plant-arm`), which is accepted and reported once per id through `note` naming
both; joint names, when given, the layout's — in another order they are matched by name; every value finite and
plausible for the arm (ArmLayout.implausible: q = 1e300 is no state of it); one position and velocity per joint;
its links are matched by name and each flexible link must bring exactly its modal coordinates and rates — except a
state with no link entries at all (the hardware bridge measures joints only), which decodes with zero modal
coordinates and `has_modes` False. Anything else raises ValueError saying what does not fit.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass

import numpy as np

from flexarm_msgs.msg import FlexState

from rclpy.serialization import deserialize_message

from ..plant.outputs import EE_P, EE_Q, EE_RIGID, EE_V, EE_W, EN_EL, EN_GR, EN_KIN, StateOutputs
from .cdr import flex_state_layout

_STAMP = struct.Struct('<iI')
_U64 = struct.Struct('<Q')


class FlexStateEncoder:
    """Serialized FlexStates of one arm: a CDR template (cdr.flex_state_layout) refilled in place; `fill` returns
    the bytes to publish (Publisher.publish(bytes))."""

    def __init__(self, layout, frame_id: str, outputs=None):
        """outputs: the plant's ArmOutputs (links' tip deflections, end effector, energies), or None for a state
        of joints only (the hardware bridge)."""
        self.layout = layout
        self.qi = np.asarray(layout.q_index)
        self.calc = StateOutputs(outputs.model) if outputs is not None else None
        infos = list(outputs.links) if outputs is not None else []
        self.cdr = cdr = flex_state_layout(layout, frame_id, [(i.name, i.planes, i.freqs_hz, i.mode_tip_displacement)
                                                              for i in infos])
        self._q, self._qd, self._tau = cdr.view('position'), cdr.view('velocity'), cdr.view('effort')
        self._step = cdr.view('step')
        self._sec, self._nsec = cdr.view('stamp.sec'), cdr.view('stamp.nanosec')
        self._links = [(info, cdr.view(f'links[{k}].modal_position'), cdr.view(f'links[{k}].modal_velocity'),
                        cdr.view(f'links[{k}].tip_deflection'), cdr.view(f'links[{k}].tip_rotation'),
                        cdr.view(f'links[{k}].elastic_energy')) for k, info in enumerate(infos)]
        self._pose, self._twist = cdr.view('end_effector_pose'), cdr.view('end_effector_twist')
        self._rigid, self._energies = cdr.view('end_effector_rigid_position'), cdr.view('energies')

    def fill(self, z, zd, tau, step: int, t_ns: int) -> bytes:
        self._sec[0], self._nsec[0] = divmod(int(t_ns), 1_000_000_000)
        self._step[0] = step
        self._q[:] = z[self.qi]
        self._qd[:] = zd[self.qi]
        self._tau[:] = tau
        for info, mp, mv, td, tr, e in self._links:
            dl = z[info.slice]
            mp[:] = dl
            mv[:] = zd[info.slice]
            td[:] = info.phi_tip @ dl
            tr[:] = info.theta_tip @ dl
            e[0] = info.elastic_energy(dl)
        if self.calc is not None:
            o = self.calc.compute(z, zd)
            self._pose[:3] = o[EE_P:EE_P + 3]
            self._pose[3:] = o[EE_Q:EE_Q + 4]
            self._twist[:3] = o[EE_V:EE_V + 3]
            self._twist[3:] = o[EE_W:EE_W + 3]
            self._rigid[:] = o[EE_RIGID:EE_RIGID + 3]
            self._energies[:] = (o[EN_KIN], o[EN_EL], o[EN_GR])
        return bytes(self.cdr.buf)


@dataclass
class DecodedState:
    z: np.ndarray
    zd: np.ndarray
    tau: np.ndarray          # the effort in the message (zeros if it has none)
    t: float                 # s, header stamp
    stamp_ns: int
    step: int
    has_modes: bool          # False: joints only (modal coordinates set to zero)
    tip: np.ndarray = None   # (3,) end_effector_pose.position (m)
    rigid_tip: np.ndarray = None   # (3,) end_effector_rigid_position (m)


def stamp_seconds(stamp) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def check_arm(msg, layout) -> str:
    """'' if the message is of the layout's arm; a note naming both ids if it is another arm's with the same layout
    (accepted); ValueError if it has no arm_id or another arm's of another layout (module docstring)."""
    if not msg.arm_id:
        raise ValueError('state without arm_id: the sender does not say which arm it is')
    if not layout.arm_id or msg.arm_id == layout.arm_id:
        return ''
    theirs = {lk.link_name: len(lk.modal_position) for lk in msg.links}
    ours = {lk.name: lk.n_modes for lk in layout.flexible_links}
    why = ''
    if sorted(msg.joint_names) != sorted(layout.joint_names):
        why = f'joints {list(msg.joint_names)}, this arm has {list(layout.joint_names)}'
    elif theirs and theirs != ours:
        why = f'modes per link {theirs}, this arm has {ours}'
    if why:
        raise ValueError(f'state of arm {msg.arm_id!r}, this node runs {layout.arm_id!r} ({why})')
    return (f'states of arm {msg.arm_id!r} accepted by this node of arm {layout.arm_id!r}: the same layout '
            f'(joints {list(layout.joint_names)}' + (f', modes per link {ours})' if theirs else ', joints only)'))


def decode_state(msg, layout, note=None) -> DecodedState:
    """(z, zd, ...) of `layout` from a FlexState; ValueError naming what does not fit (module docstring).
    note(arm_id, text): called when the state is another arm's of the same layout (accepted)."""
    n = layout.n_joints
    other = check_arm(msg, layout)
    if other and note is not None:
        note(msg.arm_id, other)
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
    why = layout.implausible(z, zd)
    if why:
        raise ValueError(why)
    tau = np.asarray(msg.effort, dtype=float) if len(msg.effort) else np.zeros(n)
    if order is not None and len(msg.effort):
        tau = tau[order]
    if not np.all(np.isfinite(tau)):
        raise ValueError('non-finite effort')
    st = msg.header.stamp
    t = stamp_seconds(st)
    if not math.isfinite(t):
        raise ValueError('bad stamp')
    p, r = msg.end_effector_pose.position, msg.end_effector_rigid_position
    return DecodedState(z, zd, tau, t, int(st.sec) * 1_000_000_000 + int(st.nanosec), int(msg.step), has_modes,
                        np.array([p.x, p.y, p.z]), np.array([r.x, r.y, r.z]))


class FlexStateDecoder:
    """decode_state for serialized FlexStates (raw subscriptions): the first message of a fitting shape is decoded
    the slow way (rclpy deserialization + decode_state's rule) and its layout learnt; later messages with the same
    fixed bytes (sizes, names, arm_id, frame) are read with numpy at the learnt offsets (the same values, ~20x
    faster); any other message takes the slow path again."""

    def __init__(self, layout, note=None):
        """note(text): told once per arm_id when another arm's states of the same layout are accepted."""
        self.layout = layout
        self.cdr = None
        self.fast = 0
        self.slow = 0
        self.note = note
        self.other_arms = {}            # arm_id -> the note: another arm's states accepted (same layout)

    def decode(self, data) -> DecodedState:
        cdr = self.cdr
        if cdr is not None and cdr.matches(data):
            self.fast += 1
            # every float64 of the message is 8-byte aligned from the CDR origin (offset 4): one view, one gather
            f64 = np.frombuffer(data, dtype='<f8', count=self._n64, offset=4)
            z, zd = f64[self._iz], f64[self._izd]
            if self._zero_modes is not None:            # joints only: modal coordinates zero
                z[self._zero_modes] = 0.0
                zd[self._zero_modes] = 0.0
            tau, ee = f64[self._itau], f64[self._iee]
            if not (np.all(np.isfinite(z)) and np.all(np.isfinite(zd))):
                raise ValueError('non-finite value')
            why = self.layout.implausible(z, zd)
            if why:
                raise ValueError(why)
            if not np.all(np.isfinite(tau)):
                raise ValueError('non-finite effort')
            sec, nsec = _STAMP.unpack_from(data, 4)
            return DecodedState(z, zd, tau, sec + 1e-9 * nsec, sec * 1_000_000_000 + nsec,
                                _U64.unpack_from(data, self._step_off)[0], bool(self._flex), ee[:3], ee[3:])
        self.slow += 1
        msg = deserialize_message(bytes(data), FlexState)
        st = decode_state(msg, self.layout, self._other_arm)
        self._learn(msg)
        return st

    def _other_arm(self, arm, text):
        """Another arm's states of the same layout: told once per arm (the fast path sees the same arm_id bytes)."""
        if arm not in self.other_arms:
            self.other_arms[arm] = text
            if self.note is not None:
                self.note(text)

    def _learn(self, msg):
        """Remember the layout of a message decode_state accepted, if the fast path can read it (arm order)."""
        lay = self.layout
        if tuple(msg.joint_names) != tuple(lay.joint_names) or len(msg.effort) != lay.n_joints:
            return
        flex = lay.flexible_links if len(msg.links) else ()         # no links at all: joints only
        if [lk.link_name for lk in msg.links] != [lk.name for lk in flex]:
            return
        if any(len(m.frequencies) != lk.n_modes or len(m.mode_tip_displacement) != lk.n_modes
               or len(m.mode_plane) != lk.n_modes for m, lk in zip(msg.links, flex)):
            return
        self._flex = flex
        cdr = flex_state_layout(lay if msg.arm_id == lay.arm_id else _with_arm_id(lay, msg.arm_id),
                                msg.header.frame_id,
                                [(m.link_name, list(m.mode_plane), list(m.frequencies),
                                  list(m.mode_tip_displacement)) for m in msg.links])

        def idx(name):              # indices of a field's float64s in the message seen as float64 from offset 4
            o, n, _ = cdr.fields[name]
            assert (o - 4) % 8 == 0
            return np.arange(n) + (o - 4) // 8
        self._n64 = (cdr.size - 4) // 8
        iz, izd = np.zeros(lay.n_coords, np.int64), np.zeros(lay.n_coords, np.int64)
        iz[lay.q_index], izd[lay.q_index] = idx('position'), idx('velocity')
        for k, lk in enumerate(flex):
            iz[lk.modes], izd[lk.modes] = idx(f'links[{k}].modal_position'), idx(f'links[{k}].modal_velocity')
        self._iz, self._izd, self._itau = iz, izd, idx('effort')
        self._iee = np.concatenate([idx('end_effector_pose')[:3], idx('end_effector_rigid_position')])
        self._zero_modes = lay.mode_index if (not flex and lay.n_modes) else None
        self._step_off = cdr.fields['step'][0]
        self.cdr = cdr


def _with_arm_id(layout, arm_id):
    """The layout as a message of a sender that leaves arm_id empty carries it (fast-path template only)."""
    return dataclasses.replace(layout, arm_id=arm_id)
