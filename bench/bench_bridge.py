"""Bridge cycle rate against the pty servo emulator: read_state + write (BridgeCore.cycle) back to back.

The emulator runs in a separate process (no shared GIL), like real servos. A pty ignores the baud
rate: the figures are SDK + Python + pty costs, not RS-485 wire time. On a real bus add per cycle
about 10 bits x bytes / baud (sync read of n servos: 14 + n x 32 bytes; sync write: 14 + n x 3
bytes), each servo's Return Delay Time, and the USB adapter's latency timer (set it to 1 ms).

Then recovery with the shipped defaults (SDK reply timeout, 3 failed reads -> fault, back-off 0.1 s
doubling to 1 s): cold starts (emulator and bridge started together, the bridge's first request 0 to
1.2 s later), and the time from the servos answering again to the bridge connected after each kind of
outage (target: within 2 s).

And the Bus Watchdog's margin: the bridge at the shipped 250 Hz, enabled, for 10 s (paced like the node's loop):
the longest time a servo went without an instruction, next to bus_watchdog (0.1 s): a longer silence stops the
servos (a hung host, to them), so the ratio is the headroom before a stall of the host stops the arm.
"""
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'flexarm_control'))

from flexarm_control.bridge.config import BridgeConfig  # noqa: E402
from flexarm_control.bridge.core import DISABLED, BridgeCore, Request  # noqa: E402
from flexarm_control.bridge.servo_bus import ServoBus  # noqa: E402


def run(n, baud, seconds=1.5):
    ids = [str(i) for i in range(1, n + 1)]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, 'flexarm_control') + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.Popen([sys.executable, '-m', 'flexarm_control.emulation.servo_emulator', '--ids', *ids, '--baud', str(baud)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    port = proc.stdout.readline().strip()
    flat = {'port': port, 'baud_rate': baud, 'loop_rate': 1000.0, 'command_timeout': 10.0, 'read_timeout': 0.1,
            'hardware_status_period': 0, 'joint_names': [f'j{i}' for i in ids]}
    for i in ids:
        flat[f'joints.j{i}.servo_id'] = int(i)
    cfg = BridgeConfig.from_mapping(flat)
    core = BridgeCore(cfg, ServoBus(cfg.bus_config()))
    try:
        for _ in range(20):
            core.cycle()
            if core.state == DISABLED:
                break
            time.sleep(0.05)
        req = Request('enable')
        core._requests.put(req)
        core.cycle()
        assert req.success, req.message
        wall, cpu = [], []
        t_end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < t_end:
            core.submit_effort(0.05 * np.sin(0.01 * k) * np.ones(n))
            t0, c0 = time.perf_counter(), time.process_time()
            core.cycle()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            k += 1
        fails = core.bus.counters.read_failures + core.bus.counters.crc_errors + core.bus.counters.write_failures
        return np.array(wall), np.array(cpu), fails, core.state
    finally:
        core.shutdown()
        proc.terminate()
        proc.wait(5)


def recovery():
    sys.path.insert(0, os.path.join(ROOT, 'test'))
    import signal
    import tempfile
    from bridge_harness import BridgeLoop, EmulatorProcess
    from flexarm_control.bridge.config import flatten
    from flexarm_control.bridge.core import FAULT

    def core_for(link):
        flat = flatten({'port': link, 'joint_names': ['a', 'b'],
                        'joints': {'a': {'servo_id': 1}, 'b': {'servo_id': 2}}})
        cfg = BridgeConfig.from_mapping(flat)
        return BridgeCore(cfg, ServoBus(cfg.bus_config()))

    work = tempfile.mkdtemp(prefix='bench_bridge_')
    link = os.path.join(work, 'tty')
    times, failed = [], 0
    for k in range(20):
        emu = EmulatorProcess(link)
        try:
            time.sleep((0.0, 0.3, 0.6, 1.2)[k % 4])
            t0 = time.monotonic()
            loop = BridgeLoop(core_for(link))
            try:
                times.append(loop.wait_state(DISABLED, 30.0) - t0)
                failed += loop.core.failed_attempts_total
            except AssertionError:
                pass
            loop.stop()
        finally:
            emu.stop_process()
    print(f'cold starts: {len(times)}/20 connected (target 20/20), time to connect median '
          f'{1e3 * np.median(times):.0f} ms, max {1e3 * max(times):.0f} ms, {failed} failed attempts')
    print(f'{"outage":>8} {"length s":>8} {"fault":>36} {"reconnect s":>11} {"target s":>8}')
    for kind in ('silent', 'stalled', 'port', 'restart'):
        for length in (1.5, 5.0):
            emu = EmulatorProcess(link)
            loop = BridgeLoop(core_for(link), command=[0.0, 0.0])
            try:
                loop.wait_state(DISABLED, 30.0)
                if kind == 'silent':
                    emu.command('silent 1')
                elif kind == 'stalled':
                    os.kill(emu.proc.pid, signal.SIGSTOP)
                elif kind == 'port':
                    emu.command('close')
                else:
                    emu.stop_process()
                loop.wait_state(FAULT, 30.0)
                time.sleep(length)
                if kind == 'silent':
                    emu.command('silent 0')
                elif kind == 'stalled':
                    os.kill(emu.proc.pid, signal.SIGCONT)
                elif kind == 'port':
                    emu.command('reopen')
                else:
                    emu = EmulatorProcess(link)
                t_back = time.monotonic()
                dt = loop.wait_state(DISABLED, 30.0, after=t_back) - t_back
                print(f'{kind:>8} {length:>8.1f} {loop.core.last_fault[:36]:>36} {dt:>11.3f} {2.0:>8.1f}')
            finally:
                loop.stop()
                if emu.proc.poll() is None:
                    os.kill(emu.proc.pid, signal.SIGCONT)
                    emu.stop_process()


def watchdog_margin(seconds=10.0):
    sys.path.insert(0, os.path.join(ROOT, 'test'))
    import tempfile
    from bridge_harness import BridgeLoop, EmulatorProcess
    from flexarm_control.bridge.config import flatten
    from flexarm_control.bridge.core import ENABLED
    link = os.path.join(tempfile.mkdtemp(prefix='bench_bridge_'), 'tty')
    emu = EmulatorProcess(link)
    flat = flatten({'port': link, 'joint_names': ['a', 'b'], 'joints': {'a': {'servo_id': 1}, 'b': {'servo_id': 2}}})
    cfg = BridgeConfig.from_mapping(flat)
    loop = BridgeLoop(BridgeCore(cfg, ServoBus(cfg.bus_config())), rate=cfg['loop_rate'], command=[0.01, 0.01])
    try:
        loop.wait_state(DISABLED, 30.0)
        req = loop.core.request('enable')
        assert req.success, req.message
        loop.wait_state(ENABLED, 10.0)
        time.sleep(seconds)
        core = loop.core
        gap, wd = core.gap_max_total, core.wd_period
        print(f'Bus Watchdog margin: {cfg["loop_rate"]:g} Hz for {seconds:g} s enabled, {core.fault_count} fault(s): '
              f'longest silence towards a servo {1e3 * gap:.1f} ms vs bus_watchdog {1e3 * wd:.0f} ms: '
              f'{wd / gap:.1f}x headroom (load {os.getloadavg()[0]:.1f})')
    finally:
        loop.stop()
        emu.stop_process()


def main():
    print(__doc__.split('\n\n')[0])
    print(f'{"servos":>6} {"baud":>8} {"rate Hz":>8} {"mean ms":>8} {"p99 ms":>7} {"max ms":>7} {"CPU ms/cycle":>12} {"failures":>8}')
    for n in (2, 6):
        for baud in (1000000, 4000000):
            wall, cpu, fails, state = run(n, baud)
            print(f'{n:>6} {baud:>8} {1 / wall.mean():>8.0f} {1e3 * wall.mean():>8.2f} {1e3 * np.percentile(wall, 99):>7.2f} '
                  f'{1e3 * wall.max():>7.2f} {1e3 * cpu.mean():>12.3f} {fails:>8}')
    print('(pty: the baud rate is nominal; see the docstring for the real-bus wire time)')
    print()
    watchdog_margin()
    print()
    recovery()


if __name__ == '__main__':
    main()
