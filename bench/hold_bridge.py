"""Hold test of the hardware path against the servo emulator driven by the flexible-arm model.

Starts, as ``ros2 launch flexarm_bringup hardware.launch.py port:=<emulator> controller:=pd_servo`` would
(the same executables, the shipped parameter files, the launch file's overrides and node names):

* ``dxl_emulator --arm <arm> --params hardware_bridge.yaml --link <port>`` (the arm model on emulated servos),
* ``hardware_bridge --ros-args --params-file hardware_bridge.yaml --params-file <port override>``,
* the controller with ``controllers.yaml`` + ``{arm: <arm>}`` under its launch name,

then enables the bridge, sends one reference (a move to ``--target``) and holds it for ``--duration`` s,
reporting the bridge's faults and what its /diagnostics counted, the tracking, and the shutdown (SIGINT)
of each process. ``--launch`` uses the real ``ros2 launch`` instead (source the ROS 2 tools first).

    python bench/hold_bridge.py [--duration 300] [--arm slewing_beam] [--target 0.5] [--emulator-realtime]

On a loaded 2-core machine the emulator process can be descheduled for longer than the bridge's reply
timeout: to the bridge that is an outage (faults, reconnects; the emulator's late replies show up as
``stale_replies``). ``--emulator-realtime`` serves with SCHED_FIFO priority, as servos answer whatever
the host does, so that what remains is the bridge's own behaviour. Arms other than the shipped bridge
file's two joints get the shipped joints' settings under their own joint names.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from flexarm_sim.arms import resolve_arm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
CONFIG = os.path.join(ROOT, 'flexarm_bringup', 'config')


def spawn(args, env, log):
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def cpu_seconds(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, IndexError, ValueError):
        return float('nan')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--duration', type=float, default=300.0, help='s to hold the reference')
    ap.add_argument('--arm', default='deluca_two_link')
    ap.add_argument('--controller', default='pd_servo', choices=['pd_servo', 'modal', 'computed_torque'])
    ap.add_argument('--target', type=float, nargs='+', default=[0.5, -0.3], help='rad per joint')
    ap.add_argument('--move-time', type=float, default=3.0)
    ap.add_argument('--set', action='append', default=[], metavar='NAME=VALUE',
                    help='controller parameter override (YAML value), e.g. --set rate=250.0 (not with --launch)')
    ap.add_argument('--trace', type=float, default=0.0, metavar='S', help='print q, qd, effort every S seconds')
    ap.add_argument('--emulator-realtime', action='store_true',
                    help='run the emulator with SCHED_FIFO priority (like servos, it then answers whatever '
                         'the load on this machine; needs CAP_SYS_NICE)')
    ap.add_argument('--launch', action='store_true', help='use the real `ros2 launch` (ROS 2 tools sourced)')
    args = ap.parse_args()

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from flexarm_msgs.srv import Enable
    from flexarm_sim.arms import arm_id

    arm = resolve_arm(args.arm)
    bridge_yaml = os.path.join(CONFIG, 'hardware_bridge.yaml')
    work = tempfile.mkdtemp(prefix='flexarm_hold_')
    with open(arm) as f:
        arm_joints = [j['name'] for j in yaml.safe_load(f)['joints']]
    with open(bridge_yaml) as f:
        shipped = yaml.safe_load(f)
    bp = shipped['hardware_bridge']['ros__parameters']
    if arm_joints != bp['joint_names']:
        # another arm: the shipped joints' settings, in order, under the arm's joint names
        if len(arm_joints) > len(bp['joint_names']):
            raise SystemExit(f'{os.path.basename(arm)} has {len(arm_joints)} joints; the shipped bridge file '
                             f'{len(bp["joint_names"])}')
        bp['joints'] = {new: bp['joints'][old] for new, old in zip(arm_joints, bp['joint_names'])}
        bp['joint_names'] = arm_joints
        bp['arm'] = arm
        bridge_yaml = os.path.join(work, 'hardware_bridge.yaml')
        with open(bridge_yaml, 'w') as f:
            yaml.safe_dump(shipped, f)
    if len(args.target) != len(arm_joints):
        args.target = (args.target * len(arm_joints))[:len(arm_joints)]
    link = os.path.join(work, 'ttyDXL')
    env = dict(os.environ, ROS_DOMAIN_ID=os.environ.get('ROS_DOMAIN_ID', str(60 + os.getpid() % 30)),
               ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', PYTHONUNBUFFERED='1')
    logs = {k: open(os.path.join(work, k + '.log'), 'w') for k in ('emulator', 'bridge', 'controller', 'launch')}
    procs = {}
    emu = subprocess.Popen([sys.executable, '-m', 'flexarm_control.emulation.servo_emulator', '--arm', arm,
                            '--params', bridge_yaml, '--link', link]
                           + (['--realtime'] if args.emulator_realtime else []), env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=logs['emulator'], text=True, start_new_session=True)
    procs['emulator'] = emu
    print(f'emulator: {emu.stdout.readline().strip()} (arm model {os.path.basename(arm)}); logs in {work}')
    if args.launch:
        procs['launch'] = spawn(['ros2', 'launch', 'flexarm_bringup', 'hardware.launch.py', f'port:={link}',
                                 f'controller:={args.controller}', f'arm:={arm}'], env, logs['launch'])
    else:
        port_file = os.path.join(work, 'port.yaml')     # what launch_ros writes for the {'port': ...} override
        with open(port_file, 'w') as f:
            yaml.safe_dump({'hardware_bridge': {'ros__parameters': {'port': link}}}, f)
        arm_file = os.path.join(work, 'arm.yaml')
        overrides = {'arm': arm}
        for item in args.set:
            name, _, value = item.partition('=')
            overrides[name] = yaml.safe_load(value)
        with open(arm_file, 'w') as f:
            yaml.safe_dump({args.controller: {'ros__parameters': overrides}}, f)
        procs['bridge'] = spawn([sys.executable, '-m', 'flexarm_control.entry', 'hardware_bridge', '--ros-args', '-r',
                                 '__node:=hardware_bridge', '--params-file', bridge_yaml, '--params-file',
                                 port_file], env, logs['bridge'])
        procs['controller'] = spawn([sys.executable, '-m', 'flexarm_control.nodes.controller_node',
                                     args.controller, '--ros-args', '-r', f'__node:={args.controller}',
                                     '--params-file', os.path.join(CONFIG, 'controllers.yaml'),
                                     '--params-file', arm_file], env, logs['controller'])

    rclpy.init(domain_id=int(env['ROS_DOMAIN_ID']))
    node = rclpy.create_node('hold_bridge_monitor')
    ex = rclpy.executors.SingleThreadedExecutor()
    ex.add_node(node)
    js, diags = [], []
    rel = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(JointState, '/joint_states', lambda m: js.append(
        (time.monotonic(), list(m.position), list(m.velocity), list(m.effort))), rel)
    node.create_subscription(DiagnosticArray, '/diagnostics', lambda m: diags.append(
        {kv.key: kv.value for kv in m.status[0].values}) if m.status and
        m.status[0].name == 'flexarm hardware_bridge' else None, rel)
    ref_pub = node.create_publisher(JointTrajectory, '/flexarm/reference', rel)

    def check_alive():
        for k, p in procs.items():
            if p.poll() is not None:
                raise SystemExit(f'hold_bridge: {k} exited ({p.returncode}); logs in {work}')

    def spin_until(pred, timeout, what):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise SystemExit(f'hold_bridge: timed out waiting for {what} (logs in {work})')
            check_alive()
            ex.spin_once(timeout_sec=0.05)

    try:
        t_start = time.monotonic()
        spin_until(lambda: diags and diags[-1]['state'] == 'disabled', 180.0, 'the bridge connected')
        spin_until(lambda: int(diags[-1]['commands_accepted']) > 50, 300.0, 'the controller commanding')
        print(f'bridge connected and controller commanding after {time.monotonic() - t_start:.1f} s')
        cli = node.create_client(Enable, '/hardware_bridge/enable')
        spin_until(cli.service_is_ready, 30.0, '~/enable')
        from flexarm_sim.model import load_arm
        fut = cli.call_async(Enable.Request(arm_id=arm_id(arm, load_arm(arm).name)))   # confirmation: the arm's id
        spin_until(fut.done, 30.0, 'enable')
        assert fut.result().success, fut.result().message
        traj = JointTrajectory(joint_names=arm_joints)
        pt = JointTrajectoryPoint(positions=list(args.target), velocities=[0.0] * len(args.target))
        pt.time_from_start.sec = int(args.move_time)
        pt.time_from_start.nanosec = int(1e9 * (args.move_time % 1))
        traj.points = [pt]
        spin_until(lambda: ref_pub.get_subscription_count() > 0, 30.0, 'the controller subscribing to the reference')
        ref_pub.publish(traj)
        t_ref = time.monotonic()
        cpu0 = {k: cpu_seconds(p.pid) for k, p in procs.items()}
        print(f'enabled; reference {args.target} rad in {args.move_time:g} s; holding for {args.duration:g} s')
        next_report = t_ref + 60.0
        next_trace = t_ref
        while time.monotonic() < t_ref + args.duration:
            check_alive()
            ex.spin_once(timeout_sec=0.05)
            if args.trace and time.monotonic() >= next_trace and js:
                t, q, qd, tau = js[-1]
                print(f'  t {t - t_ref:6.2f}  q {[round(x, 3) for x in q]}  qd {[round(x, 3) for x in qd]}  '
                      f'effort {[round(x, 3) for x in tau]}')
                next_trace += args.trace
            if time.monotonic() >= next_report:
                d = diags[-1]
                print(f'  {time.monotonic() - t_ref:5.0f} s: state {d["state"]}, faults {d["faults"]}, '
                      f'q {[round(x, 4) for x in js[-1][1]]}, read errors tolerated {d["read_errors_tolerated"]}')
                next_report += 60.0
        cpu1 = {k: cpu_seconds(p.pid) for k, p in procs.items()}
        spin_until(lambda: len(diags) > 1, 5.0, 'diagnostics')
        d = diags[-1]
        settled = [s for s in js if s[0] >= t_ref + args.move_time + 5.0]
        err = [max(abs(q - r) for q, r in zip(s[1], args.target)) for s in settled]
        print('\n== hold result ==')
        print(f'load average at the end (2 cores): {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} (1 / 5 min)')
        print(f'held {args.duration:g} s: bridge state {d["state"]}, faults {d["faults"]}'
              + (f' (last: {d["last_fault"]})' if int(d['faults']) else ''))
        for k in ('reads_ok', 'read_failures', 'crc_errors', 'read_errors_tolerated', 'stale_replies', 'bus_resyncs',
                  'write_failures', 'port_errors', 'reconnects', 'watchdog_timeouts', 'commands_accepted',
                  'commands_rejected', 'limit_interventions', 'achieved_rate_hz', 'overruns', 'cycle_io_max_ms'):
            print(f'  {k:24s} {d.get(k)}')
        if settled:
            print(f'joint error after settling (from {args.move_time + 5:g} s): max {max(err):.4f} rad, '
                  f'final q {[round(x, 4) for x in settled[-1][1]]} for target {args.target}')
        print('CPU during the hold: ' + ', '.join(
            f'{k} {100 * (cpu1[k] - cpu0[k]) / args.duration:.0f}%' for k in procs))
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        print('shutdown (SIGINT): ', end='')
        order = ['launch'] if 'launch' in procs else ['controller', 'bridge']
        for k in order + ['emulator']:
            p = procs[k]
            t0 = time.monotonic()
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
            try:
                rc = p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
            print(f'{k} exit {rc} in {time.monotonic() - t0:.2f} s; ', end='')
        print()
        for f in logs.values():
            f.close()
        tb = [k for k in logs if 'Traceback' in open(os.path.join(work, k + '.log')).read()]
        print('tracebacks in logs: ' + (', '.join(tb) if tb else 'none'))
        emu_stats = [ln for ln in open(os.path.join(work, 'emulator.log')) if ln.startswith('stats:')]
        if emu_stats:
            print('emulator ' + emu_stats[-1].strip())


if __name__ == '__main__':
    main()
