"""The one FlexState codec (flexarm_sim/ros/flexstate.py) and the fixed-shape CDR layouts (ros/cdr.py), against
rclpy's own serialization and a FlexState built field by field here from the model (the reference)."""
import os

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from flexarm_msgs.msg import FlexState, JointEffortCommand, LinkDeflection
from flexarm_sim.arms import arm_id, shipped_arms_dir
from flexarm_sim.model import load_model
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.plant.outputs import ArmOutputs, quaternion_xyzw
from flexarm_sim.ros import cdr
from flexarm_sim.ros.flexstate import FlexStateDecoder, FlexStateEncoder, decode_state

ARMS = shipped_arms_dir()


def _arm(name):
    path = os.path.join(ARMS, name + '.yaml')
    model = load_model(path)
    return model, ArmLayout.of(model, arm_id(path, model.spec.name))


def reference_state(model, layout, out, z, zd, tau, step, t_ns, frame):
    """FlexState of the plant's contract, field by field, from the model's API (no codec code)."""
    msg = FlexState()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, 1_000_000_000)
    msg.header.frame_id = frame
    msg.step, msg.arm_id = step, layout.arm_id
    msg.joint_names = list(model.spec.joint_names)
    qi = model.q_index
    msg.position, msg.velocity, msg.effort = z[qi].tolist(), zd[qi].tolist(), list(tau)
    links = []
    for info in out.links:
        dl = z[info.slice]
        j, m = info.index, info.n_modes
        strain = 0.5 * float(dl @ model.data.stiffness[j, :m, :m] @ dl)       # + the curvature's quartic term
        if model.data.fs_active[j]:
            strain += 0.5 * np.einsum('abcd,a,b,c,d->', model.data.fs_K4[j, :m, :m, :m, :m], dl, dl, dl, dl)
        ld = LinkDeflection(link_name=info.name, mode_plane=info.planes, modal_position=dl.tolist(),
                            modal_velocity=zd[info.slice].tolist(), frequencies=info.freqs_hz,
                            mode_tip_displacement=info.mode_tip_displacement,
                            elastic_energy=strain)
        ld.tip_deflection.x, ld.tip_deflection.y, ld.tip_deflection.z = (info.phi_tip @ dl).tolist()
        ld.tip_rotation.x, ld.tip_rotation.y, ld.tip_rotation.z = (info.theta_tip @ dl).tolist()
        links.append(ld)
    msg.links = links
    R, p = model.tip_pose(z)
    pose = msg.end_effector_pose
    pose.position.x, pose.position.y, pose.position.z = p.tolist()
    (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w) = quaternion_xyzw(R).tolist()
    h = 1e-6
    v = (model.tip_pose(z + h * zd)[1] - model.tip_pose(z - h * zd)[1]) / (2 * h)
    msg.end_effector_twist.linear.x, msg.end_effector_twist.linear.y, msg.end_effector_twist.linear.z = v.tolist()
    zr = z.copy()
    zr[model.mode_index] = 0.0
    rp = model.tip_pose(zr)[1]
    msg.end_effector_rigid_position.x, msg.end_effector_rigid_position.y, msg.end_effector_rigid_position.z = \
        rp.tolist()
    en = model.energies(z, zd)
    msg.kinetic_energy, msg.elastic_energy, msg.gravity_energy = en['kinetic'], en['elastic'], en['gravity']
    return msg


def _random_state(model, rng):
    z = 0.01 * rng.standard_normal(model.n_coords)
    z[model.q_index] = rng.uniform(-2, 2, model.n_joints)
    zd = 0.1 * rng.standard_normal(model.n_coords)
    return z, zd, rng.uniform(-1, 1, model.n_joints)


@pytest.mark.parametrize('arm', ['deluca_two_link', 'spatial_3r', 'rigid_puma3'])
def test_encoded_state_is_the_reference_message(arm):
    model, layout = _arm(arm)
    out = ArmOutputs(model)
    enc = FlexStateEncoder(layout, 'world', out)
    rng = np.random.default_rng(3)
    for step, t_ns in ((0, 0), (7, 1_500_000_001), (2 ** 40, 2 ** 41 + 3)):
        z, zd, tau = _random_state(model, rng)
        data = enc.fill(z, zd, tau, step, t_ns)
        ref = reference_state(model, layout, out, z, zd, tau, step, t_ns, 'world')
        assert len(data) == len(serialize_message(ref))
        got = deserialize_message(data, FlexState)
        for f in ('step', 'arm_id', 'joint_names', 'kinetic_energy', 'elastic_energy', 'gravity_energy'):
            assert getattr(got, f) == pytest.approx(getattr(ref, f), rel=1e-9, abs=1e-12) if 'energy' in f \
                else getattr(got, f) == getattr(ref, f), f
        assert got.header == ref.header
        for f in ('position', 'velocity', 'effort'):
            assert list(getattr(got, f)) == list(getattr(ref, f)), f
        assert [lk.link_name for lk in got.links] == [lk.link_name for lk in ref.links]
        for a, b in zip(got.links, ref.links):
            assert list(a.mode_plane) == list(b.mode_plane)
            for f in ('modal_position', 'modal_velocity', 'frequencies', 'mode_tip_displacement'):
                assert list(getattr(a, f)) == list(getattr(b, f)), f
            for v in ('tip_deflection', 'tip_rotation'):
                assert np.allclose([getattr(getattr(a, v), c) for c in 'xyz'],
                                   [getattr(getattr(b, v), c) for c in 'xyz'], rtol=1e-12, atol=1e-15)
            assert a.elastic_energy == pytest.approx(b.elastic_energy, rel=1e-12, abs=1e-18)
        P = lambda m: [m.end_effector_pose.position.x, m.end_effector_pose.position.y, m.end_effector_pose.position.z,  # noqa: E731
                       m.end_effector_pose.orientation.x, m.end_effector_pose.orientation.y,
                       m.end_effector_pose.orientation.z, m.end_effector_pose.orientation.w,
                       m.end_effector_twist.linear.x, m.end_effector_twist.linear.y, m.end_effector_twist.linear.z,
                       m.end_effector_rigid_position.x, m.end_effector_rigid_position.y,
                       m.end_effector_rigid_position.z]
        assert np.allclose(P(got), P(ref), rtol=1e-7, atol=1e-9)


def test_decoders_agree_and_apply_one_rule():
    model, layout = _arm('deluca_two_link')
    enc = FlexStateEncoder(layout, 'base_link', ArmOutputs(model))
    dec = FlexStateDecoder(layout)
    rng = np.random.default_rng(4)
    for k in range(20):
        z, zd, tau = _random_state(model, rng)
        data = enc.fill(z, zd, tau, k, 10 ** 9 + k)
        fast = dec.decode(data)
        slow = decode_state(deserialize_message(data, FlexState), layout)
        for f in ('z', 'zd', 'tau'):
            assert np.array_equal(getattr(fast, f), getattr(slow, f)) and np.array_equal(getattr(fast, f),
                                                                                          {'z': z, 'zd': zd, 'tau': tau}[f])
        assert (fast.t, fast.stamp_ns, fast.step, fast.has_modes) == (slow.t, slow.stamp_ns, slow.step, True)
    assert dec.slow == 1 and dec.fast == 19                    # the first one teaches the layout
    bad = enc.fill(np.full(model.n_coords, np.nan), zd, tau, 0, 0)
    with pytest.raises(ValueError, match='non-finite'):
        dec.decode(bad)
    # another arm's state: refused by both paths
    other_model, other = _arm('spatial_3r')
    data = FlexStateEncoder(other, 'base_link', ArmOutputs(other_model)).fill(
        np.zeros(other.n_coords), np.zeros(other.n_coords), np.zeros(3), 0, 0)
    with pytest.raises(ValueError, match='arm'):
        dec.decode(data)
    # joints only (the hardware bridge) and joints in another order: accepted by the rule
    joints_only = FlexStateEncoder(layout, 'base_link')
    js = joints_only.fill(z, zd, tau, 1, 5)
    dec = FlexStateDecoder(layout)
    for k in range(3):                                        # slow path, then the learnt fast path
        st = dec.decode(joints_only.fill(z, zd, tau, k, 5))
        assert not st.has_modes and np.array_equal(st.z[layout.q_index], z[layout.q_index])
        assert np.all(st.z[layout.mode_index] == 0.0) and np.all(st.zd[layout.mode_index] == 0.0)
    assert (dec.slow, dec.fast) == (1, 2)
    msg = deserialize_message(js, FlexState)
    msg.joint_names = list(reversed(msg.joint_names))
    msg.position, msg.velocity = list(reversed(msg.position)), list(reversed(msg.velocity))
    msg.effort = list(reversed(msg.effort))
    st = decode_state(msg, layout)
    assert np.array_equal(st.z[layout.q_index], z[layout.q_index])
    for change, words in ((dict(position=[0.0]), 'positions'), (dict(joint_names=['a', 'b']), 'joints'),
                          (dict(effort=[1.0, 2.0, 3.0]), 'efforts')):
        m = deserialize_message(js, FlexState)
        for k2, v in change.items():
            setattr(m, k2, v)
        with pytest.raises(ValueError, match=words):
            decode_state(m, layout)
    m = deserialize_message(enc.fill(z, zd, tau, 0, 0), FlexState)
    m.links = m.links[:1]
    with pytest.raises(ValueError, match='elbow_link'):
        decode_state(m, layout)


@pytest.mark.parametrize('names', [['shoulder', 'elbow'], ['a', 'b', 'c']])
def test_small_layouts_are_rclpy_serialization(names):
    n = len(names)
    vals = np.arange(3 * n, dtype=float) * 1.5 - 2.0
    lay = cdr.joint_state_layout(names)
    lay.set_stamp(1_234_567_890_987)
    lay.view('position')[:] = vals[:n]
    lay.view('velocity')[:] = vals[n:2 * n]
    lay.view('effort')[:] = vals[2 * n:]
    js = deserialize_message(bytes(lay.buf), JointState)
    assert list(js.name) == names and list(js.position) == list(vals[:n]) and list(js.effort) == list(vals[2 * n:])
    assert (js.header.stamp.sec, js.header.stamp.nanosec) == (1234, 567_890_987)
    assert len(lay.buf) == len(serialize_message(js))
    cmd = cdr.float64_array_layout(n)
    ref = serialize_message(Float64MultiArray(data=list(vals[:n])))
    assert cmd.matches(ref) and np.array_equal(cmd.view('data', ref), vals[:n])
    assert not cmd.matches(serialize_message(Float64MultiArray(data=list(vals[:n + 1]))))
    eff = cdr.effort_command_layout(n)
    msg = JointEffortCommand(step=2 ** 33 + 1, effort=list(vals[:n]))
    msg.header.stamp.sec, msg.header.stamp.nanosec = 5, 6
    ref = serialize_message(msg)
    assert eff.matches(ref) and eff.view('step', ref)[0] == 2 ** 33 + 1
    assert np.array_equal(eff.view('effort', ref), vals[:n])


def test_serialize_writes_zero_padding_and_reads_back_with_rclpy():
    """cdr.serialize: the CDR rmw writes (rclpy deserializes it to an equal message; byte for byte equal to rmw's own
    serialization wherever rmw writes a byte), with the alignment padding zero where rmw leaves what its buffer held
    (a marker template or a reference published twice could differ: lock-step recordings compare bytes)."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from geometry_msgs.msg import Point
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Imu
    from std_msgs.msg import ColorRGBA
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    from visualization_msgs.msg import Marker, MarkerArray
    from flexarm_sim.ros.cdr import serialize
    msgs = [
        MarkerArray(markers=[Marker(ns='flexarm/links', id=3, points=[Point(x=1.5), Point(y=-2.0)],
                                    colors=[ColorRGBA(r=0.5, a=1.0)], text='h\u00e9', frame_locked=True),
                             Marker(ns='x')]),
        JointTrajectory(joint_names=['a', 'bb', 'ccc'],
                        points=[JointTrajectoryPoint(positions=[1.0, 2.0, 3.0], velocities=[0.1, 0.2, 0.3])]),
        DiagnosticArray(status=[DiagnosticStatus(level=b'\x02', name='n', hardware_id='hw',
                                                 values=[KeyValue(key='k', value='v')])]),
        Imu(orientation_covariance=[float(i) for i in range(9)]),
    ]
    msgs[1].header.frame_id = 'base'
    msgs[1].header.stamp.sec = 7
    for m in msgs:
        a = serialize(m)
        assert serialize(m) == a and deserialize_message(a, type(m)) == m
        ref = serialize_message(m)
        assert len(ref) >= len(a)          # rmw's buffer may carry a tail past the message
        pad = _padding_offsets(m)
        assert pad or isinstance(m, Imu)      # strings and bytes before aligned fields: padding
        assert all(a[i] == ref[i] for i in range(len(a)) if i not in pad), type(m).__name__
        assert all(a[i] == 0 for i in pad)


def _padding_offsets(msg):
    """Offsets of the alignment padding in cdr.serialize(msg): serialized again with 0xAB padding, the bytes that
    differ."""
    from flexarm_sim.ros import cdr
    zero = cdr.serialize(msg)
    real = cdr._align
    try:
        cdr._align = lambda out, n: out.extend(b'\xab' * ((-(len(out) - 4)) % n))
        marked = cdr.serialize(msg)
    finally:
        cdr._align = real
    assert len(marked) == len(zero)
    return {i for i, (x, y) in enumerate(zip(zero, marked)) if x != y}


def test_oversized_inputs_are_refused_unread_and_reasons_bounded():
    """Twenty 10^6-element commands made the plant's loop thread deserialize 8 MB each (317 skipped periods): a
    command longer than its joints need is refused by the command rule without being read, naming its count. A
    joint state naming a joint twice, or 10^5 joints, is refused (the last duplicate won before). A diagnostics
    message holds at most MAX_REASON characters of a reason (a 10^6-name reference gave a 10.9 MB one)."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from flexarm_sim.common.commands import MAX_REASON, check_command
    from flexarm_sim.ros.cdr import serialize
    from flexarm_sim.ros.messages import CommandReader, diagnostics
    from flexarm_sim.ros.sensors import decode_joint_state
    reader = CommandReader(2)
    data = serialize(Float64MultiArray(data=[0.5] * 10 ** 6))
    values = reader.values(data)
    assert values.shape == (10 ** 6,) and values.strides == (0,)          # a view of nothing: not read
    assert check_command(values, -np.ones(2), np.ones(2))[1] == 'expected 2 values, got 1000000'
    assert reader.values(serialize(Float64MultiArray(data=[0.5, -0.5]))).tolist() == [0.5, -0.5]
    assert reader.values(serialize(Float64MultiArray(data=[0.5] * 3))).tolist() == [0.5] * 3    # small: read
    step, stamp, eff = reader.stamped_command(data)
    assert check_command(eff, -np.ones(2), np.ones(2))[0] is None
    for names, words in ((['shoulder', 'shoulder'], 'given twice'), ([f'j{i}' for i in range(10 ** 5)], '100000')):
        with pytest.raises(ValueError, match=words):
            decode_joint_state(JointState(name=names, position=[0.0] * len(names)), ['shoulder', 'elbow'])
    st = diagnostics('n', 'h', 'warn', 'x' * 10 ** 6, {'last_reject_reason': 'y' * 10 ** 6}, 0).status[0]
    assert len(st.message) <= MAX_REASON + 40 and len(st.values[0].value) <= 4 * MAX_REASON + 40
    assert st.message.endswith('(1000000 characters)')


def test_commands_that_are_no_such_message_are_refused_by_the_rule():
    """Bytes rclpy cannot read as the command's type (its RMWError escaped the plant's and the bridge's
    subscription callbacks) reach the one rule as `Unreadable`: refused naming the type, counted by every inbox the
    plant and the bridge have (the gate, the lock-step inbox, the due queue), the previous command kept."""
    from flexarm_sim.common.commands import LatestCommand, Unreadable, check_command
    from flexarm_sim.plant.commands import DueCommands, LockstepInbox
    from flexarm_sim.ros.messages import CommandReader
    reader = CommandReader(2)
    garbage = b'\x00\x01\x00\x00' + b'\xff' * 7
    values = reader.values(garbage)
    assert isinstance(values, Unreadable) and values.why == 'unreadable Float64MultiArray (RMWError)'
    step, stamp, eff = reader.stamped_command(garbage)
    assert (step, stamp) == (0, 0) and eff.why == 'unreadable JointEffortCommand (RMWError)'
    assert check_command(values, -np.ones(2), np.ones(2)) == (None, values.why, False)
    gate = LatestCommand(-np.ones(2), np.ones(2))
    assert gate.submit([0.5, 0.5], 0.0) == (True, '')
    assert gate.submit(values, 1.0) == (False, values.why) and gate.rejected == 1
    assert gate.get()[0].tolist() == [0.5, 0.5]
    inbox, due = LockstepInbox(np.ones(2)), DueCommands(np.ones(2), max_ahead=8)
    assert inbox.submit(0, 0, eff) == (False, eff.why) and inbox.rejected == 1
    assert due.submit(5, 1, eff, 4) == ('refused', eff.why) and due.rejected == 1


def test_strain_of_another_arm_is_accepted_only_with_the_same_gauges():
    """A model-mismatch study (`flexarm run --plant-arm`) has the plant simulate another arm (its own arm_id) than the
    estimator's model. Its strain readings are accepted when every configured gauge is in the message with the same
    geometry (the same layout: as check_arm accepts another arm's states), with a note; without the geometry, or
    with another gauge's geometry, they are refused. (Refused whatever their gauges, an estimator with strain gauges
    waited for ever in lock-step.)"""
    from flexarm_sim.model.sensing import parse_gauge
    from flexarm_sim.ros.sensors import SensorEncoder, decode_strain

    class Cfg:
        pass
    model = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    gauges = [parse_gauge(model, 'shoulder@0.05'), parse_gauge(model, 'elbow@0.05')]
    cfg = Cfg()
    cfg.gauges = gauges
    ours, theirs = 'deluca_two_link:aaaa', 'deluca_two_link:bbbb'
    msg = SensorEncoder(model, cfg, arm_id=theirs).strain_gauges([1e-5, -2e-5], [0.0, 0.0], 7, 10**9)
    notes = []
    y, t_ns, step = decode_strain(msg, gauges, ours, lambda arm, text: notes.append((arm, text)))
    assert np.allclose(y, [1e-5, -2e-5]) and t_ns == 10**9 and step == 7
    assert len(notes) == 1 and notes[0][0] == theirs and 'accepted' in notes[0][1]
    assert decode_strain(msg, gauges, theirs, lambda *a: notes.append(a))[2] == 7 and len(notes) == 1   # own arm
    other = [parse_gauge(model, 'shoulder@0.10'), gauges[1]]                 # a gauge elsewhere on the link
    with pytest.raises(ValueError, match='no reading of gauge'):
        decode_strain(msg, other, ours)
    msg.positions, msg.planes, msg.distances = [], [], []                   # no geometry: nothing to compare
    with pytest.raises(ValueError, match="without its gauges' geometry"):
        decode_strain(msg, gauges, ours)
    assert decode_strain(msg, gauges, theirs)[2] == 7                        # its own arm needs none


def _slow(rule, msg_type, data):
    """What the topic's rule gives for these bytes (rclpy deserialization + decode_*), or the ValueError's text."""
    try:
        return rule(deserialize_message(data, msg_type))
    except ValueError as e:
        return str(e)


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return len(a) == len(b) and all((x is None and y is None) or np.array_equal(np.asarray(x), np.asarray(y))
                                    for x, y in zip(a, b))


def _decoded(reader, data):
    try:
        return reader.decode(data)
    except ValueError as e:
        return str(e)


def test_serialized_readings_are_read_as_the_rule_reads_them():
    """The estimator's readers of serialized sensor readings (ros/sensors.py: learnt fixed bytes, numpy reads)
    against the rule they shortcut, on the wire bytes rclpy itself writes (rmw's serializer: padding not zeroed):
    every reading of a stream gives what deserialization + decode_joint_state / decode_strain /
    decode_accelerometer give - values, stamps, steps and refusals (non-finite values named) - and after the first
    reading of a shape none is deserialized; a reading of another shape (joints renamed or reordered, a gauge
    moved, at another distance or in the other plane, another frame) takes the rule again and is refused or read as
    it says; another arm's strain is told once."""
    from sensor_msgs.msg import Imu
    from std_msgs.msg import Header
    from flexarm_msgs.msg import StrainGauges
    from flexarm_sim.model.sensing import parse_gauge
    from flexarm_sim.ros.sensors import (AccelReader, JointStateReader, SensorEncoder, StrainReader,
                                         decode_accelerometer, decode_joint_state, decode_strain)

    class Cfg:
        pass
    model = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    cfg = Cfg()
    cfg.gauges = [parse_gauge(model, 'shoulder@0.05'), parse_gauge(model, 'elbow@0.05')]
    ours, theirs = 'deluca_two_link:aaaa', 'deluca_two_link:bbbb'
    names = ['shoulder', 'elbow']
    rules = {'joints': (lambda m: decode_joint_state(m, names), JointState),
             'strain': (lambda m: decode_strain(m, cfg.gauges, ours), StrainGauges),
             'accel': (decode_accelerometer, Imu)}
    enc = SensorEncoder(model, cfg, arm_id=ours, accel_variance=4e-4)
    rng = np.random.default_rng(5)
    readers = {'joints': JointStateReader(names), 'strain': StrainReader(cfg.gauges, ours), 'accel': AccelReader()}

    def check(key, data, learn=None):
        reader = readers[key]
        before = reader.slow
        got, want = _decoded(reader, data), _slow(*rules[key], data)
        assert _same(got, want), (key, got, want)
        if learn is not None:
            assert reader.slow == before + (0 if learn else 1), (key, reader.slow, before)
        return got
    for k in range(60):
        q, qd, tau = rng.normal(size=(3, 2))
        y, a = rng.normal(size=2) * 1e-4, rng.normal(size=3) * 5
        if k in (20, 40):                                    # a bad reading mid-stream
            q[1], y[0], a[2] = np.nan, np.inf, -np.inf
        t_ns = 10 ** 9 * k + int(rng.integers(10 ** 9))
        for key, msg in (('joints', enc.joint_state(q, qd, tau, t_ns)),
                         ('strain', enc.strain_gauges(y, [1e-12, 2e-12], k, t_ns)),
                         ('accel', enc.accelerometer(a, t_ns))):
            wire = serialize_message(msg)                               # as rmw writes it (padding not zeroed)
            zero = cdr.serialize(msg)                                   # every padding byte zero
            for b in (wire, zero):
                got = check(key, b, learn=k > 0 or b is zero)
                if k in (20, 40):
                    assert 'non-finite' in got
    for r in readers.values():
        assert r.slow == 1 and r.fast == 119, (type(r).__name__, r.slow, r.fast)

    # other shapes take the rule again, refused or read as it says: a gauge moved 1 cm, at another distance from
    # the neutral axis, sensing the other plane; joints reordered (read by name), one missing; another frame
    def strain_msg(**change):
        m = SensorEncoder(model, cfg, arm_id=ours).strain_gauges([1e-5, 2e-5], [0.0, 0.0], 3, 10)
        for f, v in change.items():
            setattr(m, f, v)
        return serialize_message(m)
    c = [g.c for g in cfg.gauges]
    for change, words in (({'positions': [0.06, 0.05]}, 'configured at'),
                          ({'distances': [c[0], 2 * c[1]]}, 'from the neutral axis'),
                          ({'planes': [0, 1]}, 'senses')):
        assert words in check('strain', strain_msg(**change), learn=False), change
    assert check('joints', serialize_message(JointState(name=['elbow', 'shoulder'], position=[1.0, 2.0])),
                 learn=False)[0].tolist() == [2.0, 1.0]
    assert 'missing' in check('joints', serialize_message(JointState(name=['shoulder', 'wrist'],
                                                                      position=[1.0, 2.0])), learn=False)
    for k in range(5):          # no rates or efforts: as the rule says (rmw sizes such a message beyond its data,
        got = check('joints', serialize_message(JointState(name=['elbow', 'shoulder'], position=[k, 2.0 * k])))
        assert got[0].tolist() == [2.0 * k, k] and got[1] is None and got[2] is None    # so it is not learnt)
    check('accel', serialize_message(Imu(header=Header(frame_id='elsewhere'))), learn=False)

    # another arm's strain with the same gauges: accepted with a note, once (its arm_id is in the learnt bytes)
    notes = []
    other = StrainReader(cfg.gauges, theirs, lambda arm, text: notes.append(arm))
    for k in range(3):
        y, t_ns, step = other.decode(strain_msg(step=k))
        assert np.allclose(y, [1e-5, 2e-5]) and step == k
    assert notes == [ours] and other.fast == 2
    for r in readers.values():
        assert 'unreadable' in _decoded(r, b'\x00\x01\x00\x00' + b'\xff' * 3)


def test_the_sensor_encoder_writes_every_field_of_its_messages():
    """The plant's sensor messages (SensorEncoder: preallocated messages), on the wire and read back by rclpy:
    every field is what the message means - names, frames (the tip frame of the accelerometer), arm_id, the gauges'
    links and geometry, stamps, step, values, REP 145's 'no orientation / no rates' covariances, the acceleration
    covariance - at two consecutive calls (the values are overwritten, not appended)."""
    from sensor_msgs.msg import Imu
    from flexarm_msgs.msg import StrainGauges
    from flexarm_sim.model.sensing import parse_gauge
    from flexarm_sim.ros.sensors import SensorEncoder

    class Cfg:
        pass
    model = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    cfg = Cfg()
    cfg.gauges = [parse_gauge(model, 'shoulder@0.05'), parse_gauge(model, 'elbow@0.12:in_plane:c=0.002')]
    enc = SensorEncoder(model, cfg, arm_id='deluca_two_link:abcd', accel_variance=4e-4)
    for k, t_ns in enumerate((1_700_000_000_123_456_789, 5)):
        q, qd, tau, a = [0.1 + k, -0.2], [0.3, 0.4 * k], [-0.5, 0.6], [1.0, -2.0 + k, 9.81]
        js = deserialize_message(serialize_message(enc.joint_state(q, qd, tau, t_ns)), JointState)
        assert list(js.name) == ['shoulder', 'elbow'] and js.header.frame_id == ''
        assert (js.header.stamp.sec, js.header.stamp.nanosec) == divmod(t_ns, 10 ** 9)
        assert list(js.position) == q and list(js.velocity) == qd and list(js.effort) == tau
        st = deserialize_message(serialize_message(enc.strain_gauges([1e-5, -2e-5 * k], [1e-12, 4e-12], 40 + k,
                                                                     t_ns)), StrainGauges)
        assert st.arm_id == 'deluca_two_link:abcd' and st.step == 40 + k
        assert (st.header.stamp.sec, st.header.stamp.nanosec) == divmod(t_ns, 10 ** 9)
        assert list(st.names) == [g.name for g in cfg.gauges]
        assert list(st.link_names) == ['shoulder_link', 'elbow_link']
        assert list(st.positions) == [0.05, 0.12] and list(st.planes) == [0, 0]
        assert list(st.distances) == [g.c for g in cfg.gauges] and cfg.gauges[1].c == 0.002
        assert list(st.strain) == [1e-5, -2e-5 * k] and list(st.variance) == [1e-12, 4e-12]
        imu = deserialize_message(serialize_message(enc.accelerometer(a, t_ns)), Imu)
        assert imu.header.frame_id == 'elbow_link_tip'
        assert (imu.header.stamp.sec, imu.header.stamp.nanosec) == divmod(t_ns, 10 ** 9)
        la = imu.linear_acceleration
        assert [la.x, la.y, la.z] == a
        o, w = imu.orientation, imu.angular_velocity
        assert [o.x, o.y, o.z, o.w] == [0.0, 0.0, 0.0, 1.0] and [w.x, w.y, w.z] == [0.0, 0.0, 0.0]
        assert list(imu.orientation_covariance) == [-1.0] + [0.0] * 8
        assert list(imu.angular_velocity_covariance) == [-1.0] + [0.0] * 8
        assert list(imu.linear_acceleration_covariance) == [4e-4, 0, 0, 0, 4e-4, 0, 0, 0, 4e-4]


def test_a_gauge_whose_geometry_is_not_a_number_is_refused():
    """decode_strain compares each gauge's position and distance with the configured one; NaN compares false both
    ways, and `abs(nan - x) > tol` let a NaN geometry through (and a reader would then learn it as a fixed byte
    pattern). Refused, naming the gauge."""
    from flexarm_msgs.msg import StrainGauges
    from flexarm_sim.model.sensing import parse_gauge
    from flexarm_sim.ros.sensors import StrainReader, decode_strain
    model = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    gauges = [parse_gauge(model, 'shoulder@0.05')]
    for field, values in (('positions', [float('nan')]), ('distances', [float('nan')])):
        msg = StrainGauges(arm_id='a:1', names=[gauges[0].name], positions=[0.05], planes=[0],
                           distances=[gauges[0].c], strain=[1e-5])
        setattr(msg, field, values)
        with pytest.raises(ValueError, match=gauges[0].name):
            decode_strain(msg, gauges, 'a:1')
        reader = StrainReader(gauges, 'a:1')
        with pytest.raises(ValueError, match=gauges[0].name):
            reader.decode(serialize_message(msg))
        assert reader.cdr is None                          # nothing learnt from a refused reading
