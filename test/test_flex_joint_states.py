"""System test: the flex_joint_states node (own process, real DDS) turns a FlexState published from this
process into a JointState of the URDF's real + virtual joints (values from FlexJointMap)."""
import time

import numpy as np
import pytest

pytestmark = pytest.mark.ros

K = 4


def _state(step, q, deltas, rates):
    from flexarm_msgs.msg import FlexState, LinkDeflection
    msg = FlexState()
    msg.header.frame_id = 'base_link'
    msg.header.stamp.sec = 7
    msg.header.stamp.nanosec = step
    msg.step = step
    from flexarm_sim.arms import arm_id, resolve_arm
    from flexarm_sim.model import load_arm
    path = resolve_arm('deluca_two_link')
    msg.arm_id = arm_id(path, load_arm(path).name)           # a state says which arm it is (empty: refused)
    msg.joint_names = ['elbow', 'shoulder']                  # order differs from the arm's on purpose
    msg.position = [q[1], q[0]]
    msg.velocity = [0.0, 0.0]
    msg.links = [LinkDeflection(link_name=f'{name}_link', mode_plane=[0, 0], modal_position=list(d),
                                modal_velocity=list(r))
                 for name, d, r in zip(('shoulder', 'elbow'), deltas, rates)]
    return msg


def test_flex_joint_states_node(spawn, ros_env):
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from flexarm_msgs.msg import FlexState

    from flexarm_bringup.urdf_gen import FlexJointMap

    node_proc = spawn(['-m', 'flexarm_bringup.entry', '--ros-args',
                       '-p', 'arm:=deluca_two_link', '-p', f'segments:={K}'])
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(ros_env['ROS_DOMAIN_ID']))
    try:
        node = rclpy.create_node('fjs_test', context=ctx)
        from rclpy.executors import SingleThreadedExecutor
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        got = []
        node.create_subscription(JointState, '/joint_states', got.append, qos)
        pub = node.create_publisher(FlexState, '/flexarm/state', qos)
        q = [0.3, -0.7]
        deltas = [np.array([0.02, -0.004]), np.array([-0.01, 0.003])]
        rates = [np.array([0.1, 0.0]), np.array([0.0, -0.2])]
        deadline = time.monotonic() + 60.0               # node start-up: interpreter, model, discovery
        step = 0
        while not got and time.monotonic() < deadline:
            assert node_proc.poll() is None, node_proc.communicate()[1]
            if pub.get_subscription_count() > 0:
                pub.publish(_state(step, q, deltas, rates))
                step += 1
            ex.spin_once(timeout_sec=0.1)
        assert got, 'no joint_states from flex_joint_states'
        # a state that does not fit the arm is dropped, the node keeps running
        bad = _state(999, q, deltas, rates)
        bad.links[0].modal_position = [0.1]
        pub.publish(bad)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            ex.spin_once(timeout_sec=0.05)
        assert node_proc.poll() is None
        assert all(m.header.stamp.nanosec != 999 for m in got)
    finally:
        rclpy.shutdown(context=ctx)

    msg = got[0]
    fmap = FlexJointMap('deluca_two_link', K)
    assert list(msg.name) == fmap.joint_names
    assert len(msg.name) == 2 + 2 * K
    assert msg.header.stamp.sec == 7
    assert list(msg.position) == pytest.approx(fmap.positions(q, deltas).tolist(), abs=1e-15)
    assert list(msg.velocity) == pytest.approx(fmap.positions([0.0, 0.0], rates).tolist(), abs=1e-15)
    assert msg.position[0] == pytest.approx(0.3) and msg.position[1] == pytest.approx(-0.7)
    assert any(abs(v) > 1e-4 for v in msg.position[2:])
