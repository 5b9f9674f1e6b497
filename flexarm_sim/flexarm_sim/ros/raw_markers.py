"""The plant's MarkerArray as serialized bytes, updated in place (no ROS node; rclpy serialization only).

Why: publishing a MarkerArray converts every geometry_msgs/Point into C inside rclpy, one Python object per
point, while holding the GIL; with a 300-point trail at 30 Hz those pauses stalled the 1 kHz loop thread
(bench/bench_plant_timing.py: p99 period error 258 us with markers, 10 us without). The markers have a fixed
shape for a given arm and trail length, so their CDR serialization is a fixed byte layout: `MarkerEncoder`
serializes one template message (markers_from_geometry, below: the message itself) with
sentinel coordinates and stamps, finds where they landed, and afterwards writes coordinates and stamps into
that buffer with numpy and hands `bytes` to Publisher.publish (rclpy's raw publish).

The trail always has `trail_length` points: until it is full, its oldest point is repeated (a LINE_STRIP
through repeated points draws the same line). Offsets are verified against the template at construction;
`MarkerEncoder.build` returns None when the layout cannot be located (the caller then publishes messages).
"""
from __future__ import annotations

import numpy as np
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from .cdr import serialize
from .messages import stamp

_SEC, _NSEC = 1515870810, 987654321          # sentinel stamp (int32 sec, uint32 nanosec)
_CDR_LE = b'\x00\x01'                         # CDR little-endian encapsulation


def _sentinels(marker_index: int, n_points: int) -> np.ndarray:
    """Distinct, exactly representable coordinates for the template: (n_points, 3)."""
    return (1.0e7 * (marker_index + 1) + 0.25 + np.arange(3 * n_points, dtype=float)).reshape(n_points, 3)


class MarkerEncoder:
    def __init__(self, buf: bytearray, point_offsets, stamp_offsets, point_counts):
        self._buf = buf
        self._points = [np.frombuffer(buf, dtype='<f8', count=3 * k, offset=o).reshape(k, 3) if k else None
                        for o, k in zip(point_offsets, point_counts)]
        self._stamps = [(np.frombuffer(buf, dtype='<i4', count=1, offset=o),
                         np.frombuffer(buf, dtype='<u4', count=1, offset=o + 4)) for o in stamp_offsets]
        self.point_counts = tuple(point_counts)

    @classmethod
    def build(cls, n_joints: int, line_points, trail_length: int, frame_id: str, ns: str = 'flexarm'):
        """Encoder for an arm with n_joints, centre lines of line_points[j] points, a trail of trail_length."""
        counts = list(line_points) + [n_joints + 1, trail_length if trail_length >= 2 else 0]
        lines = [_sentinels(j, k) for j, k in enumerate(line_points)]
        jt = _sentinels(len(lines), n_joints + 1)
        trail = list(_sentinels(len(lines) + 1, counts[-1])) if counts[-1] else []
        t_ns = _SEC * 1_000_000_000 + _NSEC
        msg = markers_from_geometry(jt[:-1], lines, jt[-1], trail, t_ns, frame_id, ns)
        buf = bytearray(serialize(msg))          # padding zero: the same markers, the same bytes
        if bytes(buf[:2]) != _CDR_LE:
            return None
        point_offsets = []
        for m, k in enumerate(counts):
            if k == 0:
                point_offsets.append(0)
                continue
            expect = _sentinels(m, k)
            o = bytes(buf).find(expect[0, 0].tobytes())
            if o < 0 or o + 24 * k > len(buf) or not np.array_equal(
                    np.frombuffer(buf, dtype='<f8', count=3 * k, offset=o), expect.ravel()):
                return None
            point_offsets.append(o)
        pattern = np.array([_SEC], '<i4').tobytes() + np.array([_NSEC], '<u4').tobytes()
        stamp_offsets, o = [], bytes(buf).find(pattern)
        while o >= 0:
            stamp_offsets.append(o)
            o = bytes(buf).find(pattern, o + 1)
        if len(stamp_offsets) != len(counts):
            return None
        return cls(buf, point_offsets, stamp_offsets, counts)

    def encode(self, joints, lines, tip, trail, t_ns: int) -> bytes:
        """Serialized MarkerArray: joints (n, 3), lines [(k_j, 3)], tip (3,), trail (m, 3) newest last, m >= 0."""
        pts = self._points
        for j, line in enumerate(lines):
            pts[j][:] = line
        pj = pts[len(lines)]
        pj[:-1] = joints
        pj[-1] = tip
        tr = pts[-1]
        if tr is not None:
            trail = np.asarray(trail, dtype=float).reshape(-1, 3)
            k = min(len(trail), len(tr))
            if k == 0:
                tr[:] = tip
            else:
                tr[len(tr) - k:] = trail[len(trail) - k:]
                tr[:len(tr) - k] = trail[len(trail) - k]
        sec, nsec = divmod(int(t_ns), 1_000_000_000)
        for s, n in self._stamps:
            s[0] = sec
            n[0] = nsec
        return bytes(self._buf)


def _points(arr):
    return [Point(x=float(a), y=float(b), z=float(c)) for a, b, c in arr]


def markers_from_geometry(joints, lines, tip, trail, t_ns: int, frame_id: str, ns: str = 'flexarm') -> MarkerArray:
    """The plant's MarkerArray from the arm's geometry: joint origins (n, 3), centre lines [(k, 3)] (LINE_STRIP, ids
    0..n-1), joints and tip (SPHERE_LIST, id 100), trail [(3,)] (LINE_STRIP, id 101)."""
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
