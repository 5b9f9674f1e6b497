"""The flexarm plant node (`plant`): integrates the arm model at a fixed rate and speaks ROS 2.

Run: ``plant --ros-args --params-file flexarm_bringup/config/plant.yaml [-p arm:=slewing_beam]``
(parameters: flexarm_sim/plant/config.py and the commented plant.yaml; invalid values stop the node at
start with a message naming the parameter; run-time changes via ``ros2 param set`` are validated).

Threads: the timing loop runs in its own thread on absolute monotonic deadlines (scheduler.py: bounded
catch-up, then skip-and-count; it sleeps to the deadline minus ``timing.spin_us`` and busy-waits the rest,
which removes most of the sleep wake-up jitter). The loop thread itself publishes /joint_states and
/flexarm/state, each from one preallocated message refilled in place (messages.JointStateBuilder /
FlexStateBuilder: array assignment into the message buffers, the derived quantities in one numba call), so
a state is published for every due step, in order, with no hand-off; the rclpy executor (subscriptions,
services, parameters) spins in the main thread; a low-priority output thread builds /flexarm/markers
(~30 Hz) and /diagnostics from snapshots, woken right after a step so that its work falls in the loop's
sleep. GIL: the switch interval is lowered to 0.2 ms so the loop thread gets the interpreter back quickly,
and the objects that exist after start-up are moved out of the cyclic garbage collector (``gc.freeze``: a
full collection of the ~80 000 start-up objects took 50-70 ms, holding the GIL — the old worst-case
period errors). ``timing.realtime_priority`` (default 50, as ros2_control's controller manager) puts the loop
thread in SCHED_FIFO in realtime mode where permitted (diagnostics ``loop_thread_fifo_priority``; refused ->
one warning, normal scheduling). De Luca arm, 1 kHz, 60 s (bench_plant_timing.py): p99 period error 0.2 us,
0 overruns with it; 244 us, 137 overruns without. No
CPU affinity is set (the loop, the executor and DDS's threads need both cores of a 2-core machine).

Time modes (parameter ``time_mode``):
* ``realtime``: one step per wall period 1/loop_rate; stamps are ROS (wall) time.
* ``simtime``: stamps are simulated time (from 0 at start, never reset, frozen while paused) and
  ``/clock`` is published; paced at ``real_time_factor`` x wall speed (0 = as fast as possible).
  Other nodes run with ``use_sim_time:=true``.
* ``lockstep``: as simtime (``/clock`` published), but each step k -> k+1 waits for the
  flexarm_msgs/JointEffortCommand on ``/flexarm/effort_command`` with ``step == k+1`` (and header.stamp
  equal to the stamp of state k, or zero). /flexarm/state is published for every step; while waiting
  the current state is re-sent every ``lockstep.republish_period`` (wall) so a late-joining controller
  starts. The result is independent of machine load (bit for bit). Float64MultiArray commands are
  ignored (counted) in lockstep; in the other modes JointEffortCommand is accepted like them.

Commands, limits and watchdog: commands.py (reject wrong length / non-finite and keep the previous
command; clamp to the torque limits; zero torque after ``command_timeout`` of plant time without a
valid command, normal operation on the next valid command).

Plant-side joint servo (``servo.enabled``, servo.py): each joint is driven by a finite-stiffness position
servo, torque = effort command + kp (q_c - q) + kv (qdot_c - qdot) evaluated at every integration sub-step, with the
set-points q_c from ``/position_controller/commands`` (std_msgs/Float64MultiArray, rad, arm joint order:
ros2_control's JointGroupPositionController topic; optionally followed by one rate per joint, rad/s, for
kv (qdot_c - qdot); wrong length / non-finite rejected and counted, clipped to the position limits). The effort command then acts as feed-forward. Not in lockstep.

Divergence guard: engine.py (kernel failure, non-finite state or |z|, |dz/dt| beyond the
``divergence.*`` bounds stop integration; the last good state stays published, /diagnostics reports
ERROR with the reason; ``/flexarm/reset`` restarts). Never publishes NaN; the process does not exit.

Services: ``/flexarm/reset`` (flexarm_msgs/srv/SetState: to the initial state, or to a given state;
restarts at step 0, clears the held command and the trail, recovers from divergence);
``/flexarm/pause`` (std_srvs/srv/SetBool: true = pause, false = resume; while paused the state is
frozen and still published, simulated time stops, the watchdog clock stops).

QoS (all KEEP_LAST, VOLATILE):
| topic | reliability | depth |
|---|---|---|
| /joint_states (pub) | reliable | 10 |
| /flexarm/state (pub) | reliable | 10 |
| /flexarm/markers (pub) | reliable | 5 |
| /diagnostics (pub) | reliable | 10 |
| /clock (pub, simtime/lockstep) | reliable (matches rclpy's best-effort /clock subscription) | 10 |
| /effort_controller/commands (sub) | reliable (ros2_control forward controllers publish reliable) | 10 |
| /flexarm/effort_command (sub) | reliable | 100 |
"""
from __future__ import annotations

import collections
import gc
import math
import os
import sys
import threading
import time

import numpy as np
import rclpy
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Point
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool
from visualization_msgs.msg import MarkerArray

from flexarm_msgs.msg import FlexState, JointEffortCommand
from flexarm_msgs.srv import SetState

from . import messages
from .commands import CommandGate, LockstepInbox, Throttle
from .config import PARAMETERS, ConfigError, PlantConfig
from .engine import PlantCore, initial_state
from .outputs import ArmOutputs
from .raw_markers import MarkerEncoder
from .servo import JointServo
from .scheduler import FixedRateScheduler, set_timer_slack

IDLE_PERIOD = 0.05        # s wall: loop period while paused / diverged (outputs keep flowing)


def _qos(depth, reliable=True):
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


def resolve_arm(name: str) -> str:
    """Path of an arm description: an existing file, or a name in flexarm_bringup/config/arms."""
    if os.path.isfile(name):
        return name
    fname = name if name.endswith(('.yaml', '.yml')) else name + '.yaml'
    tried = [os.path.abspath(name)]
    dirs = []
    try:
        from ament_index_python.packages import get_package_share_directory
        dirs.append(os.path.join(get_package_share_directory('flexarm_bringup'), 'config', 'arms'))
    except Exception:  # noqa: BLE001 - package index not available (plain source tree)
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    dirs.append(os.path.normpath(os.path.join(here, '..', '..', '..', 'flexarm_bringup', 'config', 'arms')))
    for d in dirs:
        p = os.path.join(d, os.path.basename(fname))
        tried.append(p)
        if os.path.isfile(p):
            return p
    raise ConfigError('arm', f'arm description {name!r} not found (tried {", ".join(tried)})')


def every_n(loop_rate: float, rate: float) -> int:
    """Steps between publications for a publish rate (0 = never)."""
    if rate <= 0:
        return 0
    return max(1, int(round(loop_rate / rate)))


class PlantNode(Node):
    def __init__(self, **kw):
        super().__init__('plant', **kw)
        for name, p in PARAMETERS.items():
            self.declare_parameter(name, p.default, ParameterDescriptor(
                description=p.doc, dynamic_typing=True, read_only=False))
        overrides = getattr(self, '_parameter_overrides', {}) or {}
        for name in overrides:
            if name not in PARAMETERS and name not in ('use_sim_time', 'start_type_description_service') \
                    and not name.startswith('qos_overrides.'):
                raise ConfigError(name, 'unknown parameter (typo?)')
        cfg = PlantConfig.from_mapping({n: self.get_parameter(n).value for n in PARAMETERS})
        from ..model import load_model
        path = resolve_arm(cfg['arm'])
        try:
            model = load_model(path)
        except Exception as e:  # noqa: BLE001 - any spec / mode-solver error is a bad `arm`
            raise ConfigError('arm', f'{path}: {e}') from e
        n, nm = model.n_joints, int(model.mode_index.size)
        cfg.check_against_arm(n, nm)
        self.cfg = cfg
        self.model = model
        self.arm_path = path
        self.mode = cfg['time_mode']
        self.rate = cfg['loop_rate']
        self.core = PlantCore(model, 1.0 / self.rate, cfg['substeps'], cfg['integrator'],
                              cfg['divergence.max_abs_position'], cfg['divergence.max_abs_velocity'])
        z0, zd0 = initial_state(model, cfg['initial.position'], cfg['initial.velocity'],
                                cfg['initial.modal_position'], cfg['initial.modal_velocity'])
        self.core.set_initial(z0, zd0)
        self.core.reset()
        self.core.warm_up()
        self.spec_limits = np.array([j.effort_limit for j in model.spec.joints], dtype=float)
        limits = self._limits(cfg)
        self.gate = CommandGate(limits, cfg['command_timeout'])
        if cfg['servo.enabled']:
            self.core.servo = JointServo(model, cfg['servo.kp'], cfg['servo.kv'], 1.0 / self.rate, limits)
            self.core.servo.q_c[:] = z0[model.q_index]
            self.n_position_rejected = 0
            self._position_lo, self._position_hi = (np.array(lim, dtype=float)
                                                    for lim in zip(*(js.position_limits for js in model.spec.joints)))
        self.inbox = LockstepInbox(limits)
        # one ArmOutputs (scratch arrays) per publishing thread: loop thread (lockstep) and output thread
        self.outputs = ArmOutputs(model, cfg['markers.centerline_points'])
        self.outputs_bg = ArmOutputs(model, cfg['markers.centerline_points'])
        self.frame_id = cfg['frame_ids.base']
        messages.flex_state(self.outputs, z0, zd0, np.zeros(n), 0, 0, self.frame_id)     # warm up
        # preallocated messages refilled by the loop thread (the only thread publishing them)
        self.js_builder = messages.JointStateBuilder(model.spec.joint_names, model.q_index)
        self.state_builder = messages.FlexStateBuilder(self.outputs, self.frame_id)
        self.state_builder.fill(z0, zd0, np.zeros(n), 0, 0)
        messages.markers(self.outputs, z0, [], 0, self.frame_id)
        self.joint_names = list(model.spec.joint_names)

        # state shared between threads
        self._lock = threading.Lock()          # core state (loop thread vs. reset service)
        self._running = False
        self._paused = False
        self.loop_priority = 0                 # SCHED_FIFO priority the loop thread got (0: normal scheduling)
        # wait_for_command: held (like paused) until the first valid command (not in lockstep, which waits anyway)
        self._awaiting_command = bool(cfg['wait_for_command']) and self.mode != 'lockstep'
        self.total_steps = 0                   # integrated steps since start (never reset): simulated clock
        self.plant_time = 0.0                  # s, watchdog clock
        self.ignored_unstamped = 0
        self.watchdog_state = self.gate.state
        self._trail = collections.deque(maxlen=max(1, cfg['markers.trail_length']))   # tip positions (3,)
        self._marker_encoder = None
        self._marker_encoder_trail = None
        self._snapshot = None
        self._snap_cv = threading.Condition()
        self._warn_throttle = Throttle(2.0)
        self._apply_rates(cfg)
        self._wall_period = self._period(cfg)
        self.sched = FixedRateScheduler(self._wall_period, cfg['max_catchup_steps'],
                                        spin_s=1e-6 * cfg['timing.spin_us'])
        self._wall_stamps = self.mode == 'realtime' and not self.get_parameter('use_sim_time').value

        self.pub_js = self.create_publisher(JointState, '/joint_states', _qos(10))
        self.pub_state = self.create_publisher(FlexState, '/flexarm/state', _qos(10))
        self.pub_markers = self.create_publisher(MarkerArray, '/flexarm/markers', _qos(5))
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', _qos(10))
        self.pub_clock = self.create_publisher(Clock, '/clock', _qos(10)) if self.mode != 'realtime' else None
        self.create_subscription(Float64MultiArray, '/effort_controller/commands', self._on_command, _qos(10))
        self.create_subscription(JointEffortCommand, '/flexarm/effort_command', self._on_stamped, _qos(100))
        if self.core.servo is not None:
            self.create_subscription(Float64MultiArray, '/position_controller/commands', self._on_position,
                                     _qos(10))
        self.create_service(SetState, '/flexarm/reset', self._on_reset)
        self.create_service(SetBool, '/flexarm/pause', self._on_pause)
        self.add_on_set_parameters_callback(self._on_set_parameters)

        self._loop_thread = threading.Thread(target=self._loop, name='plant-loop', daemon=True)
        self._out_thread = threading.Thread(target=self._output_loop, name='plant-output', daemon=True)
        self.get_logger().info(
            f'arm {model.spec.name} ({path}): {n} joints, {nm} modes; {self.mode} at {self.rate:g} Hz, '
            f'{cfg["integrator"]} x{self.core.substeps} substeps'
            + (f'; joint servo kp {cfg["servo.kp"]} kv {cfg["servo.kv"]} ({self.core.servo.substeps} sub-steps)'
               if self.core.servo is not None else ''))

    # ------------------------------------------------------------------ configuration helpers
    def _limits(self, cfg):
        lim = cfg['effort_limits']
        return np.array(lim, dtype=float) if lim else self.spec_limits.copy()

    def _period(self, cfg):
        if self.mode == 'simtime':
            rtf = cfg['real_time_factor']
            return 0.0 if rtf == 0 else 1.0 / (self.rate * rtf)
        return 1.0 / self.rate

    def _apply_rates(self, cfg):
        r = self.rate
        self.every_js = every_n(r, cfg['publish_rates.joint_states'])
        self.every_state = every_n(r, cfg['publish_rates.state'])
        self.every_markers = every_n(r, cfg['publish_rates.markers'])
        self.every_clock = every_n(r, cfg['publish_rates.clock'])
        self.diag_period = 1.0 / cfg['publish_rates.diagnostics']

    def _on_set_parameters(self, params):
        try:
            new = self.cfg.with_changes({p.name: p.value for p in params})
            new.check_against_arm(self.model.n_joints, int(self.model.mode_index.size))
        except ConfigError as e:
            return SetParametersResult(successful=False, reason=str(e))
        self.cfg = new
        limits = self._limits(new)
        self.gate.set_limits(limits)
        self.inbox.set_limits(limits)
        self.gate.set_timeout(new['command_timeout'])
        self._apply_rates(new)
        self.core.max_abs_position = new['divergence.max_abs_position']
        self.core.max_abs_velocity = new['divergence.max_abs_velocity']
        self.sched.max_catchup = new['max_catchup_steps']
        self._wall_period = self._period(new)
        if new['markers.trail_length'] != self._trail.maxlen:
            self._trail = collections.deque(self._trail, maxlen=max(1, new['markers.trail_length']))
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ time
    def sim_ns(self) -> int:
        return int(round(self.total_steps * 1e9 / self.rate))

    def stamp_ns(self) -> int:
        if self._wall_stamps:
            return time.time_ns()          # = ROS time without use_sim_time, a few us cheaper than Clock.now()
        return self.get_clock().now().nanoseconds if self.mode == 'realtime' else self.sim_ns()

    # ------------------------------------------------------------------ inputs
    def _reject_warning(self, reason):
        if self._warn_throttle(time.monotonic()):
            self.get_logger().warning(f'rejected effort command: {reason} (previous command kept; '
                                      f'{self.gate.rejected + self.inbox.rejected} rejected so far)')

    def _on_command(self, msg):
        if self.mode == 'lockstep':
            self.ignored_unstamped += 1
            return
        ok, reason = self.gate.submit(msg.data, self.plant_time)
        if not ok:
            self._reject_warning(reason)
        elif self._awaiting_command:
            self._awaiting_command = False
            self.get_logger().info('first torque command: integrating')

    def _on_position(self, msg):
        """Servo set-points (ros2_control's JointGroupPositionController topic): one angle per joint, or the
        angles followed by one rate per joint; finite; angles clipped to the position limits. A bad one is
        counted and the previous set-point kept."""
        v = np.asarray(msg.data, dtype=float)
        n = self.model.n_joints
        if v.size not in (n, 2 * n) or not np.all(np.isfinite(v)):
            self.n_position_rejected += 1
            if self._warn_throttle(time.monotonic()):
                self.get_logger().warning(f'rejected position command {list(msg.data)}: expected {n} finite '
                                          f'angles (+ {n} rates) ({self.n_position_rejected} rejected so far)')
            return
        q = np.clip(v[:n], self._position_lo, self._position_hi)
        with self._lock:
            self.core.servo.q_c[:] = q
            self.core.servo.qd_c[:] = v[n:] if v.size == 2 * n else 0.0
        if self._awaiting_command:
            self._awaiting_command = False
            self.get_logger().info('first position command: integrating')

    def _on_stamped(self, msg):
        if self.mode == 'lockstep':
            ok, reason = self.inbox.submit(int(msg.step), messages.stamp_ns(msg.header.stamp), msg.effort)
        else:
            ok, reason = self.gate.submit(msg.effort, self.plant_time)
            if ok:
                self._awaiting_command = False
        if not ok and not reason.startswith('stale'):
            self._reject_warning(reason)

    def _on_reset(self, req, resp):
        try:
            if req.to_initial:
                z, zd = None, None
            else:
                z, zd = initial_state(self.model, req.position, req.velocity, req.modal_position,
                                      req.modal_velocity)
        except ValueError as e:
            resp.success, resp.message = False, str(e)
            return resp
        with self._lock:
            was = self.core.diverged
            self.core.reset(z, zd)
            if self.core.servo is not None:         # the servo holds where the arm was put
                self.core.servo.q_c[:] = self.core.z[self.model.q_index]
                self.core.servo.qd_c[:] = 0.0
            self.gate.clear()
            self._trail.clear()
            self.sched.start()
        self.inbox.reset()
        resp.success = True
        resp.message = 'reset to the initial state' if req.to_initial else 'reset to the given state'
        if was:
            resp.message += f' (recovered from: {was})'
        self.get_logger().info(resp.message)
        return resp

    def _on_pause(self, req, resp):
        self._paused = bool(req.data)
        self.inbox.wake()
        resp.success = True
        resp.message = 'paused' if self._paused else 'running'
        return resp

    # ------------------------------------------------------------------ outputs
    def _publish_js(self, t_ns):
        """Loop thread only (its preallocated message)."""
        c = self.core
        self.pub_js.publish(self.js_builder.fill(c.z, c.zd, c.tau, t_ns))

    def _publish_clock(self):
        msg = Clock()
        msg.clock = messages.stamp(self.sim_ns())
        self.pub_clock.publish(msg)

    def _take_snapshot(self, t_ns, state, markers):
        c = self.core
        snap = (c.z.copy(), c.zd.copy(), c.tau.copy(), c.step_index, t_ns, state, markers)
        with self._snap_cv:
            self._snapshot = snap
            self._snap_cv.notify()

    def _publish_state(self, z, zd, tau, step, t_ns):
        """Loop thread only (its preallocated message)."""
        self.pub_state.publish(self.state_builder.fill(z, zd, tau, step, t_ns))

    def _build_marker_encoder(self, trail_length):
        _, lines, _ = self.outputs_bg.geometry(np.zeros(self.model.n_coords))
        self._marker_encoder = MarkerEncoder.build(self.model.n_joints, [len(x) for x in lines], trail_length,
                                                   self.frame_id)
        self._marker_encoder_trail = trail_length

    def _publish_markers(self, z, t_ns):
        """Output thread. Published as pre-serialized bytes (raw_markers.py: converting a few hundred Point objects
        inside rclpy held the GIL long enough to delay the loop thread's ticks)."""
        out = self.outputs_bg
        length = self.cfg['markers.trail_length']
        joints, lines, tip = out.geometry(z)
        if length > 0:
            self._trail.append(tip)
        if self._marker_encoder_trail != length:
            self._build_marker_encoder(length)
        trail = np.array(self._trail, dtype=float).reshape(-1, 3) if length > 0 else np.zeros((0, 3))
        if self._marker_encoder is not None:
            self.pub_markers.publish(self._marker_encoder.encode(joints, lines, tip, trail, t_ns))
        else:                                     # layout not located (should not happen): build the message
            pts = [Point(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in trail]
            self.pub_markers.publish(messages.markers_from_geometry(joints, lines, tip, pts, t_ns, self.frame_id))

    def _output_loop(self):
        next_diag = time.monotonic()
        while self._running:
            with self._snap_cv:
                timeout = max(0.0, next_diag - time.monotonic())
                if self._snapshot is None:
                    self._snap_cv.wait(timeout)
                snap, self._snapshot = self._snapshot, None
            try:
                if snap is not None:
                    z, zd, tau, step, t_ns, _, do_markers = snap     # states: published by the loop thread
                    if do_markers:
                        self._publish_markers(z, t_ns)
                if time.monotonic() >= next_diag:
                    next_diag = time.monotonic() + self.diag_period
                    self.pub_diag.publish(self.diagnostics_msg())
            except Exception as e:  # noqa: BLE001 - keep publishing; a context shutdown ends the loop
                if not self._running or not rclpy.ok(context=self.context):
                    return
                self.get_logger().error(f'output thread: {e!r}')

    def diagnostics_values(self) -> dict:
        st = self.sched.stats.summary(self.sched.period if self.sched.period > 0 else float('nan'))
        c = self.core
        g = self.gate
        v = {
            'time_mode': self.mode, 'arm': self.model.spec.name, 'loop_rate_hz': self.rate,
            'integrator': c.method, 'substeps': c.substeps,
            'achieved_rate_hz': st.get('rate_hz', 0.0) * (self.rate * self.sched.period if self.sched.period > 0
                                                           else 1.0),
            'period_error_p50_us': 1e6 * st.get('period_err_p50_s', float('nan')),
            'period_error_p99_us': 1e6 * st.get('period_err_p99_s', float('nan')),
            'period_error_max_us': 1e6 * st.get('period_err_max_s', float('nan')),
            'lateness_p99_us': 1e6 * st.get('lateness_p99_s', float('nan')),
            'overruns': st['overruns'], 'skipped_periods': st['skipped_periods'],
            'skipped_time_s': self.sched.lag_s,
            'step_compute_mean_us': 1e6 * st['compute_mean_s'], 'step_compute_max_us': 1e6 * st['compute_max_s'],
            'step_compute_p99_us': 1e6 * st.get('compute_p99_s', float('nan')),
            'commands_accepted': g.accepted + self.inbox.accepted,
            'commands_rejected': g.rejected + self.inbox.rejected,
            'commands_clamped': g.clamped + self.inbox.clamped,
            'last_reject_reason': g.last_reject_reason or self.inbox.last_reject_reason,
            'watchdog': self.watchdog_state if self.mode != 'lockstep' else 'n/a (lockstep)',
            'watchdog_timeouts': g.timeouts,
            'step': c.step_index, 'sim_time_s': self.sim_ns() * 1e-9, 'paused': self._paused,
            'waiting_for_command': self._awaiting_command,
            'loop_thread_fifo_priority': self.loop_priority,
            'servo': (f'on, {self.core.servo.substeps} sub-steps per step, set-point '
                      f'{np.array2string(self.core.servo.q_c, precision=4)}, '
                      f'{self.n_position_rejected} rejected') if self.core.servo is not None else 'off',
            'diverged': c.diverged or 'no', 'divergences': c.divergences,
        }
        if self.mode == 'lockstep':
            v['lockstep_waiting_for_step'] = self.inbox.expected
            v['lockstep_stale_commands'] = self.inbox.stale
            v['unstamped_commands_ignored'] = self.ignored_unstamped
        return v

    def diagnostics_msg(self):
        v = self.diagnostics_values()
        c = self.core
        if c.diverged:
            level, msg = 'error', c.diverged + ' — call /flexarm/reset'
        elif self._paused:
            level, msg = 'warn', 'paused'
        elif self._awaiting_command:
            level, msg = 'ok', 'holding: waiting for the first torque command (wait_for_command)'
        elif self.watchdog_state == 'timeout':
            level, msg = 'warn', 'command watchdog timeout: zero torque'
        else:
            level, msg = 'ok', 'running'
        return messages.diagnostics('flexarm plant', self.model.spec.name, level, msg, v,
                                    self.get_clock().now().nanoseconds)

    # ------------------------------------------------------------------ the timing loop
    def start(self):
        self._build_marker_encoder(self.cfg['markers.trail_length'])
        gc.collect()
        gc.freeze()          # start-up objects (modules, numba, scipy) out of the collector: no 50 ms GIL pauses
        self._running = True
        self._out_thread.start()
        self._loop_thread.start()

    def stop(self):
        self._running = False
        self.inbox.wake()
        with self._snap_cv:
            self._snap_cv.notify_all()
        for t in (self._loop_thread, self._out_thread):
            if t.is_alive():
                t.join(timeout=2.0)

    def _after_step(self, t_ns):
        """Publications due after a step (loop thread)."""
        k = self.total_steps
        if self.every_js and k % self.every_js == 0:
            self._publish_js(t_ns)
        if self.pub_clock is not None and k % self.every_clock == 0:
            self._publish_clock()
        if self.every_state and k % self.every_state == 0:
            c = self.core
            self._publish_state(c.z, c.zd, c.tau, c.step_index, t_ns)
        if self.every_markers and k % self.every_markers == 0:
            self._take_snapshot(t_ns, False, True)

    def _idle(self):
        """Paused or diverged: keep the last good state flowing at a low rate."""
        t_ns = self.stamp_ns()
        self._publish_js(t_ns)
        if self.pub_clock is not None:
            self._publish_clock()
        if self.every_state:
            c = self.core
            with self._lock:
                z, zd, tau, k = c.z.copy(), c.zd.copy(), c.tau.copy(), c.step_index
            self._publish_state(z, zd, tau, k, t_ns)
        if self.every_markers:
            self._take_snapshot(t_ns, False, True)
        time.sleep(IDLE_PERIOD)

    def _loop(self):
        set_timer_slack(1000)
        prio = self.cfg['timing.realtime_priority']
        if prio > 0 and self.mode == 'realtime':     # not simtime: as fast as possible at SCHED_FIFO would hog a core
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))   # this thread only
                self.loop_priority = prio
                self.get_logger().info(f'timing loop thread: SCHED_FIFO priority {prio}')
            except (OSError, AttributeError) as e:
                self.get_logger().warning(f'timing.realtime_priority {prio} refused ({e}): normal scheduling '
                                          '(grant CAP_SYS_NICE or an rtprio limit for punctual steps)')
        try:
            if self.mode == 'lockstep':
                self._lockstep_loop()
            else:
                self._timed_loop()
        except Exception as e:  # noqa: BLE001
            if self._running and rclpy.ok(context=self.context):
                self.get_logger().fatal(f'timing loop stopped: {e!r}')
                raise

    def _timed_loop(self):
        sched = self.sched
        stats = sched.stats
        tau = np.zeros(self.model.n_joints)
        perf = time.perf_counter
        idle = False
        sched.start()
        while self._running:
            if self._paused or self.core.diverged or self._awaiting_command:
                idle = True
                self._idle()
                continue
            if idle or sched.period != self._wall_period:
                idle = False
                sched.period = self._wall_period
                sched.start()
            sched.wait()
            c0 = perf()
            with self._lock:
                self.watchdog_state = self.gate.torque(self.plant_time, tau)
                if self.core.advance(tau):
                    self.total_steps += 1
                    self.plant_time = self.total_steps / self.rate
                else:
                    self.get_logger().error(self.core.diverged + ' — integration stopped, waiting for /flexarm/reset')
                    continue
            self._after_step(self.stamp_ns())
            stats.record_compute(perf() - c0)

    def _lockstep_loop(self):
        tau = np.zeros(self.model.n_joints)
        inbox = self.inbox
        stats = self.sched.stats
        perf = time.perf_counter
        while self._running:
            if self._paused or self.core.diverged:
                self._idle()
                continue
            with self._lock:
                gen = inbox.generation
                k = self.core.step_index
                t_ns = self.sim_ns()
                z, zd, tau_prev = self.core.z.copy(), self.core.zd.copy(), self.core.tau.copy()
            self._publish_state(z, zd, tau_prev, k, t_ns)
            inbox.expect(k + 1, t_ns)
            got = False
            with inbox.cond:
                while self._running and not self._paused and inbox.generation == gen:
                    if inbox.take(tau):
                        got = True
                        break
                    if not inbox.cond.wait(self.cfg['lockstep.republish_period']):
                        self._publish_state(z, zd, tau_prev, k, t_ns)
            if not got:
                continue
            stats.record_tick(time.monotonic(), 0.0)
            c0 = perf()
            with self._lock:
                if inbox.generation != gen:
                    continue
                if self.core.advance(tau):
                    self.total_steps += 1
                    self.plant_time = self.total_steps / self.rate
                else:
                    self.get_logger().error(self.core.diverged + ' — integration stopped, waiting for /flexarm/reset')
                    continue
            t_ns = self.sim_ns()
            k = self.total_steps
            if self.every_js and k % self.every_js == 0:
                self._publish_js(t_ns)
            if k % self.every_clock == 0:
                self._publish_clock()
            if self.every_markers and k % self.every_markers == 0:
                self._take_snapshot(t_ns, False, True)
            stats.record_compute(perf() - c0)


def main(args=None):
    sys.setswitchinterval(0.0002)
    rclpy.init(args=args)
    try:
        node = PlantNode()
    except ConfigError as e:
        print(f'plant: {e}', file=sys.stderr, flush=True)
        rclpy.try_shutdown()
        return 2
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    node.start()
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.stop()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
