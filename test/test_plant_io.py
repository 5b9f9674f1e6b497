"""System tests of the plant process over DDS: bad commands, watchdog, reset/pause, parameters."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plant_harness import ARMS, Client, finite_state, start_plant, write_params  # noqa: E402

from flexarm_sim.model import load_model  # noqa: E402
from flexarm_sim.plant.engine import PlantCore, initial_state  # noqa: E402

pytestmark = pytest.mark.ros
GARBAGE = b'\x00\x01\x00\x00' + b'\xff' * 7        # a CDR header, then a sequence length beyond the bytes


@pytest.fixture
def client_for(ros_env):
    made = []

    def make(plant):
        c = Client(ros_env, plant)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


def test_bad_commands_never_make_a_non_finite_state(spawn, tmp_path, client_for):
    from std_msgs.msg import Float64MultiArray
    plant = start_plant(spawn, tmp_path, arm='deluca_two_link', command_timeout=5.0,
                        **{'publish_rates.diagnostics': 5.0})
    c = client_for(plant)
    c.wait_started()
    pub = c.publisher(Float64MultiArray, '/effort_controller/commands')
    pub.publish(Float64MultiArray(data=[0.1, -0.1]))
    c.spin_until(lambda: list(c.states[-1].effort) == [0.1, -0.1], what='valid command applied')
    bad = [[math.nan, 0.0], [0.0, math.inf], [-math.inf, 1.0], [1.0], [1.0, 2.0, 3.0], []]
    for data in bad:
        pub.publish(Float64MultiArray(data=data))
    d = c.wait_diag(lambda d: int(d['commands_rejected']) >= len(bad), what='rejections counted')
    assert 'non-finite' in d['last_reject_reason'] or 'expected' in d['last_reject_reason']
    # bytes that are no such message (rclpy raised in the plant's callback): refused, counted, named
    from flexarm_msgs.msg import JointEffortCommand
    stamped = c.publisher(JointEffortCommand, '/flexarm/effort_command')
    pub.publish(GARBAGE)
    c.wait_diag(lambda d: int(d['commands_rejected']) >= len(bad) + 1 and
                d['last_reject_reason'] == 'unreadable Float64MultiArray (RMWError)', what='garbage refused')
    stamped.publish(GARBAGE)
    c.wait_diag(lambda d: int(d['commands_rejected']) >= len(bad) + 2 and
                d['last_reject_reason'] == 'unreadable JointEffortCommand (RMWError)', what='garbage refused')
    n0 = len(c.states)
    c.spin_until(lambda: len(c.states) > n0 + 5)
    assert list(c.states[-1].effort) == [0.1, -0.1]           # previous valid command kept
    pub.publish(Float64MultiArray(data=[1e12, -1e12]))         # clamped to the arm's 2 N m
    c.spin_until(lambda: list(c.states[-1].effort) == [2.0, -2.0], what='clamped command')
    c.wait_diag(lambda d: int(d['commands_clamped']) >= 1)
    c.spin_for(0.5)
    assert all(finite_state(m) for m in c.states)
    assert all(all(math.isfinite(x) for x in js.position + js.velocity + js.effort) for js in c.joint_states)
    assert c.diag()['diverged'] == 'no'


def test_watchdog_zeroes_torque_and_recovers(spawn, tmp_path, client_for):
    from std_msgs.msg import Float64MultiArray
    plant = start_plant(spawn, tmp_path, arm='slewing_beam', command_timeout=0.3,
                        **{'publish_rates.diagnostics': 10.0, 'watchdog.action': 'zero_torque'})
    c = client_for(plant)
    c.wait_started()
    pub = c.publisher(Float64MultiArray, '/effort_controller/commands')
    pub.publish(Float64MultiArray(data=[0.05]))
    c.spin_until(lambda: list(c.states[-1].effort) == [0.05], what='command applied')
    c.wait_diag(lambda d: d['watchdog'] == 'ok')
    # stop sending: zero torque after the timeout, reported
    c.spin_until(lambda: list(c.states[-1].effort) == [0.0], what='watchdog zero torque')
    d = c.wait_diag(lambda d: d['watchdog'] == 'timeout', what='watchdog timeout in diagnostics')
    assert int(d['watchdog_timeouts']) == 1 and d['level'] == 1
    # the zero torque came after at least the timeout of plant time since the last non-zero effort
    last_on = max(m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in c.states if m.effort[0] != 0)
    first_off = min(m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in c.states
                    if m.effort[0] == 0 and m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec > last_on)
    assert first_off - last_on < 5.0
    pub.publish(Float64MultiArray(data=[-0.04]))                # recovers
    c.spin_until(lambda: list(c.states[-1].effort) == [-0.04], what='recovered')
    c.wait_diag(lambda d: d['watchdog'] == 'ok')


def test_reset_pause_and_runtime_parameters(spawn, tmp_path, client_for):
    from flexarm_msgs.srv import SetState
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    from std_srvs.srv import SetBool
    plant = start_plant(spawn, tmp_path, arm='deluca_two_link', **{'initial.position': [0.3, -0.2],
                                                                   'publish_rates.diagnostics': 10.0})
    c = client_for(plant)
    c.wait_started()
    c.spin_until(lambda: c.states[-1].step > 200)

    def first_state_after_reset(n0):
        """The first state integrated from the reset (states of before it may still be in flight)."""
        c.spin_until(lambda: any(m.step < 50 for m in c.states[n0:]), what='a state after the reset')
        return next(m for m in c.states[n0:] if m.step < 50)

    def expected(position, modal_position, steps):
        """The state after `steps` zero-torque steps from rest at the given state (in-process, same core)."""
        core = PlantCore(model, 1e-3)
        z, zd = initial_state(model, position, [], modal_position, [])
        core.reset(z, zd)
        for _ in range(steps):
            assert core.advance(np.zeros(2))
        return core.z[model.q_index]
    model = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    n0 = len(c.states)
    r = c.call(SetState, '/flexarm/reset', SetState.Request(to_initial=False, position=[0.5, 0.25],
                                                            modal_position=[0.01, 0.0, 0.0, 0.0]))
    assert r.success, r.message
    m = first_state_after_reset(n0)
    assert np.allclose(m.position, expected([0.5, 0.25], [0.01, 0.0, 0.0, 0.0], m.step), atol=1e-12, rtol=0)
    bad = c.call(SetState, '/flexarm/reset', SetState.Request(position=[1.0, 2.0, 3.0]))
    assert not bad.success and 'position' in bad.message
    bad = c.call(SetState, '/flexarm/reset', SetState.Request(velocity=[math.nan, 0.0]))
    assert not bad.success and 'non-finite' in bad.message
    bad = c.call(SetState, '/flexarm/reset', SetState.Request(position=[100.0, 0.0]))     # beyond the joint limit
    assert not bad.success and 'limits' in bad.message and 'shoulder' in bad.message
    bad = c.call(SetState, '/flexarm/reset', SetState.Request(position=[0.0, 0.0], velocity=[1e308, 0.0]))
    assert not bad.success and 'velocity limit' in bad.message
    c.spin_until(lambda: c.states[-1].step > 100)         # the segment's own small steps are behind us
    n0 = len(c.states)
    r = c.call(SetState, '/flexarm/reset', SetState.Request(to_initial=True))
    assert r.success
    m = first_state_after_reset(n0)
    assert np.allclose(m.position, expected([0.3, -0.2], [], m.step), atol=1e-12, rtol=0)
    # pause: the step counter stops, resume: it moves again
    assert c.call(SetBool, '/flexarm/pause', SetBool.Request(data=True)).success
    c.wait_diag(lambda d: d['paused'] == 'True')
    n0 = len(c.states)
    # states already in flight when the pause took effect may still arrive: wait for the counter to stand still
    c.spin_until(lambda: len(c.states) > n0 + 3 and len({m.step for m in c.states[-3:]}) == 1, what='paused')
    steps = {m.step for m in c.states[-3:]}
    c.spin_for(0.3)
    assert {m.step for m in c.states[-3:]} == steps
    assert c.call(SetBool, '/flexarm/pause', SetBool.Request(data=False)).success
    c.spin_until(lambda: c.states[-1].step > max(steps) + 10, what='resumed')
    # run-time parameters are validated

    def setp(name, value):
        if isinstance(value, list):
            pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=value)
        else:
            pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
        res = c.call(SetParameters, '/plant/set_parameters',
                     SetParameters.Request(parameters=[Parameter(name=name, value=pv)]))
        return res.results[0]
    r = setp('command_timeout', -1.0)
    assert not r.successful and 'command_timeout' in r.reason
    r = setp('effort_limits', [1.0])
    assert not r.successful and 'effort_limits' in r.reason
    r = setp('loop_rate', 10.0)
    assert not r.successful and 'read-only' in r.reason
    assert setp('effort_limits', [0.5, 0.5]).successful
    assert setp('publish_rates.markers', 5.0).successful


def test_invalid_parameter_file_fails_naming_the_parameter(spawn, tmp_path):
    procs = []
    for params, name in (({'loop_rate': -5.0}, 'loop_rate'), ({'time_mode': 'warp'}, 'time_mode'),
                         ({'initial.position': [0.1]}, 'initial.position'), ({'arm': 'no_such_arm'}, 'arm'),
                         ({'publish_rate': {'state': 5.0}}, 'publish_rate.state')):
        path = write_params(tmp_path, params, f'bad_{name}.yaml')
        procs.append((name, spawn(['-m', 'flexarm_sim.plant.node', '--ros-args', '--params-file', path])))
    for name, p in procs:                      # started together, checked in turn
        out, err = p.communicate(timeout=90)
        assert p.returncode == 2, err
        assert f"'{name}'" in err, err


def test_markers_over_dds_match_the_state(spawn, tmp_path, client_for):
    """/flexarm/markers (published as pre-serialized bytes, ros/raw_markers.py) arrive as regular MarkerArrays:
    one LINE_STRIP per link starting at its joint, the joints + tip as a SPHERE_LIST ending at the state's
    end-effector position, and a trail of trail_length points, all stamped in plant time."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from visualization_msgs.msg import Marker, MarkerArray
    plant = start_plant(spawn, tmp_path, arm='deluca_two_link',
                        **{'publish_rates.markers': 30.0, 'markers.trail_length': 40, 'publish_rates.state': 100.0})
    c = client_for(plant)
    got = []
    c.node.create_subscription(MarkerArray, '/flexarm/markers', got.append,
                               QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
    c.wait_started()
    c.spin_until(lambda: len(got) >= 5 and len(c.states) >= 5, what='markers and states')
    arr = got[-1]
    links = [m for m in arr.markers if m.ns.endswith('/links')]
    joints = [m for m in arr.markers if m.id == 100][0]
    trail = [m for m in arr.markers if m.id == 101][0]
    assert len(links) == 2 and all(m.type == Marker.LINE_STRIP and len(m.points) == 21 for m in links)
    assert joints.type == Marker.SPHERE_LIST and len(joints.points) == 3
    assert trail.action == Marker.ADD and len(trail.points) == 40
    assert all(m.header.frame_id == 'base_link' for m in arr.markers)
    t_mk = arr.markers[0].header.stamp.sec + 1e-9 * arr.markers[0].header.stamp.nanosec
    state = min(c.states, key=lambda s: abs(s.header.stamp.sec + 1e-9 * s.header.stamp.nanosec - t_mk))
    tip = joints.points[-1]
    p = state.end_effector_pose.position
    assert abs(tip.x - p.x) + abs(tip.y - p.y) + abs(tip.z - p.z) < 1e-6      # same instant, same tip
    assert abs(links[1].points[0].x - joints.points[1].x) < 1e-12               # link 2 starts at joint 2


def test_wait_for_command_holds_a_gravity_arm_until_the_first_command(spawn, tmp_path, client_for):
    """wait_for_command: the spatial arm (gravity) does not move and plant time stands still until a valid
    command arrives (a rejected one does not start it); then it integrates (and sags under gravity)."""
    from std_msgs.msg import Float64MultiArray
    plant = start_plant(spawn, tmp_path, arm='spatial_3r', wait_for_command=True,
                        **{'publish_rates.diagnostics': 5.0})
    c = client_for(plant)
    c.wait_started()
    c.wait_diag(lambda d: d['waiting_for_command'] == 'True', what='holding')
    pub = c.publisher(Float64MultiArray, '/effort_controller/commands')
    pub.publish(Float64MultiArray(data=[math.nan, 0.0, 0.0]))        # rejected: does not start the plant
    c.spin_for(0.6)
    held = c.states[-1]
    assert all(x == 0.0 for x in held.position) and held.step == 0
    assert c.diag()['waiting_for_command'] == 'True' and int(c.diag()['commands_rejected']) >= 1
    pub.publish(Float64MultiArray(data=[0.0, 0.0, 0.0]))
    c.spin_until(lambda: c.states[-1].step > 200, what='integrating after the first command')
    assert c.diag()['waiting_for_command'] == 'False'
    assert abs(c.states[-1].position[1]) > 1e-3                        # zero torque: the arm falls
    assert all(finite_state(m) for m in c.states)


def test_plant_side_servo_follows_position_commands(spawn, tmp_path, client_for):
    """servo.enabled: /position_controller/commands (one angle per joint) drives the joints through the
    plant-side servo; bad set-points are counted and the previous one kept. Simulated time as fast as
    possible (the De Luca servo settles in seconds of plant time)."""
    from std_msgs.msg import Float64MultiArray
    plant = start_plant(spawn, tmp_path, arm='deluca_two_link', time_mode='simtime', real_time_factor=0.0,
                        **{'servo.enabled': True, 'servo.kp': [20.0, 4.0], 'servo.kv': [6.0, 0.2],
                           'publish_rates.diagnostics': 5.0, 'command_timeout': 10.0})   # the largest: settles in ~3 s
    c = client_for(plant)
    c.wait_started()
    pub = c.publisher(Float64MultiArray, '/position_controller/commands')
    pub.publish(Float64MultiArray(data=[0.3, -0.2]))
    for bad in ([math.nan, 0.0], [0.1], []):
        pub.publish(Float64MultiArray(data=bad))
    c.spin_until(lambda: abs(c.states[-1].position[0] - 0.3) < 2e-3 and abs(c.states[-1].position[1] + 0.2) < 2e-3
                 and max(abs(v) for v in c.states[-1].velocity) < 1e-2, timeout=60.0, what='servo at the set-point')
    d = c.wait_diag(lambda d: '3 rejected' in d['servo'], what='bad set-points counted')
    assert d['servo'].startswith('on') and '0.3' in d['servo']
    assert all(finite_state(m) for m in c.states)
