"""Recorder: real rclpy publishers in this process -> MCAP file -> read back with the independent
`rosbags` reader (AnyReader, flexarm_msgs types registered from their .msg text)."""
import os
import time
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time

from flexarm_sim.ros.cdr import serialize

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


def _spin_until(ex, pred, timeout=20.0, what='condition'):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f'timed out waiting for {what}'
        ex.spin_once(timeout_sec=0.02)


def test_channels_qos_resends_and_losses(tmp_path, rclpy_context):
    """A topic nobody publishes gets no channel; a channel carries its publishers' QoS (rosbag2's YAML); a stamped
    message byte-identical to the previous one on its topic (a re-send) is counted, not written, while identical
    unstamped messages (two equal commands) are both written; a gap in a publisher's sample numbers is counted lost."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rosgraph_msgs.msg import Clock
    from std_msgs.msg import Float64MultiArray
    from flexarm_bringup.recorder import Recorder, is_stamped, message_definition
    from flexarm_sim.ros.messages import qos

    assert is_stamped(message_definition('rosgraph_msgs/msg/Clock'), 'rosgraph_msgs/msg/Clock')
    assert is_stamped(message_definition('visualization_msgs/msg/MarkerArray'), 'visualization_msgs/msg/MarkerArray')
    assert not is_stamped(message_definition('std_msgs/msg/Float64MultiArray'), 'std_msgs/msg/Float64MultiArray')
    talker = rclpy.create_node('rec_talker2', context=rclpy_context)
    rec_node = rclpy.create_node('rec_recorder2', context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(talker)
    p_clock = talker.create_publisher(Clock, '/clock', qos(7))
    p_cmd = talker.create_publisher(Float64MultiArray, '/cmd', qos(10))
    path = tmp_path / 'r.mcap'
    rec = Recorder(rec_node, path, [('/clock', Clock), ('/cmd', Float64MultiArray),
                                    ('/nobody', 'std_msgs/msg/Float64MultiArray')])
    _spin_until(ex, lambda: p_clock.get_subscription_count() and p_cmd.get_subscription_count(), what='match')
    for sec in (1, 1, 1, 2, 2, 3):                  # 1 and 2 sent again: re-sends
        p_clock.publish(Clock(clock=Time(sec=sec)))
    for _ in range(2):
        p_cmd.publish(Float64MultiArray(data=[1.0, 2.0]))
    _spin_until(ex, lambda: rec.report().get('/clock', {}).get('resends') == 3 and rec.counts.get('/cmd') == 2,
                what='recorded')
    # a sample its publisher numbered 10 after 6: four never reached the recorder
    t = next(t for t in rec._topics if t.name == '/clock')
    gid = next(iter(t.seq))
    rec._write(t, bytes(serialize(Clock(clock=Time(sec=9)))), {'publisher_gid': {'data': gid},
                                                                'publication_sequence_number': 10})
    rec.close()
    assert rec.counts == {'/clock': 4, '/cmd': 2}
    assert rec.report()['/clock'] == {'messages': 4, 'resends': 3, 'lost': 3}
    assert rec.problems() == ['/clock: 3 message(s) lost (their publisher wrote them; the recorder never got them)']
    ex.shutdown()
    rec.release()
    talker.destroy_node()
    rec_node.destroy_node()
    from mcap.reader import make_reader
    with open(path, 'rb') as f:
        r = make_reader(f)
        channels = {c.topic: c for c in r.get_summary().channels.values()}
        meta = {m.name: m.metadata for m in r.iter_metadata()}
    assert set(channels) == {'/clock', '/cmd'}                       # no channel for /nobody
    import yaml
    offered = yaml.safe_load(channels['/clock'].metadata['offered_qos_profiles'])
    assert len(offered) == 1 and offered[0]['reliability'] == 'reliable' and offered[0]['durability'] == 'volatile'
    assert set(offered[0]) == {'history', 'depth', 'reliability', 'durability', 'deadline', 'lifespan', 'liveliness',
                               'liveliness_lease_duration', 'avoid_ros_namespace_conventions'}
    assert meta['flexarm_recording']['/clock.lost'] == '3'


def test_close_destroys_nothing_an_executor_may_be_waiting_on(tmp_path, rclpy_context, monkeypatch):
    """The shutdown order (issue 24 item 3): `make demo` printed `InvalidHandle: cannot use Destroyable because
    destruction was requested` from the runner's spin thread in 2 runs of 4 — the recorder destroyed its
    subscriptions while the executor spun. Now close() finishes the file and destroys nothing, and the runner's
    shut-down (runner._shut_down) destroys entities only after every spin thread has stopped: checked here on the
    runner's own teardown with real nodes, a recorder and spinning executors, by watching every destroy."""
    import rclpy
    import rclpy.node
    from std_msgs.msg import Float64MultiArray
    from flexarm_bringup import runner as runner_mod
    from flexarm_bringup.recorder import Recorder

    spins, destroyed_while_spinning, calls = [], [], []
    real = {name: getattr(rclpy.node.Node, name) for name in ('destroy_subscription', 'destroy_node')}

    def watch(name):
        def wrapper(self, *a, **kw):
            calls.append(name)
            if any(sp.thread.is_alive() for sp in spins):
                destroyed_while_spinning.append(name)
            return real[name](self, *a, **kw)
        return wrapper
    for name in real:
        monkeypatch.setattr(rclpy.node.Node, name, watch(name))
    monkeypatch.setattr(runner_mod.rclpy, 'try_shutdown', lambda: None)     # the fixture owns the context
    node = rclpy.create_node('rec_runner', context=rclpy_context)
    talker = rclpy.create_node('rec_talker3', context=rclpy_context)
    pub = talker.create_publisher(Float64MultiArray, '/t', 10)
    monkeypatch.setattr(runner_mod, 'default_executor', lambda: lambda: rclpy.executors.SingleThreadedExecutor(
        context=rclpy_context))
    rec = Recorder(node, tmp_path / 'x.mcap', [('/t', Float64MultiArray)])
    node.create_subscription(Float64MultiArray, '/t', lambda m: None, 10)      # one the executor does wait on
    spins += [runner_mod._Spinner(node), runner_mod._Spinner(talker)]
    for _ in range(50):
        pub.publish(Float64MultiArray(data=[1.0]))
        time.sleep(0.002)

    class _NoProcs:
        def stop(self):
            pass
    runner_mod._shut_down(_NoProcs(), [], None, rec, spins, [node, talker])
    assert not any(sp.thread.is_alive() for sp in spins)
    assert destroyed_while_spinning == []
    assert calls.count('destroy_node') == 2 and 'destroy_subscription' in calls      # the recorder's, at release


def test_the_runner_destroys_its_command_watch_in_the_spin_thread(rclpy_context, monkeypatch):
    """CI (two namespaced runs side by side): `stop_watching_commands` destroyed the stamped-command subscription from
    the main thread while the runner's executor built its wait set; the spin thread died on `InvalidHandle: cannot use
    Destroyable because destruction was requested` and the run failed on 'pause(True) not answered'. Now the
    destruction runs in the spin thread, between two spin_once (checked by watching the thread that destroys)."""
    import threading
    import rclpy
    import rclpy.node
    from flexarm_bringup import runner as runner_mod
    from flexarm_sim.arms import load_arm_model
    from flexarm_sim.model.layout import ArmLayout

    destroyers = []
    real = rclpy.node.Node.destroy_subscription

    def watch(self, sub):
        destroyers.append(threading.current_thread())
        return real(self, sub)
    monkeypatch.setattr(rclpy.node.Node, 'destroy_subscription', watch)
    monkeypatch.setattr(runner_mod.rclpy, 'try_shutdown', lambda: None)     # the fixture owns the context
    monkeypatch.setattr(runner_mod, 'default_executor', lambda: lambda: rclpy.executors.SingleThreadedExecutor(
        context=rclpy_context))
    node = rclpy.create_node('cmd_watch_runner', context=rclpy_context)
    model, _ = load_arm_model('deluca_two_link')
    runner = runner_mod.RunnerNode(node, ArmLayout.of(model, 'test'), watch_commands=True)
    spin = runner_mod._Spinner(node)
    runner.in_spin_thread = spin.call
    assert runner.cmd_sub in node.subscriptions
    sub = runner.cmd_sub
    runner.stop_watching_commands()
    assert destroyers == [spin.thread] and sub not in node.subscriptions and runner.cmd_sub is None
    runner.stop_watching_commands()                     # a second call: nothing left to destroy
    assert len(destroyers) == 1
    with pytest.raises(ZeroDivisionError):              # what fn raises reaches the caller; the spin thread goes on
        spin.call(lambda: 1 / 0)
    assert spin.call(threading.current_thread) is spin.thread
    runner_mod._shut_down(type('NoProcs', (), {'stop': lambda self: None})(), [], runner, None, [spin], [node])
    assert not spin.thread.is_alive()
