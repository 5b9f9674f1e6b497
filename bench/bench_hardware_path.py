"""The hardware path judged by the tip: hardware.launch.py's nodes against the servo emulator, in real time.

The nodes are the ones `ros2 launch flexarm_bringup hardware.launch.py port:=<pty> controller:=modal
estimator:=encoders` starts, with the same argv (flexarm_bringup.bringup.hardware_nodes + command): the bridge at the
shipped config/hardware_bridge.yaml's loop_rate (250 Hz), the state estimator on the encoders, the modal controller
on its estimate. The servos are `dxl_emulator --arm deluca_two_link --params hardware_bridge.yaml --record`: the
flexible-arm model driven by the servo currents, whose recording gives what the hardware cannot measure, the tip.
The move: 30 deg of both joints in 2.5 s (a cycloid, published on /flexarm/reference as the runner does), figures
over 6 s from its start: tip RMS against the rigid reference's tip, tip error at the end of the move, ringing (the
tip's largest excursion from rest at the target over the last second), joint RMS during the move and the joint error
at the end of the move, the link's largest deflection over its length, and the nodes' counts (bridge rate,
overruns, limit interventions; estimator resets; controller safe-mode entries).
Beside it, the same law, rate and sensors in process in lock-step (estimation/evaluate.py: the estimator on the
drives' measured torque, as hardware.launch.py configures it; no transport delay), and the ratio.
`--plant-arm ARM.yaml`: the emulator runs that arm (the nodes keep the shipped one): a model-error run.
`--launch`: the nodes started by the real `ros2 launch` (the tools of ../shared/ros2-tools.md on PATH).
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, '..', 'flexarm_bringup', 'config')
BRIDGE_YAML = os.path.join(CONFIG, 'hardware_bridge.yaml')
ARM = 'deluca_two_link'
ANGLE = math.radians(30.0)
MOVE_TIME = 2.5
RUN_S = 6.0
LEAD_S = 2.0                  # s after enabling before the move: the estimator and the controller settle


def lockstep_figures(model, plant, rate):
    """The same move in process, lock-step, at `rate`: (tip RMS, tip at the end of the move, ringing, joint RMS
    during the move, joint error at the end of the move), m and rad."""
    from flexarm_control.estimation import config as econfig
    from flexarm_control.estimation.evaluate import run_closed_loop
    from flexarm_control.estimation.runtime import EstimatorRuntime
    from flexarm_control.laws import ModalLQR, PointToPoint
    from flexarm_sim.plant import config as pconfig
    from flexarm_sim.sensors import SensorConfig, preset_values
    q1 = np.full(model.n_joints, ANGLE)
    ref = PointToPoint(np.zeros(model.n_joints), q1, MOVE_TIME)
    law = ModalLQR(model, dt=1.0 / rate)
    law.set_reference(ref)
    pre = preset_values(model, 'encoders')
    sens = SensorConfig.from_values(plant, pconfig.resolved(dict(pconfig.TABLE.defaults(), **pre), plant))
    est = EstimatorRuntime(model, dict(econfig.TABLE.defaults(), **{k: v for k, v in pre.items() if k in econfig.TABLE},
                                       rate=rate, input='measured_effort'))
    run = run_closed_loop(plant, law, RUN_S, sensors=sens, estimator=est, control_rate=rate)
    return figures(plant, run.t, run.z, ref, 0.0)


def figures(plant, t, z, ref, t0):
    """(tip RMS, tip error at the end of the move, ringing, joint RMS during the move, joint error at the end of the
    move, largest deflection over length per link) of the arm's motion z(t) against `ref` started at t0."""
    from flexarm_sim.model.trajectory import relative_deflections
    from flexarm_sim.model.equilibrium import static_equilibrium
    qi = np.asarray(plant.q_index)
    if t.size > 1 and np.any(np.diff(t) != np.diff(t)[0]):
        # the emulator's rows come per request (bunched within a bridge cycle): onto an even 1 ms grid, as lock-step
        grid = np.arange(max(t[0], t0), min(t[-1], t0 + RUN_S) + 1e-12, 1e-3)
        t, z = grid, np.column_stack([np.interp(grid, t, z[:, k]) for k in range(z.shape[1])])
    s = t - t0
    keep = (s >= 0.0) & (s <= RUN_S + 1e-9)
    s, z = s[keep], z[keep]
    if s.size == 0 or s[-1] < RUN_S - 0.01:
        raise RuntimeError(f'the recording covers {s[-1] if s.size else 0:.2f} of the run\'s {RUN_S:g} s')
    travel = np.max(np.abs(np.asarray(ref.sample(RUN_S)[0]) - ref.sample(0.0)[0]))
    if np.max(np.abs(z[:, qi] - z[0, qi])) < 0.3 * travel:
        raise RuntimeError(f'the arm did not move (joints at {z[-1, qi]} rad): the controller refused or re-timed '
                           'the reference, or the bridge was not enabled')
    q_d = np.array([ref.sample(x)[0] for x in s])
    zr = np.zeros(plant.n_coords)
    tip_d = []
    for q in q_d:
        zr[qi] = q
        tip_d.append(plant.tip_pose(zr)[1])
    tip = np.array([plant.tip_pose(x)[1] for x in z])
    err = np.linalg.norm(tip - np.array(tip_d), axis=1)
    k_end = int(np.argmin(np.abs(s - MOVE_TIME)))
    z_eq, _ = static_equilibrium(plant, np.asarray(ref.sample(RUN_S)[0], dtype=float))
    ring = float(np.max(np.linalg.norm(tip[s >= RUN_S - 1.0] - plant.tip_pose(z_eq)[1], axis=1)))
    move = s <= MOVE_TIME
    qe = z[:, qi] - q_d
    return dict(tip_rms=float(np.sqrt(np.mean(err ** 2))), tip_end=float(err[k_end]), ring=ring,
                joint_rms=np.sqrt(np.mean(qe[move] ** 2, axis=0)), joint_end=qe[k_end],
                deflection=np.max(np.abs(relative_deflections(plant, z)), axis=0))


def _ros_env(domain):
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               PYTHONUNBUFFERED='1')
    env.pop('ROS_LOCALHOST_ONLY', None)
    return env


def _stop(p, sig=signal.SIGINT, timeout=10.0):
    """Stop a process started in its own session: `sig` to its group, SIGKILL after `timeout`."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5.0)
        except ProcessLookupError:
            pass


def hardware_run(plant_arm, domain, tmp, model, controller_extra=None, launch=False):
    """One run of the hardware path; returns (recording arrays, reference start on the emulator's clock, the
    reference, the last diagnostics of every node, those at the move's start)."""
    import rclpy
    from builtin_interfaces.msg import Duration
    from diagnostic_msgs.msg import DiagnosticArray
    from flexarm_bringup.bringup import command, hardware_nodes
    from flexarm_control.laws import PointToPoint
    from flexarm_msgs.srv import Enable
    from flexarm_sim.arms import arm_id, resolve_arm
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    env = _ros_env(domain)
    os.environ.update(ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    os.environ.pop('ROS_LOCALHOST_ONLY', None)
    link, rec = os.path.join(tmp, 'ttyDXL'), os.path.join(tmp, 'arm.npz')
    logs, procs, files = {}, [], []
    emu = None

    def start(argv, name):
        log = open(os.path.join(tmp, name + '.log'), 'w')
        files.append(log)
        logs[name] = log.name
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def tail(name):
        with open(logs[name]) as f:
            return f.read()[-3000:]
    node = None
    try:
        emu = start([sys.executable, '-m', 'flexarm_control.emulation.servo_emulator', '--arm', plant_arm or resolve_arm(ARM),
                     '--params', BRIDGE_YAML, '--link', link, '--record', rec], 'emulator')
        deadline = time.monotonic() + 60.0
        while not os.path.exists(link):
            if time.monotonic() > deadline or emu.poll() is not None:
                raise RuntimeError('the emulator did not start: ' + tail('emulator'))
            time.sleep(0.1)
        if launch:                   # the real tool (../shared/ros2-tools.md): the user's path itself
            if controller_extra:
                raise RuntimeError('--launch takes the shipped parameters only (no --input-delay)')
            procs.append(('ros2 launch', start(['ros2', 'launch', 'flexarm_bringup', 'hardware.launch.py',
                                                f'port:={link}', 'controller:=modal', 'estimator:=encoders'],
                                               'ros2 launch')))
        else:
            for spec in hardware_nodes(ARM, 'modal', '', BRIDGE_YAML, link, '', controller_extra=controller_extra,
                                       estimator='encoders'):
                procs.append((spec.name, start(command(spec, tmp), spec.name)))
        rclpy.init()
        node = rclpy.create_node('hardware_path_probe')
        diags, js, commands = {}, [], []
        node.create_subscription(DiagnosticArray, '/diagnostics',
                                 lambda m: diags.update({st.name: {kv.key: kv.value for kv in st.values}
                                                         for st in m.status}), 10)
        node.create_subscription(JointState, '/joint_states', lambda m: js.append(1), 10)
        node.create_subscription(Float64MultiArray, '/effort_controller/commands', lambda m: commands.append(1), 10)
        pub = node.create_publisher(JointTrajectory, '/flexarm/reference',
                                    QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))

        def spin_until(pred, timeout, what):
            end = time.monotonic() + timeout
            while not pred():
                rclpy.spin_once(node, timeout_sec=0.05)
                for name, p in procs + [('emulator', emu)]:
                    if p.poll() is not None:
                        raise RuntimeError(f'{name} exited ({p.returncode}): ' + tail(name))
                if time.monotonic() > end:
                    raise RuntimeError(f'timed out waiting for {what}')
        spin_until(lambda: len(js) > 10, 90.0, '/joint_states')
        # the controller answers the states before ~/enable (else the bridge's command watchdog latches torque off)
        spin_until(lambda: len(commands) > 100, 90.0, 'the controller\'s commands')
        cli = node.create_client(Enable, '/hardware_bridge/enable')
        spin_until(cli.service_is_ready, 30.0, '~/enable')
        fut = cli.call_async(Enable.Request(arm_id=arm_id(resolve_arm(ARM))))
        spin_until(fut.done, 30.0, 'the reply of ~/enable')
        if not fut.result().success:
            raise RuntimeError('~/enable refused: ' + fut.result().message)
        spin_until(lambda: pub.get_subscription_count() > 0, 30.0, 'the controller on /flexarm/reference')
        t_lead = time.monotonic() + LEAD_S
        spin_until(lambda: time.monotonic() > t_lead, LEAD_S + 5.0, 'the lead')
        n = model.n_joints
        ref = PointToPoint(np.zeros(n), np.full(n, ANGLE), MOVE_TIME)
        t_start = time.time() + 0.3
        msg = JointTrajectory()
        msg.header.stamp.sec = int(math.floor(t_start))
        msg.header.stamp.nanosec = int(round((t_start - math.floor(t_start)) * 1e9))
        msg.joint_names = list(model.spec.joint_names)
        for tk in np.linspace(0.0, MOVE_TIME, 101):
            q, qd, qdd = ref.sample(tk)
            pt = JointTrajectoryPoint(positions=[float(x) for x in q], velocities=[float(x) for x in qd],
                                      accelerations=[float(x) for x in qdd])
            pt.time_from_start = Duration(sec=int(tk), nanosec=int(round((tk - int(tk)) * 1e9)))
            msg.points.append(pt)
        pub.publish(msg)
        at_start = {k: dict(v) for k, v in diags.items()}
        t_done = time.monotonic() + 0.3 + RUN_S + 1.2       # one more diagnostics period after the run
        spin_until(lambda: time.monotonic() > t_done, RUN_S + 10.0, 'the run')
    finally:
        for _, p in reversed(procs):
            _stop(p)
        if node is not None:
            node.destroy_node()
            rclpy.try_shutdown()
        if emu is not None:
            _stop(emu, timeout=60.0)           # it writes the recording on its way out
        for f in files:
            f.close()
    if not os.path.exists(rec):
        raise RuntimeError('the emulator wrote no recording: ' + tail('emulator'))
    data = dict(np.load(rec))
    return data, t_start - float(data['wall_minus_monotonic']), ref, diags, at_start


def _num(d, key):
    try:
        return float(d.get(key, 'nan'))
    except (TypeError, ValueError):
        return float('nan')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--plant-arm', default=None, help='the emulated arm (default: the shipped deluca_two_link)')
    ap.add_argument('--domain', type=int, default=None,
                    help='ROS_DOMAIN_ID of the run (loopback only; default from the process id, 30-89)')
    ap.add_argument('--input-delay', type=float, default=None,
                    help='s: the controller\'s input_delay (default: the modal law\'s, 4 ms in whole periods)')
    ap.add_argument('--launch', action='store_true',
                    help='start the nodes with the real `ros2 launch flexarm_bringup hardware.launch.py port:=<pty> '
                         'controller:=modal estimator:=encoders` (ros2 on PATH) instead of their argv')
    ap.add_argument('--quick', action='store_true', help='(accepted for run_all.py; the run is one 6 s move)')
    ap.add_argument('--logs', default=None, help='keep the nodes\' logs and the recording in this folder')
    a = ap.parse_args(argv)
    from flexarm_control.bridge.config import load_yaml
    from flexarm_sim.arms import resolve_arm
    from flexarm_sim.model import load_model
    rate = float(load_yaml(BRIDGE_YAML)['loop_rate'])
    model = load_model(resolve_arm(ARM))
    plant = load_model(a.plant_arm) if a.plant_arm else model
    extra = None if a.input_delay is None else {'input_delay': float(a.input_delay)}
    domain = a.domain if a.domain is not None else 30 + os.getpid() % 60
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
        data, t0, ref, diags, at_start = hardware_run(a.plant_arm, domain, a.logs, model, extra, a.launch)
    else:
        with tempfile.TemporaryDirectory(prefix='hw_path_') as tmp:
            data, t0, ref, diags, at_start = hardware_run(a.plant_arm, domain, tmp, model, extra, a.launch)
    hw = figures(plant, data['t'], data['z'], ref, t0)
    ls = lockstep_figures(model, plant, rate)
    bridge = next((v for k, v in diags.items() if k.endswith('hardware_bridge') or k == 'hardware_bridge'), {})
    est = next((v for k, v in diags.items() if 'state_estimator' in k), {})
    ctl = next((v for k, v in diags.items() if k.endswith('modal') or 'modal' in k), {})
    ctl0 = next((v for k, v in at_start.items() if k.endswith('modal') or 'modal' in k), {})
    print(f'\nhardware path (bridge at {rate:g} Hz + estimator on the encoders + modal, against the emulated '
          f'{plant.spec.name}), 30 deg in {MOVE_TIME:g} s, {RUN_S:g} s, real time; lock-step: the same in process')
    print(f'{"":10s} {"tip RMS":>8s} {"tip end":>8s} {"ringing":>8s} {"joint RMS in move (rad)":>24s} '
          f'{"joint at end (rad)":>20s} {"deflection/length":>18s}')
    for name, f in (('hardware', hw), ('lock-step', ls)):
        print(f'{name:10s} {1e3 * f["tip_rms"]:6.1f}mm {1e3 * f["tip_end"]:6.1f}mm {1e3 * f["ring"]:6.2f}mm '
              f'{f["joint_rms"][0]:11.3f} {f["joint_rms"][1]:.3f} {f["joint_end"][0]:+11.3f} {f["joint_end"][1]:+.3f} '
              f'{100 * f["deflection"][0]:10.1f}% {100 * f["deflection"][-1]:.1f}%')
    print(f'ratio      {hw["tip_rms"] / ls["tip_rms"]:8.2f} {hw["tip_end"] / max(ls["tip_end"], 1e-12):8.2f} '
          f'            target (issue 28): tip RMS within 1.5x of lock-step')
    print(f'bridge: {_num(bridge, "achieved_rate_hz"):.1f} Hz, overruns {bridge.get("overruns", "?")}, limit '
          f'interventions {bridge.get("limit_interventions", "?")}, read failures {bridge.get("read_failures", "?")}; '
          f'estimator resets {est.get("resets", est.get("filter_resets", "?"))}; controller safe-mode entries '
          f'{ctl.get("safe_mode_entries", "?")} ({ctl0.get("safe_mode_entries", "?")} before the move); '
          f'recorded {data["t"].size} plant advances')
    return 0


if __name__ == '__main__':
    sys.exit(main())
