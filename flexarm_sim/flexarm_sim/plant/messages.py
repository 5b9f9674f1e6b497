"""ROS messages of the plant, built from arrays (thin: no node, no I/O)."""
from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point
from sensor_msgs.msg import JointState
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from flexarm_msgs.msg import FlexState, LinkDeflection

from .outputs import ArmOutputs, quaternion_xyzw


def stamp(ns: int) -> Time:
    ns = int(ns)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_ns(t: Time) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def joint_state(names, q, qd, tau, t_ns: int) -> JointState:
    msg = JointState()
    msg.header.stamp = stamp(t_ns)
    msg.name = names
    msg.position = q.tolist()
    msg.velocity = qd.tolist()
    msg.effort = tau.tolist()
    return msg


def _f64_view(arr):
    """Writable float64 numpy view of an array.array('d') message field (same memory: no copy per message)."""
    return np.frombuffer(arr, dtype=np.float64)


class JointStateBuilder:
    """One preallocated sensor_msgs/JointState, refilled in place (array assignment, no per-message objects).
    Publish it before the next `fill` (rclpy serializes at publish)."""

    def __init__(self, names, q_index):
        import array
        n = len(names)
        self.qi = np.asarray(q_index)
        self.msg = msg = JointState()
        msg.name = list(names)
        msg.position, msg.velocity, msg.effort = (array.array('d', bytes(8 * n)) for _ in range(3))
        self._q, self._qd, self._tau = _f64_view(msg.position), _f64_view(msg.velocity), _f64_view(msg.effort)
        self._stamp = msg.header.stamp

    def fill(self, z, zd, tau, t_ns: int) -> JointState:
        t_ns = int(t_ns)
        self._stamp.sec, self._stamp.nanosec = t_ns // 1_000_000_000, t_ns % 1_000_000_000
        self._q[:] = z[self.qi]
        self._qd[:] = zd[self.qi]
        self._tau[:] = tau
        return self.msg


def flex_state(out: ArmOutputs, z, zd, tau, step: int, t_ns: int, frame_id: str) -> FlexState:
    m = out.model
    msg = FlexState()
    msg.header.stamp = stamp(t_ns)
    msg.header.frame_id = frame_id
    msg.step = int(step)
    msg.joint_names = out.joint_names
    qi = m.q_index
    msg.position = z[qi].tolist()
    msg.velocity = zd[qi].tolist()
    msg.effort = np.asarray(tau, dtype=float).tolist()
    links = []
    for info in out.links:
        dl, dld, tip, rot, e = out.link_values(info, z, zd)
        ld = LinkDeflection()
        ld.link_name = info.name
        ld.mode_plane = info.planes
        ld.modal_position = dl.tolist()
        ld.modal_velocity = dld.tolist()
        ld.frequencies = info.freqs_hz
        ld.mode_tip_displacement = info.mode_tip_displacement
        ld.tip_deflection.x, ld.tip_deflection.y, ld.tip_deflection.z = (float(x) for x in tip)
        ld.tip_rotation.x, ld.tip_rotation.y, ld.tip_rotation.z = (float(x) for x in rot)
        ld.elastic_energy = e
        links.append(ld)
    msg.links = links
    R, p, v, w, pr = out.end_effector(z, zd)
    pose = msg.end_effector_pose
    pose.position.x, pose.position.y, pose.position.z = (float(x) for x in p)
    qx, qy, qz, qw = (float(x) for x in quaternion_xyzw(R))
    pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = qx, qy, qz, qw
    tw = msg.end_effector_twist
    tw.linear.x, tw.linear.y, tw.linear.z = (float(x) for x in v)
    tw.angular.x, tw.angular.y, tw.angular.z = (float(x) for x in w)
    rp = msg.end_effector_rigid_position
    rp.x, rp.y, rp.z = (float(x) for x in pr)
    en = out.energies(z, zd)
    msg.kinetic_energy = float(en['kinetic'])
    msg.elastic_energy = float(en['elastic'])
    msg.gravity_energy = float(en['gravity'])
    return msg


def _points(arr):
    return [Point(x=float(a), y=float(b), z=float(c)) for a, b, c in arr]


def markers(out: ArmOutputs, z, trail, t_ns: int, frame_id: str, ns: str = 'flexarm') -> MarkerArray:
    """Centre line per link (LINE_STRIP, ids 0..n-1), joints (SPHERE_LIST, id 100), trail (LINE_STRIP, id 101)."""
    joints, lines, tip = out.geometry(z)
    return markers_from_geometry(joints, lines, tip, trail, t_ns, frame_id, ns)


def markers_from_geometry(joints, lines, tip, trail, t_ns: int, frame_id: str, ns: str = 'flexarm') -> MarkerArray:
    """`markers` from the arm's geometry: joint origins (n, 3), centre lines [(k, 3)], tip (3,)."""
    st = stamp(t_ns)
    arr = MarkerArray()
    result = []
    for j, line in enumerate(lines):
        mk = Marker()
        mk.header.stamp = st
        mk.header.frame_id = frame_id
        mk.ns = ns + '/links'
        mk.id = j
        mk.type = Marker.LINE_STRIP
        mk.action = Marker.ADD
        mk.pose.orientation.w = 1.0
        mk.scale.x = 0.02
        mk.color = ColorRGBA(r=0.2, g=0.5, b=0.9, a=1.0)
        mk.points = _points(line)
        result.append(mk)
    mk = Marker()
    mk.header.stamp = st
    mk.header.frame_id = frame_id
    mk.ns = ns + '/joints'
    mk.id = 100
    mk.type = Marker.SPHERE_LIST
    mk.action = Marker.ADD
    mk.pose.orientation.w = 1.0
    mk.scale.x = mk.scale.y = mk.scale.z = 0.05
    mk.color = ColorRGBA(r=0.9, g=0.4, b=0.1, a=1.0)
    mk.points = _points(np.vstack([joints, tip[None, :]]))
    result.append(mk)
    mk = Marker()
    mk.header.stamp = st
    mk.header.frame_id = frame_id
    mk.ns = ns + '/trail'
    mk.id = 101
    mk.type = Marker.LINE_STRIP
    mk.pose.orientation.w = 1.0
    mk.scale.x = 0.005
    mk.color = ColorRGBA(r=0.1, g=0.8, b=0.3, a=0.8)
    # trail: geometry_msgs/Point objects (kept by the caller, built once per sample) or (3,) arrays
    pts = [p if isinstance(p, Point) else Point(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in trail]
    mk.action = Marker.ADD if len(pts) >= 2 else Marker.DELETE
    mk.points = pts if len(pts) >= 2 else []
    result.append(mk)
    arr.markers = result
    return arr


LEVELS = {'ok': DiagnosticStatus.OK, 'warn': DiagnosticStatus.WARN, 'error': DiagnosticStatus.ERROR}


def diagnostics(name: str, hardware_id: str, level: str, message: str, values: dict, t_ns: int) -> DiagnosticArray:
    st = DiagnosticStatus()
    st.level = LEVELS[level]
    st.name = name
    st.hardware_id = hardware_id
    st.message = message
    kv = []
    for k, v in values.items():
        if isinstance(v, float):
            s = f'{v:.6g}'
        else:
            s = str(v)
        kv.append(KeyValue(key=k, value=s))
    st.values = kv
    arr = DiagnosticArray()
    arr.header.stamp = stamp(t_ns)
    arr.status = [st]
    return arr
