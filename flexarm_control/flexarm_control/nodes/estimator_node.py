"""ROS 2 node `state_estimator`: adapter over estimation/runtime.py (the filter: estimation/filter.py).

Subscribes (readings decoded by flexarm_sim.ros.sensors; a bad one is rejected and counted in /diagnostics):
    /joint_states                  sensor_msgs/JointState: encoders (+ the drives' rates and measured torque); each
                                   reading is one filter period (in real time the readings that came together are
                                   fused in one tick)
    /effort_controller/commands    std_msgs/Float64MultiArray: the commanded torque (lockstep: /flexarm/effort_command,
                                   flexarm_msgs/JointEffortCommand, matched by step)
    /flexarm/strain                flexarm_msgs/StrainGauges (with sensors.strain.gauges)
    /flexarm/tip_imu               sensor_msgs/Imu, linear acceleration (with sensors.accelerometer.enabled)
    /flexarm/state                 lockstep only: the control instants (its step and stamp; nothing else is read)
Publishes:
    /flexarm/state_estimate        flexarm_msgs/FlexState: the estimated joints and modal coordinates (with the tip
                                   deflections, end effector and energies of the estimate), stamped with the readings'
                                   sample instant; controllers read it with state_topic:=/flexarm/state_estimate
    /diagnostics                   innovations, standard deviations, sensors missing / rejected / late, resets

Real time (and simtime): the readings are taken by a thread of their own outside the executor (flexarm_sim/ros/
hotpath.py; normal scheduling unless `realtime_priority` asks for SCHED_FIFO), woken by each /joint_states reading: it takes that
reading, the joint readings queued behind it and every queued strain / accelerometer reading (the plant publishes
them before its joint state, so the readings of an instant are there when its joint reading is), and one tick at the
newest joint reading's stamp fuses them all, each at its own stamp, and publishes one estimate. A process that fell
behind so catches up in one tick (issue 28: one tick and one estimate per reading through the executor kept the
estimator ~100 ms behind at 500 Hz on the 2-core machine, and the controller's safe mode lost the arm). A strain or
accelerometer reading that comes after its instant was estimated is counted as late. The commands are taken with
the readings too (an executor callback per command, 500 Hz, took the runtime's lock from a thread at normal
scheduling, which a readings thread at FIFO would wait behind beside CPU hogs). Timers and diagnostics are served
by the executor; a lock keeps the runtime consistent between them. Without joint states taken for
sensors.encoders.timeout a timer at
TIMER_HZ first takes the joint readings queued for the readings thread (a starved thread, not silent encoders: they
are estimated as a batch, counted in `reading_batches_by_timer`); with none queued it publishes the estimate
predicted on the ROS clock from the commands (runtime.predicted: not kept, so readings that were only late are still
fused at their stamps) and the encoders are flagged missing; after max_prediction no estimate is published.

Lock-step: the plant publishes the readings of control instant k, then its state k; the node estimates instant k
once it has the state's step and stamp, the readings stamped then (every configured sensor) and the command of the
previous instant (step = previous step + 1), and publishes the estimate with step k: the controller answers it
with step k + 1 as it answers the plant's state — reproducible. A plant reset (the step going back) re-initializes.

Parameters: estimation/config.py (generated into config/estimator.yaml).
QoS (reliable): readings depth READINGS_DEPTH in real time (a thread descheduled for tens of ms then fuses every
reading at its own stamp, each period predicted with its own measured torque with input:=measured_effort, as the
bring-ups set it — ~0.1 ms a reading; estimating from the newest reading only predicted the whole gap with one
torque and reset the filter under load, issue 28), 100 in lock-step; commands depth 10; /flexarm/state_estimate
depth 10 (lock-step 30000: a recorder may lag behind without losing one).
"""
from __future__ import annotations

import collections
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray

from flexarm_msgs.msg import FlexState, JointEffortCommand, StrainGauges
from flexarm_sim.arms import arm_id, load_arm_model
from flexarm_sim.common.commands import clip
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.plant.outputs import ArmOutputs
from flexarm_sim.precompile import ensure_kernels
from flexarm_sim.ros import names
from flexarm_sim.ros.flexstate import FlexStateEncoder, check_arm
from flexarm_sim.ros.hotpath import HotLoop, HotSubscription
from flexarm_sim.ros.messages import CommandReader, diagnostics, qos
from flexarm_sim.ros.node_main import log_at
from flexarm_sim.ros.parameters import NodeParams, warn_unmatched_params_files
from flexarm_sim.ros.sensors import AccelReader, JointStateReader, StrainReader, stamp_ns, too_long

from ..estimation.config import TABLE
from ..estimation.runtime import EstimatorRuntime

TIMER_HZ = 20.0
FUTURE_TOLERANCE_S = 0.5      # s a reading's stamp may lead this node's clock (transport, clocks of two machines)
FRAME_ID = 'base_link'
READINGS_DEPTH = 50          # real time: readings queued per topic (100 ms at 500 Hz)


class EstimatorNode(Node):
    def __init__(self, **kw):
        super().__init__('state_estimator', **kw)
        warn_unmatched_params_files(self)
        self.params = NodeParams(self, TABLE)
        model, path = load_arm_model(self.params['arm'])
        self.params.resolve({'sensors.strain.gauges': []})
        self.model = model
        self.layout = ArmLayout.of(model, arm_id(path, model.spec.name))
        ensure_kernels(model, log=self.get_logger().info)      # the filter's kernels too (precompile.KERNEL_GROUPS)
        self.rt = rt = EstimatorRuntime(model, self.params.values, log=self.log,
                                       design_ahead=not self.params['lockstep'])
        self.names = list(model.spec.joint_names)
        self.lockstep = self.params['lockstep']
        self.encoder = FlexStateEncoder(self.layout, FRAME_ID, ArmOutputs(model, 2))
        self.n_published = 0
        self.warn_last = {}
        self.other_arms = set()               # arm ids of another arm whose readings were accepted (same layout)
        # the serialized readings' decoders (ros/sensors.py: learnt fixed bytes, numpy reads; one per topic)
        self.readers = {'encoders': JointStateReader(self.names),
                        'strain': StrainReader(rt.sensor_set.gauges, self.layout.arm_id, self._other_arm),
                        'accelerometer': AccelReader()}
        self.command_reader = CommandReader(model.n_joints)
        # readings: every one is fused at its own stamp (READINGS_DEPTH in real time: a stalled process works through
        # its backlog, each period with its own torque; 100 in lock-step: every instant must be answered); commands:
        # every one is validated in order (depth 10 in real time), so a rejected command never hides the valid one
        # sent just before it
        readings = qos(100 if self.lockstep else READINGS_DEPTH)
        self.pub = self.create_publisher(FlexState, names.STATE_ESTIMATE, qos(30000 if self.lockstep else 10))
        self.pub_diag = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos(10))
        # lock-step bookkeeping: instants to answer, the newest reading stamps, commands by step
        self._instants = collections.deque()
        self._stamps = {'joints': -1, 'strain': -1, 'accel': -1}
        self._commands = {}
        self._prev_step = None
        self._last_instant = None
        self._wait_since = None
        self._lock = threading.Lock()         # the runtime: readings thread (real time) vs. executor
        self.hot_loop = None
        self.side = []                        # real time: (subscription, raw callback) of strain / accelerometer
        if self.lockstep:
            # the readings of an instant before the instant itself: their subscriptions first (the executor takes one
            # message per ready subscription in the order they were created, backlog or not)
            if rt.sensor_set.gauges:
                self.create_subscription(StrainGauges, names.STRAIN, self._raw('strain', 'strain', self._on_strain),
                                         readings, raw=True)
            if rt.sensor_set.accelerometer:
                self.create_subscription(Imu, names.TIP_IMU, self._raw('accelerometer', 'accelerometer',
                                                                       self._on_imu), readings, raw=True)
            self.create_subscription(JointEffortCommand, names.STAMPED_COMMAND, self._on_stamped_command, qos(100))
            self.create_subscription(JointState, names.JOINT_STATES, self._raw('encoders', 'joint state',
                                                                              self._on_joints), readings, raw=True)
            self.create_subscription(FlexState, names.STATE, self._on_instant, readings)
        else:
            # the readings thread (ros/hotpath.py: on this node, no executor in the way): every /joint_states reading
            # wakes it; it takes the backlog of every reading topic and ticks once (module docstring)
            self.hot = HotSubscription(self, JointState, names.JOINT_STATES, readings)
            self.side.append((HotSubscription(self, Float64MultiArray, names.EFFORT_COMMANDS, qos(10)),
                              self._raw(None, 'command', self._on_command)))
            if rt.sensor_set.gauges:
                self.side.append((HotSubscription(self, StrainGauges, names.STRAIN, readings),
                                  self._raw('strain', 'strain', self._on_strain)))
            if rt.sensor_set.accelerometer:
                self.side.append((HotSubscription(self, Imu, names.TIP_IMU, readings),
                                  self._raw('accelerometer', 'accelerometer', self._on_imu)))
            self._joint_reading = self._raw('encoders', 'joint state', self._on_joints)
            self.hot_loop = HotLoop(self.hot, self._on_readings, 'estimator-readings',
                                    on_error=lambda e: self.get_logger().error(f'readings: {e!r}'),
                                    priority=self.params['realtime_priority'])
            self.batches = 0                  # readings-thread wake-ups; joint readings in them: rt's encoders track
            self.timer_batches = 0            # batches the timer took because the readings thread had not (starved)
            self.largest_batch = 0
        self._t_last_js = time.monotonic()
        self._last_stamp_ns = None
        self._last_msg = None
        self.create_timer(1.0 / TIMER_HZ, self._on_timer)
        self.create_timer(1.0, self._publish_diagnostics)
        sensors = ', '.join(['encoders'] + [g.name for g in rt.sensor_set.gauges]
                            + (['tip accelerometer'] if rt.sensor_set.accelerometer else []))
        self.get_logger().info(f'estimating {model.spec.name} ({int(model.mode_index.size)} modes) from {sensors} at '
                               f'{rt.rate:g} Hz{", lockstep" if self.lockstep else ""}; input: {rt.values["input"]}')

    def log(self, level, message):
        log_at(self.get_logger(), level, message)

    def _rejected(self, what, reason):
        if not reason:
            return
        now = time.monotonic()
        if now - self.warn_last.get(what, -1e9) > 2.0:
            self.warn_last[what] = now
            self.get_logger().warning(f'rejected {what}: {clip(reason)}')

    # ------------------------------------------------------------------ readings
    def _raw(self, track, what, handler):
        """A callback for a raw subscription: a message beyond sensors.MAX_READING_BYTES is refused unread (a huge
        one would hold the thread that reads it, and in real time the runtime's lock), others are decoded by the
        track's reader (ros/sensors.py; a command: CommandReader, whose values the runtime judges) and handed on;
        one that does not decode (unreadable, or against the codec's rule) is refused, counted on the track and
        warned about (throttled). track: the runtime's track (None: a command)."""
        decode = self.command_reader.values if track is None else self.readers[track].decode

        def callback(data):
            why = too_long(data)
            if not why:
                try:
                    value = decode(data)
                except ValueError as e:             # the readers' rule, unreadable bytes included
                    why = str(e)
            if why:
                if track is None:
                    self.rt.commands_rejected += 1
                    self.rt.last_command_reject = f'{what}: {why}'
                else:
                    self.rt.tracks[track].reject(f'{track}: {why}')
                self._rejected(what, why)
                return
            handler(value)
        return callback

    def _future(self, t_ns) -> str:
        """Why a reading stamped t_ns is refused as from the future ('' if it is not): more than FUTURE_TOLERANCE_S
        ahead of this node's clock (the ROS clock: sim time in simtime/lockstep). One such reading made the missing-
        encoder watch wait for its stamp: encoders silent for 5 s were never flagged."""
        now = self.get_clock().now().nanoseconds
        ahead = 1e-9 * (t_ns - now)
        if now > 0 and ahead > FUTURE_TOLERANCE_S:
            return f'stamped {ahead:.3f} s ahead of this node\'s clock (at most {FUTURE_TOLERANCE_S:g} s)'
        return ''

    def _on_joints(self, reading):
        q, qd, eff, t_ns = reading
        why = self._future(t_ns)
        if why:
            self.rt.tracks['encoders'].reject(f'encoders: {why}')
            self._rejected('joint state', why)
            return
        ok, why = self.rt.joints(t_ns * 1e-9, q, qd, eff)
        if not ok:
            self._rejected('joint state', why)
            return
        self._t_last_js = time.monotonic()
        if self.lockstep:
            self._stamps['joints'] = max(self._stamps['joints'], t_ns)
            self._advance()
        elif self._batch_stamp is None or t_ns > self._batch_stamp:
            self._batch_stamp = t_ns

    _batch_stamp = None                      # real time: the newest joint reading of the batch being taken

    def _on_readings(self, first):
        """The readings thread (real time), woken by a /joint_states reading: the joint readings already queued
        behind it and every queued strain / accelerometer reading (published before the joint reading of their
        instant) are taken too, validated and kept, and one tick at the newest joint reading's stamp fuses them all,
        each at its own stamp (runtime.tick), and publishes one estimate. A process that fell behind catches up
        in one tick instead of publishing an estimate per reading, each older than the last (issue 28: behind
        by ~100 ms at 500 Hz, the controller's safe mode lost the arm)."""
        with self._lock:
            self._estimate_batch([first, *self.hot.queued(READINGS_DEPTH - 1)])

    def _estimate_batch(self, joints):
        """Under the lock: the joint readings `joints` (bytes) and every queued side reading kept, one tick at the
        newest joint reading's stamp (_on_readings)."""
        self._batch_stamp = None
        self._take_side_readings()
        for data in joints:
            self._joint_reading(data)
        if self._batch_stamp is not None:
            self._tick(self._batch_stamp, None)
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(joints))

    def _take_side_readings(self):
        """Real time, under the lock: every queued command, strain and accelerometer reading validated and kept (by
        the readings thread before its tick; by the timer while the encoders are missing: the readings are then
        fused at the encoders' return, the commands drive its prediction)."""
        for hot, callback in self.side:
            for data in hot.queued(READINGS_DEPTH):
                callback(data)

    # ------------------------------------------------------------------ lifecycle (node_main)
    def start(self):
        if self.hot_loop is None:
            return
        self.rt.start()                       # the filter's cell designer (real time)
        self.hot_loop.start_reported(self.log, 'readings thread', 'readings are estimated once it runs')

    def stop(self):
        if self.hot_loop is None:
            return
        self.hot_loop.stop()
        self.rt.stop()
        self.hot.destroy()
        for hot, _ in self.side:
            hot.destroy()

    def _on_strain(self, reading):
        self._reading('strain', 'strain', self.rt.strain, *reading[:2])

    def _other_arm(self, arm, text):
        """Another arm's readings of the same layout accepted (a model-mismatch study): said once per arm."""
        if arm not in self.other_arms:
            self.other_arms.add(arm)
            self.get_logger().warning(text)

    def _on_imu(self, reading):
        self._reading('accelerometer', 'accel', self.rt.accel, *reading)

    def _reading(self, track, stamp_key, feed, value, t_ns):
        """A decoded sensor reading: one stamped ahead of this node's clock refused and counted, others fed to the
        runtime; in lock-step it may complete a control instant."""
        why = self._future(t_ns)
        if why:
            self.rt.tracks[track].reject(f'{track}: {why}')
            self._rejected(track, why)
            return
        ok, why = feed(t_ns * 1e-9, value)
        self._rejected(track, why)
        if ok and self.lockstep:
            self._stamps[stamp_key] = max(self._stamps[stamp_key], t_ns)
            self._advance()

    def _on_command(self, values):
        """Real time, under the lock: a command taken with the readings (module docstring)."""
        self._rejected('command', self.rt.command(values)[1])

    # ------------------------------------------------------------------ lock-step
    def _on_stamped_command(self, msg):
        self._commands[int(msg.step)] = list(msg.effort)
        if len(self._commands) > 1000:
            for k in sorted(self._commands)[:-500]:
                del self._commands[k]
        self._advance()

    def _on_instant(self, msg):
        try:
            other = check_arm(msg, self.layout)  # the plant's instants (empty or another layout's arm_id: refused)
            if other:
                self._other_arm(msg.arm_id, other)
        except ValueError as e:
            self._rejected('state', str(e))
            return
        step, t_ns = int(msg.step), stamp_ns(msg.header.stamp)
        if self._last_instant == (step, t_ns):
            # the plant re-sends its state while it waits for the command: the controller may have missed the
            # estimate (not matched yet), so send it again
            if self._last_msg is not None:
                self.pub.publish(self._last_msg)
            return
        if self._instants and self._instants[-1] == (step, t_ns):
            return
        self._instants.append((step, t_ns))
        self._advance()

    def _ready(self, step, t_ns):
        """Has everything of instant (step, t_ns) arrived? (module docstring)"""
        s = self._stamps
        if s['joints'] < t_ns:
            return False
        if self.rt.sensor_set.gauges and s['strain'] < t_ns:
            return False
        if self.rt.sensor_set.accelerometer and s['accel'] < t_ns:
            return False
        prev = self._prev_step
        return prev is None or step <= prev or (prev + 1) in self._commands

    def _advance(self):
        while self._instants:
            step, t_ns = self._instants[0]
            if not self._ready(step, t_ns):
                if self._wait_since is None:
                    self._wait_since = time.monotonic()
                return
            self._instants.popleft()
            self._answer(step, t_ns)

    def _answer(self, step, t_ns):
        self._wait_since = None
        prev = self._prev_step
        if prev is not None and step <= prev:
            self.get_logger().info(f'plant step went back from {prev} to {step} (a reset): re-initializing')
            self.rt.filter.initialized = False
        elif prev is not None:
            cmd = self._commands.pop(prev + 1, None)
            if cmd is not None:
                self._rejected('command', self.rt.command(cmd)[1])
        self._prev_step = step
        self._last_instant = (step, t_ns)
        self._tick(t_ns, step)

    # ------------------------------------------------------------------ ticks
    def _tick(self, t_ns, step):
        self._publish(self.rt.tick(t_ns * 1e-9), step, t_ns)

    def _publish(self, est, step, t_ns):
        self._last_stamp_ns = t_ns
        if est is None:
            return
        msg = self.encoder.fill(est.z, est.zd, est.tau, self.n_published if step is None else step, t_ns)
        self.pub.publish(msg)
        self._last_msg = msg
        self.n_published += 1

    def _on_timer(self):
        if self.lockstep:
            # a configured sensor that stopped: answer the waiting instant without it after its timeout
            if self._instants and self._wait_since is not None and \
                    time.monotonic() - self._wait_since > self.params['sensors.encoders.timeout']:
                step, t_ns = self._instants.popleft()
                self._answer(step, t_ns)
            return
        with self._lock:
            if self._last_stamp_ns is None:
                return
            if time.monotonic() - self._t_last_js > self.params['sensors.encoders.timeout']:
                # joint readings queued but not taken: the readings thread is starved, not the encoders silent —
                # they are estimated here (predicting over them from the commands alone put the estimate 0.1-0.23
                # rad off the arm after a 0.33 s stall beside two CPU hogs, dropped the readings as late, and the
                # filter reset; issue 28)
                backlog = list(self.hot.queued(READINGS_DEPTH))
                if backlog:
                    self.timer_batches += 1
                    self._estimate_batch(backlog)
                    return
                now = self.get_clock().now().nanoseconds
                if now > self._last_stamp_ns:
                    self._take_side_readings()
                    self._publish(self.rt.predicted(now * 1e-9), None, now)

    def _publish_diagnostics(self):
        with self._lock:
            level, message, values = self.rt.diagnostics()
            values = dict(values, published=self.n_published, arm_id=self.layout.arm_id,
                          readings_read_in_place=sum(r.fast for r in self.readers.values()),
                          readings_deserialized=sum(r.slow for r in self.readers.values()))
            if self.hot_loop is not None:
                values.update(reading_batches=self.batches, largest_reading_batch=self.largest_batch,
                              reading_batches_by_timer=self.timer_batches,
                              readings_thread_fifo_priority=self.hot_loop.granted_priority,
                              dds_receive_threads_fifo=self.hot_loop.receive.update())
        self.pub_diag.publish(diagnostics('flexarm_control/state_estimator', self.model.spec.name, level, message,
                                          values, self.get_clock().now().nanoseconds))
