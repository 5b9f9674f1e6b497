"""System test: the De Luca arm under each controller in real time over DDS (plant and controller in their own
processes, `flexarm run` defaults: plant 1 kHz, states and control at 500 Hz; a 30 deg move, within the model's
validity: exit 0) stays bounded and tracks.

Behaviour only, no timing asserts: before the delay-aware laws (controller_node.py, laws: input_delay) and the
loop-thread state publishing of the plant, these runs diverged (joint errors of radians, tip deflections of metres,
saturated torques). In real time the controller's commands are stamped with the step at which its design delay
has passed and act there (flexarm_sim/plant/runtime.py). Bounds are loose multiples of the lock-step / in-process figures (peak tip deflection
~0.24 m, joint RMS error <= 0.23 rad) so a loaded machine (overruns, late states) does not fail them."""
import json
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ros_support import run_summary  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.mark.parametrize('controller', ['modal', 'pd_servo'])
def test_realtime_closed_loop_over_dds_stays_bounded(ros_env, controller):
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'run', '--controller', controller,
                        '--duration', '4', '--angle', '30', '--quiet', '--json'], env=ros_env, capture_output=True, text=True,
                       timeout=240)
    s = run_summary(r)                         # exit 0 (or 5, held short): not lost, within the model's validity
    assert s['time_mode'] == 'realtime'
    assert s['samples'] > 500
    rms = s['joint_rms_error_rad']
    assert all(math.isfinite(x) for x in rms) and max(rms) < 0.5, s
    assert math.isfinite(s['peak_tip_deflection_m']) and s['peak_tip_deflection_m'] < 0.5, s
    # the controller stamps each command for the step at which its design delay has passed; the plant applies it
    # there, or at once when it came later (how many are late is the machine's load: reported, not asserted)
    assert s['commands_on_time'] > 100 and s['commands_late'] >= 0, s
    # where the plant's loop may be SCHED_FIFO (here: root), the controller's state thread is too, below it
    assert s['controller_state_thread_fifo_priority'] == (40 if s['plant_loop_fifo_priority'] == 50 else 0), s
    # ... and so are the DDS threads that deliver what those threads wait for (Fast DDS's receive threads)
    fifo = s['plant_loop_fifo_priority'] == 50
    assert (s['plant_dds_receive_threads_fifo'] > 0) == fifo, s
    assert (s['controller_dds_receive_threads_fifo'] > 0) == fifo, s


def test_realtime_modal_law_from_the_encoder_estimate_holds_the_arm_without_filter_resets(ros_env):
    """Issue 28 item 3: the modal law fed back the state estimate from the encoders in real time (plant, estimator
    and controller in their own processes). The estimator's filter cells are designed ahead in a process of its own
    and the nodes' design processes are started before their loops: designed inside a tick, a cell made the estimate
    late by 1-13 ms 27 times in the move, and the controllers' design processes' start-up (~2.5 s of a core) ran
    beside the move's first seconds. Measured (30 deg move, 4 s): idle 17.5 mm tip RMS, no safe mode; beside two
    CPU hogs 51-54 mm with the safe mode entered 1-3 times; in all of them no filter reset and the arm not lost
    (exit 0). Asserted: exit 0 and no reset, the behaviour, not the figures."""
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'run', '--controller', 'modal',
                        '--estimator', 'encoders', '--duration', '4', '--angle', '30', '--quiet', '--json'],
                       env=ros_env, capture_output=True, text=True, timeout=300)
    s = run_summary(r)                         # exit 0 (or 5, held short): not lost, within the model's validity
    assert s['estimator'] == 'encoders' and s['samples'] > 500, s
    assert s['estimator_resets'] == 0, s
    assert max(s['joint_rms_error_rad']) < 0.5 and s['peak_tip_deflection_m'] < 0.5, s


UNLOADED_PEAK_TIP_M = 0.24     # lock-step / unloaded real time, modal law (the runner's demo figure: 0.235 m)


def test_overload_never_destabilizes_the_arm(ros_env):
    """Issue 18: beside two CPU hogs the modal controller lost the arm (80 m of 'tip deflection'). Now the run
    ends bounded (peak tip <= 1.5x the unloaded run) or with the controller's safe mode entered and reported —
    never a runaway."""
    hogs = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]
    try:
        r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'run', '--controller', 'modal',
                            '--duration', '4', '--quiet', '--json'], env=ros_env, capture_output=True, text=True,
                           timeout=300)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # 0, or 3 with the summary printed: the 60 deg move bends link 1 beyond the model's validity even unloaded;
    # or 5: the safe mode held the arm short of its target (degraded, not lost)
    assert r.returncode in (0, 3, 5), r.stderr[-2000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    tip, rms = s['peak_tip_deflection_m'], s['joint_rms_error_rad']
    assert math.isfinite(tip) and tip < 1.0 and all(math.isfinite(x) and x < 1.0 for x in rms), s
    assert tip <= 1.5 * UNLOADED_PEAK_TIP_M or s['controller_safe_mode_entries'] >= 1, s
