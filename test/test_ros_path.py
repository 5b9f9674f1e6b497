"""The ROS 2 user's path, exactly as ROS takes it: the installed node executables started with the shipped
parameter files parsed by rcl itself (`--ros-args --params-file`), their parameters read back over the parameter
services (what `ros2 param get/dump` see) and compared with the files, the dump loaded back, clean exits on
SIGINT/SIGTERM (also during start-up), a warning for a parameter file without a section for the node."""
import math
import os
import signal
import sys
import time

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ros_support import CONFIG, NODES, RosClient, dump_yaml, start_node, stop_cleanly  # noqa: E402

from flexarm_sim.arms import resolve_arm  # noqa: E402
from flexarm_sim.common.params import flatten  # noqa: E402
from flexarm_sim.model import load_model  # noqa: E402

pytestmark = pytest.mark.ros
EXIT_WITHIN_S = 2.0
# a signal during start-up is handled when the C call it lands in returns (numba's cache load, an extension module's
# initialization): 0.02 s idle, 0.3-0.5 s beside two CPU hogs, 2.1 s once in a fresh clone's full suite (flex_joint_states)
START_UP_EXIT_WITHIN_S = 5.0


def _file_values(path, node):
    with open(path) as f:
        return flatten(yaml.safe_load(f)[node]['ros__parameters'])


def _expected_derived(node, values):
    """What "not set" means, computed here from the arm file (independently of the nodes' tables)."""
    model = load_model(resolve_arm(values['arm']))
    n, nm = model.n_joints, int(model.mode_index.size)
    if node == 'plant':
        # the watchdog hold's rule (plant/servo.py hold_gains; the hold at work: test_safe_mode.py): the ROS path
        # carries it
        from flexarm_sim.plant.servo import hold_gains
        kp, kv = hold_gains(model)
        return {'watchdog.hold_kp': list(kp), 'watchdog.hold_kv': list(kv),
                'initial.position': [0.0] * n, 'initial.velocity': [0.0] * n, 'initial.modal_position': [0.0] * nm,
                'initial.modal_velocity': [0.0] * nm, 'servo.kp': [0.0] * n, 'servo.kv': [0.0] * n,
                'effort_limits': [j.effort_limit for j in model.spec.joints],
                'sensors.strain.gauges': [], 'sensors.strain.bias': []}          # no gauges: no biases
    if node == 'state_estimator':
        return {'sensors.strain.gauges': []}
    period = 1.0 / values['rate']
    from flexarm_control.controller.kinds import law_class
    delay = law_class(node).design_periods(values['rate']) * period     # the law's real-time design (whole periods)
    from flexarm_control.controller.config import STATE_AGE_MARGIN_S
    out = {'input_delay': delay, 'safe_mode.max_state_age': delay + STATE_AGE_MARGIN_S}
    if node == 'modal':
        out['tip_max'] = 0.01 * sum(j.link.length for j in model.spec.joints)
    # the laws' own rules for their default gains (validated in flexarm_control/test): the ROS path must carry them
    from flexarm_control.laws import ComputedTorque, PDServo
    if node == 'pd_servo':
        law = PDServo(model, dt=period, input_delay=period)
        out.update(kp=list(law.kp), kv=list(law.kv))
    if node == 'computed_torque':
        law = ComputedTorque(model, dt=period, input_delay=period)
        out.update(omega_n=list(law.omega_n), zeta=list(law.zeta))
    return out


def _same(a, b):
    if isinstance(a, list) or isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


@pytest.mark.parametrize('node', ['plant', 'pd_servo', 'modal', 'computed_torque', 'state_estimator'])
def test_shipped_file_loads_through_rcl_and_param_dump_loads_back(node, ros_env, tmp_path):
    shipped = os.path.join(CONFIG, NODES[node][1])
    in_file = _file_values(shipped, node)
    proc = start_node(node, ['--ros-args', '--params-file', shipped], ros_env)
    client = RosClient(ros_env)
    try:
        got = client.parameters(node, proc)
        derived = _expected_derived(node, {**in_file, **{k: v for k, v in got.items() if k in ('arm', 'rate')}})
        for name, value in in_file.items():
            if value == []:                                   # rcl: not set -> the derived value
                assert _same(got[name], derived[name]), (name, got[name], derived[name])
            else:
                assert _same(got[name], value), (name, got[name], value)
        for name, value in derived.items():                   # commented-out (derived) scalars are declared too
            assert name in got and _same(got[name], value), (name, got.get(name), value)
        # `ros2 param dump` of the running node loads back into a new node with the same values
        dump = tmp_path / f'{node}_dump.yaml'
        dump.write_text(dump_yaml(node, got))
        code, dt, err = stop_cleanly(proc)
        assert code == 0 and dt < EXIT_WITHIN_S and 'Traceback' not in err, (code, dt, err[-2000:])
        proc = start_node(node, ['--ros-args', '--params-file', str(dump)], ros_env)
        again = client.parameters(node, proc)
        assert set(again) == set(got)
        assert all(_same(again[k], got[k]) for k in got), {k: (got[k], again[k]) for k in got
                                                             if not _same(again[k], got[k])}
        code, dt, err = stop_cleanly(proc, signal.SIGTERM)
        assert code == 0 and dt < EXIT_WITHIN_S and 'Traceback' not in err, (code, dt, err[-2000:])
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()


def test_params_file_without_a_section_for_the_node_warns(ros_env):
    """`ros2 run flexarm_sim plant --ros-args --params-file controllers.yaml`: warned, naming both."""
    path = os.path.join(CONFIG, 'controllers.yaml')
    proc = start_node('plant', ['--ros-args', '--params-file', path], ros_env)
    client = RosClient(ros_env)
    try:
        client.parameters('plant', proc)            # up
    finally:
        client.close()
    code, _, err = stop_cleanly(proc)
    assert code == 0
    assert f'parameter file {path} has no section for node /plant' in err, err[-2000:]
    assert 'pd_servo, modal, computed_torque' in err


@pytest.mark.parametrize('node', ['plant', 'modal', 'flex_joint_states'])
@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_signal_during_start_up_exits_0_without_a_traceback(node, sig, ros_env):
    """A signal while the node is still importing, loading its kernels or being constructed."""
    proc = start_node(node, [], ros_env)
    time.sleep(0.8)
    assert proc.poll() is None, proc.stderr.read()
    code, dt, err = stop_cleanly(proc, sig)
    assert code == 0 and dt < START_UP_EXIT_WITHIN_S and 'Traceback' not in err and 'KeyboardInterrupt' not in err, \
        (code, dt, err[-2000:])


def test_flex_joint_states_and_pd_servo_exit_cleanly_when_running(ros_env):
    """Both nodes up (parameter services answer), then SIGINT / SIGTERM."""
    procs = {n: start_node(n, [], ros_env) for n in ('flex_joint_states', 'pd_servo')}
    client = RosClient(ros_env)
    try:
        for n, p in procs.items():
            client.parameters(n, p)
    finally:
        client.close()
    for (n, p), sig in zip(procs.items(), (signal.SIGINT, signal.SIGTERM)):
        code, dt, err = stop_cleanly(p, sig)
        assert code == 0 and dt < EXIT_WITHIN_S and 'Traceback' not in err, (n, code, dt, err[-2000:])


def test_bad_parameter_value_names_it_and_exits_2(ros_env):
    proc = start_node('pd_servo', ['--ros-args', '-p', 'rate:=-5.0'], ros_env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "invalid parameter 'rate'" in err and 'Traceback' not in err, err[-2000:]
    proc = start_node('plant', ['--ros-args', '-p', 'effort_limits:=[5.0, 1.0]'], ros_env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "effort_limits[0]" in err and 'only be tightened' in err, err[-2000:]


def test_the_data_path_belongs_to_the_nodes_the_launch_files_name(ros_env):
    """Issue 24 item 5: the data topics were owned by hidden nodes (/plant_io, /modal_io), so `ros2 node info /plant`
    showed none of them and rqt_graph showed names no launch file mentions. Now the graph holds only the launch
    files' names, the plant subscribes its commands and the controller its states itself; and each node said how
    its kernels loaded, last (`numba kernels ready in N s (k compiled, m loaded from the cache)`)."""
    procs = {'plant': start_node('plant', ['--ros-args', '-p', 'time_mode:=lockstep'], ros_env),
             'modal': start_node('modal', ['--ros-args', '-p', 'lockstep:=true'], ros_env)}
    client = RosClient(ros_env)
    try:
        for n, p in procs.items():
            client.parameters(n, p)                     # up: its services answer
        node = client.node

        def graph_ready():
            names = {n for n, _ in node.get_node_names_and_namespaces()}
            return {'plant', 'modal'} <= names
        client.spin_until(graph_ready, 60, 'both nodes in the graph')

        def subs(n):
            return {t for t, _ in node.get_subscriber_names_and_types_by_node(n, '/')}
        client.spin_until(lambda: {'/flexarm/effort_command', '/effort_controller/commands'} <= subs('plant')
                          and '/flexarm/state' in subs('modal'), 60, 'the hot subscriptions on their nodes')
        names = {n for n, _ in node.get_node_names_and_namespaces()}
        assert not [n for n in names if n.endswith('_io')], names
    finally:
        client.close()
    for n, p in procs.items():
        code, dt, err = stop_cleanly(p)
        assert code == 0 and 'Traceback' not in err, (n, code, err[-2000:])
        ready = [ln for ln in err.splitlines() if 'numba kernels ready in ' in ln]
        assert len(ready) == 1 and ' compiled, ' in ready[0] and ' loaded from the cache)' in ready[0], err[-2000:]
        later = err.split(ready[0], 1)[1]
        assert 'compiling or loading' not in later and 'waiting for its cache' not in later, err[-2000:]
