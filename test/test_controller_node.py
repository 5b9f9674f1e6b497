"""System test: a controller node in its own process commands a stand-in plant in this process (real DDS)."""
import math
import os
import time

import numpy as np
import pytest
from flexarm_sim.arms import resolve_arm

HERE = os.path.dirname(os.path.abspath(__file__))
ARM = resolve_arm('deluca_two_link')
pytestmark = pytest.mark.ros


def _spin_until(rclpy, node, cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.02)
    return cond()


def test_pd_node_commands_and_stops_on_state_timeout(spawn, ros_env, monkeypatch):
    for k in ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE'):
        monkeypatch.setenv(k, ros_env[k])
    import rclpy
    from flexarm_msgs.msg import FlexState, JointEffortCommand, LinkDeflection
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float64MultiArray

    proc = spawn(['-m', 'flexarm_control.entry', 'pd_servo', '--ros-args', '-p', f'arm:={ARM}',
                  '-p', 'rate:=200.0', '-p', 'state_timeout:=0.2', '-p', 'lockstep:=true', '-p',
                  'default_move:=true'])
    rclpy.init()
    try:
        node = rclpy.create_node('standin_plant')
        cmds, stamped = [], []
        node.create_subscription(Float64MultiArray, '/effort_controller/commands', cmds.append, 10)
        node.create_subscription(JointEffortCommand, '/flexarm/effort_command', stamped.append, 10)
        pub = node.create_publisher(FlexState, '/flexarm/state', 10)
        matched = _spin_until(rclpy, node, lambda: pub.get_subscription_count() >= 1
                              and node.count_publishers('/flexarm/effort_command') >= 1, 60.0)
        assert matched, proc.stderr.read() if proc.poll() is not None else 'controller did not appear'

        from flexarm_sim.arms import arm_id
        from flexarm_sim.model import load_arm
        own_id = arm_id(ARM, load_arm(ARM).name)

        def state(step, q, arm=own_id):
            msg = FlexState(step=step, joint_names=['shoulder', 'elbow'], position=list(q),
                            velocity=[0.0, 0.0], arm_id=arm)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(step * 10_000_000, 1_000_000_000)
            msg.links = [LinkDeflection(link_name=nm, modal_position=[0.0, 0.0], modal_velocity=[0.0, 0.0])
                         for nm in ('shoulder_link', 'elbow_link')]
            return msg
        # lock-step: each state is answered with the command for the next step
        for step in range(1, 31):
            pub.publish(state(step, [0.0, 0.0]))
            assert _spin_until(rclpy, node, lambda: any(c.step == step + 1 for c in stamped), 10.0)
        c = [c for c in stamped if c.step == 31][0]
        assert len(c.effort) == 2 and all(math.isfinite(x) for x in c.effort)
        assert c.effort[0] > 0.0          # the default move pushes the shoulder towards +60 deg
        diags = []
        node.create_subscription(DiagnosticArray, '/diagnostics', diags.append, 10)

        def diag_values():
            return [{kv.key: kv.value for kv in st.values} for d in diags for st in d.status
                    if st.name == 'flexarm_control/pd_servo']
        # a waiting or paused plant re-sends its state: answered again with the same command, the law not run again
        # (a lock-step run must not depend on how long the plant waited)
        pub.publish(state(30, [0.0, 0.0]))
        pub.publish(state(30, [0.0, 0.0]))
        assert _spin_until(rclpy, node, lambda: sum(c.step == 31 for c in stamped) == 3, 10.0)
        assert all(list(d.effort) == list(c.effort) for d in stamped if d.step == 31)
        n_diag = len(diag_values())         # two diagnostics later: the second was surely made after the re-sends
        assert _spin_until(rclpy, node, lambda: len(diag_values()) > n_diag + 1, 10.0)
        assert int(diag_values()[-1]['published']) == 30
        # the same step and stamp with another state (a paused plant reset twice) is a new state: the law runs
        pub.publish(state(30, [0.01, 0.0]))
        assert _spin_until(rclpy, node, lambda: sum(c.step == 31 for c in stamped) == 4, 10.0)
        assert list([d for d in stamped if d.step == 31][-1].effort) != list(c.effort)
        # states that do not fit are refused (counted in /diagnostics), never answered with a non-finite command
        bad = state(40, [float('nan'), 0.0])
        pub.publish(bad)
        other = state(41, [0.0, 0.0])
        other.arm_id = 'spatial_3r:0123456789ab'          # another arm, another layout
        other.joint_names = ['hip', 'shoulder']
        pub.publish(other)
        pub.publish(state(42, [0.0, 0.0]))
        assert _spin_until(rclpy, node, lambda: any(c.step == 43 for c in stamped), 10.0)
        assert not any(c.step in (41, 42) for c in stamped)

        def rejected(n=2):
            vals = diag_values()
            return vals and int(vals[-1]['states_rejected']) >= n
        assert _spin_until(rclpy, node, rejected, 10.0)
        # issue 28 item 5: a state that does not say its arm, or is no state of this arm (q = 1e300), is refused
        # and counted; another arm's id with this arm's layout (a perturbed plant, `flexarm run --plant-arm`) is
        # accepted, with a warning naming both ids
        pub.publish(state(50, [0.0, 0.0], arm=''))
        pub.publish(state(51, [1e300, 0.0]))
        pub.publish(state(52, [0.0, 0.0], arm='deluca_perturbed:feedfacecafe'))
        assert _spin_until(rclpy, node, lambda: any(c.step == 53 for c in stamped), 10.0)
        assert not any(c.step in (51, 52) for c in stamped)
        assert _spin_until(rclpy, node, lambda: rejected(4), 10.0)
        assert 'implausible' in diag_values()[-1]['last_reject_reason']
        assert diag_values()[-1]['states_of_other_arms'] == 'deluca_perturbed:feedfacecafe'
        # stop publishing state: commands stop within the timeout
        _spin_until(rclpy, node, lambda: False, 0.5)
        n = len(cmds)
        _spin_until(rclpy, node, lambda: False, 0.7)
        assert len(cmds) == n
        assert np.all(np.isfinite(np.array([list(c.data) for c in cmds])))
    finally:
        rclpy.shutdown()
    assert proc.poll() is None, proc.stderr.read()
    proc.terminate()
    err = proc.communicate(timeout=30)[1]
    assert err.count("states of arm 'deluca_perturbed:feedfacecafe' accepted") == 1 and own_id in err
