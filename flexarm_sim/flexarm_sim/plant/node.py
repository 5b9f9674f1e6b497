"""The flexarm plant node (`plant`): ROS 2 adapter over the ROS-free PlantRuntime (runtime.py).

Run: ``ros2 run flexarm_sim plant --ros-args --params-file config/plant.yaml [-p arm:=slewing_beam]``
(parameters: config.py, generated into config/plant.yaml; invalid values stop the node with exit code 2 and a
line naming the parameter; run-time changes via ``ros2 param set`` are validated).

This node declares the parameters, loads the arm, builds the runtime and wires it: subscriptions feed it
commands, services reset/pause it, and it publishes through the sink below — /joint_states and /flexarm/state from
serialized messages refilled in place (ros/messages.JointStateEncoder, ros/flexstate.FlexStateEncoder: CDR bytes
written with numpy, published raw), /flexarm/markers likewise (ros/raw_markers.py), /diagnostics and /clock; commands
are taken raw and read in place (ros/messages.CommandReader). Threads and timing: runtime.py.

Commands: /effort_controller/commands (std_msgs/Float64MultiArray, N m, arm joint order; ros2_control's
forward-command convention) and /flexarm/effort_command (flexarm_msgs/JointEffortCommand, stamped: lock-step);
/position_controller/commands (rad [+ rad/s], plant-side servo, `servo.enabled`). Bad ones are counted (diagnostics)
with a throttled warning and the previous command stays in force (commands.py).

Services: /flexarm/reset (flexarm_msgs/srv/SetState: the initial state, or a given state within the joint limits
and the divergence bounds; restarts at step 0, recovers from divergence); /flexarm/pause (std_srvs/srv/SetBool).

Sensor models (`sensors.*`, flexarm_sim/sensors.py): with sensors.encoders.enabled /joint_states carries the
encoders' and drives' readings instead of the true joint state; strain gauges on /flexarm/strain
(flexarm_msgs/StrainGauges), the tip accelerometer on /flexarm/tip_imu (sensor_msgs/Imu), each stamped with its
sample instant (encoding: ros/sensors.py).

Names: every topic and service above is relative to the node's namespace (ros/names.py): these absolute names in
the root namespace, /armB/flexarm/state ... in /armB. More than one publisher on a command topic is reported in
/diagnostics (WARN naming them and their GIDs, counted: common/sources.py).

QoS (all KEEP_LAST, VOLATILE, reliable): /joint_states 10, /flexarm/state 10, /flexarm/markers 5, /diagnostics 10,
/clock 10 (simtime/lockstep), /effort_controller/commands 10, /position_controller/commands 10,
/flexarm/effort_command 100, /flexarm/strain 10, /flexarm/tip_imu 10. Lock-step runs as fast as its controller
answers: there the plant's timeline topics keep LOCKSTEP_HISTORY_S of plant time (a recorder or observer may lag that
much behind without losing a message).

Diagnostics count the samples published on each timeline topic (`published.<name>`, the relative name of ros/names.py:
distinct stamps, so a re-sent state is not counted twice), the figure a recording is checked against; they are
stamped on the plant's clock (sim time in simtime and lockstep, as /clock and every other node's stamps then).
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool
from visualization_msgs.msg import MarkerArray

from flexarm_msgs.msg import FlexState, JointEffortCommand, StrainGauges
from flexarm_msgs.srv import SetState

from ..arms import arm_id, load_arm_model
from ..common.commands import clip
from ..model.layout import ArmLayout
from ..precompile import ensure_kernels
from ..ros import graph, names
from ..ros.flexstate import FlexStateEncoder
from ..ros.hotpath import HotSubscription
from ..ros.parameters import NodeParams, warn_unmatched_params_files
from ..ros.messages import CommandReader, JointStateEncoder, diagnostics, qos, stamp
from ..ros.node_main import log_at
from ..ros.sensors import SensorEncoder
from . import config
from .outputs import ArmOutputs
from ..ros.raw_markers import MarkerEncoder, markers_from_geometry
from .runtime import PlantRuntime

LOCKSTEP_HISTORY_S = 60.0     # s of plant time a lock-step publisher keeps for a lagging reader (memory only if used)


class PlantNode(Node):
    def __init__(self, **kw):
        super().__init__('plant', **kw)
        warn_unmatched_params_files(self)
        self.params = NodeParams(self, config.TABLE)
        model, path = load_arm_model(self.params['arm'])
        config.check_against_arm(self.params.values, model)
        self.params.resolve(config.derived_values(self.params.values, model))
        ensure_kernels(model, log=self.get_logger().info)
        self.rt = rt = PlantRuntime(model, self.params.values, path)
        self.params.on_change(rt.apply)
        self.model = model
        self.arm_id = arm_id(path, model.spec.name)
        self.layout = ArmLayout.of(model, self.arm_id)
        frame = self.params['frame_ids.base']
        self.js_encoder = JointStateEncoder(model.spec.joint_names, model.q_index)
        self.commands = CommandReader(model.n_joints)
        n = model.n_joints
        self.state_encoder = FlexStateEncoder(self.layout, frame,
                                              ArmOutputs(model, self.params['markers.centerline_points']))
        z0, zd0 = rt.core.z, rt.core.zd
        self.state_encoder.fill(z0, zd0, np.zeros(n), 0, 0)            # warm up (numba outputs)
        joints, lines, _ = rt.marker_layout()
        self.marker_encoders = {}
        self._marker_encoder(rt.cfg['markers.trail_length'], [len(x) for x in lines])
        self.frame_id = frame
        self.mode = rt.mode

        # lock-step runs as fast as its controller answers: a deeper history lets observers (recorders, the runner)
        # lag behind without losing a message (module docstring)
        self.published = {}                  # topic -> [samples published, stamp of the last]
        depth = self._depth
        self.pub_js = self.create_publisher(JointState, names.JOINT_STATES, depth(10, 'publish_rates.joint_states'))
        self.pub_state = self.create_publisher(FlexState, names.STATE, depth(10, 'publish_rates.state'))
        self.pub_markers = self.create_publisher(MarkerArray, names.MARKERS, depth(5, 'publish_rates.markers'))
        self.pub_diag = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos(10))
        self.pub_clock = self.create_publisher(Clock, names.CLOCK, depth(10, 'publish_rates.clock')) \
            if self.mode != 'realtime' else None
        self._clock_msg = Clock()
        self._sensor_publishers(rt)
        # commands arrive serialized (raw) and are read in place (ros/messages.CommandReader); the loop thread takes
        # the torque commands itself at every tick (ros/hotpath.py: no executor callback per command)
        self.hot_effort = HotSubscription(self, Float64MultiArray, names.EFFORT_COMMANDS, qos(10))
        # stamped commands: lock-step, the loop thread waits for each (take_command); otherwise it polls them with the
        # unstamped ones at every tick (each acts at the step it names: runtime.py)
        self.hot = HotSubscription(self, JointEffortCommand, names.STAMPED_COMMAND, qos(100))
        if rt.core.servo is not None:
            self.create_subscription(Float64MultiArray, names.POSITION_COMMANDS, self._on_position, qos(10))
        # who commands this plant: more than one publisher on a command topic is reported (ros/graph.py)
        self.sources = graph.monitor(self, [names.EFFORT_COMMANDS, names.STAMPED_COMMAND]
                                     + ([names.POSITION_COMMANDS] if rt.core.servo is not None else []))
        self.create_service(SetState, names.RESET, self._on_reset)
        self.create_service(SetBool, names.PAUSE, self._on_pause)
        self.get_logger().info(
            f'arm {model.spec.name} ({path}): {n} joints, {int(model.mode_index.size)} modes; {self.mode} at '
            f'{rt.rate:g} Hz, {rt.core.method} x{rt.core.substeps} substeps, state at '
            f'{rt.cfg["publish_rates.state"]:g} Hz'
            + (f'; joint servo kp {rt.cfg["servo.kp"]} kv {rt.cfg["servo.kv"]} ({rt.core.servo.substeps} '
               'sub-steps)' if rt.core.servo is not None else ''))

    def _sensor_publishers(self, rt):
        """Topics of the sensor models (flexarm_sim/sensors.py): /joint_states (measured), /flexarm/strain,
        /flexarm/tip_imu."""
        self.sensor_enc = self.pub_strain = self.pub_imu = None
        sn = rt.sensors
        if sn is None:
            return
        self.sensor_enc = SensorEncoder(self.model, sn.cfg, self.arm_id, accel_variance=sn.accel_variance)
        if sn.cfg.gauges:
            self.pub_strain = self.create_publisher(StrainGauges, names.STRAIN, self._depth(10, 'publish_rates.state'))
        if sn.cfg.accelerometer:
            self.pub_imu = self.create_publisher(Imu, names.TIP_IMU, self._depth(10, 'publish_rates.state'))

    def _depth(self, depth, rate_param):
        """The QoS of a timeline topic: `depth`, in lock-step enough for LOCKSTEP_HISTORY_S at its rate."""
        if self.mode == 'lockstep':
            depth = max(depth, int(math.ceil(LOCKSTEP_HISTORY_S * self.params[rate_param])))
        return qos(depth)

    def _count(self, topic, t_ns):
        """One more sample published on topic, unless it re-sends the last one (same stamp)."""
        c = self.published.get(topic)
        if c is None:
            self.published[topic] = [1, t_ns]
        elif c[1] != t_ns:
            c[0] += 1
            c[1] = t_ns

    def _marker_encoder(self, trail_length, line_lengths=None):
        enc = self.marker_encoders.get(trail_length)
        if enc is None:
            if line_lengths is None:
                line_lengths = [len(x) for x in self.rt.marker_layout()[1]]
            enc = MarkerEncoder.build(self.model.n_joints, line_lengths, trail_length, self.params['frame_ids.base'])
            self.marker_encoders = {trail_length: enc}
        return enc

    # ------------------------------------------------------------------ lifecycle (node_main)
    def start(self):
        self.rt.start(self)

    def stop(self):
        self.rt.stop()
        self.hot_effort.destroy()
        self.hot.destroy()

    # ------------------------------------------------------------------ the runtime's sink
    def poll_commands(self):
        """Every tick (loop thread): the torque commands received since the last one (lock-step: counted, ignored)."""
        for data in self.hot_effort.queued():
            self._on_command(data)
        if self.mode == 'lockstep':
            return
        for data in self.hot.queued():
            self._on_stamped(data)

    def take_command(self, timeout_s):
        """Lock-step: the next JointEffortCommand, taken by the loop thread itself (None on timeout / wake)."""
        data = self.hot.take(timeout_s)
        return None if data is None else self.commands.stamped_command(data)

    def wake_commands(self):
        self.hot.wake()

    def joint_state(self, z, zd, tau, t_ns):
        self.pub_js.publish(self.js_encoder.fill(z, zd, tau, t_ns))
        self._count(names.JOINT_STATES, t_ns)

    def state(self, z, zd, tau, step, t_ns):
        self.pub_state.publish(self.state_encoder.fill(z, zd, tau, step, t_ns))
        self._count(names.STATE, (t_ns, step))      # a reset (step 0 again) at a stamp is a new sample

    def sensors(self, s):
        enc = self.sensor_enc
        if s.joints is not None:
            self.pub_js.publish(enc.joint_state(*s.joints, s.t_ns))
            self._count(names.JOINT_STATES, s.t_ns)
        if s.strain is not None:
            self.pub_strain.publish(enc.strain_gauges(s.strain, s.strain_variance, s.step, s.t_ns))
            self._count(names.STRAIN, s.t_ns)
        if s.accel is not None:
            self.pub_imu.publish(enc.accelerometer(s.accel, s.t_ns))
            self._count(names.TIP_IMU, s.t_ns)

    def clock(self, t_ns):
        if self.pub_clock is not None:
            self._clock_msg.clock = stamp(t_ns)
            self.pub_clock.publish(self._clock_msg)
            self._count(names.CLOCK, t_ns)

    def markers(self, joints, lines, tip, trail, t_ns):
        enc = self._marker_encoder(self.rt.cfg['markers.trail_length'])
        if enc is not None:
            self.pub_markers.publish(enc.encode(joints, lines, tip, trail, t_ns))
        else:                                     # layout not located (should not happen): build the message
            self.pub_markers.publish(markers_from_geometry(joints, lines, tip, trail, t_ns, self.frame_id))
        self._count(names.MARKERS, t_ns)

    def diagnostics(self, level, message, values):
        values = dict(values, arm_id=self.arm_id)
        values.update({f'published.{topic}': c[0] for topic, c in list(self.published.items())})
        lv, why, more = graph.watch(self, self.sources, self.get_logger().warning)
        values.update(more)
        if why:
            level, message = ('warn', why) if level == 'ok' else (level, f'{message}; {why}')
        t_ns = self.get_clock().now().nanoseconds if self.mode == 'realtime' else self.rt.sim_ns()
        self.pub_diag.publish(diagnostics('flexarm plant', self.model.spec.name, level, message, values, t_ns))

    def log(self, level, message):
        log_at(self.get_logger(), level, message)

    # ------------------------------------------------------------------ inputs
    def _rejected(self, what, reason):
        if not reason.startswith('stale') and self.rt.warn_throttle(time.monotonic()):
            n = self.rt.command_counts()['commands_rejected'] + self.rt.n_position_rejected
            self.get_logger().warning(f'rejected {what}: {clip(reason)} (previous command kept; {n} rejected so far)')

    def _on_command(self, data):
        ok, reason = self.rt.submit_effort(self.commands.values(data))
        if not ok:
            self._rejected('effort command', reason)

    def _on_stamped(self, data):
        ok, reason = self.rt.submit_stamped(*self.commands.stamped_command(data))
        if not ok:
            self._rejected('stamped effort command', reason)

    def _on_position(self, msg):
        ok, reason = self.rt.submit_position(msg.data)
        if not ok:
            self._rejected('position command', reason)

    def _on_reset(self, req, resp):
        resp.success, resp.message = self.rt.reset(req.to_initial, req.position, req.velocity, req.modal_position,
                                                   req.modal_velocity)
        if not resp.success:
            resp.message = clip(resp.message)
            self.get_logger().warning(f'reset refused: {resp.message}')
        return resp

    def _on_pause(self, req, resp):
        self.rt.pause(req.data)
        resp.success = True
        resp.message = 'paused' if req.data else 'running'
        return resp


if __name__ == '__main__':
    from ..entry import plant
    sys.exit(plant())
