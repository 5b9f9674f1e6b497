"""ROS message helpers shared by every flexarm node: QoS profiles, stamps, /diagnostics, the raw JointState
encoder, and readers of the raw command messages (thin: no node, no I/O)."""
from __future__ import annotations

import math

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from std_msgs.msg import Float64MultiArray

from flexarm_msgs.msg import JointEffortCommand

from ..common.commands import MAX_REASON, Unreadable, clip
from .cdr import effort_command_layout, float64_array_layout, joint_state_layout

LEVELS = {'ok': DiagnosticStatus.OK, 'warn': DiagnosticStatus.WARN, 'error': DiagnosticStatus.ERROR}


def qos(depth: int, reliable: bool = True) -> QoSProfile:
    """KEEP_LAST(depth), VOLATILE, reliable (or best effort): every flexarm topic."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


def stamp(ns: int) -> Time:
    ns = int(ns)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_ns(t) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def diagnostic_value(v: float) -> str:
    """A float as a diagnostic value: 6 significant digits, or every digit (repr) from a magnitude of 1e6 on - an
    instant of plant time in real time is seconds since the epoch, and at 6 digits `command_end_s` read
    1.79619e+09, 2400 s off: `flexarm run` took the move as ending after the run and never judged its end."""
    return repr(v) if math.isfinite(v) and abs(v) >= 1e6 else f'{v:.6g}'


def diagnostics(name: str, hardware_id: str, level: str, message: str, values: dict, t_ns: int) -> DiagnosticArray:
    """One DiagnosticStatus (level 'ok' | 'warn' | 'error'; floats with 6 significant digits, those of magnitude
    >= 1e6 exactly (`diagnostic_value`); the message and every value at most common.commands.MAX_REASON characters,
    a value 4 times that)."""
    st = DiagnosticStatus(level=LEVELS[level], name=name, hardware_id=hardware_id, message=clip(message))
    st.values = [KeyValue(key=k, value=diagnostic_value(v) if isinstance(v, float) else clip(v, 4 * MAX_REASON))
                 for k, v in values.items()]
    arr = DiagnosticArray(status=[st])
    arr.header.stamp = stamp(t_ns)
    return arr


class JointStateEncoder:
    """Serialized sensor_msgs/JointState of fixed joints, refilled in place (cdr.py); publish the bytes."""

    def __init__(self, names, q_index=None, frame_id: str = ''):
        self.cdr = joint_state_layout(list(names), frame_id)
        self.qi = None if q_index is None else np.asarray(q_index)
        self._q, self._qd, self._tau = (self.cdr.view(f) for f in ('position', 'velocity', 'effort'))
        self._sec, self._nsec = self.cdr.view('stamp.sec'), self.cdr.view('stamp.nanosec')

    def fill(self, q, qd, tau, t_ns: int) -> bytes:
        """q, qd: joint values, or generalized coordinates when q_index was given."""
        self._sec[0], self._nsec[0] = divmod(int(t_ns), 1_000_000_000)
        if self.qi is not None:
            q, qd = q[self.qi], qd[self.qi]
        self._q[:], self._qd[:], self._tau[:] = q, qd, tau
        return bytes(self.cdr.buf)


MAX_COMMAND_OVERHEAD = 4096      # bytes of a command beyond its values (header, layout dimensions, labels)
MAX_REFERENCE_BYTES = 16 << 20   # a trajectory_msgs/JointTrajectory beyond this is refused unread


def _oversized(data, array=False) -> np.ndarray:
    """What the command rule sees of a message too long to read: as many values as it holds (a Float64MultiArray
    without layout dimensions: its count; otherwise as many as its bytes could hold), none of them a number (no
    memory: a broadcast view), so the rule refuses it naming the count."""
    count = (len(data) - 4) // 8
    if array and len(data) >= 16 and int.from_bytes(bytes(data[4:8]), 'little') == 0:
        count = int.from_bytes(bytes(data[12:16]), 'little')
    return np.broadcast_to(np.nan, (count,))


def _deserialized(data, msg_type):
    """The message rclpy reads from `data`, or `Unreadable` naming the type when they are no such message."""
    try:
        return deserialize_message(bytes(data), msg_type)
    except Exception as e:  # noqa: BLE001 - rclpy raises its RMWError (and others) for bytes that are no such message
        return Unreadable(f'unreadable {msg_type.__name__} ({type(e).__name__})')


def trajectory_counts(data):
    """(joint names, points) of a serialized trajectory_msgs/JointTrajectory, read from its CDR without deserializing
    it (points is None when the names are more than 4096: not counted further); ValueError if it is not one."""
    import struct
    n = len(data)

    def u32(o):
        if o + 4 > n:
            raise ValueError('truncated JointTrajectory')
        return struct.unpack_from('<I', data, o)[0], o + 4

    def align(o):
        return o + (-(o - 4)) % 4

    o = 4 + 8                                   # encapsulation, stamp
    length, o = u32(o)                          # frame_id
    o = align(o + length)
    names, o = u32(o)
    if names > 4096:
        return names, None
    for _ in range(names):
        length, o = u32(align(o))
        o += length
    points, _ = u32(align(o))
    return names, points


class CommandReader:
    """Values of raw std_msgs/Float64MultiArray (or flexarm_msgs/JointEffortCommand) commands: read in place when
    the message has the expected length and no layout dimensions (what controllers send), deserialized otherwise
    (the gate behind judges the values)."""

    def __init__(self, n_joints: int):
        self.array = float64_array_layout(n_joints)
        self.stamped = effort_command_layout(n_joints)

    def values(self, data) -> np.ndarray:
        if self.array.matches(data):
            return np.array(self.array.view('data', data))
        if len(data) > self.max_bytes:
            return _oversized(data, array=True)
        msg = _deserialized(data, Float64MultiArray)
        return msg if isinstance(msg, Unreadable) else np.asarray(msg.data, dtype=float)

    @property
    def max_bytes(self) -> int:
        """A command this long is refused unread: one of these joints is ~8 n bytes, layout dimensions included
        (a 10^6-element command took the plant's loop thread milliseconds to deserialize: 317 skipped periods)."""
        return MAX_COMMAND_OVERHEAD + 8 * len(self.array.view('data'))

    def stamped_command(self, data):
        """(step, stamp_ns, efforts) of a JointEffortCommand."""
        lay = self.stamped
        if lay.matches(data):
            return int(lay.view('step', data)[0]), lay.stamp_ns(data), np.array(lay.view('effort', data))
        if len(data) > self.max_bytes + 64:
            return 0, 0, _oversized(data)
        msg = _deserialized(data, JointEffortCommand)
        if isinstance(msg, Unreadable):
            return 0, 0, msg
        return int(msg.step), stamp_ns(msg.header.stamp), np.asarray(msg.effort, dtype=float)


class CommandWriter:
    """Serialized Float64MultiArray / JointEffortCommand of n joints (the controllers' commands)."""

    def __init__(self, n_joints: int):
        self.array = float64_array_layout(n_joints)
        self.stamped = effort_command_layout(n_joints)
        self._data = self.array.view('data')
        self._eff, self._step = self.stamped.view('effort'), self.stamped.view('step')
        self._sec, self._nsec = self.stamped.view('stamp.sec'), self.stamped.view('stamp.nanosec')

    def array_bytes(self, values) -> bytes:
        self._data[:] = values
        return bytes(self.array.buf)

    def stamped_bytes(self, step: int, stamp_ns_: int, values) -> bytes:
        self._step[0] = step
        self._sec[0], self._nsec[0] = divmod(int(stamp_ns_), 1_000_000_000)
        self._eff[:] = values
        return bytes(self.stamped.buf)
