"""ROS 2 controller nodes (one per kind of controller/kinds.py: `pd_servo`, `modal`, `computed_torque`,
`tip_tracking`): adapters over controller/runtime.py.

Topics: subscribes `state_topic` (default /flexarm/state; /flexarm/state_estimate: the state_estimator's)
(flexarm_msgs/FlexState, decoded by flexarm_sim.ros.flexstate; states of another
arm or that do not fit are refused and counted) and /flexarm/reference (trajectory_msgs/JointTrajectory, checked
against the arm's joint limits; a refused one keeps the previous reference); publishes
/effort_controller/commands (std_msgs/Float64MultiArray, arm joint order), /diagnostics and, in lock-step,
/flexarm/effort_command (flexarm_msgs/JointEffortCommand, step = state.step + 1, computed from exactly that
state; the same state re-sent (step, stamp and values) gets the same command again, the law is not run twice).
In real time, answering the plant's own states (state_topic = /flexarm/state, event-driven), it also publishes
the stamped command, for step = state.step + 1 + the input delay its gains are designed for in plant steps (the
plant's step rate read off consecutive states): the plant applies it at that step (flexarm_sim/plant/runtime.py),
so the loop's delay is the design delay whenever the transport is faster; the unstamped copy serves other
consumers (the hardware bridge, ros2_control).
pd_servo with command_interface:=position publishes the set-points on /position_controller/commands.

Parameters: controller/config.py (generated into config/controllers.yaml; the node name is the YAML section).
QoS: /flexarm/state depth 1 in real time (a stalled process answers the newest state, not a backlog), 100 in
lock-step (every state must be answered); the rest reliable, depth 10 (the commands 30000 in lock-step, which runs
as fast as the loop answers: a recorder may lag behind without losing one). The states are served by a thread of their
own outside the executor (flexarm_sim/ros/hotpath.py: on this node, in a group no executor runs); references,
parameters, timers and diagnostics by the executor; a lock keeps the runtime consistent between them.
"""
from __future__ import annotations

import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from flexarm_msgs.msg import FlexState, JointEffortCommand
from flexarm_sim.arms import arm_id, load_arm_model
from flexarm_sim.common.commands import clip
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.precompile import ensure_kernels
from flexarm_sim.ros import graph, names
from flexarm_sim.ros.flexstate import FlexStateDecoder
from flexarm_sim.ros.hotpath import HotLoop, HotSubscription
from flexarm_sim.ros.messages import MAX_REFERENCE_BYTES, CommandWriter, diagnostics, qos, trajectory_counts
from flexarm_sim.ros.node_main import log_at
from flexarm_sim.ros.parameters import NodeParams, warn_unmatched_params_files

from ..controller.config import TABLES
from ..controller.kinds import KINDS
from ..controller.runtime import ControllerRuntime
from ..laws.reference import MAX_POINTS

LOCKSTEP_HISTORY = 30000     # commands kept for a lagging reader in lock-step (60 s at 500 Hz; memory only if used)
MAX_STEPS_BETWEEN_STATES = 100_000   # consecutive states further apart (a reset between them) give no step rate


def reference_size_problem(data, n_joints) -> str:
    """Why a serialized reference is refused unread ('' if it may be read): more bytes than MAX_REFERENCE_BYTES,
    more joint names than the arm's joints, more points than laws.reference.MAX_POINTS."""
    if len(data) > MAX_REFERENCE_BYTES:
        return f'{len(data)} bytes (at most {MAX_REFERENCE_BYTES})'
    try:
        names, points = trajectory_counts(data)
    except ValueError as e:
        return str(e)
    if names > n_joints:
        return f'{names} joint names for an arm of {n_joints} joints'
    if points > MAX_POINTS:
        return f'{points} points: at most {MAX_POINTS} per trajectory'
    return ''


class ControllerNode(Node):
    def __init__(self, kind, **kw):
        super().__init__(kind, **kw)
        self.kind = kind
        warn_unmatched_params_files(self)
        self.params = NodeParams(self, TABLES[kind])
        model, path = load_arm_model(self.params['arm'])
        self.layout = ArmLayout.of(model, arm_id(path, model.spec.name))
        ensure_kernels(model, log=self.get_logger().info)
        self.rt = rt = ControllerRuntime(kind, model, self.params.values, log=self.log)
        self.params.resolve(rt.effective_values())
        self.params.on_change(self._apply)
        self.model = model
        self._warn_caps()
        self.lockstep = rt.lockstep
        self.state_timeout = self.params['state_timeout']
        self._newest = None                    # (z, zd, t, step, stamp, monotonic receive time): timer mode
        self._stale = True
        self._t_last_state = None
        self._answered = None                  # lock-step: ((step, stamp), z, zd, answer) of the last state answered
        self._blind_warned = False              # warned once: joints-only states under a modal law
        self.decoder = FlexStateDecoder(self.layout, note=lambda text: self.get_logger().warning(text))
        self.writer = CommandWriter(model.n_joints)
        # lock-step runs as fast as the loop answers: a deeper history lets a recorder lag behind without losing one
        out = qos(LOCKSTEP_HISTORY if self.lockstep else 10)
        self.pub = self.create_publisher(Float64MultiArray, names.EFFORT_COMMANDS, out)
        # real time: stamped commands only against the plant's own states (their step counts plant steps; an
        # estimate's does not)
        self.stamp_realtime = (not self.lockstep and self.params['event_driven']
                               and self.params['state_topic'] == names.STATE)
        self._plant_rate = None                # plant steps per second, from consecutive states (stamp_realtime)
        self._prev_state = None                # (step, stamp_ns) of the previous state (stamp_realtime)
        self.pub_stamped = self.create_publisher(JointEffortCommand, names.STAMPED_COMMAND, out) \
            if self.lockstep or self.stamp_realtime else None
        self.pub_position = self.create_publisher(Float64MultiArray, names.POSITION_COMMANDS, qos(10)) \
            if getattr(rt.law, 'servo_in_plant', False) else None
        self.pub_diag = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos(10))
        # the data path: states taken raw by a thread of their own (ros/hotpath.py: no executor in the way), decoded
        # in place (FlexStateDecoder), answered at once; real time keeps only the newest state, lock-step every one
        self._lock = threading.Lock()          # the runtime: hot thread (states) vs. executor (references, params)
        self.hot = HotSubscription(self, FlexState, self.params['state_topic'], qos(100 if self.lockstep else 1))
        self.hot_loop = HotLoop(self.hot, self._on_state, f'{kind}-states',
                                on_error=lambda e: self.get_logger().error(f'state handling: {e!r}'),
                                priority=0 if self.lockstep else self.params['realtime_priority'])
        self.create_subscription(JointTrajectory, names.REFERENCE, self._on_reference, qos(10), raw=True)
        # a second publisher beside this controller (commands) or beside the plant (states) is reported
        self.sources = graph.monitor(self, [names.EFFORT_COMMANDS]
                                     + ([names.STAMPED_COMMAND] if self.pub_stamped is not None else [])
                                     + ([names.POSITION_COMMANDS] if self.pub_position is not None else []))
        self.state_sources = graph.monitor(self, [self.params['state_topic']], what='states')
        if not self.lockstep:
            self.create_timer(1.0 / rt.rate if not self.params['event_driven'] else self.state_timeout,
                              self._on_timer)
        self.create_timer(1.0, self._publish_diagnostics)
        self.get_logger().info(f'{kind} on arm {model.spec.name}: {rt.rate:g} Hz'
                               f'{", lockstep" if self.lockstep else ""}, designed for {1e3 * rt.input_delay:.2f} ms '
                               f'of input delay (safe mode beyond {1e3 * rt.max_state_age:.2f} ms of state age)')

    def _warn_caps(self):
        law = self.rt.law
        if self.kind == 'pd_servo' and not law.servo_in_plant:
            capped = np.asarray(law.gain_info.get('kv_sample_capped', np.zeros(law.n, bool)))
            if np.any(capped):
                names = [self.model.spec.joint_names[j] for j in np.nonzero(capped)[0]]
                self.get_logger().warning(
                    f'at {self.rt.rate:g} Hz with {self.rt.input_delay * 1e3:.2f} ms of input delay the velocity '
                    f'gain of {names} is capped at {np.array2string(law.kv_cap[capped], precision=3)} N m s/rad (the '
                    f'joint inertia with the links free is small); those servos are soft (kp = '
                    f'{np.array2string(law.kp[capped], precision=3)} N m/rad). A stiffer servo belongs in the drive '
                    '(plant-side servo, command_interface:=position) or needs a higher rate.')
        elif self.kind == 'computed_torque':
            J = law.rigid.mass_matrix(np.asarray(self.model.spec.nominal_configuration, float))
            kv, kp = law.sampled_gains(J)
            if np.any(kp < law.kp * (1 - 1e-9)):
                self.get_logger().warning(
                    f'at {self.rt.rate:g} Hz with {self.rt.input_delay * 1e3:.2f} ms of input delay the joint '
                    f'bandwidth is capped at w_n = {np.array2string(np.sqrt(kp), precision=3)} rad/s (set '
                    f'{np.array2string(law.omega_n, precision=3)}) by the hubs\' inertia with the links free')

    def log(self, level, message):
        log_at(self.get_logger(), level, message)

    def _apply(self, values, changed):
        with self._lock:
            self.rt.apply(values, changed)

    # ------------------------------------------------------------------ lifecycle (node_main)
    def start(self):
        self.rt.start()
        self.hot_loop.start_reported(self.log, 'state thread', 'states are answered once it runs')

    def stop(self):
        self.hot_loop.stop()
        self.rt.stop()
        self.hot.destroy()

    # ------------------------------------------------------------------ inputs
    def _on_state(self, data):
        """The hot thread: decode, compute, publish (lock-step: the stamped command for the next control step)."""
        try:
            st = self.decoder.decode(data)
        except ValueError as e:
            with self._lock:
                self.rt.states_rejected += 1
                self.rt.last_reject_reason = f'state: {e}'
            self.get_logger().warning(f'rejected state: {e} ({self.rt.states_rejected} so far)',
                                      throttle_duration_sec=2.0)
            return
        self._t_last_state = st.t
        if (not st.has_modes and not self._blind_warned and hasattr(self.rt.law, 'design_cell')
                and self.model.n_coords > self.model.n_joints):
            self._blind_warned = True
            self.get_logger().warning(
                f'the states on {self.params["state_topic"]} carry joints only (no modal coordinates: the hardware '
                'bridge measures joints): the modal law feeds back zero deflection. Estimate them: hardware.launch.py '
                'estimator:=encoders (state_estimator, state_topic:=/flexarm/state_estimate)')
        if self.lockstep:
            last = self._answered
            if (last is not None and (st.step, st.stamp_ns) == last[0] and np.array_equal(st.z, last[1])
                    and np.array_equal(st.zd, last[2])):
                # the plant (or the estimator) re-sends a state while it waits: the same answer again, the law not
                # run again (its integrator and delay state would take an extra step: a lock-step run would then
                # depend on how long the plant waited or was paused). The state itself is compared too: two resets
                # of a paused plant give step 0 at the same (never reset) plant time with different states.
                self.pub_stamped.publish(last[3])
                return
            with self._lock:
                self.rt.hold(st.z, st.t)
                tau = self.rt.on_state(st.z, st.zd, st.t)
            stamped = self.writer.stamped_bytes(st.step + 1, st.stamp_ns, tau)
            self._answered = ((st.step, st.stamp_ns), st.z.copy(), st.zd.copy(), stamped)
            self.pub_stamped.publish(stamped)
            self._publish(tau)
            return
        self._newest = (st.z, st.zd, st.t, st.stamp_ns, time.monotonic())
        self._stale = False
        if self.params['event_driven']:        # answer each state at once: no sampling delay on top of transport
            age = 1e-9 * (self.get_clock().now().nanoseconds - st.stamp_ns)
            with self._lock:
                self.rt.hold(st.z, st.t)
                tau = self.rt.on_state(st.z, st.zd, st.t, age)
            if tau is not None:                # None: not acted on (safe mode: implausible or too old)
                if self.stamp_realtime:
                    self._publish_stamped(st, tau)
                self._publish(tau)

    def _publish_stamped(self, st, tau):
        """Real time: the command for the step at which its design delay has passed (module docstring)."""
        prev, self._prev_state = self._prev_state, (st.step, st.stamp_ns)
        if prev is not None and 0 < st.step - prev[0] <= MAX_STEPS_BETWEEN_STATES and st.stamp_ns > prev[1]:
            self._plant_rate = (st.step - prev[0]) * 1e9 / (st.stamp_ns - prev[1])
        if self._plant_rate is None:
            return
        delay_steps = int(round(self.rt.input_delay * self._plant_rate))
        self.pub_stamped.publish(self.writer.stamped_bytes(st.step + 1 + delay_steps, st.stamp_ns, tau))

    def _on_reference(self, data):
        """A reference (raw): its size checked before it is read, then built and checked outside the lock the
        state thread needs (a 10^5-point reference once held it for 29 s: control stopped, the plant's watchdog
        fired), installed under it."""
        msg, why = None, reference_size_problem(data, self.model.n_joints)
        if not why:
            try:
                msg = deserialize_message(bytes(data), JointTrajectory)
            except Exception as e:  # noqa: BLE001 - whatever rclpy raises for bytes that are no JointTrajectory
                why = f'not a trajectory_msgs/JointTrajectory ({type(e).__name__})'
        if msg is not None and self._t_last_state is None:
            self.get_logger().warning('reference before the first state: ignored')
            return
        t_now = self._t_last_state
        if msg is not None:
            with self._lock:
                start = self.rt.reference_start(t_now)
            ref, why = self.rt.prepare_reference(msg, t_now, start)
        else:
            ref = None
        with self._lock:
            ok, reason = self.rt.install_reference(ref, t_now, why)
        if not ok:
            self.get_logger().warning(f'rejected reference: {clip(reason)} (previous reference kept)')
        elif reason:
            self.get_logger().warning(f'reference: {reason}')
        self._publish_diagnostics()           # at once: who sent it learns the outcome (sim time may stand still)

    def _publish(self, tau):
        law = self.rt.law
        if self.pub_position is not None:      # the plant's servo is the PD: set-points (angles, rates) first
            self.pub_position.publish(Float64MultiArray(data=law.setpoint.tolist() + law.setpoint_rate.tolist()))
        self.pub.publish(self.writer.array_bytes(tau))

    def _on_timer(self):
        nw = self._newest
        if nw is None or time.monotonic() - nw[4] > self.state_timeout:
            if not self._stale and nw is not None:
                self.get_logger().warning('state timed out: not commanding (plant watchdog takes over)')
            self._stale = True
            return
        if self.params['event_driven']:
            return
        z, zd, t, stamp_ns, t_recv = nw
        age = 1e-9 * (self.get_clock().now().nanoseconds - stamp_ns)
        with self._lock:
            tau = self.rt.on_state(z, zd, t + (time.monotonic() - t_recv), age)
        if tau is not None:
            self._publish(tau)

    def _publish_diagnostics(self):
        with self._lock:
            level, message, values = self.rt.diagnostics(self._stale)
        values = dict(values, arm_id=self.layout.arm_id, states_decoded_fast=self.decoder.fast,
                      states_decoded_slow=self.decoder.slow,
                      state_thread_fifo_priority=self.hot_loop.granted_priority,
                      dds_receive_threads_fifo=self.hot_loop.receive.update())
        for mon in (self.sources, self.state_sources):
            _, why, more = graph.watch(self, mon, self.get_logger().warning)
            values.update(more)
            if why:
                level, message = ('warn', why) if level == 'ok' else (level, f'{message}; {why}')
        if self.decoder.other_arms:
            values['states_of_other_arms'] = ', '.join(self.decoder.other_arms)
        self.pub_diag.publish(diagnostics(f'flexarm_control/{self.get_name()}', self.model.spec.name, level, message,
                                          values, self.get_clock().now().nanoseconds))


def __getattr__(kind):
    """`controller_node:<kind>` (entry.py, run_node): a factory of the controller node of any registered kind."""
    if kind in KINDS:
        return lambda: ControllerNode(kind)
    raise AttributeError(kind)
