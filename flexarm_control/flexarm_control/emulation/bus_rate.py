"""ServoBus's cycle rate against the emulated servos: ``read_state()`` + ``write_efforts()`` per cycle.

``python -m flexarm_control.emulation.bus_rate`` prints it for 2 and 6 servos at 1 and 4 Mbaud, the emulator in a
thread of this process and in a process of its own.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict, List, Sequence

import numpy as np

from ..bridge.servo_bus import JointServoConfig, ServoBus, ServoBusConfig
from .servo_emulator import ServoEmulator

def _start_emulator_process(ids: Sequence[int], baud: int):
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexarm_control.emulation.servo_emulator", "--ids", *map(str, ids),
         "--baud", str(baud)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    path = proc.stdout.readline().strip()
    if not path:
        proc.kill()
        raise RuntimeError("emulator process did not start")
    return proc, path


def measure_cycle_rate(n_servos: int = 2, baud: int = 1000000, seconds: float = 1.0,
                       emulator: str = "thread") -> Dict[str, float]:
    """Run read_state()+write_efforts() against the emulator for *seconds*.

    emulator: 'thread' (in-process ServoEmulator) or 'process' (the
    ``python -m ...servo_emulator`` CLI in a child process, no shared GIL).
    A pty ignores the baud rate: the figures measure the bus code + Python + pty
    overhead, not RS-485 wire time (on a real bus add roughly
    ``10 bits * bytes / baud`` plus each servo's Return Delay Time and the
    USB adapter's latency timer).
    """
    ids = list(range(1, n_servos + 1))
    proc = emu = None
    if emulator == "process":
        proc, path = _start_emulator_process(ids, baud)
    else:
        emu = ServoEmulator(ids)
        path = emu.port_name
    joints = [JointServoConfig("j%d" % i, i, current_limit=1.0) for i in ids]
    # a generous reply timeout: an emulator thread or process that a loaded machine deschedules answers late,
    # which this measures as a slow cycle rather than failing (the rate, not the timeout, is the figure here)
    bus = ServoBus(ServoBusConfig(path, baud, joints, read_timeout=0.5, hw_status_period=0))
    durations: List[float] = []
    failures = 0
    try:
        bus.open()
        bus.ping_all(require=True)
        bus.configure()
        bus.enable()
        t_end = time.monotonic() + seconds
        k = 0
        while True:
            t0 = time.perf_counter()
            r = bus.read_state()
            ok = bus.write_efforts(0.05 * np.sin(0.01 * k) * np.ones(n_servos))
            durations.append(time.perf_counter() - t0)
            failures += (not r.ok) + (not ok)
            k += 1
            if time.monotonic() >= t_end:
                break
        bus.disable()
    finally:
        bus.close()
        if emu is not None:
            emu.close()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
    d = np.array(durations)
    return {
        "n_servos": n_servos, "baud": baud, "emulator": emulator, "cycles": int(d.size),
        "rate_hz": float(d.size / d.sum()) if d.size else 0.0,
        "mean_ms": float(d.mean() * 1e3), "p50_ms": float(np.percentile(d, 50) * 1e3),
        "p99_ms": float(np.percentile(d, 99) * 1e3), "max_ms": float(d.max() * 1e3),
        "failures": failures,
    }


if __name__ == "__main__":  # pragma: no cover - quick manual benchmark
    for mode in ("thread", "process"):
        for baud in (1000000, 4000000):
            for n in (2, 6):
                print(measure_cycle_rate(n, baud, 1.0, emulator=mode))
