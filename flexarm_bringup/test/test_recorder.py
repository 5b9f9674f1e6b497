"""Recorder: real rclpy publishers in this process -> MCAP file -> read back with the independent
`rosbags` reader (AnyReader, flexarm_msgs types registered from their .msg text)."""
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros

N = 15


def _msg_dir(pkg):
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory(pkg)) / 'msg'


@pytest.fixture
def rclpy_context():
    import rclpy
    ctx = rclpy.Context()
    # own DDS domain (1..100) so a parallel test run does not cross-talk
    rclpy.init(context=ctx, domain_id=1 + (os.getpid() * 11) % 100)
    yield ctx
    rclpy.shutdown(context=ctx)


def test_message_definition_has_nested_types():
    from flexarm_bringup.recorder import DELIMITER, message_definition
    text = message_definition('flexarm_msgs/msg/FlexState')
    assert text.startswith((_msg_dir('flexarm_msgs') / 'FlexState.msg').read_text().rstrip('\n'))
    headers = [line[5:] for line in text.splitlines() if line.startswith('MSG: ')]
    for t in ('std_msgs/msg/Header', 'builtin_interfaces/msg/Time', 'flexarm_msgs/msg/LinkDeflection',
              'geometry_msgs/msg/Vector3', 'geometry_msgs/msg/Pose', 'geometry_msgs/msg/Point',
              'geometry_msgs/msg/Quaternion', 'geometry_msgs/msg/Twist'):
        assert t in headers
    assert len(headers) == len(set(headers))
    assert text.count(DELIMITER + '\nMSG: ') == len(headers)
    # the definition is consumable by an independent parser (mcap-ros2-support's)
    from mcap_ros2._dynamic import generate_dynamic
    decoders = generate_dynamic('flexarm_msgs/msg/FlexState', text)
    assert {'flexarm_msgs/msg/FlexState', 'flexarm_msgs/msg/LinkDeflection', 'std_msgs/msg/Header'} <= set(decoders)


def test_record_and_read_back_with_rosbags(tmp_path, rclpy_context):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from flexarm_msgs.msg import FlexState, LinkDeflection
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from flexarm_bringup.recorder import Recorder

    import rclpy
    talker = rclpy.create_node('rec_talker', context=rclpy_context)
    rec_node = rclpy.create_node('rec_recorder', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(talker)
    ex.add_node(rec_node)
    qos = QoSProfile(depth=N, reliability=ReliabilityPolicy.RELIABLE)
    p_state = talker.create_publisher(FlexState, '/flexarm/state', qos)
    p_js = talker.create_publisher(JointState, '/joint_states', qos)
    p_cmd = talker.create_publisher(Float64MultiArray, '/effort_controller/commands', qos)
    path = tmp_path / 'sub' / 'run.mcap'
    rec = Recorder(rec_node, path, [('/flexarm/state', FlexState),
                                    ('/joint_states', 'sensor_msgs/msg/JointState'),
                                    ('/effort_controller/commands', 'std_msgs/msg/Float64MultiArray')],
                   metadata={'flexarm': {'arm': 'deluca_two_link'}})
    deadline = time.monotonic() + 20
    while not all(p.get_subscription_count() for p in (p_state, p_js, p_cmd)):
        assert time.monotonic() < deadline, 'recorder subscriptions never matched'
        ex.spin_once(timeout_sec=0.05)
    t_start = rec_node.get_clock().now().nanoseconds
    for i in range(N):
        s = FlexState()
        s.header.stamp.sec = 100 + i
        s.header.stamp.nanosec = 5000 * i
        s.header.frame_id = 'base_link'
        s.step = 10 * i
        s.joint_names = ['shoulder', 'elbow']
        s.position = [0.1 * i, -0.2 * i]
        s.velocity = [1.0, 2.0]
        link = LinkDeflection(link_name='shoulder_link', mode_plane=[0, 0],
                              modal_position=[1e-3 * i, -2e-3 * i], frequencies=[0.48, 1.80])
        link.tip_deflection.y = 0.01 * i
        s.links = [link, LinkDeflection(link_name='elbow_link', mode_plane=[0], modal_position=[3e-3 * i])]
        s.end_effector_pose.position.x = 1.0 + i
        s.end_effector_pose.orientation.w = 1.0
        s.kinetic_energy = float(i)
        p_state.publish(s)
        js = JointState(name=['shoulder', 'elbow'], position=[0.5 * i, 0.25], velocity=[], effort=[1.5, -1.5])
        js.header.stamp.sec = i
        p_js.publish(js)
        p_cmd.publish(Float64MultiArray(data=[float(i), -float(i)]))
        ex.spin_once(timeout_sec=0.0)
        time.sleep(0.005)
    deadline = time.monotonic() + 20
    while min(rec.counts.values()) < N and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
    t_end = rec_node.get_clock().now().nanoseconds
    rec.close()
    rec.close()                                  # idempotent
    assert rec.counts == {'/flexarm/state': N, '/joint_states': N, '/effort_controller/commands': N}
    ex.shutdown()
    talker.destroy_node()
    rec_node.destroy_node()

    # ---- read back with rosbags (independent of mcap / mcap-ros2-support)
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore
    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    for name in ('FlexState', 'LinkDeflection'):
        types.update(get_types_from_msg((_msg_dir('flexarm_msgs') / f'{name}.msg').read_text(),
                                        f'flexarm_msgs/msg/{name}'))
    store.register(types)
    with AnyReader([path], default_typestore=store) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            '/flexarm/state': 'flexarm_msgs/msg/FlexState',
            '/joint_states': 'sensor_msgs/msg/JointState',
            '/effort_controller/commands': 'std_msgs/msg/Float64MultiArray'}
        got = {}
        stamps = {}
        for conn, t, raw in reader.messages():
            got.setdefault(conn.topic, []).append(reader.deserialize(raw, conn.msgtype))
            stamps.setdefault(conn.topic, []).append(t)
    assert {k: len(v) for k, v in got.items()} == rec.counts
    for topic, ts in stamps.items():
        assert ts == sorted(ts)
        assert t_start <= ts[0] and ts[-1] <= t_end      # reception times on the recorder's clock
    for i, m in enumerate(got['/flexarm/state']):
        assert m.step == 10 * i
        assert (m.header.stamp.sec, m.header.stamp.nanosec) == (100 + i, 5000 * i)
        assert m.header.frame_id == 'base_link'
        assert list(m.joint_names) == ['shoulder', 'elbow']
        assert list(m.position) == pytest.approx([0.1 * i, -0.2 * i])
        assert [lk.link_name for lk in m.links] == ['shoulder_link', 'elbow_link']
        assert list(m.links[0].mode_plane) == [0, 0]
        assert list(m.links[0].modal_position) == pytest.approx([1e-3 * i, -2e-3 * i])
        assert list(m.links[0].frequencies) == pytest.approx([0.48, 1.80])
        assert m.links[0].tip_deflection.y == pytest.approx(0.01 * i)
        assert list(m.links[1].modal_position) == pytest.approx([3e-3 * i])
        assert m.end_effector_pose.position.x == pytest.approx(1.0 + i)
        assert m.kinetic_energy == pytest.approx(float(i))
    for i, m in enumerate(got['/joint_states']):
        assert list(m.name) == ['shoulder', 'elbow']
        assert list(m.position) == pytest.approx([0.5 * i, 0.25])
        assert len(m.velocity) == 0
        assert list(m.effort) == pytest.approx([1.5, -1.5])
        assert m.header.stamp.sec == i
    for i, m in enumerate(got['/effort_controller/commands']):
        assert list(m.data) == pytest.approx([float(i), -float(i)])

    # ---- rosbag2 conventions at the MCAP level
    from mcap.reader import make_reader
    with open(path, 'rb') as f:
        r = make_reader(f)
        header = r.get_header()
        summary = r.get_summary()
        metadata = {m.name: m.metadata for m in r.iter_metadata()}
    assert header.profile == 'ros2'
    assert {s.encoding for s in summary.schemas.values()} == {'ros2msg'}
    assert {c.message_encoding for c in summary.channels.values()} == {'cdr'}
    assert all('offered_qos_profiles' in c.metadata for c in summary.channels.values())
    assert 'reliability: reliable' in next(c.metadata['offered_qos_profiles'] for c in summary.channels.values())
    assert metadata['flexarm'] == {'arm': 'deluca_two_link'}
    # and a second independent decoder (mcap-ros2-support) reads the same file
    from mcap_ros2.reader import read_ros2_messages
    n = sum(1 for m in read_ros2_messages(str(path), topics=['/flexarm/state'])
            if m.ros_msg.links[0].link_name == 'shoulder_link')
    assert n == N


def test_unknown_type_fails_before_creating_file(tmp_path, rclpy_context):
    import rclpy
    from flexarm_bringup.recorder import Recorder, RecorderError
    node = rclpy.create_node('rec_bad', context=rclpy_context)
    with pytest.raises(RecorderError):
        Recorder(node, tmp_path / 'x.mcap', [('/a', 'no_such_pkg/msg/Nope')])
    with pytest.raises(RecorderError):
        Recorder(node, tmp_path / 'x.mcap', [('relative', 'std_msgs/msg/Empty')])
    assert not (tmp_path / 'x.mcap').exists()
    node.destroy_node()
