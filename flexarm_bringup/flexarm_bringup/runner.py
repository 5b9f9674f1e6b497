"""`flexarm run`: the plant and a controller as ROS 2 nodes, a reference move, a summary.

    flexarm run --arm deluca_two_link --controller modal --duration 6 [--rate 1000] [--control-rate 500]
                [--time-mode realtime|simtime|lockstep] [--shaping zv] [--record out.mcap] [--plot out.png]
                [--json] [--single-process] [--plant-servo] [--estimator encoders|strain|strain_accel]

The nodes are exactly those of `ros2 launch flexarm_bringup sim.launch.py` (flexarm_bringup.bringup.sim_nodes:
the shipped config/plant.yaml and config/controllers.yaml with the same overrides), started as the installed
executables in their own processes (real rclpy over DDS, loopback) — or, with --single-process, composed with
this runner's node in this process (one executor thread per node). The runner publishes the reference on
/flexarm/reference — a cycloidal move of every joint by --angle (default 60 deg) in --move-time (2.5 s,
Naganathan's case 1), starting --lead seconds of plant time after the nodes are ready — records /flexarm/state
(and, with --record, the published topics into a rosbag2-compatible MCAP file), prints progress lines, and at the
end a summary: achieved plant rate and overruns (from the plant's /diagnostics), joint RMS tracking error, peak
tip deflection (deformed minus rigid end-effector position), residual tip vibration after the move, 2 % settling
time, peak torque.

Start-up waits for readiness, not a fixed time: the plant is ready at its first state, a controller when the plant
integrates (the plant holds the arm until the first command). The wait ends with an error naming the process
that is not ready and showing its log once nothing has happened for STARTUP_QUIET_S (no state, no log line: a
compile in progress logs), or after STARTUP_LIMIT_S in all. Outside lock-step the move then waits (at most
SAFE_START_WAIT_S) until the controller is not in a safe mode it entered at start-up (_wait_loop_settled); the summary
reports those start-up entries apart. Memory stays bounded: the samples kept for the summary
and the plot are decimated beyond MAX_SAMPLES (the recording streams to disk). SIGINT exits 130, SIGTERM 143 (interrupt.py),
after stopping the nodes.

Exit codes: 0 the move done; 3 the arm lost or the model's validity left; 4 the recording incomplete; 5 the move not
completed, the arm held short of its target by the controller's safe mode (degraded, not lost: `_verdict`); 1 an
error, 2 bad arguments.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import rclpy
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from flexarm_control.figures import move_figures
from flexarm_control.laws.pd import naganathan_gains
from flexarm_control.laws.reference import PointToPoint, move_target
from flexarm_control.planning import desired_tip_path
from flexarm_control.nodes.controller_node import ControllerNode
from flexarm_control.nodes.estimator_node import EstimatorNode
from flexarm_msgs.msg import FlexState, JointEffortCommand
from flexarm_sim.arms import arm_id, resolve_arm
from flexarm_sim.common.commands import clip
from flexarm_sim.common.params import ConfigError
from flexarm_sim.model import load_model, validity_limit
from flexarm_sim.model.trajectory import relative_deflections
from flexarm_sim.model.layout import ArmLayout, layout_difference as same_layout
from flexarm_sim.plant.node import PlantNode
from flexarm_sim.ros import dds_security, names
from flexarm_sim.ros.cdr import serialize
from flexarm_sim.ros.flexstate import FlexStateDecoder
from flexarm_sim.ros.hotpath import HotLoop, HotSubscription
from flexarm_sim.ros.messages import qos
from flexarm_sim.ros.node_main import SPIN_WAKE_S, default_executor

from .bringup import CONTROLLERS, DEFAULT_CONTROL_RATE, ESTIMATORS, TIME_MODES, command, sim_nodes
from .interrupt import Interrupted
from .plots import plot_tip_run
from .recorder import Recorder

BRIDGE_STATUS = 'flexarm hardware_bridge'     # the hardware bridge's own status in /diagnostics (bridge/ros_node.py)
RECORDED_TOPICS = (             # relative: recorded in the run's namespace (names.resolve)
    (names.STATE, 'flexarm_msgs/msg/FlexState'),
    (names.STATE_ESTIMATE, 'flexarm_msgs/msg/FlexState'),
    (names.JOINT_STATES, 'sensor_msgs/msg/JointState'),
    (names.EFFORT_COMMANDS, 'std_msgs/msg/Float64MultiArray'),
    (names.REFERENCE, 'trajectory_msgs/msg/JointTrajectory'),
    (names.MARKERS, 'visualization_msgs/msg/MarkerArray'),
    (names.DIAGNOSTICS, 'diagnostic_msgs/msg/DiagnosticArray'),
    (names.CLOCK, 'rosgraph_msgs/msg/Clock'),
    (names.STAMPED_COMMAND, 'flexarm_msgs/msg/JointEffortCommand'),
    (names.POSITION_COMMANDS, 'std_msgs/msg/Float64MultiArray'),
    (names.STRAIN, 'flexarm_msgs/msg/StrainGauges'),
    (names.TIP_IMU, 'sensor_msgs/msg/Imu'),
    (names.APPLIED_EFFORT, 'flexarm_msgs/msg/AppliedEffort'),
)
# the plant's timeline topics (relative): its diagnostics count what it published on each (plant/node.py,
# published.<name>), a lock-step recording holds exactly that many
PLANT_TIMELINE = (names.STATE, names.JOINT_STATES, names.CLOCK, names.MARKERS, names.STRAIN, names.TIP_IMU)
RECORD_INCOMPLETE_EXIT_CODE = 4   # `flexarm run --record`: a recording that misses messages (the summary is printed)
RECORD_DRAIN_S = 30.0         # s (wall) for the recorder to take what the paused plant published
STARTUP_QUIET_S = 60.0
STARTUP_LIMIT_S = 600.0
RUN_STALL_S = 30.0            # wall seconds without plant time advancing: the run is stuck
STAMP_TOL_S = 0.5e-9         # s: stamps are whole nanoseconds; a window's ends are decided this far inside
MAX_SAMPLES = 1 << 17         # samples kept (beyond: every other one dropped, the rate halved)
PROGRESS_AFTER_S = 2.0
PAUSED_STATE_PERIOD_S = 0.05  # a paused plant re-sends its state this often (plant/runtime.IDLE_PERIOD)
REFERENCE_ACK_S = 10.0        # s for the plant's pause service and the controller to accept the reference
LOST_EXIT_CODE = 3            # `flexarm run`'s exit code when the arm was lost or the model's validity left
HELD_SHORT_EXIT_CODE = 5      # ... when the controller's safe mode held the arm short of its target (degraded, not lost)
PLAN_ACK_S = 300.0            # s for a planning controller (tip_tracking) to plan and accept the move
PLANNING_LEAD_S = 3.0         # s of plant time a planning controller gets before a real-time move starts
LOST_JOINT_ERROR_RAD = 0.2    # the arm is lost if a joint ends the run farther than this from its target ...
LOST_PEAK_JOINT_ERROR_RAD = 1.0   # ... or strays farther than this from its reference at any time
LOST_SETTLE_S = 0.5           # s after the command's end from which the end rule applies
LOOP_SETTLE_S = 0.3           # s after the loop closed: a controller diagnostic this much later says which law it runs
SAFE_START_WAIT_S = 6.0       # s the move waits at most for a controller in its safe mode since start-up
DESIGN_AHEAD_S = 60.0         # s: the preview reference starts this far ahead; the move waits at most half of it


def add_parser(sub):
    p = sub.add_parser('run', help='simulate an arm under a controller (ROS 2 nodes) and summarise the run')
    p.add_argument('--arm', default='deluca_two_link', help='the name of a shipped arm or an arm YAML path')
    p.add_argument('--controller', default='modal', choices=CONTROLLERS + ('none',))
    p.add_argument('--duration', type=float, default=6.0, help='s of plant time from the start of the move')
    p.add_argument('--rate', type=float, default=1000.0, help='plant loop rate, Hz')
    p.add_argument('--control-rate', type=float, default=DEFAULT_CONTROL_RATE,
                   help='control rate, Hz: plant state rate and controller rate (sim.launch.py control_rate:=)')
    p.add_argument('--time-mode', default='realtime', choices=TIME_MODES,
                   help='lockstep: the controller answers every control period (reproducible, as fast as possible)')
    p.add_argument('--shaping', default='none', choices=('none', 'zv', 'zvd'))
    p.add_argument('--angle', type=float, default=60.0, help='move of every joint, degrees')
    p.add_argument('--move-time', type=float, default=2.5, help='s')
    p.add_argument('--lead', type=float, default=None,
                   help='s of plant time between readiness (outside lock-step: the controller on its normal law) '
                        'and the move (default 0.5; tip_tracking outside lock-step: '
                        f'{PLANNING_LEAD_S:g}, the planning time plus the pre-actuation)')
    p.add_argument('--plant-arm', metavar='ARM', default='',
                   help='simulate this arm (same joints and modes, other parameters) under a controller designed on '
                        '--arm: a model-mismatch study (the figures are of the plant\'s arm)')
    p.add_argument('--record', metavar='MCAP', help='record the published topics into this MCAP file')
    p.add_argument('--plot', metavar='PNG', help='plot joints vs reference, torques, tip deflection, modes')
    p.add_argument('--json', action='store_true', help='print the summary as one JSON object')
    p.add_argument('--single-process', action='store_true', help='compose plant and controller in this process')
    p.add_argument('--attach', action='store_true',
                   help='start no nodes: drive and summarise a running plant and controller (e.g. started by '
                        '`ros2 launch flexarm_bringup sim.launch.py`; give the same --arm, --controller, '
                        '--time-mode and --control-rate)')
    p.add_argument('--quiet', action='store_true', help='no progress lines')
    p.add_argument('--plant-servo', action='store_true',
                   help="pd_servo only: the plant's joint servo (thesis gains, evaluated at the plant's sub-steps) "
                        'is the PD; the controller sends set-points and the rigid feed-forward')
    p.add_argument('--estimator', default='none', choices=ESTIMATORS,
                   help='the controller feeds back the state estimate from this sensor set (the plant models the '
                        'sensors: encoders; + a strain gauge per flexible link; + a tip accelerometer); the summary is '
                        'of the true state (sim.launch.py estimator:=)')
    p.add_argument('--namespace', default='/',
                   help='run the arm in this namespace (its topics and services: /<ns>/flexarm/state, ...; several '
                        'arms share a domain; sim.launch.py namespace:=)')
    p.set_defaults(func=run)


class _Progress:
    def __init__(self, quiet):
        self.quiet = quiet
        self.t0 = time.monotonic()
        self._inline = False

    def line(self, msg):
        if self.quiet:
            return
        if self._inline:
            sys.stderr.write('\n')
            self._inline = False
        sys.stderr.write(f'[flexarm run {time.monotonic() - self.t0:6.1f} s] {msg}\n')
        sys.stderr.flush()

    def inline(self, msg):
        if self.quiet:
            return
        sys.stderr.write('\r' + msg)
        sys.stderr.flush()
        self._inline = True

    def end_inline(self):
        if self._inline and not self.quiet:
            sys.stderr.write('\n')
        self._inline = False


def thesis_servo_gains(model, angle: float):
    """Naganathan's k_p, k_v (eqs. 2.27-2.28) for the default move of every joint by angle from zero."""
    kp, kv, _ = naganathan_gains(model, task=[np.zeros(model.n_joints), np.full(model.n_joints, angle)])
    return [float(x) for x in kp], [float(x) for x in kv]


def node_specs(args, model=None):
    """The plant and controller of this run: sim.launch.py's nodes with the runner's rates and outputs."""
    plant_extra = {'publish_rates.joint_states': float(min(args.rate, 1000.0)), 'publish_rates.markers': 30.0,
                   'publish_rates.diagnostics': 2.0}
    ctl_extra = {}
    if _held(args):       # lock-step: from step 0, paused, to the end of the run, paused (_start_held, the recording)
        plant_extra.update({'start_paused': True, 'pause_at': args.lead + args.duration})
    if args.plant_servo:
        kp, kv = thesis_servo_gains(model, math.radians(args.angle))
        plant_extra.update({'servo.enabled': True, 'servo.kp': kp, 'servo.kv': kv})
        ctl_extra['command_interface'] = 'position'
    # another command's run (`flexarm excite`): its sensors and the controller's gains
    plant_extra.update(getattr(args, 'plant_extra', None) or {})
    ctl_extra.update(getattr(args, 'controller_extra', None) or {})
    return sim_nodes(args.arm, args.controller, args.time_mode, rate=args.rate, control_rate=args.control_rate,
                     shaping=args.shaping, plant_extra=plant_extra, controller_extra=ctl_extra,
                     estimator=getattr(args, 'estimator', 'none'), namespace=getattr(args, 'namespace', '/'),
                     plant_arm=getattr(args, 'plant_arm', ''))


def _held(args) -> bool:
    """Does this run start the plant paused at step 0 and end it paused at lead + duration? Lock-step runs whose
    nodes the runner starts: the same run then publishes the same messages from the first step to the last (a
    recording holds them all, every time)."""
    return args.time_mode == 'lockstep' and not getattr(args, 'attach', False) and not _hardware(args)


def _hardware(args) -> bool:
    """Is a running hardware bridge the plant (`flexarm excite --hardware`)?"""
    return bool(getattr(args, 'hardware', False))


def cycloid_trajectory(q0, angle, T, n_points=51):
    """Points (t, q, qd, qdd) of Naganathan's cycloidal move q0 -> q0 + angle in T (every joint; angle a scalar or
    one per joint)."""
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


class Samples:
    """The run's samples in preallocated numpy arrays (t, q, tau, deformed and rigid tip, modal coordinates),
    bounded: beyond `capacity` every other sample is dropped and only every 2nd (4th, ...) one kept thereafter."""

    def __init__(self, n_joints, n_modes, capacity=MAX_SAMPLES):
        self.capacity = capacity
        self.width = 1 + 2 * n_joints + 6 + n_modes
        self.n, self.m = n_joints, n_modes
        self.buf = np.zeros((capacity, self.width))
        self.count = 0
        self.stride = 1
        self._seen = 0
        self.latest = None

    def add(self, row):
        self.latest = row
        self._seen += 1
        if (self._seen - 1) % self.stride:
            return
        if self.count == self.capacity:
            self.buf[:self.capacity // 2] = self.buf[0:self.capacity:2]
            self.count = self.capacity // 2
            self.stride *= 2
        self.buf[self.count] = row
        self.count += 1

    def arrays(self):
        b, n, m = self.buf[:self.count], self.n, self.m
        return {'t': b[:, 0], 'q': b[:, 1:1 + n], 'tau': b[:, 1 + n:1 + 2 * n], 'tip': b[:, 1 + 2 * n:4 + 2 * n],
                'rigid': b[:, 4 + 2 * n:7 + 2 * n], 'modal': b[:, 7 + 2 * n:7 + 2 * n + m]}


class RunnerNode:
    """The runner's ROS side: collects FlexState and diagnostics, publishes the reference."""

    def __init__(self, node, layout, watch_commands=True):
        self.node = node
        self.layout = layout
        self.lock = threading.Lock()
        self.samples = Samples(layout.n_joints, layout.n_modes)
        self.rejected = 0
        self.last_step = 0
        self.stride = 0               # plant steps between states (loop rate / control rate), set by the runner
        self.last_reject = ''
        self.plant_diag = {}
        self.controller_diag = {}
        self.controller_diag_t = -math.inf   # monotonic time the last controller diagnostic arrived
        self.controller_at_start = {}        # the controller's diagnostic when the move started (_wait_loop_settled)
        self.design_wait_s = 0.0             # s the move waited for the controller's gain cells (_design_the_move_ahead)
        self.decoder = FlexStateDecoder(layout)
        self.step_gaps = 0            # states missed (step numbers skipped within a reset segment)
        # states on a thread of their own (ros/hotpath.py): the runner keeps up with a lock-step plant
        self.hot = HotSubscription(node, FlexState, names.STATE, qos(1000))
        self.hot_loop = HotLoop(self.hot, self._on_state, 'runner-states')
        self.hot_loop.start()
        self.estimator_diag = {}
        self._rejected_seen = None
        self.pause_client = None
        self.diag_sub = node.create_subscription(DiagnosticArray, names.DIAGNOSTICS, self._on_diag, 10)
        self.pub_ref = node.create_publisher(JointTrajectory, names.REFERENCE, qos(10))
        self.plant_diags = 0          # plant diagnostics received
        self.states = 0               # distinct states received
        self.commands_seen = 0        # lock-step: stamped commands seen (the controller answers the held plant)
        # only a held plant's readiness needs them: at the control rate through the executor they cost the runner
        # ~30 % of a core, taken from the plant and the controller on a 2-core machine
        self.cmd_sub = node.create_subscription(JointEffortCommand, names.STAMPED_COMMAND, self._on_command,
                                                qos(10), raw=True) if watch_commands else None
        self.in_spin_thread = lambda fn: fn()    # set to the node's _Spinner.call once a thread spins it

    def stop_watching_commands(self):
        """Readiness established: the stamped commands are no longer counted (their subscription is destroyed, in
        the node's spin thread: destroyed from another thread while the executor built its wait set, it raised
        `InvalidHandle: cannot use Destroyable because destruction was requested` there, killed the spin thread, and
        the run failed on '/flexarm/pause(True) not answered' - CI, two namespaced runs side by side)."""
        if self.cmd_sub is not None:
            sub, self.cmd_sub = self.cmd_sub, None
            self.in_spin_thread(lambda: self.node.destroy_subscription(sub))

    def _on_command(self, _data):
        self.commands_seen += 1

    def close(self):
        self.hot_loop.stop()
        self.hot.destroy()

    def _on_state(self, data):
        try:
            st = self.decoder.decode(data)
        except ValueError as e:
            self.rejected += 1
            self.last_reject = str(e)
            return
        row = np.concatenate([[st.t], st.z[self.layout.q_index], st.tau, st.tip, st.rigid_tip,
                              st.z[self.layout.mode_index], [st.step]])
        with self.lock:
            if st.step == self.last_step and self.samples.latest is not None:
                return          # the same state re-sent (a paused or waiting plant): one sample per instant
            if self.stride and st.step - self.last_step > self.stride and self.last_step:
                self.step_gaps += 1
            self.samples.add(row[:-1])
            self.last_step = st.step
            self.states += 1

    def _far_ends(self, topic):
        """(the graph's endpoints across the runner's end on `topic`: subscriptions to its reference, publishers of
        /diagnostics; how many of them its end has matched; can an endpoint's QoS ever match ours)."""
        def can_match(pub_qos, sub_qos):      # the policies that differ in practice (rclpy's own check also
            # refuses our unset deadline against the graph's 'infinite' one)
            return not ((pub_qos.reliability == ReliabilityPolicy.BEST_EFFORT
                         and sub_qos.reliability == ReliabilityPolicy.RELIABLE)
                        or (pub_qos.durability == DurabilityPolicy.VOLATILE
                            and sub_qos.durability == DurabilityPolicy.TRANSIENT_LOCAL))
        topic = self.node.resolve_topic_name(topic)
        if topic == self.node.resolve_topic_name(names.REFERENCE):
            return (self.node.get_subscriptions_info_by_topic(topic), self.pub_ref.get_subscription_count(),
                    lambda e: can_match(self.pub_ref.qos_profile, e.qos_profile))
        return (self.node.get_publishers_info_by_topic(topic), self.diag_sub.get_publisher_count(),
                lambda e: can_match(e.qos_profile, self.diag_sub.qos_profile))

    def linked(self, topic, peer) -> bool:
        """Is node `peer` on `topic` (/flexarm/reference: its subscription; /diagnostics: its publisher) matched
        with the runner's end? Matched counts are anonymous, so every endpoint the graph knows on the topic must be
        matched: the recorder's subscription to the reference (in this process) matches at once, the controller's
        may not have yet (a reference published then is lost). Endpoints whose QoS cannot match ours (another
        node's best-effort /diagnostics, say) never will, and are not waited for."""
        ends, matched, compatible = self._far_ends(topic)
        ends = [e for e in ends if compatible(e)]
        return any(e.node_name == peer for e in ends) and matched >= len(ends)

    def endpoint_nodes(self, topic):
        """Names of the nodes the graph knows across the runner's end on `topic`."""
        return sorted({e.node_name for e in self._far_ends(topic)[0]})

    def references_accepted(self) -> int:
        with self.lock:
            return int(_num(self.controller_diag.get('references_accepted')) or 0)

    def controller_diag_value(self, key):
        with self.lock:
            return self.controller_diag.get(key)

    def reference_refused(self) -> str:
        """The controller's reason if it refused a reference since the runner started watching ('' if none)."""
        with self.lock:
            n = int(_num(self.controller_diag.get('references_rejected')) or 0)
            if self._rejected_seen is None:
                self._rejected_seen = n
            return self.controller_diag.get('last_reject_reason', '') if n > self._rejected_seen else ''

    def pause(self, on: bool) -> str:
        """Pause / resume the plant (/flexarm/pause); '' or what went wrong."""
        if self.pause_client is None:
            self.pause_client = self.node.create_client(SetBool, names.PAUSE)
        name = self.node.resolve_service_name(names.PAUSE)
        if not self.pause_client.wait_for_service(timeout_sec=REFERENCE_ACK_S):
            return f'the plant offers no {name} service'
        fut = self.pause_client.call_async(SetBool.Request(data=bool(on)))
        deadline = time.monotonic() + REFERENCE_ACK_S
        while not fut.done():
            if time.monotonic() > deadline:
                return f'{name}({on}) not answered'
            time.sleep(0.005)
        r = fut.result()
        return '' if r.success else f'{name}({on}): {r.message}'

    def _on_diag(self, msg):
        for st in msg.status:
            vals = {kv.key: kv.value for kv in st.values}
            with self.lock:
                if st.name == 'flexarm_control/state_estimator':
                    self.estimator_diag = dict(vals, _message=st.message)
                elif st.name.startswith('flexarm_control/'):
                    self.controller_diag = vals
                    self.controller_diag_t = time.monotonic()
                elif 'plant' in st.name or st.name == BRIDGE_STATUS:
                    self.plant_diag = dict(vals, _message=st.message)
                    self.plant_diags += 1

    def latest(self):
        with self.lock:
            return None if self.samples.latest is None else (self.samples.latest.copy(), self.last_step)

    def publish_reference(self, t_start, times, q, qd, qdd):
        msg = JointTrajectory()
        sec = int(math.floor(t_start))
        msg.header.stamp.sec = sec
        msg.header.stamp.nanosec = int(round((t_start - sec) * 1e9))
        msg.joint_names = list(self.layout.joint_names)
        for k, tk in enumerate(times):
            pt = JointTrajectoryPoint()
            pt.positions = [float(x) for x in q[k]]
            pt.velocities = [float(x) for x in qd[k]]
            pt.accelerations = [float(x) for x in qdd[k]]
            s = int(math.floor(tk))
            pt.time_from_start = Duration(sec=s, nanosec=int(round((tk - s) * 1e9)))
            msg.points.append(pt)
        self.pub_ref.publish(serialize(msg))          # padding zero: the same reference, the same bytes


def summarize(arrays, q0, angle, move_time, t_move, duration, plant_diag, controller, controller_diag=None,
              model=None, plant_model=None, time_mode='realtime', at_start=None):
    """The run's figures from the recorded samples (plant time): the tip against the desired tip path of the
    reference (flexarm_control.figures), the joints, the torques, the model's validity, whether the arm was lost.
    at_start: the controller's diagnostic when the move started (_wait_loop_settled)."""
    controller_diag = controller_diag or {}
    plant_model = plant_model or model
    # Windows are closed intervals decided half a nanosecond inside their ends: stamps are whole nanoseconds, and
    # t_move = (plant time at the pause) + lead carries that time's rounding, so a plain `t >= t_move` took or left
    # the sample at t_move by the pause instant (one sample in N: lock-step RMS differed by 1/(2N) between runs).
    t = arrays['t']
    keep = (t >= t_move - 0.2 - STAMP_TOL_S) & (t <= t_move + duration + STAMP_TOL_S)
    t = t[keep]
    q, tau, tip, rigid, modal = (arrays[k][keep] for k in ('q', 'tau', 'tip', 'rigid', 'modal'))
    reference = PointToPoint(q0, q0 + angle, move_time, t_move)
    q_ref = cycloid_sample(q0, angle, move_time, t_move, t)
    in_run = t >= t_move - STAMP_TOL_S
    err = (q - q_ref)[in_run]
    t_end = t_move + move_time
    # the command ends when the reference does, or later: input shaping, a plan's post-actuation (the controller says)
    # (a command ending after the run counts as ending with it: nothing after it is measured)
    t_cmd_end = min(max(t_end, _num(controller_diag.get('command_end_s')) or t_end), t_move + duration)
    Z = np.zeros((t.size, plant_model.n_coords))
    Z[:, plant_model.q_index] = q
    if plant_model.mode_index.size:
        Z[:, plant_model.mode_index] = modal
    rel = relative_deflections(plant_model, Z) if t.size else np.zeros((0, plant_model.n_joints))
    tip_d = desired_tip_path(model, reference, t) if t.size else np.zeros((0, 3))
    fig = move_figures(t, tip, tip_d, t_move, t_end, t_cmd_end, duration, rel, validity_limit(plant_model))
    out = {'controller': controller, 'samples': int(t.size),
           'plant_time_s': float(t[-1] - t[0]) if t.size else 0.0,
           'overruns': _num(plant_diag.get('overruns')),
           'skipped_periods': _num(plant_diag.get('skipped_periods')),
           # real time: stamped commands that acted at their step (the designed delay) or late (the transport's)
           'commands_on_time': _num(plant_diag.get('stamped_on_time')),
           'commands_late': _num(plant_diag.get('stamped_late')),
           'command_max_late_steps': _num(plant_diag.get('stamped_max_late_steps')),
           # SCHED_FIFO priorities granted (0: normal scheduling) to the plant's loop and the controller's state thread
           'plant_loop_fifo_priority': _num(plant_diag.get('loop_thread_fifo_priority')),
           'controller_state_thread_fifo_priority': _num(controller_diag.get('state_thread_fifo_priority')),
           # DDS receive threads put at SCHED_FIFO beside those threads (0: none; they deliver what those threads await)
           'plant_dds_receive_threads_fifo': _num(plant_diag.get('dds_receive_threads_fifo')),
           'controller_dds_receive_threads_fifo': _num(controller_diag.get('dds_receive_threads_fifo')),
           'controller_states_skipped': _num(controller_diag.get('states_skipped')),
           # the safe mode from the move's start on; before it (start-up), apart
           **safe_mode_figures(controller_diag, at_start or {}),
           # the age of the states the controller answered (the estimator's hop included when it feeds back the
           # estimate) against the limit its safe mode applies
           'controller_late_states': _num(controller_diag.get('late_states')),
           'controller_state_age_p99_ms': _num(controller_diag.get('state_age_p99_ms')),
           'controller_state_age_max_ms': _num(controller_diag.get('max_state_age_ms')),
           'controller_state_age_limit_ms': _num(controller_diag.get('state_age_limit_ms')),
           **fig,
           'validity_limit': validity_limit(plant_model),
           'joint_rms_error_rad': [float(x) for x in np.sqrt(np.mean(err ** 2, axis=0))] if err.size else None,
           'peak_tip_deflection_m': float(np.linalg.norm(tip - rigid, axis=1).max()) if t.size else None,
           'peak_torque_nm': [float(x) for x in np.abs(tau).max(axis=0)] if tau.size else None,
           'command_end_s': float(t_cmd_end - t_move)}
    if time_mode != 'lockstep':
        out['achieved_rate_hz'] = _num(plant_diag.get('achieved_rate_hz'))
    if controller == 'tip_tracking':
        out['plan_time_s'] = _num(controller_diag.get('last_plan_time_s'))
        out['moves_retimed'] = _num(controller_diag.get('moves_retimed'))
    out['lost'], out['held_short'] = _verdict(err, q, q_ref, t[in_run][-1] - t_cmd_end if err.size else 0.0,
                                              controller_diag)
    out['validity_left'] = _validity_left(fig)
    plot = {'t': t, 't_move': t_move, 'tip': tip, 'tip_desired': tip_d, 'tau': tau, 'relative_deflection': rel}
    return out, plot


def safe_mode_figures(end: dict, start: dict) -> dict:
    """The controller's safe-mode entries, time and last reason from the move's start on (its diagnostic at the end
    less the one at the start; a move started on the hold law counts that entry), and those before it (start-up)."""
    n_end, n_start = _num(end.get('safe_mode_entries')), _num(start.get('safe_mode_entries')) or 0.0
    t_end, t_start = _num(end.get('safe_mode_time_s')), _num(start.get('safe_mode_time_s')) or 0.0
    on = start.get('safe_mode') == 'on'          # _wait_loop_settled gave up: the move started on the hold law
    before = max(n_start - 1.0, 0.0) if on else n_start
    entries = n_end - before if n_end is not None else None
    later = n_end is not None and n_end > n_start
    return {'controller_safe_mode_entries': entries,
            'controller_safe_mode_time_s': t_end - t_start if t_end is not None else None,
            'controller_safe_mode_yields': _delta(end, start, 'safe_mode_yields'),
            'controller_safe_mode_reason': (end.get('safe_mode_reason') or '') if later else
                                           (start.get('safe_mode_reason') or '') if on else '',
            'controller_safe_mode_entries_at_start': before,
            'controller_safe_mode_reason_at_start': (start.get('safe_mode_reason') or '') if before else ''}


def _delta(end: dict, start: dict, key: str):
    """A controller count from the move's start on (its diagnostic at the end less the one at the start)."""
    n_end = _num(end.get(key))
    return None if n_end is None else n_end - (_num(start.get(key)) or 0.0)


def _verdict(err, q, q_ref, after_command_s, controller_diag=None):
    """(lost, held_short): why the arm counts as lost, and why it ended short of its target though not lost ('' if
    not). Lost: a joint beyond LOST_PEAK_JOINT_ERROR_RAD of its reference at any time, or, in a run lasting
    LOST_SETTLE_S beyond the end of the command, farther than LOST_JOINT_ERROR_RAD from its target at the end (a run
    stopped mid-move is judged by the peak rule only). An end short of the target while the controller's safe mode is
    on at the end (its hold law, or the drives' hold once it yields: controller/safe_mode.py) is the degraded mode
    doing what it is for - holding the arm, bringing it back at the pace its degraded loop allows (under starvation a
    hold law ended 0.203 rad short 1.5 s after a 30 deg move, still returning) - held short, not lost; the peak rule
    still applies."""
    why, short = [], []
    if err.size:
        peak = np.abs(err).max(axis=0)
        final = np.abs(q[-1] - q_ref[-1])
        diag = controller_diag or {}
        safe = diag.get('safe_mode') == 'on'
        for j in range(peak.size):
            if peak[j] > LOST_PEAK_JOINT_ERROR_RAD:
                why.append(f'joint {j} strayed {peak[j]:.3g} rad from its reference')
            elif after_command_s >= LOST_SETTLE_S and final[j] > LOST_JOINT_ERROR_RAD:
                (short if safe else why).append(f'joint {j} ended {final[j]:.3g} rad from its target')
        if short:
            how = ("the drives' hold (the safe mode yielded)" if str(diag.get('safe_mode_not_commanding')) == 'True'
                   else "the safe mode's hold law")
            short = [f"{'; '.join(short)}, held by {how}: {diag.get('safe_mode_reason') or 'safe mode on'}"]
    return '; '.join(why), '; '.join(short)


def _validity_left(fig) -> str:
    """Why the run's figures are not physics ('' if they are): a link deflected beyond the model's validity
    (flexarm_sim.model.validity: small deflections, the assumed-modes reduction's premise)."""
    if fig.get('model_valid') is not False:
        return ''
    worst = fig['max_deflection_over_length']
    j = int(np.argmax(worst))
    return f'link {j} deflected {100 * worst[j]:.1f} % of its length, beyond the model\'s validity'


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class _Processes:
    """The node processes: started in their own sessions, their output in log files."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.procs = []           # (name, Popen, log path)
        self._read = {}

    def start(self, name, argv, env):
        path = os.path.join(self.tmpdir, f'{name}.log')
        with open(path, 'wb') as log:
            p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=_die_with_parent)
        self.procs.append((name, p, path))
        return p

    def cpu_seconds(self):
        """{process: user + system CPU seconds so far} (Linux /proc)."""
        out = {}
        for name, p, _ in self.procs:
            try:
                with open(f'/proc/{p.pid}/stat') as f:
                    fields = f.read().rsplit(')', 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
            except (OSError, IndexError, ValueError):
                pass
        return out

    def exited(self):
        for name, p, _ in self.procs:
            if p.poll() is not None:
                return name, p.returncode
        return None

    def new_lines(self):
        """[(process, line)] written since the last call."""
        out = []
        for name, _, path in self.procs:
            try:
                with open(path, errors='replace') as f:
                    f.seek(self._read.get(name, 0))
                    text = f.read()
                    self._read[name] = f.tell()
            except OSError:
                continue
            out += [(name, ln) for ln in text.splitlines() if ln.strip()]
        return out

    def tail(self, name, n=20):
        for nm, _, path in self.procs:
            if nm == name:
                try:
                    with open(path, errors='replace') as f:
                        return ''.join(f.readlines()[-n:]) or '(empty)\n'
                except OSError:
                    return '(no log)\n'
        return ''

    def stop(self):
        for _, p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5.0
        for _, p, _ in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _die_with_parent():
    """In the child, before exec: SIGTERM when the runner dies, however it dies (Linux PR_SET_PDEATHSIG), so a
    killed runner never leaves its nodes running."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)     # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _relay(progress, lines):
    """Show the nodes' lines that matter while waiting: compile notices, warnings, errors."""
    for name, ln in lines:
        if 'numba kernels' in ln or 'compiling' in ln or 'WARN' in ln or 'ERROR' in ln or 'FATAL' in ln \
                or ln.startswith(name + ':'):
            progress.line(f'{name}: {ln.strip()}')


def run(args):
    progress = _Progress(args.quiet)
    tmpdir = tempfile.mkdtemp(prefix='flexarm_run_')
    try:
        return _run(args, progress, tmpdir)
    except Interrupted as e:
        progress.end_inline()
        print(f'flexarm run: interrupted ({e.name}): nodes stopped', file=sys.stderr)
        return e.exit_code
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _run(args, progress, tmpdir):
    if args.plant_servo and (args.controller != 'pd_servo' or args.time_mode == 'lockstep'):
        return _fail('--plant-servo needs --controller pd_servo and a realtime or simtime plant')
    if args.attach and args.single_process:
        return _fail('--attach and --single-process exclude each other')
    if args.lead is None:
        args.lead = PLANNING_LEAD_S if (args.controller == 'tip_tracking' and args.time_mode != 'lockstep') else 0.5
    try:
        path = resolve_arm(args.arm, 'arm')
        model = load_model(path)
        plant_path = resolve_arm(args.plant_arm, 'plant_arm') if args.plant_arm else path
        plant_model = load_model(plant_path) if plant_path != path else model
        specs = node_specs(args, model)
        if _hardware(args):      # a running hardware bridge is the plant: start the rest
            specs = [s for s in specs if s.package != 'flexarm_sim']
    except (ConfigError, ValueError) as e:
        return _fail(str(e))
    if plant_model is not model:
        why = same_layout(model, plant_model)
        if why:
            return _fail(f'--plant-arm {args.plant_arm}: {why}; a model-mismatch study needs the same joints and modes')
    # the runner records the plant's states: its layout is the plant's arm
    layout = ArmLayout.of(plant_model, arm_id(plant_path, plant_model.spec.name))
    args._plant_model = plant_model
    ns = names.namespace(getattr(args, 'namespace', '/'))
    why = dds_security.refusal()          # security requested where the DDS has none: never run unprotected
    if why:
        return _fail(why)
    procs = _Processes(tmpdir)
    spins, composed, nodes = [], [], []
    recorder = runner = None
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = rclpy.create_node('flexarm_runner', namespace=ns)
        nodes.append(node)
        runner = RunnerNode(node, layout, watch_commands=_held(args))
        runner.stride = int(round(args.rate / args.control_rate))
        spins.append(_Spinner(node))
        runner.in_spin_thread = spins[-1].call
        if args.record:
            recorder = Recorder(node, args.record, [(names.resolve(t, ns), m) for t, m in RECORDED_TOPICS],
                                metadata=dict({'flexarm_run': {'arm': model.spec.name, 'controller': args.controller,
                                                               'arm_id': arm_id(path, model.spec.name),
                                                               'time_mode': args.time_mode,
                                                               'plant': 'hardware_bridge' if _hardware(args)
                                                               else 'plant',
                                                               'rate_hz': 0.0 if _hardware(args) else args.rate,
                                                               'control_rate_hz': args.control_rate}},
                                              **(getattr(args, 'metadata', None) or {})))
        started = ', '.join(s.name for s in specs)
        # lock-step (_held): the plant last, paused at step 0, once the others are connected to the runner's recorder
        # (their first messages answer the plant's first state: a recorder matched later would miss them)
        first, last = specs, []
        if _held(args):
            first = [s for s in specs if s.package != 'flexarm_sim']
            last = [s for s in specs if s.package == 'flexarm_sim']
        if args.attach:
            progress.line(f'attaching to the running {started}')
        elif args.single_process:
            progress.line(f'starting {started} in this process')
            for group in (first, last):
                if group is last and last:
                    err = _connected(node, recorder, first, progress)
                    if err:
                        return _fail(err)
                for n in _compose(group, tmpdir):
                    composed.append(n)
                    nodes.append(n)
                    spins.append(_Spinner(n))
        else:
            env = dict(os.environ)
            env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
            progress.line(f'starting {started} ({args.time_mode}, control at {args.control_rate:g} Hz)')
            for s in first:
                procs.start(s.name, command(s, tmpdir), env)
            if last:
                err = _connected(node, recorder, first, progress, procs)
                if err:
                    return _fail(err)
                for s in last:
                    procs.start(s.name, command(s, tmpdir), env)
        return _drive(args, model, runner, procs, recorder, progress)
    finally:
        _shut_down(procs, composed, runner, recorder, spins, nodes)


class _Spinner:
    """A node's executor spun by a thread of its own until stop(): the loop looks at its flag at least every
    SPIN_WAKE_S, so stop() returns with nothing in the executor's wait (see _shut_down). call() runs a function in
    that thread between two spin_once: the one safe moment to destroy one of the node's entities while it spins."""

    def __init__(self, node):
        self.executor = default_executor()()
        self.executor.add_node(node)
        self._running = True
        self._calls = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._spin, name=f'spin-{node.get_name()}', daemon=True)
        self.thread.start()

    def _spin(self):
        ex = self.executor
        while self._running:
            ex.spin_once(timeout_sec=SPIN_WAKE_S)
            while not self._calls.empty():
                fn, done, outcome = self._calls.get()
                try:
                    outcome.append(fn())
                except Exception as e:  # noqa: BLE001 - handed to the caller: the spin thread goes on
                    outcome.append(e)
                done.set()

    def call(self, fn, timeout=5.0):
        """fn() in the spin thread, waited for up to *timeout* s: its result, or what it raised raised here;
        TimeoutError if it did not run."""
        if not self.thread.is_alive():
            return fn()                  # nothing spins: nothing to race with
        done, outcome = threading.Event(), []
        self._calls.put((fn, done, outcome))
        if not done.wait(timeout):
            raise TimeoutError(f'{self.thread.name} did not run {getattr(fn, "__name__", fn)} within {timeout:g} s')
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    def stop(self):
        self._running = False
        self.thread.join(timeout=5.0)
        return not self.thread.is_alive()


def _shut_down(procs, composed, runner, recorder, spins, nodes):
    """Orderly shutdown. The rule: nothing is destroyed while a thread may use it. A spin thread's executor enters
    every entity of its nodes into its wait set: destroying one meanwhile raised `InvalidHandle: cannot use
    Destroyable because destruction was requested` in that thread (after `run done`, 2 runs in 4 of `make demo`;
    the recorder destroyed its subscriptions while the runner's executor spun). So: the node processes, the composed
    nodes' own threads, the runner's and the recorder's threads (the file is finished), then the spin threads
    (joined), then the executors, and only then the entities and nodes."""
    procs.stop()
    for n in composed:
        n.stop()
    if runner is not None:
        runner.hot_loop.stop()
    if recorder is not None:
        recorder.close()
    stopped = [sp.stop() for sp in spins]
    for sp, ok in zip(spins, stopped):
        sp.executor.shutdown(timeout_sec=5.0 if ok else 0.0)
    if all(stopped):                    # a spin thread that did not stop keeps its entities (the process exits)
        if runner is not None:
            runner.close()
        if recorder is not None:
            recorder.release()
        for n in reversed(nodes):
            n.destroy_node()
    rclpy.try_shutdown()


def _subscribes_state(node, spec) -> bool:
    """Is the started node in the graph with its state subscription?"""
    try:
        topics = {t for t, _ in node.get_subscriber_names_and_types_by_node(spec.name, spec.namespace)}
    except Exception:  # noqa: BLE001 - rclpy's NodeNameNonExistentError: not discovered yet
        return False
    return bool(topics & {names.resolve(t, spec.namespace) for t in (names.STATE, names.STATE_ESTIMATE,
                                                                     names.JOINT_STATES)})


def _publishes(spec) -> tuple:
    """The recorded topics a started node (not the plant) publishes, resolved: a recording of a held run must be
    matched with each before the plant's first step, or that node's first messages are lost (189 commands once)."""
    if spec.executable == 'state_estimator':
        rel = (names.STATE_ESTIMATE, names.DIAGNOSTICS)
    else:
        rel = (names.EFFORT_COMMANDS, names.DIAGNOSTICS) + ((names.STAMPED_COMMAND,) if spec.overrides.get('lockstep')
                                                           else ())
    return tuple(names.resolve(t, spec.namespace) for t in rel)


def _connected(node, recorder, specs, progress, procs=None, timeout=STARTUP_QUIET_S * 5):
    """Lock-step: wait until the started nodes are in the graph with their state subscription and, when recording,
    until the recorder is matched with each of their publishers of recorded topics (_publishes) and with every
    publisher the graph knows on its topics; '' or what went wrong."""
    t0 = time.monotonic()

    def publishing(topic):
        try:
            return {i.node_name for i in node.get_publishers_info_by_topic(topic)}
        except Exception:  # noqa: BLE001 - the graph is not ready
            return set()
    while True:
        missing = [s.name for s in specs if not _subscribes_state(node, s)]
        if recorder is not None:
            missing += [f'{s.name} on {t}' for s in specs for t in _publishes(s)
                        if t in recorder.recorded and s.name not in publishing(t)]
        if not missing and (recorder is None or recorder.matched()):
            return ''
        if procs is not None:
            ex = procs.exited()
            if ex:
                return f'{ex[0]} exited with code {ex[1]} during start-up:\n' + procs.tail(ex[0])
            _relay(progress, procs.new_lines())
        if time.monotonic() - t0 > timeout:
            return (f'{", ".join(missing) or "the recorder"} not connected after {timeout:.0f} s'
                    + ('' if procs is None else '\n' + '\n'.join(f'--- {s.name} log:\n' + procs.tail(s.name)
                                                                 for s in specs)))
        time.sleep(0.02)


def _compose(specs, tmpdir):
    """The plant and controller nodes in this process, each with its own --ros-args (as its process would get)."""
    out = []
    for s in specs:
        argv = command(s, tmpdir)
        cli = argv[argv.index('--ros-args'):]
        node = PlantNode(cli_args=cli) if s.package == 'flexarm_sim' else EstimatorNode(cli_args=cli) \
            if s.executable == 'state_estimator' else ControllerNode(s.name, cli_args=cli)
        node.start()
        out.append(node)
    return out


def _fail(msg, code=1):
    print(f'flexarm run: {msg}', file=sys.stderr)
    return code


def _not_ready(runner, args, procs):
    """Names of the processes that are not ready yet: the plant until its first state, the controller until the
    plant integrates (it holds the arm until the first command)."""
    latest = runner.latest()
    if latest is None:
        return ['plant']
    if _hardware(args):          # the bridge's states come at once; the servos move when enabled
        with runner.lock:
            enabled = runner.plant_diag.get('state') == 'enabled'
        return [] if enabled else ['the servos (enable them: the bridge\'s ~/enable with the arm_id)']
    if args.controller != 'none' and latest[1] == 0 and not (_held(args) and runner.commands_seen):
        return [args.controller]       # held (lock-step): it has answered the plant's first state
    return []


def _wait_ready(args, runner, procs, progress):
    t0 = time.monotonic()
    last_activity = t0
    said = False
    while True:
        waiting = _not_ready(runner, args, procs)
        if not waiting:
            runner.stop_watching_commands()
            progress.line(f'nodes ready after {time.monotonic() - t0:.1f} s')
            return None
        ex = procs.exited()
        if ex:
            return _fail(f'{ex[0]} exited with code {ex[1]} during start-up:\n' + procs.tail(ex[0]))
        lines = procs.new_lines()
        now = time.monotonic()
        if lines:
            last_activity = now
            _relay(progress, lines)
        if not said and now - t0 > PROGRESS_AFTER_S:
            said = True
            progress.line(f'waiting for {", ".join(waiting)} to start ...')
        if now - last_activity > STARTUP_QUIET_S or now - t0 > STARTUP_LIMIT_S:
            logs = '\n'.join(f'--- {name} log:\n' + procs.tail(name) for name in waiting if procs.tail(name))
            return _fail(f'{", ".join(waiting)} not ready after {now - t0:.0f} s ('
                         + ('no state from the plant' if waiting == ['plant'] else
                            'the hardware bridge\'s servos were not enabled' if _hardware(args) else
                            f'the plant has received no command from {args.controller}')
                         + f'; nothing happened in the last {now - last_activity:.0f} s)\n' + logs)
        time.sleep(0.02)


def _wait_loop_settled(args, runner, procs, progress) -> dict:
    """Outside lock-step: once the nodes are ready and linked, wait until a controller diagnostic that arrived
    LOOP_SETTLE_S or more later says it is not in its safe mode (diagnostics come once a second: 0.3-1.3 s; at most
    SAFE_START_WAIT_S, then the move starts as things are, said). The loop's first moments are its slowest (the plant
    starts integrating, the nodes' first answers, their design processes' cached cells): the modal law on an estimate
    entered its safe mode there (issue 28; over the real `ros2 launch sim.launch.py controller:=modal
    estimator:=encoders`, once in 3 runs), and a move started meanwhile is flown on the hold law and the hand-back.
    Returns the controller's diagnostic then: the start-up's safe-mode figures, which summarize reports apart (the
    entries until the move's start, --lead later, count as the move's)."""
    t_closed = time.monotonic()
    said = False
    while True:
        with runner.lock:
            diag, t_diag = dict(runner.controller_diag), runner.controller_diag_t
        now = time.monotonic()
        if t_diag >= t_closed + LOOP_SETTLE_S:
            if diag.get('safe_mode') != 'on':
                if said:
                    progress.line(f'{args.controller}: on its normal law again after {now - t_closed:.1f} s')
                return diag
            if not said:
                said = True
                why = diag.get('safe_mode_reason') or 'no reason given'
                progress.line(f'{args.controller} is in its safe mode at start-up ({why}): the move waits for its '
                              'normal law')
        if procs.exited() or now - t_closed > SAFE_START_WAIT_S:
            progress.line(f'{args.controller} still in its safe mode {SAFE_START_WAIT_S:g} s after start-up: the '
                          'move starts on the hold law' if said else
                          f'no diagnostic from {args.controller} in {now - t_closed:.1f} s: the move starts')
            return diag
        time.sleep(0.02)


def _design_the_move_ahead(args, runner, procs, progress, t_now, times, q, qd, qdd):
    """Real time, a gain-scheduled controller: the move's reference is first sent DESIGN_AHEAD_S ahead, and the move
    waits until the controller says no cell of its schedules is pending (`gain_cells_pending` in its diagnostics, at
    most DESIGN_AHEAD_S / 2); then the move's own reference replaces it. The controller designs a reference's cells
    when it accepts it, in its design process; with an empty design cache (a fresh clone, a new arm) the modal law's
    and the hold law's cells of the 30 deg move (28 then; 10 since joint 0 is cyclic, laws/schedule.py) were designed
    during the move, beside it: on the strain estimate
    beside one CPU hog 2 of 2 such runs entered the safe mode on late states (36-53 mm tip RMS, 1 filter reset),
    against 12 of 13 clean runs at 14.0-14.5 mm with the cells on disk; the design itself (8-19 s of its process
    there) makes states late, so the move waits for it. None (go on) or the exit code."""
    accepted = runner.references_accepted()
    runner.reference_refused()
    runner.publish_reference(t_now + DESIGN_AHEAD_S, times, q, qd, qdd)
    t0 = time.monotonic()
    said = False
    while True:
        with runner.lock:
            diag = dict(runner.controller_diag)
        pending = _num(diag.get('gain_cells_pending'))
        waited = runner.design_wait_s = time.monotonic() - t0
        if int(_num(diag.get('references_accepted')) or 0) > accepted and pending == 0:
            if said:
                progress.line(f'{args.controller}: the move\'s gain cells designed in {waited:.1f} s')
            return None
        why = runner.reference_refused()
        if why:
            return _fail(f'{args.controller} refused the move: {why}')
        if procs.exited() or waited > DESIGN_AHEAD_S / 2:
            progress.line(f'{args.controller}: {pending:g} gain cells of the move still being designed after '
                          f'{waited:.0f} s: the move starts')
            return None
        if not said and waited > PROGRESS_AFTER_S:
            said = True
            progress.line(f'{args.controller} is designing the gain cells of the move ({pending:g} to go) ...')
        time.sleep(0.02)


def _drive(args, model, runner, procs, recorder, progress):
    angle = math.radians(args.angle)
    err = _wait_ready(args, runner, procs, progress)
    if err is not None:
        return err
    others = runner.node.count_publishers(names.STATE) - 1
    if others > 0:
        return _fail(f'{others} other node(s) publish {runner.node.resolve_topic_name(names.STATE)} in this ROS domain '
                     f"(ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}): stop them or use another domain")
    if args.controller != 'none':
        # the reference is published once and acknowledged in the controller's diagnostics: both links must be
        # matched first (discovery)
        deadline = time.monotonic() + STARTUP_QUIET_S
        for topic in (names.REFERENCE, names.DIAGNOSTICS):
            while not runner.linked(topic, args.controller):
                if time.monotonic() > deadline:
                    seen = ', '.join(runner.endpoint_nodes(topic)) or 'none'
                    return _fail(f'the runner and {args.controller} are not connected on {topic} after '
                                 f'{STARTUP_QUIET_S:.0f} s (nodes seen there: {seen}; the controller node must be '
                                 f'named {args.controller!r}, as the launch files name it)')
                time.sleep(0.01)
    # lock-step: the plant runs as fast as the controller answers, so it could pass the move's start before the
    # reference reaches the controller (on a loaded machine: a late start, a jump in the reference). Pause it, send
    # the reference, wait until the controller reports it accepted (it publishes its diagnostics at once then: the
    # paused plant's /clock stands still, so its periodic ones do too), resume: the move starts where it says.
    hold = args.time_mode == 'lockstep' and args.controller != 'none'
    if args.controller != 'none' and not hold:
        runner.controller_at_start = _wait_loop_settled(args, runner, procs, progress)
    if hold:
        err = runner.pause(True)
        if err:
            return _fail(err)
        time.sleep(2 * PAUSED_STATE_PERIOD_S)         # the paused plant re-sends its state: the runner's is current
    row, _ = runner.latest()
    n = model.n_joints
    q0 = row[1:1 + n].copy()
    lims = np.array([js.position_limits for js in model.spec.joints], dtype=float)
    angle = move_target(q0, angle, lims[:, 0], lims[:, 1]) - q0     # per joint: -angle where +angle leaves the limits
    t_move = row[0] + args.lead
    if getattr(args, 'trajectory', None) is not None:      # another command's reference (`flexarm excite`)
        times, q, qd, qdd = args.trajectory(q0)
        angle = np.zeros(n)
    else:
        times, q, qd, qdd = cycloid_trajectory(q0, angle, args.move_time)
    if args.controller != 'none':
        planning = args.controller == 'tip_tracking'
        if not hold and not planning and runner.controller_diag_value('gain_cells_pending') is not None:
            err = _design_the_move_ahead(args, runner, procs, progress, row[0], times, q, qd, qdd)
            if err is not None:
                return err
            # the design slowed the loop (its process beside the nodes): the move starts once it has settled again,
            # and its figures count from there
            runner.controller_at_start = _wait_loop_settled(args, runner, procs, progress)
            row, _ = runner.latest()
            t_move = row[0] + args.lead
        accepted = runner.references_accepted()
        runner.reference_refused()                    # the refusals so far: the baseline
        runner.publish_reference(t_move, times, q, qd, qdd)
        if hold or planning:
            # lock-step: the paused plant waits for the acceptance; a planning controller accepts once the move is
            # planned (real time: in its planner thread, re-timing the move if the plan comes after its start)
            limit = PLAN_ACK_S if planning else REFERENCE_ACK_S
            deadline = time.monotonic() + limit
            said = False
            while runner.references_accepted() <= accepted:
                why = runner.reference_refused()
                if why:
                    return _fail(f'{args.controller} refused the move: {why}')
                if planning and not said and time.monotonic() > deadline - limit + PROGRESS_AFTER_S:
                    said = True
                    progress.line(f'{args.controller} is planning the move ...')
                if time.monotonic() > deadline:
                    return _fail(f'{args.controller} did not accept the reference within {limit:.0f} s '
                                 f'(its diagnostics: {runner.controller_diag})\n--- {args.controller} log:\n'
                                 + procs.tail(args.controller))
                time.sleep(0.005)
            if planning:
                retimed = _num(runner.controller_diag_value('last_retime_s')) or 0.0
                if retimed > 0 and (_num(runner.controller_diag_value('moves_retimed')) or 0) > 0:
                    progress.line(f'{args.controller} re-timed the move {retimed:.3f} s later (planning took '
                                  f'{_num(runner.controller_diag_value("last_plan_time_s")) or float("nan"):.2f} s)')
                    t_move += retimed
        if hold:
            if recorder is not None and _held(args):
                err = _recording_from_start(runner, recorder)
                if err:
                    return _fail(err)
            err = runner.pause(False)
            if err:
                return _fail(err)
    t_end = t_move + args.duration
    progress.line(f'running {args.duration:g} s of plant time ({args.time_mode})')
    last_t, last_change, last_print, w0 = row[0], time.monotonic(), 0.0, time.monotonic()
    cpu0 = procs.cpu_seconds()
    pace = _RecordingPace(runner, recorder) if recorder is not None and _held(args) else None
    while True:
        row, _ = runner.latest()
        t = row[0]
        if t >= t_end:
            break
        now = time.monotonic()
        held = pace is not None and pace(now)          # (a plant held for the recorder is not stalled)
        if t != last_t or held:
            last_t, last_change = t, now
        ex = procs.exited()
        if ex:
            return _fail(f'{ex[0]} exited with code {ex[1]}:\n' + procs.tail(ex[0]))
        _relay(progress, [ln for ln in procs.new_lines() if 'WARN' in ln[1] or 'ERROR' in ln[1]])
        if now - last_change > RUN_STALL_S:
            return _fail(f'plant time stopped advancing at t = {t:.3f} s for {RUN_STALL_S:.0f} s:\n'
                         + '\n'.join(f'--- {name} log:\n' + procs.tail(name) for name, _, _ in procs.procs))
        if now - last_print > 0.25:
            last_print = now
            defl = np.linalg.norm(row[1 + 2 * n:4 + 2 * n] - row[4 + 2 * n:7 + 2 * n])
            progress.inline(f'  t = {max(0.0, t - t_move):5.2f}/{args.duration:.2f} s   q = ['
                            + ', '.join(f'{x:+.3f}' for x in row[1:1 + n])
                            + f'] rad   tip deflection {1e3 * defl:7.2f} mm')
        time.sleep(0.02)
    progress.end_inline()
    wall = time.monotonic() - w0
    cpu1 = procs.cpu_seconds()
    cpu = {name: round(100.0 * (cpu1[name] - cpu0[name]) / wall, 1) for name in cpu1 if name in cpu0}
    progress.line(f'run done: {args.duration:g} s of plant time in {wall:.1f} s wall')
    time.sleep(0.6)      # one more diagnostics period
    record_problems = []
    if recorder is not None:
        t0 = time.monotonic()
        record_problems = _finish_recording(args, runner, recorder)   # the file holds what the summary reports
        if time.monotonic() - t0 > PROGRESS_AFTER_S:
            progress.line(f'recording written in {time.monotonic() - t0:.1f} s')
    with runner.lock:
        arrays = {k: v.copy() for k, v in runner.samples.arrays().items()}
        diag = dict(runner.plant_diag)
        cdiag = dict(runner.controller_diag)
        ediag = dict(runner.estimator_diag)
    summary, plot = summarize(arrays, q0, angle, args.move_time, t_move, args.duration, diag, args.controller, cdiag,
                              model=model, plant_model=args._plant_model, time_mode=args.time_mode,
                              at_start=runner.controller_at_start)
    summary.update({'arm': model.spec.name, 'estimator': args.estimator, 'duration_s': args.duration,
                    'rate_hz': args.rate,
                    'control_rate_hz': args.control_rate, 'time_mode': args.time_mode, 'shaping': args.shaping,
                    'single_process': bool(args.single_process), 'move_deg': args.angle,
                    'move_time_s': args.move_time, 'states_rejected': runner.rejected,
                    'state_gaps_seen': runner.step_gaps,
                    'sample_stride': runner.samples.stride, 'run_wall_s': round(wall, 3),
                    'steps_per_wall_s': round(args.duration * args.rate / wall, 1),
                    'plant_arm': args._plant_model.spec.name,
                    'cpu_percent_of_a_core': cpu, 'design_wait_s': round(runner.design_wait_s, 3)})
    if args.estimator != 'none':
        summary.update(estimator_resets=_num(ediag.get('resets')), estimator_status=ediag.get('_message', ''))
    if recorder is not None:
        summary['record'] = {'path': os.path.abspath(args.record), 'messages': dict(recorder.counts),
                             'complete': not record_problems, 'problems': record_problems}
    if args.plot:
        t0 = time.monotonic()
        plant = args._plant_model
        plot_tip_run(args.plot, plot['t'], plot['tip'], plot['tip_desired'], plot['tau'], plot['relative_deflection'],
                     summary['validity_limit'], joint_names=list(model.spec.joint_names),
                     link_names=[js.name + '_link' for js in plant.spec.joints], t_move=plot['t_move'],
                     title=f'{plant.spec.name}: {args.controller}'
                           + (f' (designed on {model.spec.name})' if plant is not model else ''))
        summary['plot'] = os.path.abspath(args.plot)
        if time.monotonic() - t0 > PROGRESS_AFTER_S:
            progress.line(f'plot written in {time.monotonic() - t0:.1f} s')
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    if summary['validity_left']:
        print(f'flexarm run: the run left the model\'s validity: {summary["validity_left"]} (the figures above are '
              f'outside what the model describes)', file=sys.stderr)
    if summary['lost']:
        print(f'flexarm run: the arm was lost: {summary["lost"]}', file=sys.stderr)
    elif summary['held_short']:
        print(f'flexarm run: the move was not completed, the arm held short of its target (degraded, not lost): '
              f'{summary["held_short"]}', file=sys.stderr)
    if record_problems:
        _fail('the recording is incomplete: ' + '; '.join(record_problems))
    if summary['lost'] or summary['validity_left']:
        return LOST_EXIT_CODE
    if record_problems:
        return RECORD_INCOMPLETE_EXIT_CODE
    if summary['held_short']:
        return HELD_SHORT_EXIT_CODE
    return 0


class _RecordingPace:
    """A held lock-step run with a recording runs as fast as its loop answers, which may be faster than the
    recorder takes the messages (a loaded machine: 908 joint states and 500 commands lost once, the publishers'
    histories overrun). The publishers keep 60 s of plant time in lock-step and the recorder's reader 10^5 messages;
    besides, the plant may run at most PAUSE_AHEAD states ahead of the recorder (as the runner sees them): beyond, it is paused until the recorder is within
    RESUME_AHEAD (or RECORD_DRAIN_S have passed: the recording is then reported incomplete). A pause in lock-step
    changes nothing of the run (the paused instant's re-sends are recorded once). Called by the run's loop: True
    while it holds the plant (plant time stands still on purpose)."""

    PAUSE_AHEAD = 250
    RESUME_AHEAD = 50

    def __init__(self, runner, recorder):
        self.runner, self.recorder = runner, recorder
        self.since = None
        self.holds = 0

    def __call__(self, now) -> bool:
        lag = self.runner.states - self.recorder.counts.get(_resolved(self.runner, names.STATE), 0)
        if self.since is None and lag > self.PAUSE_AHEAD:
            if not self.runner.pause(True):
                self.since, self.holds = now, self.holds + 1
        elif self.since is not None and (lag < self.RESUME_AHEAD or now - self.since > RECORD_DRAIN_S):
            if not self.runner.pause(False):
                self.since = None
        return self.since is not None


def _resolved(runner, name) -> str:
    """A relative topic name in the run's namespace (the recorder's keys)."""
    return names.resolve(name, runner.node.get_namespace())


def _recording_from_start(runner, recorder) -> str:
    """Held lock-step run, before the plant's first step: the recorder is matched with every publisher and holds
    the plant's first state (re-sent while it is paused); '' or what went wrong."""
    deadline = time.monotonic() + STARTUP_QUIET_S
    while not recorder.matched() or not recorder.counts.get(_resolved(runner, names.STATE)):
        if time.monotonic() > deadline:
            return (f'the recorder has not received the paused plant\'s first state after {STARTUP_QUIET_S:.0f} s '
                    f'(recorded so far: {recorder.counts})')
        time.sleep(0.01)
    return ''


def _plant_counts_final(runner, timeout=10.0):
    """{topic: samples the plant published} once it is paused for good: two diagnostics in a row say paused with the
    same counts (plant/node.py); None if they do not within timeout."""
    deadline = time.monotonic() + timeout
    seen, last = runner.plant_diags, None
    while time.monotonic() < deadline:
        with runner.lock:
            n, d = runner.plant_diags, dict(runner.plant_diag)
        if n != seen:
            seen = n
            if d.get('paused') == 'True':
                counts = {k[len('published.'):]: int(v) for k, v in d.items() if k.startswith('published.')}
                if counts == last:
                    return counts
                last = counts
        time.sleep(0.02)
    return None


def _finish_recording(args, runner, recorder) -> list:
    """Finish the recording; returns why it is incomplete ([] when it is not). Every recording: no message lost
    between a publisher and the recorder (recorder.problems). A held lock-step run (the plant paused itself at the
    run's end): every sample the plant published on its timeline topics is in the file, counted against the plant's
    own count (issue 23, item 6), and an answer (command, estimate) to each of its states."""
    problems, expected = [], {}
    if _held(args):
        expected = _plant_counts_final(runner)
        if expected is None:
            problems.append('the plant did not report what it published (no diagnostics after its pause)')
            expected = {}
        expected = {k: v for k, v in expected.items() if k in PLANT_TIMELINE}
        states = expected.get(names.STATE, 0)
        if args.controller != 'none':           # lock-step: every state answered (the last, paused one too)
            expected.update({names.EFFORT_COMMANDS: states, names.STAMPED_COMMAND: states})
        if args.estimator != 'none':            # and estimated first
            expected[names.STATE_ESTIMATE] = states
        expected = {_resolved(runner, k): v for k, v in expected.items()}
        recorder.wait_for(expected, RECORD_DRAIN_S)
    recorder.close()
    counts = recorder.counts
    timeline = {_resolved(runner, t) for t in PLANT_TIMELINE}
    problems += [f'{topic}: {counts.get(topic, 0)} of the {n} messages '
                 + ('the plant published' if topic in timeline else 'answering its states')
                 for topic, n in sorted(expected.items()) if counts.get(topic, 0) != n]
    return problems + recorder.problems()


def _print_summary(s):
    def fmt(v, unit='', scale=1.0, digits=4):
        if v is None:
            return 'n/a'
        if isinstance(v, list):
            return '[' + ', '.join(f'{scale * x:.{digits}g}' for x in v) + ']' + unit
        return f'{scale * v:.{digits}g}{unit}'
    est = '' if s.get('estimator', 'none') == 'none' else f", from the estimate ({s['estimator']})"
    plant = '' if s.get('plant_arm', s['arm']) == s['arm'] else f" (plant: {s['plant_arm']})"
    print(f"flexarm run: {s['arm']}{plant} with {s['controller']}{est} (shaping {s['shaping']}), "
          f"{s['move_deg']:g} deg cycloidal move in {s['move_time_s']:g} s, {s['duration_s']:g} s")
    if s['time_mode'] == 'lockstep':
        print(f"  lock-step             {s['steps_per_wall_s']:g} plant steps per wall second "
              f"({s['steps_per_wall_s'] / s['rate_hz']:.2f}x real time at a {s['rate_hz']:g} Hz plant)")
    else:
        print(f"  plant rate achieved   {fmt(s.get('achieved_rate_hz'), ' Hz')}  (loop rate {s['rate_hz']:g} Hz), "
              f"overruns {fmt(s['overruns'])}, skipped periods {fmt(s['skipped_periods'])}")
        if s.get('commands_on_time') is not None:
            print(f"  command delay         {fmt(s['commands_on_time'])} commands at the designed delay, "
                  f"{fmt(s['commands_late'])} later (at most {fmt(s['command_max_late_steps'])} plant steps)")
    print(f"  tip path error        RMS {fmt(s['tip_rms_error_m'], ' mm', 1e3)}, max "
          f"{fmt(s['tip_max_error_m'], ' mm', 1e3)}  (against the desired tip path)")
    print(f"  tip error at the end  {fmt(s['end_of_move_tip_error_m'], ' mm', 1e3)}  "
          f"(at {s['move_time_s']:g} s, the end of the move)")
    print(f"  residual vibration    {fmt(s['residual_vibration_m'], ' mm', 1e3)}  "
          f"(after the command ended at {s['command_end_s']:.3g} s)")
    print(f"  settled within 1 mm   {fmt(s['settling_time_1mm_s'], ' s')}")
    valid = s['model_valid']
    print(f"  link deflection       {fmt(s['max_deflection_over_length'], ' %', 100.0, 3)} of length: "
          + ('within' if valid else 'OUTSIDE') + f" the model's validity ({100 * s['validity_limit']:.0f} %)")
    print(f"  joint RMS error       {fmt(s['joint_rms_error_rad'], ' rad')}")
    print(f"  peak torque           {fmt(s['peak_torque_nm'], ' N m')}")
    if s.get('controller_safe_mode_entries'):            # the figures above are then (partly) the hold law's
        print(f"  safe mode             {fmt(s['controller_safe_mode_entries'])} entries, "
              f"{fmt(s.get('controller_safe_mode_time_s'), ' s', digits=3)} on the hold law, not {s['controller']}'s "
              f"(last: {clip(s.get('controller_safe_mode_reason') or '?', 100)}); "
              f"{fmt(s.get('controller_states_skipped'))} states skipped"
              + (f", {fmt(s['controller_safe_mode_yields'])} yields to the drives' hold"
                 if s.get('controller_safe_mode_yields') else ''))
    if s.get('controller_safe_mode_entries_at_start'):    # left before the move: not in the figures above
        print(f"  safe mode at start-up {fmt(s['controller_safe_mode_entries_at_start'])} entries before the move "
              f"(last: {clip(s.get('controller_safe_mode_reason_at_start') or '?', 100)})")
    if s.get('plan_time_s') is not None:
        print(f"  planning              {s['plan_time_s']:.2f} s")
    if 'record' in s:
        print(f"  recording             {s['record']['path']} "
              f"({sum(s['record']['messages'].values())} messages)")
    if 'plot' in s:
        print(f"  plot                  {s['plot']}")
