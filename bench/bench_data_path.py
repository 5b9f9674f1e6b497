"""The ROS data path at 1 kHz on two cores (issue 16): every figure next to its target, measured in this run.

1. per-stage cost, in-process (median us): RK4 step, FlexState encode, publish, decode, law update, command encode
   (raw CDR, ros/cdr.py) next to the rclpy message path it replaced;
2. lock-step steps per wall second, De Luca arm, each controller, separate processes and --single-process;
3. real time, control at 1 kHz, plant and controller in separate processes (`flexarm run --control-rate 1000`):
   CPU % of a core of each, skipped states, plant overruns, tracking next to lock-step's;
4. /joint_states seen by a subscriber in its own process (plant alone, 1 kHz, every output on): error between
   consecutive stamps (|d stamp - 1 ms|) p99 and sample-to-receive latency p99; the plant's CPU %, next to an rclpy
   executor timer doing one step + a JointState publish (the baseline).

    python bench/bench_data_path.py [--quick]     (--quick: 10 s real-time runs instead of 60 s)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from flexarm_sim.arms import resolve_arm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARM = resolve_arm('deluca_two_link')
CONTROLLERS = ('pd_servo', 'modal', 'computed_torque')
TARGETS = {'plant_cpu': 30.0, 'controller_cpu': 25.0, 'lockstep': 1000.0, 'single': 3000.0, 'stamp_p99_us': 50.0,
           'latency_p99_us': 300.0}


def median_us(fn, n=2000):
    t = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return 1e6 * float(np.median(t))


def stages():
    """Per-stage cost in this process (no DDS): raw path and the rclpy message path it replaced."""
    import rclpy
    from rclpy.serialization import deserialize_message, serialize_message
    from std_msgs.msg import Float64MultiArray

    from flexarm_control.controller import config
    from flexarm_control.controller.runtime import ControllerRuntime
    from flexarm_msgs.msg import FlexState
    from flexarm_sim.arms import arm_id
    from flexarm_sim.model import load_model
    from flexarm_sim.model.layout import ArmLayout
    from flexarm_sim.plant.engine import PlantCore
    from flexarm_sim.plant.outputs import ArmOutputs
    from flexarm_sim.ros.flexstate import FlexStateDecoder, FlexStateEncoder, decode_state
    from flexarm_sim.ros.messages import CommandReader, CommandWriter
    model = load_model(ARM)
    layout = ArmLayout.of(model, arm_id(ARM, model.spec.name))
    core = PlantCore(model, 1e-3)
    z, zd, tau = core.z, core.zd, np.zeros(2)
    out = {'RK4 step (1 ms)': median_us(lambda: core.advance(tau))}
    enc = FlexStateEncoder(layout, 'base_link', ArmOutputs(model))
    data = enc.fill(z, zd, tau, 0, 0)
    out['FlexState encode (raw CDR)'] = median_us(lambda: enc.fill(z, zd, tau, 1, 2))
    msg = deserialize_message(data, FlexState)
    out['FlexState serialize (rclpy message)'] = median_us(lambda: serialize_message(msg))
    dec = FlexStateDecoder(layout)
    dec.decode(data)
    out['FlexState decode (raw CDR)'] = median_us(lambda: dec.decode(data))
    out['FlexState deserialize + decode (rclpy)'] = median_us(lambda: decode_state(deserialize_message(data,
                                                                                                          FlexState),
                                                                                      layout))
    for kind in CONTROLLERS:
        rt = ControllerRuntime(kind, model, dict(config.TABLES[kind].defaults(), rate=1000.0, lockstep=True))
        rt.hold(z, 0.0)
        k = [0]

        def step():
            k[0] += 1
            rt.on_state(z, zd, 1e-3 * k[0])
        out[f'law update: {kind}'] = median_us(step, 1000)
    w, r = CommandWriter(2), CommandReader(2)
    cmd = w.array_bytes(tau)
    out['command encode (raw CDR)'] = median_us(lambda: w.array_bytes(tau))
    out['command serialize (rclpy message)'] = median_us(lambda: serialize_message(Float64MultiArray(data=[0.1, 0.2])))
    out['command decode (raw CDR)'] = median_us(lambda: r.values(cmd))
    rclpy.init()
    node = rclpy.create_node('bench_stages')
    pub = node.create_publisher(FlexState, '/bench_stage_state', 10)
    node.create_subscription(FlexState, '/bench_stage_state', lambda m: None, 10, raw=True)
    out['publish FlexState bytes (rclpy)'] = median_us(lambda: pub.publish(data), 1000)
    out['publish FlexState message (rclpy)'] = median_us(lambda: pub.publish(msg), 1000)
    node.destroy_node()
    rclpy.shutdown()
    return out


def flexarm_run(env, *args, timeout=900):
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'run', '--json', '--quiet', *args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return {'error': r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f'exit {r.returncode}'}
    return json.loads(r.stdout.strip().splitlines()[-1])


def probe_joint_states(env, seconds):
    """Plant alone (1 kHz, state at 1 kHz, markers, diagnostics) + a subscriber process: stamp intervals, latency,
    the plant's CPU."""
    code = r'''
import json, sys, time
import numpy as np, rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
rclpy.init(); node = rclpy.create_node('stamp_probe'); stamps, recv = [], []
def cb(m):
    recv.append(time.time_ns()); stamps.append(m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)
node.create_subscription(JointState, '/joint_states', cb, QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
t_end = None
while True:
    rclpy.spin_once(node, timeout_sec=0.05)
    if t_end is None and len(stamps) > 2000:
        stamps.clear(); recv.clear(); t_end = time.monotonic() + float(sys.argv[1]); print('started', flush=True)
    if t_end is not None and time.monotonic() > t_end:
        break
s, r = np.array(stamps), np.array(recv)
d = np.diff(s) * 1e-9
print(json.dumps({'n': len(s), 'interval_err_p99_us': float(np.percentile(np.abs(d - 1e-3), 99) * 1e6),
                  'interval_err_max_us': float(np.max(np.abs(d - 1e-3)) * 1e6),
                  'gaps': int(np.sum(d > 1.5e-3)),
                  'latency_p50_us': float(np.percentile(r - s, 50) * 1e-3),
                  'latency_p99_us': float(np.percentile(r - s, 99) * 1e-3)}), flush=True)
'''
    import tempfile
    from flexarm_bringup.bringup import command, sim_nodes
    tmp = tempfile.mkdtemp()
    spec = sim_nodes('deluca_two_link', 'none', 'realtime', control_rate=1000.0,
                     plant_extra={'publish_rates.markers': 30.0, 'publish_rates.diagnostics': 1.0})[0]
    plant = subprocess.Popen(command(spec, tmp), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = subprocess.Popen([sys.executable, '-c', code, str(seconds)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout.readline().strip() == 'started'
        c0, w0 = cpu_seconds(plant.pid), time.monotonic()
        res = json.loads(probe.stdout.readline())
        res['plant_cpu'] = 100.0 * (cpu_seconds(plant.pid) - c0) / (time.monotonic() - w0)
        return res
    finally:
        plant.terminate()
        probe.kill()
        plant.wait(timeout=10)


def cpu_seconds(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def timer_baseline(env, seconds):
    out = subprocess.run([sys.executable, os.path.join(HERE, '_rclpy_timer_baseline.py'), '1000', str(seconds), ARM],
                         env=env, capture_output=True, text=True, timeout=seconds + 120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def verdict(value, target, higher_better=False):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 'n/a'
    ok = value >= target if higher_better else value <= target
    return 'meets' if ok else 'MISSES'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--quick', action='store_true', help='10 s real-time runs (default 60 s)')
    a = ap.parse_args()
    seconds = 10.0 if a.quick else 60.0
    env = dict(os.environ, ROS_DOMAIN_ID=str(200 + os.getpid() % 30), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    print(f'data path, De Luca two-link arm, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}')

    print('\n1. per-stage cost in-process (median us; raw CDR path next to the rclpy message path)')
    for name, us in stages().items():
        print(f'   {name:42s} {us:8.1f}')

    print('\n2. lock-step steps per wall second (plant 1 kHz, control 500 Hz; 6 s of plant time)')
    print(f'   {"controller":18s} {"processes":>10s} {"single-process":>15s}   target >= {TARGETS["lockstep"]:g} / '
          f'{TARGETS["single"]:g}')
    for c in CONTROLLERS:
        multi = flexarm_run(env, '--controller', c, '--time-mode', 'lockstep', '--duration', '6')
        single = flexarm_run(env, '--controller', c, '--time-mode', 'lockstep', '--duration', '6', '--single-process')
        m, s = multi.get('steps_per_wall_s'), single.get('steps_per_wall_s')
        print(f'   {c:18s} {m if m is not None else multi.get("error"):>10} {s if s is not None else single.get("error"):>15}'
              f'   {verdict(m, TARGETS["lockstep"], True)} / {verdict(s, TARGETS["single"], True)}')

    print(f'\n3. real time, control at 1 kHz over DDS, {seconds:g} s (modal law)')
    rt = flexarm_run(env, '--controller', 'modal', '--control-rate', '1000', '--duration', str(seconds))
    ls = flexarm_run(env, '--controller', 'modal', '--control-rate', '1000', '--duration', str(min(seconds, 10.0)),
                     '--time-mode', 'lockstep')
    if 'error' in rt:
        print('   run failed:', rt['error'])
    else:
        cpu = rt.get('cpu_percent_of_a_core', {})
        print(f'   plant CPU {cpu.get("plant", float("nan")):.1f} % of a core (target <= {TARGETS["plant_cpu"]:g}: '
              f'{verdict(cpu.get("plant"), TARGETS["plant_cpu"])}), controller {cpu.get("modal", float("nan")):.1f} % '
              f'(target <= {TARGETS["controller_cpu"]:g}: {verdict(cpu.get("modal"), TARGETS["controller_cpu"])})')
        print(f'   states skipped {rt.get("controller_states_skipped")}, plant overruns {rt.get("overruns")}, '
              f'safe-mode entries {rt.get("controller_safe_mode_entries")} (target 0 / 0)')
        print(f'   joint RMS {rt.get("joint_rms_error_rad")} rad vs lock-step {ls.get("joint_rms_error_rad")}; peak tip '
              f'{rt.get("peak_tip_deflection_m")} vs {ls.get("peak_tip_deflection_m")} m')

    print(f'\n4. /joint_states at a subscriber in its own process (plant alone, 1 kHz, all outputs on), {seconds:g} s')
    js = probe_joint_states(env, seconds)
    tb = timer_baseline(env, min(seconds, 10.0))
    print(f'   stamp interval error p99 {js["interval_err_p99_us"]:.1f} us (max {js["interval_err_max_us"]:.0f}, '
          f'{js["gaps"]} gaps; target <= {TARGETS["stamp_p99_us"]:g}: {verdict(js["interval_err_p99_us"], TARGETS["stamp_p99_us"])})')
    print(f'   sample-to-receive latency p50 {js["latency_p50_us"]:.0f} us, p99 {js["latency_p99_us"]:.0f} us '
          f'(target <= {TARGETS["latency_p99_us"]:g}: {verdict(js["latency_p99_us"], TARGETS["latency_p99_us"])})')
    print(f'   plant CPU {js["plant_cpu"]:.1f} % of a core (target <= {TARGETS["plant_cpu"]:g}: '
          f'{verdict(js["plant_cpu"], TARGETS["plant_cpu"])}); rclpy timer baseline (step + JointState publish): '
          f'{tb["cpu_percent"]:.1f} %, its period error p99 {1e6 * tb["period_err_p99_s"]:.0f} us')
    return 0


if __name__ == '__main__':
    sys.exit(main())
