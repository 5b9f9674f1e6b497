"""SIGINT / SIGTERM to ``hardware_bridge`` and to the servo emulator: exit code 0 within 2 s, no traceback,
in every phase - during start-up (the signal is sent as soon as the process reports that it is starting,
i.e. while it imports, loads the model or builds the node), connected, enabled, and while reconnecting
(port missing, servos silent: blocking serial I/O). The bridge switches the torque off on the way out.
"""
import os
import signal
import sys
import time

import pytest
import rclpy
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_harness import ROOT, EmulatorProcess, Watched  # noqa: E402

from flexarm_control.bridge import control_table as ct  # noqa: E402
from flexarm_control.emulation.servo_emulator import ServoEmulator  # noqa: E402
from flexarm_sim.arms import resolve_arm  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]

EXIT_BOUND = 2.0           # s, the requirement (measured exits are ~0.1-0.4 s)
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def bridge_process(tmp_path, env, port, **over):
    p = {'port': port, 'loop_rate': 250.0, 'command_timeout': 1.0, 'diagnostics_period': 0.2,
         'joint_names': ['shoulder', 'elbow'],
         'joints': {'shoulder': {'servo_id': 1}, 'elbow': {'servo_id': 2, 'direction': -1}}}
    p.update(over)
    path = tmp_path / 'bridge.yaml'
    path.write_text(yaml.safe_dump({'hardware_bridge': {'ros__parameters': p}}))
    return Watched(['-m', 'flexarm_control.entry', 'hardware_bridge', '--ros-args', '--params-file', str(path)], env=env)


def assert_clean_exit(proc, sig, what):
    rc, dt = proc.signal_and_wait(sig)
    err = proc.stderr_text()
    print(f'\n{what}, {signal.Signals(sig).name}: exit {rc} after {dt:.3f} s')
    assert rc == 0, f'{what}: exit code {rc}\n{err[-3000:]}'
    assert 'Traceback' not in err, f'{what}:\n{err[-3000:]}'
    assert dt < EXIT_BOUND, f'{what}: {dt:.2f} s to exit'
    return err


def connected(line):
    return 'connected to 2 servo(s)' in line


@pytest.mark.parametrize('sig', SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize('phase', ['startup', 'connected', 'reconnecting_port_missing', 'reconnecting_silent'])
def test_bridge_exits_cleanly(phase, sig, tmp_path, ros_env):
    emu = None
    try:
        if phase == 'reconnecting_port_missing':
            port = str(tmp_path / 'no_such_tty')
        else:
            emu = EmulatorProcess(str(tmp_path / 'ttySIG'), env=ros_env)
            port = emu.port
            if phase == 'reconnecting_silent':
                emu.command('silent 1')
        proc = bridge_process(tmp_path, ros_env, port)
        try:
            if phase == 'startup':
                proc.wait_line(lambda s: s.startswith('hardware_bridge: starting'), 60.0)
            elif phase == 'connected':
                proc.wait_line(connected, 60.0)
            else:
                proc.wait_line(lambda s: 'reconnect attempt 2 failed' in s, 60.0)
            err = assert_clean_exit(proc, sig, f'hardware_bridge {phase}')
            if phase == 'reconnecting_silent':
                assert 'did not answer a ping' in err or 're-sync' in err
        finally:
            proc.kill()
    finally:
        if emu is not None:
            assert emu.stop_process() == 0


@pytest.mark.parametrize('sig', SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_bridge_enabled_exits_cleanly_with_torque_off(sig, tmp_path, ros_env):
    """Enabled and commanded, then the signal: exit 0 and every servo's torque off (the node's stop())."""
    from std_msgs.msg import Float64MultiArray

    from flexarm_msgs.srv import Enable
    from flexarm_sim.arms import arm_id
    emu = ServoEmulator([1, 2], link_path=str(tmp_path / 'ttyEN'))
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(ros_env['ROS_DOMAIN_ID']))
    node = rclpy.create_node('signal_test_client', context=ctx)
    executor = rclpy.executors.SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    proc = bridge_process(tmp_path, ros_env, emu.port_name)
    try:
        proc.wait_line(connected, 60.0)
        pub = node.create_publisher(Float64MultiArray, '/effort_controller/commands', 10)
        cli = node.create_client(Enable, '/hardware_bridge/enable')
        confirm = Enable.Request(arm_id=arm_id(resolve_arm('deluca_two_link'), 'deluca_two_link'))

        def spin_until(pred, timeout):
            deadline = time.monotonic() + timeout
            while not pred():
                assert time.monotonic() < deadline and proc.proc.poll() is None
                pub.publish(Float64MultiArray(data=[0.02, 0.02]))
                executor.spin_once(timeout_sec=0.01)
        spin_until(lambda: cli.service_is_ready() and pub.get_subscription_count() > 0, 30.0)
        # service_is_ready() only says the request reached the server's reader; a response sent before this
        # client's response reader is matched (DDS discovery, slow on a loaded machine) is lost. Enabling is
        # idempotent ('already enabled'), so ask again rather than wait forever for a lost answer.
        for attempt in range(4):
            fut = cli.call_async(confirm)
            try:
                spin_until(fut.done, 10.0)
                break
            except AssertionError:
                if proc.proc.poll() is not None or attempt == 3:
                    raise
        assert fut.result().success, fut.result().message
        spin_until(lambda: emu.torque_enabled(1) and emu.torque_enabled(2)
                   and emu.servos[1].get(ct.GOAL_CURRENT) != 0, 30.0)
        assert_clean_exit(proc, sig, 'hardware_bridge enabled')
        assert not emu.torque_enabled(1) and not emu.torque_enabled(2)
    finally:
        proc.kill()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=ctx)
        emu.close()


@pytest.mark.parametrize('sig', SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize('phase', ['startup', 'startup_arm_model', 'serving'])
def test_emulator_exits_cleanly(phase, sig, tmp_path, ros_env):
    link = str(tmp_path / 'ttyEMU')
    args = ['-m', 'flexarm_control.emulation.servo_emulator', '--ids', '1', '2', '--link', link]
    if phase == 'startup_arm_model':
        args += ['--arm', resolve_arm('deluca_two_link'),
                 '--params', os.path.join(ROOT, 'flexarm_bringup', 'config', 'hardware_bridge.yaml')]
    if phase == 'serving':
        emu = EmulatorProcess(link, env=ros_env)
        import dynamixel_sdk as dxl
        port = dxl.PortHandler(emu.port)
        assert port.openPort()
        try:
            # serving: it answers a ping (the SDK waits ~34 ms per try; a loaded machine may schedule the emulator
            # later than that, so wait for an answer — readiness, not the property under test)
            deadline = time.monotonic() + 20.0
            while dxl.PacketHandler(2.0).ping(port, 1)[:2] != (1020, dxl.COMM_SUCCESS):
                assert time.monotonic() < deadline and emu.proc.poll() is None, 'the emulator never answered a ping'
            assert_clean_exit(emu, sig, f'emulator {phase}')
        finally:
            port.closePort()
            emu.kill()
        assert not os.path.lexists(link)            # the link is removed on the way out
        return
    proc = Watched(args, env=ros_env)
    try:
        proc.wait_line(lambda s: s.startswith('dxl_emulator: starting'), 60.0)
        assert_clean_exit(proc, sig, f'emulator {phase}')
    finally:
        proc.kill()
