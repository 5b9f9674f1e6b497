"""`flexarm run`: the plant and a controller as ROS 2 nodes, a reference move, a summary.

    flexarm run --arm deluca_two_link --controller modal --duration 6 [--rate 1000] [--control-rate 500]
                [--shaping zv] [--record out.mcap] [--plot out.png] [--json] [--single-process]

By default the plant (`flexarm_sim` plant node) and the controller (`flexarm_control` node) run as separate
processes (real rclpy over DDS, loopback), as they would with `ros2 launch`; `--single-process` composes
them with this runner's node in this process (one executor thread per node). The runner publishes the reference on
/flexarm/reference — a cycloidal move of every joint by --angle (default 60 deg) in --move-time (2.5 s,
Naganathan's case 1), starting --lead seconds of plant time after the first state — records
/flexarm/state (and, with --record, the published topics into a rosbag2-compatible MCAP file), prints a
progress line, and at the end a summary: achieved plant rate and overruns (from the plant's
/diagnostics), joint RMS tracking error, peak tip deflection (deformed minus rigid end-effector position),
residual tip vibration after the move, 2 % settling time, peak torque.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

CONTROLLERS = ('pd_servo', 'modal', 'computed_torque', 'none')
RECORDED_TOPICS = (
    ('/flexarm/state', 'flexarm_msgs/msg/FlexState'),
    ('/joint_states', 'sensor_msgs/msg/JointState'),
    ('/effort_controller/commands', 'std_msgs/msg/Float64MultiArray'),
    ('/flexarm/reference', 'trajectory_msgs/msg/JointTrajectory'),
    ('/flexarm/markers', 'visualization_msgs/msg/MarkerArray'),
    ('/diagnostics', 'diagnostic_msgs/msg/DiagnosticArray'),
)


def add_parser(sub):
    p = sub.add_parser('run', help='simulate an arm under a controller (ROS 2 nodes) and summarise the run')
    p.add_argument('--arm', default='deluca_two_link', help='arm YAML path or a name in config/arms')
    p.add_argument('--controller', default='modal', choices=CONTROLLERS)
    p.add_argument('--duration', type=float, default=6.0, help='s of plant time from the start of the move')
    p.add_argument('--rate', type=float, default=1000.0, help='plant loop rate, Hz')
    p.add_argument('--control-rate', type=float, default=500.0, help='controller rate and state publish rate, Hz')
    p.add_argument('--time-mode', default='realtime', choices=('realtime', 'simtime', 'lockstep'),
                   help='lockstep: the controller answers every plant step (reproducible, as fast as possible)')
    p.add_argument('--shaping', default='none', choices=('none', 'zv', 'zvd'))
    p.add_argument('--angle', type=float, default=60.0, help='move of every joint, degrees')
    p.add_argument('--move-time', type=float, default=2.5, help='s')
    p.add_argument('--lead', type=float, default=0.5, help='s of plant time between the first state and the move')
    p.add_argument('--record', metavar='MCAP', help='record the published topics into this MCAP file')
    p.add_argument('--plot', metavar='PNG', help='plot joints vs reference, torques, tip deflection, modes')
    p.add_argument('--json', action='store_true', help='print the summary as one JSON object')
    p.add_argument('--single-process', action='store_true', help='compose plant and controller in this process')
    p.add_argument('--quiet', action='store_true', help='no progress line')
    p.add_argument('--plant-servo', action='store_true',
                   help="pd_servo only: the plant's joint servo (thesis gains, evaluated at the plant's sub-steps) "
                        'is the PD; the controller sends set-points and the rigid feed-forward')
    p.set_defaults(func=run)


def resolve_arm(arm: str) -> str:
    """Absolute path of an arm YAML given as a path or as a name of the shipped arms."""
    if os.path.isfile(arm):
        return os.path.abspath(arm)
    name = arm if arm.endswith('.yaml') else arm + '.yaml'
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(os.path.join(get_package_share_directory('flexarm_bringup'), 'config', 'arms', name))
    except Exception:      # noqa: BLE001 - not in an ament environment
        pass
    candidates.append(os.path.join(os.path.dirname(__file__), '..', 'config', 'arms', name))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise FileNotFoundError(f'arm description not found: {arm}')


def thesis_servo_gains(arm_path: str, angle: float):
    """Naganathan's k_p, k_v (eqs. 2.27-2.28) for the default move of every joint by angle from zero."""
    import numpy as np
    from flexarm_control.laws.pd import naganathan_gains
    from flexarm_sim.model import load_model
    model = load_model(arm_path)
    kp, kv, _ = naganathan_gains(model, task=[np.zeros(model.n_joints), np.full(model.n_joints, angle)])
    return [float(x) for x in kp], [float(x) for x in kv]


def params_file(args, arm_path: str) -> str:
    """A ROS parameter file for the plant and the controller (node_name: ros__parameters: form)."""
    import yaml
    params = {
        'plant': {'ros__parameters': {
            'arm': arm_path, 'loop_rate': float(args.rate), 'time_mode': args.time_mode,
            'command_timeout': 0.5, 'wait_for_command': args.controller != 'none',
            'publish_rates': {'state': float(args.control_rate), 'joint_states': float(min(args.rate, 1000.0)),
                              'markers': 30.0, 'diagnostics': 2.0},
        }},
    }
    if args.controller != 'none':
        params[f'flexarm_{args.controller}'] = {'ros__parameters': {
            'arm': arm_path, 'rate': float(args.control_rate), 'shaping': args.shaping,
            'use_sim_time': args.time_mode != 'realtime', 'lockstep': args.time_mode == 'lockstep',
        }}
    if getattr(args, 'plant_servo', False):
        kp, kv = thesis_servo_gains(arm_path, math.radians(args.angle))
        params['plant']['ros__parameters']['servo'] = {'enabled': True, 'kp': kp, 'kv': kv}
        params['flexarm_pd_servo']['ros__parameters']['command_interface'] = 'position'
    fd, path = tempfile.mkstemp(prefix='flexarm_run_', suffix='.yaml')
    with os.fdopen(fd, 'w') as f:
        yaml.safe_dump(params, f)
    return path


def cycloid_trajectory(q0, angle, T, n_points=51):
    """Points (t, q, qd, qdd) of Naganathan's cycloidal move q0 -> q0 + angle in T (every joint)."""
    t = np.linspace(0.0, T, n_points)
    s = t / T
    shape = s - np.sin(2 * np.pi * s) / (2 * np.pi)
    dshape = (1 - np.cos(2 * np.pi * s)) / T
    ddshape = 2 * np.pi * np.sin(2 * np.pi * s) / T ** 2
    q = q0[None, :] + angle * shape[:, None]
    return t, q, angle * dshape[:, None] * np.ones_like(q), angle * ddshape[:, None] * np.ones_like(q)


def cycloid_sample(q0, angle, T, t0, t):
    s = np.clip((np.asarray(t) - t0) / T, 0.0, 1.0)
    return q0[None, :] + angle * (s - np.sin(2 * np.pi * s) / (2 * np.pi))[:, None]


class RunnerNode:
    """The runner's ROS side: collects FlexState and plant diagnostics, publishes the reference."""

    def __init__(self, node, joint_names):
        from diagnostic_msgs.msg import DiagnosticArray
        from flexarm_msgs.msg import FlexState
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        self.node = node
        self.joint_names = list(joint_names)
        self.lock = threading.Lock()
        self.samples = []          # (t, q, qd, tau, tip_deformed, tip_rigid, modal)
        self.plant_diag = {}
        self.controller_diag = {}
        self.n_commands = 0
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(FlexState, '/flexarm/state', self._on_state, qos)
        node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)
        # only to learn that a controller commands: dropped once it does (500 Hz of callbacks would compete with
        # the state recording on a loaded machine)
        self.sub_cmd = node.create_subscription(Float64MultiArray, '/effort_controller/commands', self._on_cmd, qos)
        self.pub_ref = node.create_publisher(JointTrajectory, '/flexarm/reference', qos)

    def _on_state(self, msg):
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        p = msg.end_effector_pose.position
        r = msg.end_effector_rigid_position
        modal = [x for lk in msg.links for x in lk.modal_position]
        with self.lock:
            self.samples.append((t, list(msg.position), list(msg.velocity), list(msg.effort), (p.x, p.y, p.z),
                                 (r.x, r.y, r.z), modal))

    def _on_diag(self, msg):
        for st in msg.status:
            if st.name.startswith('flexarm_control/'):
                with self.lock:
                    self.controller_diag = {kv.key: kv.value for kv in st.values}
                continue
            if st.name.startswith('flexarm_sim') or 'plant' in st.name:
                with self.lock:
                    self.plant_diag = {kv.key: kv.value for kv in st.values}
                    self.plant_diag['_level'] = int.from_bytes(st.level, 'little') if isinstance(
                        st.level, bytes) else int(st.level)
                    self.plant_diag['_message'] = st.message

    def _on_cmd(self, msg):
        self.n_commands += 1

    def latest(self):
        with self.lock:
            return self.samples[-1] if self.samples else None

    def publish_reference(self, t_start, times, q, qd, qdd):
        from builtin_interfaces.msg import Duration
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
        msg = JointTrajectory()
        sec = int(math.floor(t_start))
        msg.header.stamp.sec = sec
        msg.header.stamp.nanosec = int(round((t_start - sec) * 1e9))
        msg.joint_names = self.joint_names
        for k, tk in enumerate(times):
            pt = JointTrajectoryPoint()
            pt.positions = [float(x) for x in q[k]]
            pt.velocities = [float(x) for x in qd[k]]
            pt.accelerations = [float(x) for x in qdd[k]]
            s = int(math.floor(tk))
            pt.time_from_start = Duration(sec=s, nanosec=int(round((tk - s) * 1e9)))
            msg.points.append(pt)
        self.pub_ref.publish(msg)


def summarize(samples, q0, angle, move_time, t_move, duration, joint_names, plant_diag, controller,
              controller_diag=None):
    """The run's figures from the recorded FlexState samples (plant time)."""
    controller_diag = controller_diag or {}
    t = np.array([s[0] for s in samples])
    keep = (t >= t_move - 0.2) & (t <= t_move + duration)
    t = t[keep]
    q = np.array([s[1] for s in samples])[keep]
    tau = np.array([s[3] for s in samples])[keep]
    tip = np.array([s[4] for s in samples])[keep]
    rigid = np.array([s[5] for s in samples])[keep]
    modal = np.array([s[6] for s in samples])[keep] if samples[0][6] else np.zeros((keep.sum(), 0))
    q_ref = cycloid_sample(q0, angle, move_time, t_move, t)
    defl = np.linalg.norm(tip - rigid, axis=1)
    in_run = t >= t_move
    err = (q - q_ref)[in_run]
    t_end = t_move + move_time
    after = t >= t_end
    out = {'controller': controller, 'samples': int(t.size),
           'plant_time_s': float(t[-1] - t[0]) if t.size else 0.0,
           'achieved_rate_hz': _num(plant_diag.get('achieved_rate_hz')),
           'overruns': _num(plant_diag.get('overruns')),
           'skipped_periods': _num(plant_diag.get('skipped_periods')),
           'controller_states_skipped': _num(controller_diag.get('states_skipped')),
           'joint_rms_error_rad': [float(x) for x in np.sqrt(np.mean(err ** 2, axis=0))] if err.size else None,
           'peak_tip_deflection_m': float(defl.max()) if defl.size else None,
           'peak_torque_nm': [float(x) for x in np.abs(tau).max(axis=0)] if tau.size else None}
    if after.sum() > 10:
        tail = t >= max(t_end, t[-1] - 0.5)
        rest = tip[tail].mean(axis=0)
        dev = np.linalg.norm(tip[after] - rest, axis=1)
        out['residual_vibration_m'] = float(dev.max())
        travel = np.linalg.norm(rest - tip[in_run][0]) if in_run.any() else 0.0
        dev_all = np.linalg.norm(tip - rest, axis=1)
        outside = np.nonzero((dev_all > 0.02 * max(travel, 1e-9)) & in_run)[0]
        out['settling_time_s'] = float(t[outside[-1]] - t_move) if outside.size else 0.0
    arrays = {'t': t - t_move, 'q': q, 'q_ref': q_ref, 'tau': tau, 'tip_deflection': tip - rigid, 'modal': modal}
    return out, arrays


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class _Processes:
    def __init__(self):
        self.procs = []
        self.logs = []

    def start(self, name, argv, env):
        log = tempfile.NamedTemporaryFile(prefix=f'flexarm_{name}_', suffix='.log', delete=False)
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, p))
        self.logs.append((name, log.name))
        return p

    def check(self):
        for name, p in self.procs:
            if p.poll() is not None:
                return f'{name} exited with code {p.returncode}:\n' + self.tail(name)
        return None

    def tail(self, name, n=15):
        for nm, path in self.logs:
            if nm == name:
                with open(path, errors='replace') as f:
                    return ''.join(f.readlines()[-n:])
        return ''

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5.0
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for _, path in self.logs:
            try:
                os.unlink(path)
            except OSError:
                pass


def run(args):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from flexarm_sim.model import load_arm
    if args.plant_servo and (args.controller != 'pd_servo' or args.time_mode == 'lockstep'):
        return _fail('--plant-servo needs --controller pd_servo and a realtime or simtime plant')
    arm_path = resolve_arm(args.arm)
    spec = load_arm(arm_path)
    pfile = params_file(args, arm_path)
    procs = _Processes()
    signal.signal(signal.SIGTERM, _terminated)     # so the finally below stops the child processes
    executors = []          # one single-threaded executor (and thread) per node: rclpy's multi-threaded
    recorder = None         # executor is slow, and the composed nodes must not starve each other
    spins = []
    composed = []
    nodes = []
    rclpy.init(args=['--ros-args', '--params-file', pfile] if args.single_process else None)
    try:
        node = rclpy.create_node('flexarm_runner')
        nodes.append(node)
        runner = RunnerNode(node, spec.joint_names)
        executors.append(SingleThreadedExecutor())
        executors[0].add_node(node)
        if args.record:
            from flexarm_bringup.recorder import Recorder
            recorder = Recorder(node, args.record, RECORDED_TOPICS,
                                metadata={'flexarm_run': {'arm': spec.name, 'controller': args.controller}})
        if args.single_process:
            composed = _compose(args)
            nodes.extend(composed)
            for n in composed:
                executors.append(SingleThreadedExecutor())
                executors[-1].add_node(n)
        else:
            env = dict(os.environ)
            env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
            ros_args = ['--ros-args', '--params-file', pfile]
            procs.start('plant', [sys.executable, '-m', 'flexarm_sim.plant.node', *ros_args], env)
            if args.controller != 'none':
                procs.start('controller', [sys.executable, '-m', 'flexarm_control.nodes.controller_node',
                                           args.controller, *ros_args], env)
        for ex in executors:
            spins.append(threading.Thread(target=ex.spin, daemon=True))
            spins[-1].start()
        return _drive(args, spec, runner, procs, recorder)
    finally:
        # orderly shutdown: child processes, composed loops, recording, executor (and its thread), nodes
        procs.stop()
        for n in composed:
            stop = getattr(n, 'stop', None)
            if stop:
                stop()
        if recorder is not None:
            recorder.close()
        for ex in executors:
            ex.shutdown(timeout_sec=5.0)
        for th in spins:
            th.join(timeout=5.0)
        for n in reversed(nodes):
            n.destroy_node()
        rclpy.try_shutdown()
        os.unlink(pfile)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _compose(args):
    """Plant (and controller) nodes in this process (parameters from the --params-file given to rclpy)."""
    from flexarm_sim.plant.node import PlantNode
    plant = PlantNode()
    plant.start()
    nodes = [plant]
    if args.controller != 'none':
        from flexarm_control.nodes.controller_node import NODES
        nodes.append(NODES[args.controller](f'flexarm_{args.controller}'))
    return nodes


def _fail(msg):
    print(f'flexarm run: {msg}', file=sys.stderr)
    return 1


def _drive(args, spec, runner, procs, recorder):
    angle = math.radians(args.angle)
    wall_limit = time.monotonic() + 60.0
    # 1. the plant is up and a controller is commanding
    while runner.latest() is None or (args.controller != 'none' and runner.n_commands == 0):
        err = procs.check()
        if err:
            return _fail(err)
        if time.monotonic() > wall_limit:
            return _fail('no state from the plant / no command from the controller within 60 s\n'
                         + '\n'.join(f'--- {name} log:\n' + procs.tail(name) for name, _ in procs.procs))
        time.sleep(0.02)
    if runner.sub_cmd is not None:
        runner.node.destroy_subscription(runner.sub_cmd)
        runner.sub_cmd = None
    others = runner.node.count_publishers('/flexarm/state') - 1
    if others > 0:
        return _fail(f'{others} other node(s) publish /flexarm/state in this ROS domain '
                     f"(ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}): stop them or use another domain")
    first = runner.latest()
    q0 = np.array(first[1])
    t_move = first[0] + args.lead
    times, q, qd, qdd = cycloid_trajectory(q0, angle, args.move_time)
    if args.controller != 'none':
        runner.publish_reference(t_move, times, q, qd, qdd)
    # 2. run for the duration (plant time), with a progress line
    t_end = t_move + args.duration
    wall_limit = time.monotonic() + 10.0 + 20.0 * (args.duration + args.lead)
    last_print = 0.0
    while True:
        s = runner.latest()
        if s[0] >= t_end:
            break
        err = procs.check()
        if err:
            return _fail(err)
        if time.monotonic() > wall_limit:
            return _fail(f'plant time stopped advancing (t = {s[0]:.3f} s)')
        if not args.quiet and time.monotonic() - last_print > 0.25:
            last_print = time.monotonic()
            defl = np.linalg.norm(np.array(s[4]) - np.array(s[5]))
            sys.stderr.write(f'\r  t = {max(0.0, s[0] - t_move):5.2f}/{args.duration:.2f} s   '
                             f'q = [{", ".join(f"{x:+.3f}" for x in s[1])}] rad   tip deflection {1e3 * defl:7.2f} mm')
            sys.stderr.flush()
        time.sleep(0.02)
    if not args.quiet:
        sys.stderr.write('\n')
    time.sleep(0.6)      # one more diagnostics period
    if recorder is not None:
        recorder.close()     # the file holds exactly what the summary reports
    with runner.lock:
        samples = list(runner.samples)
        diag = dict(runner.plant_diag)
        cdiag = dict(runner.controller_diag)
    summary, arrays = summarize(samples, q0, angle, args.move_time, t_move, args.duration, spec.joint_names, diag,
                                args.controller, cdiag)
    summary.update({'arm': spec.name, 'duration_s': args.duration, 'rate_hz': args.rate,
                    'control_rate_hz': args.control_rate, 'time_mode': args.time_mode, 'shaping': args.shaping,
                    'single_process': bool(args.single_process), 'move_deg': args.angle,
                    'move_time_s': args.move_time})
    if recorder is not None:
        summary['record'] = {'path': os.path.abspath(args.record), 'messages': dict(recorder.counts)}
    if args.plot:
        from flexarm_bringup.plots import plot_run
        plot_run(args.plot, arrays['t'], arrays['q'], arrays['q_ref'], arrays['tau'], arrays['tip_deflection'],
                 arrays['modal'] if arrays['modal'].size else None, joint_names=list(spec.joint_names),
                 tip_labels=['x', 'y', 'z'], title=f'{spec.name}: {args.controller}')
        summary['plot'] = os.path.abspath(args.plot)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0


def _print_summary(s):
    def fmt(v, unit='', scale=1.0, digits=4):
        if v is None:
            return 'n/a'
        if isinstance(v, list):
            return '[' + ', '.join(f'{scale * x:.{digits}g}' for x in v) + ']' + unit
        return f'{scale * v:.{digits}g}{unit}'
    print(f"flexarm run: {s['arm']} with {s['controller']} (shaping {s['shaping']}), "
          f"{s['move_deg']:g} deg cycloidal move in {s['move_time_s']:g} s, {s['duration_s']:g} s")
    print(f"  plant rate achieved   {fmt(s['achieved_rate_hz'], ' Hz')}  (target {s['rate_hz']:g} Hz), "
          f"overruns {fmt(s['overruns'])}, skipped periods {fmt(s['skipped_periods'])}")
    print(f"  joint RMS error       {fmt(s['joint_rms_error_rad'], ' rad')}")
    print(f"  peak tip deflection   {fmt(s['peak_tip_deflection_m'], ' mm', 1e3)}")
    print(f"  residual vibration    {fmt(s.get('residual_vibration_m'), ' mm', 1e3)}")
    print(f"  2% settling time      {fmt(s.get('settling_time_s'), ' s')}")
    print(f"  peak torque           {fmt(s['peak_torque_nm'], ' N m')}")
    if 'record' in s:
        print(f"  recording             {s['record']['path']} "
              f"({sum(s['record']['messages'].values())} messages)")
    if 'plot' in s:
        print(f"  plot                  {s['plot']}")
