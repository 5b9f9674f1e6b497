"""The one codec of the sensor messages: encode (the plant) and decode (the state estimator) with one tolerance rule.

    /joint_states      sensor_msgs/JointState        encoders and drives: angle, velocity, measured torque
    /flexarm/strain    flexarm_msgs/StrainGauges     strain per gauge, with each gauge's geometry
    /flexarm/tip_imu   sensor_msgs/Imu               linear acceleration (specific force) in the tip frame; no
                                                     orientation, no rates (their covariances' first entry -1, the
                                                     REP 145 convention for "not provided")

Decoding raises ValueError saying what does not fit: joints matched by name to the arm's (every joint present, each
name at most once, at most MAX_NAMES names; positions finite; velocity/effort optional, finite when given), strain
gauges matched by name to the configured ones (every configured gauge present, each name once, finite values),
accelerations finite. Messages longer than MAX_READING_BYTES are refused unread (`too_long`). A stamp ahead of the
receiver's clock is the receiver's to refuse (it has the clock: nodes/estimator_node.py).

Serialized readings (raw subscriptions) are decoded by `JointStateReader`, `StrainReader`, `AccelReader`: the first
reading of a shape is deserialized (rclpy) and decoded by the rule above, and its fixed bytes learnt (sizes, names,
frame, arm_id, the gauges' geometry); later readings with the same fixed bytes are read with numpy at the learnt
offsets and checked the same way (finite values) - rclpy's deserialization into message objects was a fifth of the
estimator's readings thread (py-spy, strain + accelerometer, 2026-12-03); any other reading takes the rule again.
"""
from __future__ import annotations

import array
import math

import numpy as np
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Imu, JointState

from flexarm_msgs.msg import StrainGauges

from ..model.sensing import PLANE_NAMES
from .cdr import imu_layout, joint_state_layout, strain_gauges_layout


MAX_NAMES = 1024                   # joints / gauges named in one reading
MAX_READING_BYTES = 256 * 1024     # a serialized reading beyond this is refused before it is read


def too_long(data) -> str:
    """Why a serialized reading is refused unread ('' if it may be read)."""
    return f'{len(data)} bytes (at most {MAX_READING_BYTES})' if len(data) > MAX_READING_BYTES else ''


def _unique_names(names, what):
    if len(names) > MAX_NAMES:
        raise ValueError(f'{len(names)} {what} names (at most {MAX_NAMES})')
    if len(set(names)) != len(names):
        seen = set()
        dup = next(nm for nm in names if nm in seen or seen.add(nm))
        raise ValueError(f'{what} name {str(dup)[:60]!r} given twice')


def _set_stamp(stamp, t_ns: int):
    t_ns = int(t_ns)
    stamp.sec, stamp.nanosec = t_ns // 1_000_000_000, t_ns % 1_000_000_000


def stamp_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def tip_frame_id(joint_names) -> str:
    """Frame of the tip accelerometer: the deformed tip section of the last link."""
    return f'{joint_names[-1]}_link_tip'


class SensorEncoder:
    """Preallocated messages for the readings of SimulatedSensors (flexarm_sim/sensors.py)."""

    def __init__(self, model, cfg, arm_id: str = '', accel_variance: float = 0.0):
        n = model.n_joints
        self.js = JointState()
        self.js.name = list(model.spec.joint_names)
        self.strain = StrainGauges()
        st = self.strain
        st.arm_id = arm_id
        st.names = [g.name for g in cfg.gauges]
        st.link_names = [model.spec.joints[g.link].name + '_link' for g in cfg.gauges]
        st.positions = [float(g.x) for g in cfg.gauges]
        st.planes = [int(g.plane) for g in cfg.gauges]
        st.distances = [float(g.c) for g in cfg.gauges]
        self.imu = Imu()
        self.imu.header.frame_id = tip_frame_id(model.spec.joint_names)
        self.imu.orientation_covariance[0] = -1.0
        self.imu.angular_velocity_covariance[0] = -1.0
        cov = [0.0] * 9
        cov[0] = cov[4] = cov[8] = float(accel_variance)
        self.imu.linear_acceleration_covariance = cov
        self._n = n

    def joint_state(self, q, qd, effort, t_ns) -> JointState:
        m = self.js
        _set_stamp(m.header.stamp, t_ns)
        m.position = array.array('d', np.asarray(q, dtype=float).tobytes())
        m.velocity = array.array('d', np.asarray(qd, dtype=float).tobytes())
        m.effort = array.array('d', np.asarray(effort, dtype=float).tobytes())
        return m

    def strain_gauges(self, strain, variance, step, t_ns) -> StrainGauges:
        m = self.strain
        _set_stamp(m.header.stamp, t_ns)
        m.step = int(step)
        m.strain = array.array('d', np.asarray(strain, dtype=float).tobytes())
        m.variance = array.array('d', np.asarray(variance, dtype=float).tobytes())
        return m

    def accelerometer(self, accel, t_ns) -> Imu:
        m = self.imu
        _set_stamp(m.header.stamp, t_ns)
        a = [float(x) for x in accel]
        m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z = a
        return m


def decode_joint_state(msg, joint_names):
    """(q, qd | None, effort | None, t_ns) in the order of joint_names from a JointState (extra joints ignored)."""
    names = list(msg.name)
    _unique_names(names, 'joint')
    if len(msg.position) != len(names):
        raise ValueError(f'{len(names)} names but {len(msg.position)} positions')
    index = {nm: i for i, nm in enumerate(names)}
    missing = [nm for nm in joint_names if nm not in index]
    if missing:
        raise ValueError(f'joints {missing} missing (got {[str(x)[:40] for x in names[:8]]}'
                         f'{"..." if len(names) > 8 else ""})')
    order = [index[nm] for nm in joint_names]
    q = np.asarray(msg.position, dtype=float)[order]
    if not np.all(np.isfinite(q)):
        raise ValueError('non-finite position')

    def optional(values, what, plural):
        """An optional field (empty: not measured), in arm joint order."""
        if not len(values):
            return None
        if len(values) != len(names):
            raise ValueError(f'{len(values)} {plural} for {len(names)} joints')
        x = np.asarray(values, dtype=float)[order]
        if not np.all(np.isfinite(x)):
            raise ValueError(f'non-finite {what}')
        return x
    qd, eff = optional(msg.velocity, 'velocity', 'velocities'), optional(msg.effort, 'effort', 'efforts')
    return q, qd, eff, stamp_ns(msg.header.stamp)


def decode_strain(msg, gauges, arm_id: str = '', note=None):
    """(strain (len(gauges),), t_ns, step) in the order of the configured gauges (model.sensing.StrainGauge); a
    message without one of them, or with a gauge of other geometry, is refused. Another arm's message is accepted
    only with the geometry of every gauge given and equal to ours — the same gauges on the same links: the same
    layout, as flexstate.check_arm accepts another arm's states (a model-mismatch study: the plant simulates another
    arm than the estimator's model); note(arm_id, text) is then called. Refusing it made an estimator with strain
    gauges wait for ever in lock-step under `flexarm run --plant-arm`."""
    other = bool(msg.arm_id and arm_id and msg.arm_id != arm_id)
    names = list(msg.names)
    _unique_names(names, 'gauge')
    if len(msg.strain) != len(names):
        raise ValueError(f'{len(names)} gauge names but {len(msg.strain)} readings')
    if other and not (len(msg.positions) == len(msg.planes) == len(msg.distances) == len(names)):
        raise ValueError(f'strain of arm {msg.arm_id!r} without its gauges\' geometry, this node runs {arm_id!r}')
    index = {nm: i for i, nm in enumerate(names)}
    out = np.zeros(len(gauges))
    for k, g in enumerate(gauges):
        i = index.get(g.name)
        if i is None:
            raise ValueError(f'no reading of gauge {g.name} (got {[str(x)[:40] for x in names[:8]]}'
                             f'{"..." if len(names) > 8 else ""})')
        if len(msg.positions) == len(names) and not abs(msg.positions[i] - g.x) <= 1e-9 * max(1.0, abs(g.x)):
            raise ValueError(f'gauge {g.name} at {msg.positions[i]:g} m, configured at {g.x:g} m')
        if len(msg.planes) == len(names) and int(msg.planes[i]) != g.plane:
            raise ValueError(f'gauge {g.name} senses {PLANE_NAMES.get(int(msg.planes[i]), msg.planes[i])}, '
                             f'configured {PLANE_NAMES[g.plane]}')
        if len(msg.distances) == len(names) and not abs(msg.distances[i] - g.c) <= 1e-9 * max(1e-3, abs(g.c)):
            raise ValueError(f'gauge {g.name} at c = {msg.distances[i]:g} m from the neutral axis, configured '
                             f'{g.c:g} m')
        out[k] = msg.strain[i]
    if not np.all(np.isfinite(out)):
        raise ValueError('non-finite strain')
    if other and note is not None:
        note(msg.arm_id, f'strain of arm {msg.arm_id!r} accepted by this node of arm {arm_id!r}: the same gauges '
                         f'{[g.name for g in gauges]}')
    return out, stamp_ns(msg.header.stamp), int(msg.step)


def decode_accelerometer(msg):
    """((3,) specific force, t_ns) from an Imu message."""
    a = np.array([msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z], dtype=float)
    if not np.all(np.isfinite(a)):
        raise ValueError('non-finite acceleration')
    t = stamp_ns(msg.header.stamp)
    if not math.isfinite(t):
        raise ValueError('bad stamp')
    return a, t


# ---------------------------------------------------------------------------------------------- serialized readings
class _Reader:
    """A topic's serialized readings decoded (module docstring): `decode(data)` returns what the topic's decode_*
    returns, or raises ValueError (an unreadable message included)."""

    msg_type = None

    def __init__(self):
        self.cdr = None
        self.fast = 0
        self.slow = 0

    def decode(self, data):
        cdr = self.cdr
        if cdr is not None and cdr.matches(data):
            self.fast += 1
            return self._read(cdr, data)
        self.slow += 1
        try:
            msg = deserialize_message(bytes(data), self.msg_type)
        except Exception as e:  # noqa: BLE001 - whatever rclpy raises for bytes that are no such message
            raise ValueError(f'unreadable ({type(e).__name__})') from None
        out = self._decode(msg)
        self.cdr = self._learn(msg)
        return out


def _finite(x, what):
    if not np.all(np.isfinite(x)):
        raise ValueError(f'non-finite {what}')
    return x


class JointStateReader(_Reader):
    """decode_joint_state of serialized JointStates."""

    msg_type = JointState

    def __init__(self, joint_names):
        super().__init__()
        self.joint_names = list(joint_names)

    def _decode(self, msg):
        return decode_joint_state(msg, self.joint_names)

    def _learn(self, msg):
        names = list(msg.name)
        self.order = np.array([names.index(nm) for nm in self.joint_names])
        self.has = (len(msg.velocity) > 0, len(msg.effort) > 0)
        return joint_state_layout(names, msg.header.frame_id,
                                  [len(getattr(msg, f)) for f in ('position', 'velocity', 'effort')])

    def _read(self, cdr, data):
        q = _finite(cdr.view('position', data)[self.order], 'position')
        qd = _finite(cdr.view('velocity', data)[self.order], 'velocity') if self.has[0] else None
        eff = _finite(cdr.view('effort', data)[self.order], 'effort') if self.has[1] else None
        return q, qd, eff, cdr.stamp_ns(data)


class StrainReader(_Reader):
    """decode_strain of serialized StrainGauges (the learnt bytes hold the gauges' names and geometry, which the
    rule checked, and the arm_id: another arm's readings are told to `note` at their first reading, not at each)."""

    msg_type = StrainGauges

    def __init__(self, gauges, arm_id: str = '', note=None):
        super().__init__()
        self.gauges, self.arm_id, self.note = gauges, arm_id, note

    def _decode(self, msg):
        return decode_strain(msg, self.gauges, self.arm_id, self.note)

    def _learn(self, msg):
        names = list(msg.names)
        self.order = np.array([names.index(g.name) for g in self.gauges])
        return strain_gauges_layout(msg.header.frame_id, msg.arm_id, names, msg.link_names, msg.positions,
                                    msg.planes, msg.distances, len(msg.strain), len(msg.variance))

    def _read(self, cdr, data):
        y = _finite(cdr.view('strain', data)[self.order], 'strain')
        return y, cdr.stamp_ns(data), int(cdr.view('step', data)[0])


class AccelReader(_Reader):
    """decode_accelerometer of serialized Imu readings (orientation, rates and covariances not read)."""

    msg_type = Imu

    def _decode(self, msg):
        return decode_accelerometer(msg)

    def _learn(self, msg):
        return imu_layout(msg.header.frame_id)

    def _read(self, cdr, data):
        return _finite(np.array(cdr.view('linear_acceleration', data)), 'acceleration'), cdr.stamp_ns(data)
