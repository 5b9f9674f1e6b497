"""Plant timing benchmark: the real plant process (realtime mode, De Luca arm) at 1, 2 and 5 kHz.

For each rate: period error |interval - T| p50/p99/max and overruns (plant's own statistics over its
last 8192 ticks, from /diagnostics), the plant process's CPU % over the window, step compute time
(mean/max over the whole run: RK4 step + /joint_states publish + hand-off to the output thread), and the
publish-to-receive latency of /joint_states in a separate process (p50/p99). Baseline: the same
work in an rclpy executor timer, measured the same way, and the ratio of p99 period errors.

    python bench/bench_plant_timing.py [--quick] [--seconds N] [--rates 1000,2000,5000]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from flexarm_sim.arms import resolve_arm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARM = resolve_arm('deluca_two_link')


def cpu_seconds(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def run_plant(rate, seconds, env, priority=0):
    with tempfile.NamedTemporaryFile('w', suffix='.yaml', delete=False) as f:
        f.write(f'plant:\n  ros__parameters:\n    arm: {ARM}\n    loop_rate: {rate}\n'
                f'    publish_rates: {{joint_states: {rate}, diagnostics: 1.0}}\n'
                f'    timing: {{realtime_priority: {priority}}}\n')
        params = f.name
    plant = subprocess.Popen([sys.executable, '-m', 'flexarm_sim.plant.node', '--ros-args', '--params-file', params],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    probe = subprocess.Popen([sys.executable, os.path.join(HERE, '_plant_probe.py'), str(seconds)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        line = probe.stdout.readline()              # 'started' once matched and diagnostics seen
        c0, w0 = cpu_seconds(plant.pid), time.monotonic()
        result = json.loads(probe.stdout.readline())
        c1, w1 = cpu_seconds(plant.pid), time.monotonic()
        assert 'started' in line
        result['cpu_percent'] = 100.0 * (c1 - c0) / (w1 - w0)
        return result
    finally:
        plant.terminate()
        probe.kill()
        plant.wait(timeout=10)
        os.unlink(params)


def run_timer(rate, seconds, env):
    out = subprocess.run([sys.executable, os.path.join(HERE, '_rclpy_timer_baseline.py'), str(rate), str(seconds), ARM],
                         env=env, capture_output=True, text=True, timeout=seconds + 120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--quick', action='store_true', help='~5 s per measurement')
    ap.add_argument('--seconds', type=float, default=None)
    ap.add_argument('--rates', default='1000,2000,5000')
    ap.add_argument('--priority', type=int, default=50,
                    help='plant timing.realtime_priority (SCHED_FIFO of the loop thread, where permitted; the '
                         "plant's default 50); 0 = normal scheduling")
    a = ap.parse_args()
    seconds = a.seconds or (5.0 if a.quick else 60.0)
    env = dict(os.environ, ROS_DOMAIN_ID=str(150 + os.getpid() % 50), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    rows = []
    for rate in [float(r) for r in a.rates.split(',')]:
        p = run_plant(rate, seconds, env, a.priority)
        d = p['diag']
        t = run_timer(rate, seconds, env)
        us = 1e6
        granted = int(float(d.get('loop_thread_fifo_priority', 0)))
        rows.append((rate, f'plant loop (FIFO {granted})' if granted else 'plant loop (normal sched.)',
                     float(d['achieved_rate_hz']), float(d['period_error_p50_us']),
                     float(d['period_error_p99_us']), float(d['period_error_max_us']),
                     int(d['overruns']), int(d['skipped_periods']), p['cpu_percent'],
                     float(d['step_compute_mean_us']), float(d['step_compute_max_us']),
                     p['latency_p50_s'] * us, p['latency_p99_s'] * us))
        rows.append((rate, 'rclpy timer', t['rate_hz'], t['period_err_p50_s'] * us, t['period_err_p99_s'] * us,
                     t['period_err_max_s'] * us, t['overruns'], 0, t['cpu_percent'], t['compute_mean_s'] * us,
                     t['compute_max_s'] * us, float('nan'), float('nan')))
        rows.append((rate, 'ratio timer/plant p99', float('nan'), float('nan'),
                     rows[-1][4] / max(rows[-2][4], 1e-9), float('nan'), 0, 0, float('nan'), float('nan'),
                     float('nan'), float('nan'), float('nan')))
    print(f'plant timing, De Luca two-link arm, {seconds:g} s per row (period error = |tick interval - T|, us); '
          f'asked for timing.realtime_priority {a.priority}')
    hdr = ('rate', 'loop', 'achieved', 'err p50', 'err p99', 'err max', 'overruns', 'skipped', 'CPU %',
           'step mean', 'step max', 'lat p50', 'lat p99')
    print('| ' + ' | '.join(hdr) + ' |')
    print('|' + '---|' * len(hdr))
    for r in rows:
        cells = [f'{r[0]:g}', r[1]] + [('' if v != v else (f'{v:.0f}' if isinstance(v, int) else f'{v:.1f}'))
                                       for v in r[2:]]
        print('| ' + ' | '.join(cells) + ' |')
    print('(overruns: ticks started >= 1 period late; skipped: periods dropped beyond max_catchup_steps; '
          'err p50/p99/max from the plant\'s last 8192 ticks; step = RK4 step + /joint_states publish; '
          'lat = /joint_states publish-to-receive in another process)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
