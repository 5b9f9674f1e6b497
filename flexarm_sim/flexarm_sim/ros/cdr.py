"""Fixed-shape CDR messages serialized and read with numpy (the hot path of the plant and the controllers).

rclpy converts every field of a message between Python and C at each publish and take (a FlexState: ~100 us, a
large share of a 1 kHz step). The messages of the data path have one fixed shape per arm (same joints, links,
mode counts, strings), so their serialized form (CDR, little endian, XCDR1 as rmw_fastrtps writes it: a 4-byte
encapsulation header, then every primitive aligned to its size from the start of the data) is a fixed byte layout.
`CdrLayout` writes a template once, remembering where each numeric field lands; afterwards a message is its
preallocated buffer with numbers written into numpy views (publish: Publisher.publish(bytes)), and a received one
(raw subscription) is read the same way after checking that its constant bytes (lengths, names, values written as
constants, e.g. a gauge's geometry) are the template's.

Layouts here: FlexState (flexstate.py uses it), JointState, Float64MultiArray, JointEffortCommand, StrainGauges and
Imu (the sensor readers of sensors.py build theirs from the first reading of a shape). Each is checked against
rclpy's own serialization in the tests.
"""
from __future__ import annotations

import struct

import numpy as np

CDR_LE = b'\x00\x01\x00\x00'


class CdrLayout:
    """A CDR template being written: `f64s(name, n)` reserves n float64 and records where; constant parts are
    written as they are. `finish()` freezes the template; `view(name)` is a float64 numpy view into `buf`."""

    def __init__(self):
        self._b = bytearray(CDR_LE)
        self._const = bytearray(b'\x01' * 4)      # 1 where the byte belongs to the fixed part (checked on read)
        self.fields = {}                          # name -> (offset, count, dtype)
        self.buf = None

    # ---------------------------------------------------------------- writing the template
    def _align(self, n):
        pad = (-(len(self._b) - 4)) % n
        self._b += b'\x00' * pad
        self._const += b'\x00' * pad              # padding: any value
        return len(self._b)

    def _put(self, data: bytes, const: bool):
        self._b += data
        self._const += (b'\x01' if const else b'\x00') * len(data)

    def u8s(self, values, name=None):
        self.u32(len(values))
        self._put(bytes(values), name is None)
        if name is not None:
            self.fields[name] = (len(self._b) - len(values), len(values), np.uint8)

    def u32(self, v, name=None):
        o = self._align(4)
        self._put(struct.pack('<I', v), name is None)
        if name is not None:
            self.fields[name] = (o, 1, np.uint32)

    def i32(self, v, name=None):
        o = self._align(4)
        self._put(struct.pack('<i', v), name is None)
        if name is not None:
            self.fields[name] = (o, 1, np.int32)

    def u64(self, v, name=None):
        o = self._align(8)
        self._put(struct.pack('<Q', v), name is None)
        if name is not None:
            self.fields[name] = (o, 1, np.uint64)

    def string(self, s: str):
        data = s.encode() + b'\x00'
        self.u32(len(data))
        self._put(data, True)

    def strings(self, items):
        self.u32(len(items))
        for s in items:
            self.string(s)

    def f64s(self, name, n, sequence=True, values=None):
        """n float64 (a sequence of n: with its length; else n plain fields, e.g. a Vector3); `values` given: these
        n values, fixed bytes a received message must repeat (e.g. a sensor's geometry)."""
        if sequence:
            self.u32(n)
        o = self._align(8) if n or not sequence else len(self._b)
        if values is None:
            self._put(b'\x00' * (8 * n), False)
        else:
            self._put(np.asarray(values, dtype='<f8').reshape(n).tobytes(), True)
        self.fields[name] = (o, n, np.float64)

    def stamp(self, name='stamp'):
        self.i32(0, name + '.sec')
        self.u32(0, name + '.nanosec')

    def finish(self):
        self.buf = bytearray(self._b)
        self.template = bytes(self._b)
        self.size = len(self.buf)
        self.fields = {k: (o, n, np.dtype(dt).newbyteorder('<')) for k, (o, n, dt) in self.fields.items()}
        # the fixed byte runs (lengths, strings, constants) a received message must repeat exactly
        runs, start = [], None
        for i, c in enumerate(self._const + b'\x00'):
            if c and start is None:
                start = i
            elif not c and start is not None:
                runs.append((start, i, self.template[start:i]))
                start = None
        self.const_runs = runs
        return self

    # ---------------------------------------------------------------- using it
    def view(self, name, buf=None):
        o, n, dt = self.fields[name]
        return np.frombuffer(self.buf if buf is None else buf, dtype=dt, count=n, offset=o)

    def matches(self, data) -> bool:
        """True if `data` (bytes of a received message) has this layout: same size, same fixed bytes."""
        if len(data) != self.size:
            return False
        mv = memoryview(data)
        for a, b, expect in self.const_runs:
            if mv[a:b] != expect:
                return False
        return True

    def stamp_ns(self, data, name='stamp') -> int:
        """The header stamp of a received message of this layout, in nanoseconds."""
        return int(self.view(name + '.sec', data)[0]) * 1_000_000_000 + int(self.view(name + '.nanosec', data)[0])

    def set_stamp(self, t_ns, name='stamp'):
        sec, nsec = divmod(int(t_ns), 1_000_000_000)
        self.view(name + '.sec')[0] = sec
        self.view(name + '.nanosec')[0] = nsec


def header(lay: CdrLayout, frame_id: str = ''):
    lay.stamp()
    lay.string(frame_id)


def joint_state_layout(names, frame_id: str = '', lengths=None) -> CdrLayout:
    """sensor_msgs/JointState with these joint names; lengths: of position, velocity, effort (default: one value per
    name each)."""
    lay = CdrLayout()
    header(lay, frame_id)
    lay.strings(list(names))
    for f, n in zip(('position', 'velocity', 'effort'), lengths or (len(names),) * 3):
        lay.f64s(f, n)
    return lay.finish()


def strain_gauges_layout(frame_id, arm_id, names, link_names, positions, planes, distances, n_strain: int,
                         n_variance: int) -> CdrLayout:
    """flexarm_msgs/StrainGauges of these gauges: names, links and geometry (positions, planes, distances) fixed
    bytes; step, n_strain strains and n_variance variances the message's values."""
    lay = CdrLayout()
    header(lay, frame_id)
    lay.u64(0, 'step')
    lay.string(arm_id)
    lay.strings(list(names))
    lay.strings(list(link_names))
    lay.f64s('positions', len(positions), values=list(positions))
    lay.u8s(bytes(int(p) for p in planes))
    lay.f64s('distances', len(distances), values=list(distances))
    lay.f64s('strain', n_strain)
    lay.f64s('variance', n_variance)
    return lay.finish()


def imu_layout(frame_id: str = '') -> CdrLayout:
    """sensor_msgs/Imu in the frame frame_id: every float64 a value."""
    lay = CdrLayout()
    header(lay, frame_id)
    lay.f64s('orientation', 4, sequence=False)                    # x y z w
    lay.f64s('orientation_covariance', 9, sequence=False)
    lay.f64s('angular_velocity', 3, sequence=False)
    lay.f64s('angular_velocity_covariance', 9, sequence=False)
    lay.f64s('linear_acceleration', 3, sequence=False)
    lay.f64s('linear_acceleration_covariance', 9, sequence=False)
    return lay.finish()


def float64_array_layout(n: int) -> CdrLayout:
    """std_msgs/Float64MultiArray with no dimensions, data_offset 0 and n values (ros2_control's commands)."""
    lay = CdrLayout()
    lay.u32(0)              # layout.dim: empty sequence
    lay.u32(0)              # layout.data_offset
    lay.f64s('data', n)
    return lay.finish()


def effort_command_layout(n: int) -> CdrLayout:
    """flexarm_msgs/JointEffortCommand with n efforts."""
    lay = CdrLayout()
    header(lay)
    lay.u64(0, 'step')
    lay.f64s('effort', n)
    return lay.finish()


def flex_state_layout(layout, frame_id: str, links) -> CdrLayout:
    """flexarm_msgs/FlexState of an ArmLayout; `links`: [(name, planes, frequencies, mode_tip_displacement)] of
    the flexible links, in order (their constant fields; frequencies and mode_tip_displacement are written into the
    template here)."""
    lay = CdrLayout()
    header(lay, frame_id)
    lay.u64(0, 'step')
    lay.string(layout.arm_id)
    lay.strings(list(layout.joint_names))
    n = layout.n_joints
    for f in ('position', 'velocity', 'effort'):
        lay.f64s(f, n)
    lay.u32(len(links))
    constants = []
    for k, (name, planes, freqs, tipd) in enumerate(links):
        m = len(planes)
        lay.string(name)
        lay.u8s(list(planes))
        lay.f64s(f'links[{k}].modal_position', m)
        lay.f64s(f'links[{k}].modal_velocity', m)
        lay.f64s(f'links[{k}].frequencies', m)
        lay.f64s(f'links[{k}].mode_tip_displacement', m)
        lay.f64s(f'links[{k}].tip_deflection', 3, sequence=False)
        lay.f64s(f'links[{k}].tip_rotation', 3, sequence=False)
        lay.f64s(f'links[{k}].elastic_energy', 1, sequence=False)
        constants.append((k, freqs, tipd))
    lay.f64s('end_effector_pose', 7, sequence=False)             # position x y z, orientation x y z w
    lay.f64s('end_effector_twist', 6, sequence=False)            # linear, angular
    lay.f64s('end_effector_rigid_position', 3, sequence=False)
    lay.f64s('energies', 3, sequence=False)                      # kinetic, elastic, gravity
    lay.finish()
    for k, freqs, tipd in constants:
        lay.view(f'links[{k}].frequencies')[:] = freqs
        lay.view(f'links[{k}].mode_tip_displacement')[:] = tipd
    lay.view('end_effector_pose')[6] = 1.0                        # a unit quaternion until filled
    return lay


# ---------------------------------------------------------------------------------------- any message, zero padding
_PRIMITIVES = {'boolean': '?', 'octet': 'B', 'char': 'B', 'byte': 'B', 'uint8': 'B', 'int8': 'b', 'int16': 'h',
               'uint16': 'H', 'int32': 'i', 'uint32': 'I', 'int64': 'q', 'uint64': 'Q', 'float': 'f', 'double': 'd',
               'float32': 'f', 'float64': 'd'}


def serialize(msg) -> bytes:
    """A message's CDR (XCDR1, little endian: rmw_fastrtps's wire form) with every padding byte zero.

    rmw's own serializer skips padding without writing it (the bytes hold whatever its buffer held before), so the
    same message serialized twice can differ; published raw, these bytes are always the same (a lock-step run's
    recording compares byte for byte). rclpy reads them back as the message (test_ros_codec checks several types)."""
    out = bytearray(CDR_LE)
    _write(out, msg, None)
    return bytes(out)


def _align(out: bytearray, n: int):
    out += b'\x00' * ((-(len(out) - 4)) % n)


def _write(out: bytearray, value, ftype):
    if ftype is None or '/' in ftype and not ftype.startswith('sequence<'):
        for name, t in type(value).get_fields_and_field_types().items():
            _write(out, getattr(value, name), t)
        return
    if ftype.startswith('sequence<'):
        inner = ftype[len('sequence<'):-1].split(',')[0].strip()
        _align(out, 4)
        out += struct.pack('<I', len(value))
        _items(out, value, inner)
        return
    if ftype.endswith(']'):
        _items(out, value, ftype[:ftype.index('[')])
        return
    if ftype.startswith('string'):
        data = value.encode('utf-8') + b'\x00'
        _align(out, 4)
        out += struct.pack('<I', len(data)) + data
        return
    code = _PRIMITIVES.get(ftype)
    if code is None:
        raise TypeError(f'cdr.serialize: field type {ftype!r} is not supported')
    size = struct.calcsize(code)
    _align(out, size)
    if isinstance(value, (bytes, bytearray)):        # byte / char fields: a bytes object of length 1
        value = value[0]
    out += struct.pack('<' + code, value)


def _items(out: bytearray, values, ftype):
    code = _PRIMITIVES.get(ftype)
    if code is None:
        for v in values:
            _write(out, v, ftype)
        return
    size = struct.calcsize(code)
    if len(values):
        _align(out, size)
        if code == 'B' and isinstance(values, (bytes, bytearray)):
            out += bytes(values)
        else:
            out += struct.pack(f'<{len(values)}{code}', *[v if not isinstance(v, (bytes, bytearray)) else v[0]
                                                            for v in values])
