"""Parameters of the controller nodes (no ROS): one table per node, the common rows here and each law's GAINS.

config/controllers.yaml is generated from these tables (`python -m flexarm_control.controller.config`; a test
checks the shipped file is). The node name is the section name everywhere (launch files, `ros2 run` with the
shipped file, `flexarm run`).
"""
from __future__ import annotations

import math
import sys

from flexarm_sim.plant.config import CONTROL_RATE
from flexarm_sim.ros import names
from flexarm_sim.common.params import (DERIVED, ConfigError, Param, ParamTable, boolean, choice, float_range, integer, string)

from .kinds import KINDS, SHAPINGS, law_class


# s beyond the design's input delay before a state counts as late (safe_mode.max_state_age not set): a time, as the laws'
# stable bands of actual delay are (De Luca arm, modal laws designed for 4 ms: stable to 8 ms at 500 Hz and 1 kHz, 9 ms
# at 250 Hz; laws/modal.py); two periods at 500 Hz, as before
STATE_AGE_MARGIN_S = 0.004

COMMON = {
    'arm': Param('deluca_two_link', string(),
                 'arm description (a YAML path or the name of a shipped arm); must be the plant\'s (the node '
                 'refuses states of another arm)'),
    'rate': Param(CONTROL_RATE, float_range(lo=1.0, hi=10000.0),
                  'Hz, the control rate: must equal the plant\'s publish_rates.state (one command per state; the '
                  'laws are designed for this period; the node warns when the states arrive at another rate)'),
    'state_topic': Param(names.STATE, string(),
                         'the flexarm_msgs/FlexState the law feeds back, relative to the node\'s namespace: '
                         f'{names.STATE} (the plant\'s true state, or the hardware bridge\'s joints) or '
                         f'{names.STATE_ESTIMATE} (the state_estimator\'s; estimator:= in the launch files)'),
    'state_timeout': Param(0.1, float_range(lo=0.001, hi=10.0),
                           's (wall) without a fresh /flexarm/state -> stop commanding (the plant\'s watchdog takes '
                           'over)'),
    'shaping': Param('none', choice(SHAPINGS),
                     'input shaping of the reference from the closed-loop modes at the move target', runtime=True),
    'shaping_modes': Param(2, integer(lo=1, hi=10), 'modes the shaper cancels', runtime=True),
    'lockstep': Param(False, boolean(),
                      'plant in lockstep: answer every state with flexarm_msgs/JointEffortCommand (step = state '
                      'step + 1) as well'),
    'event_driven': Param(True, boolean(),
                          'answer every state at once (false: a timer at `rate` uses the newest state)'),
    'realtime_priority': Param(40, integer(lo=0, hi=99),
                               'not lockstep: SCHED_FIFO priority of the thread that answers the states where '
                               'permitted (CAP_SYS_NICE or an rtprio limit; refused -> warning), below the plant\'s '
                               'loop (50): a CPU hog at normal priority then never delays a command; 0 = normal '
                               'scheduling'),
    'input_delay': Param(DERIVED, float_range(lo=0.0, hi=0.1),
                         's of transport delay the gains are designed for; not set = one period 1/rate (modal, '
                         'tip_tracking: 4 ms in whole periods, at least one - two at 500 Hz, one at 250 Hz: their '
                         'widest stable band of actual delays, laws/modal.py; lockstep: 0)'),
    'safe_mode.max_state_age': Param(DERIVED, float_range(lo=0.0, lo_open=True, hi=1.0),
                                     's: a state older than this when it is acted on (the plant stamps the sample '
                                     'instant) is beyond what the gains were designed for; not set = input_delay + '
                                     '4 ms (the modal laws\' stable band reaches 8-9 ms at 250-1000 Hz)'),
    'safe_mode.trigger_count': Param(6, integer(lo=1, hi=1000),
                                     'late states within 0.25 s that switch to the safe mode (persistent lateness, '
                                     'beyond the band of delays the law is designed for; a stall, a few late states '
                                     'in a row, is commands held longer, which the normal law rides through: 3 put '
                                     'the modal law on an estimate in the safe mode in 4 of 6 idle runs, issue 28)'),
    'safe_mode.stall_limit': Param(0.1, float_range(lo=0.0, lo_open=True, hi=10.0),
                                   's: a single command held longer than this (a state this much older than the '
                                   'previous plus its age) switches to the safe mode at once (default: half the '
                                   'plant\'s command_timeout: the normal law never resumes on an arm the drives held)'),
    'safe_mode.recover_time': Param(1.0, float_range(lo=0.0, hi=60.0),
                                    's of states on time before the normal law resumes'),
    'safe_mode.design_period': Param(0.05, float_range(lo=0.0, lo_open=True, hi=1.0),
                                     's: the longest interval between states (a command held) the safe mode\'s hold '
                                     'law is designed for (controller/safe_mode.py; measured p99 with two CPU hogs: '
                                     '~40 ms)'),
    'safe_mode.design_delay': Param(0.03, float_range(lo=0.0, hi=0.5),
                                    's: the largest state age the hold law is designed for; in the safe mode an older '
                                    'state is not acted on (the plant\'s or bridge\'s command watchdog holds the arm)'),
    'safe_mode.return_speed': Param(0.5, float_range(lo=0.0, lo_open=True, hi=100.0),
                                    'rad/s: peak rate of the return to the reference from the current state at each '
                                    'switch of law (no jump)'),
    'default_move': Param(False, boolean(),
                          'on the first state, move every joint by move_angle in move_time (cycloidal)'),
    'move_angle': Param(math.pi / 3, float_range(lo=-2 * math.pi, hi=2 * math.pi), 'rad'),
    'move_time': Param(2.5, float_range(lo=0.01, hi=3600.0), 's'),
}

# each controller's own parameters: its law's GAINS table (one registration per controller: kinds.py)
GAINS = {k: law_class(k).GAINS for k in KINDS}

TABLES = {k: ParamTable(k, dict(COMMON, **GAINS[k])) for k in KINDS}

HEADER = """Parameters of the flexarm controller nodes, generated from flexarm_control/controller/config.py.
Node name = section name: `ros2 run flexarm_control pd_servo --ros-args --params-file config/controllers.yaml`.
Each node reads /flexarm/state, follows /flexarm/reference (trajectory_msgs/JointTrajectory) and publishes joint
torques on /effort_controller/commands (std_msgs/Float64MultiArray, N m, arm order). sim.launch.py and
hardware.launch.py load this file and set `arm`, `lockstep`, `rate` (control_rate:=) and `shaping`.
[runtime] parameters can be changed with `ros2 param set /<node> <name> <value>` (validated; a refused value
leaves the law unchanged). `[]` or a commented-out line = not set: the value named in the comment."""


def render() -> str:
    return '\n'.join([TABLES[KINDS[0]].render_yaml(HEADER)] + [TABLES[k].render_yaml() for k in KINDS[1:]])


def derived_input_delay(values: dict, periods: int = 1) -> float:
    """The input delay a law designs for when `input_delay` is not set: none in lock-step, else `periods` control
    periods (the law's `design_periods(rate)`)."""
    return 0.0 if values['lockstep'] else periods / values['rate']


def check(values: dict, n_joints: int):
    """Rules across parameters: gain arrays one value per joint (or one for all)."""
    for name in ('kp', 'kv', 'omega_n', 'zeta'):
        v = values.get(name, DERIVED)
        if v is not DERIVED and len(v) not in (1, n_joints):
            raise ConfigError(name, f'expected {n_joints} values (or one for all joints), got {len(v)}')


if __name__ == '__main__':
    sys.stdout.write(render())
