"""Issue 28 item 5 over DDS: a second publisher of commands beside the controller is detected and reported; a node
asked to run under DDS-Security where the DDS has none refuses to start (never silently unprotected).

The nodes are the installed executables with the commands the launch files produce (bringup.command)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plant_harness import Client  # noqa: E402
from ros_support import stop_cleanly  # noqa: E402

from flexarm_bringup import security  # noqa: E402
from flexarm_bringup.bringup import command, hardware_nodes, sim_nodes  # noqa: E402

pytestmark = pytest.mark.ros


def _start(spec, env, tmp_path):
    return subprocess.Popen(command(spec, str(tmp_path)), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def test_nodes_refuse_to_run_unprotected(ros_env, tmp_path):
    """Every node of both bring-ups, started as `ros2 launch ... keystore:=<dir>` starts it (enclave, security
    environment), exits 2 with one line saying why, before touching DDS; so does `flexarm run`."""
    ks = tmp_path / 'keystore'
    security.create(ks, 'sim')
    security.create(ks, 'hardware')
    env = dict(ros_env, **security.environment(ks))
    specs = sim_nodes('deluca_two_link', 'modal', 'lockstep', estimator='encoders', keystore=str(ks))
    specs += hardware_nodes('deluca_two_link', 'pd_servo', port='/dev/null', keystore=str(ks))[:1]
    assert {s.executable for s in specs} == {'plant', 'state_estimator', 'modal', 'hardware_bridge'}
    for strategy in ('Enforce', 'Permissive'):
        env['ROS_SECURITY_STRATEGY'] = strategy
        for s in specs:
            p = _start(s, env, tmp_path)
            out, err = p.communicate(timeout=120)
            lines = [x for x in err.splitlines() if x.strip() and not x.endswith(': starting')]
            assert p.returncode == 2, (s.name, p.returncode, err[-2000:])
            assert len(lines) == 1 and 'Refusing to run unprotected' in lines[0], err[-2000:]
            assert f'strategy {strategy}' in lines[0] and 'PKI-DH' in lines[0]
            assert 'Traceback' not in err
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'run', '--time-mode', 'lockstep',
                        '--duration', '0.5', '--quiet'], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and 'Refusing to run unprotected' in r.stderr and 'Traceback' not in r.stderr
    print(f'\nsecurity refusal, e.g.: {lines[0]}')


def test_a_second_command_publisher_is_detected_and_reported(ros_env, tmp_path):
    """The plant and pd_servo of sim.launch.py (real time); a rogue node publishes torques beside the controller:
    the plant's /diagnostics turn WARN naming both publishers and their GIDs, counted once; the controller reports
    the stranger on its command topic too; when the rogue leaves, both are OK again."""
    from std_msgs.msg import Float64MultiArray
    specs = sim_nodes('deluca_two_link', 'pd_servo', 'realtime',
                      plant_extra={'publish_rates.diagnostics': 5.0})
    procs = [_start(s, ros_env, tmp_path) for s in specs]
    c = Client(ros_env, procs[0])
    try:
        c.wait_started(timeout=180.0)

        def status(name):
            out = {}
            for d in reversed(c.diags):
                for st in d.status:
                    if st.name == name and name not in out:
                        out[name] = (st.level if isinstance(st.level, int) else ord(st.level), st.message,
                                     {kv.key: kv.value for kv in st.values})
            return out.get(name)

        def plant_ok():
            s = status('flexarm plant')
            return s is not None and s[2].get('publishers /effort_controller/commands') == '1' \
                and int(s[2]['commands_accepted']) > 0
        c.spin_until(plant_ok, 120.0, 'the plant commanded by pd_servo alone')
        rogue = c.node.__class__('rogue', context=c.ctx)
        c.executor.add_node(rogue)
        pub = rogue.create_publisher(Float64MultiArray, '/effort_controller/commands', 10)
        pub.publish(Float64MultiArray(data=[2.0, -2.0]))
        c.spin_until(lambda: (status('flexarm plant') or (0,))[0] == 1 and '/rogue' in status('flexarm plant')[1],
                     30.0, 'the plant reporting the second publisher')
        level, msg, values = status('flexarm plant')
        gids = [g.split(')')[0] for g in msg.split('(gid ')[1:]]
        assert '2 publishers of commands on /effort_controller/commands' in msg and '/pd_servo' in msg
        assert len(gids) == 2 and all(len(g) == 32 for g in gids) and gids[0] != gids[1]
        assert values['commands_source_conflicts'] == '1' and values['publishers /effort_controller/commands'] == '2'
        c.spin_until(lambda: status('flexarm_control/pd_servo') is not None
                     and '/rogue' in status('flexarm_control/pd_servo')[1], 30.0, 'the controller reporting it')
        print(f'\nplant /diagnostics: WARN "{msg}"')
        c.executor.remove_node(rogue)
        rogue.destroy_node()
        c.spin_until(lambda: status('flexarm plant')[2]['publishers /effort_controller/commands'] == '1'
                     and status('flexarm plant')[0] == 0, 30.0, 'back to one publisher')
        assert status('flexarm plant')[2]['commands_source_conflicts'] == '1'
    finally:
        c.close()
        for p in procs:
            code, _, err = stop_cleanly(p)
            assert code == 0 and 'Traceback' not in err, err[-2000:]
