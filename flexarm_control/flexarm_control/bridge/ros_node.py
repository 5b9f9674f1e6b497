"""``hardware_bridge`` node: Dynamixel X-series servos <-> ROS 2 (thin rclpy adapter around core.py).

Run: ``hardware_bridge --ros-args --params-file flexarm_bringup/config/hardware_bridge.yaml``
(the console script, flexarm_control/entry.py, runs this class through flexarm_sim/ros/node_main.py; parameters: bridge/config.py and the commented YAML; an
invalid or unknown parameter stops the node at start with a message naming it, exit code 2).

Threads: a loop thread runs :meth:`BridgeCore.cycle` on absolute monotonic deadlines at ``loop_rate``
(one SYNC_READ + one SYNC_WRITE per cycle; a late cycle skips the missed periods - it never
runs cycles back to back - and counts an overrun) and publishes /joint_states, then (``prompt_write``,
default on) waits up to half a period for the command that answers it and writes it at once: the
command reaches the servos one period sooner than at the next cycle's write (at 250 Hz, a controller
answering in ~2 ms acts ~2 ms after the reading instead of ~4-8 ms); the rclpy executor
(main thread) handles commands, services and the /diagnostics timer. :meth:`BridgeNode.stop` ends
the loop thread, switches the torque off and closes the port (the loop thread is the only user of the
port; stop() waits for it).

Topics (QoS: KEEP_LAST, RELIABLE, VOLATILE)
| topic | type | |
|---|---|---|
| /joint_states | sensor_msgs/JointState | position rad, velocity rad/s, effort N m (measured current x k_t x gear), joint side; stamped with the time the reply was read (monotonic -> ROS time with one offset taken at start) |
| /diagnostics | diagnostic_msgs/DiagnosticArray | one bridge status + one per servo, every ``diagnostics_period`` |
| /effort_controller/commands | std_msgs/Float64MultiArray | N m, joint_names order (current joints; entries of current_position joints ignored); not applied while stamped commands come (counted: unstamped_superseded) |
| /flexarm/effort_command | flexarm_msgs/JointEffortCommand | the stamped copy flexarm's controllers publish beside it: the same efforts, with the stamp of the readings they answer |
| /flexarm/applied_effort | flexarm_msgs/AppliedEffort | each write of efforts: when (the readings' clock), what the servos were told (their current resolution; NaN for current_position joints), the stamp of the readings the command answered (0: unstamped or the bridge's own hold) |
| /position_controller/commands | std_msgs/Float64MultiArray | rad, joint_names order (current_position joints only; subscribed only if such a joint exists) |

Services: ``~/enable`` (flexarm_msgs/srv/Enable: torque on, Bus Watchdog armed; only from state ``disabled``,
and only when the request's ``arm_id`` is this bridge's - the arm_id of its ``arm`` parameter, in /diagnostics and
the start-up log - so that a process calling it by mistake cannot enable the servos); ``~/disable``
(std_srvs/srv/Trigger: torque off, always allowed), ``~/reboot`` (Trigger: REBOOT the servos that report a
hardware error; refused while enabled). Torque is off at start and after every fault/reconnect.
"""
from __future__ import annotations

import math
import threading
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from flexarm_msgs.msg import AppliedEffort, FlexState, JointEffortCommand
from flexarm_msgs.srv import Enable
from flexarm_sim.common.scheduler import (FixedRateScheduler, ReceiveThreads, fifo_report, set_thread_fifo,
                                         set_timer_slack)
from flexarm_sim.compat.rclpy_private import parameter_overrides
from flexarm_sim.model.layout import joints_only_layout
from flexarm_sim.ros import names as ros_names
from flexarm_sim.ros.flexstate import FlexStateEncoder
from flexarm_sim.ros.messages import LEVELS, CommandReader, JointStateEncoder, diagnostic_value, qos
from flexarm_sim.ros.messages import stamp as ros_time
from flexarm_sim.ros.node_main import log_at

from flexarm_sim.ros.parameters import NodeParams, warn_unmatched_params_files

from .config import BridgeConfig, _names, table_for
from .core import DISABLED, ENABLED, BridgeCore, confirm_enable
from .servo_bus import ServoBus

def _fmt(v):
    return diagnostic_value(v) if isinstance(v, float) else str(v)


class MonotonicToRos:
    """Maps time.monotonic() seconds to ROS time (ns) with one offset measured at construction.

    The offset is taken from the tightest of several (monotonic, ROS, monotonic) brackets, so stamps
    of hardware reads are consistent with each other (never reordered by clock adjustments).
    """

    def __init__(self, clock, samples: int = 5):
        best = None
        for _ in range(samples):
            a = time.monotonic_ns()
            r = clock.now().nanoseconds
            b = time.monotonic_ns()
            if best is None or b - a < best[0]:
                best = (b - a, r - (a + b) // 2)
        self.offset_ns = best[1]

    def __call__(self, mono_s: float) -> int:
        return int(round(mono_s * 1e9)) + self.offset_ns


class BridgeNode(Node):
    def __init__(self, **kw):
        super().__init__('hardware_bridge', **kw)
        warn_unmatched_params_files(self)
        # the table of these joints (joints.<joint>.<key> for every name in joint_names), declared as every node's
        override = parameter_overrides(self).get('joint_names')
        names = _names(override.value, 'joint_names') if override is not None and override.value is not None else []
        self.params = NodeParams(self, table_for(names))
        self.cfg = BridgeConfig.from_mapping(self.params.values)
        _, self.arm_id = self.cfg.arm_identity()
        self.period = 1.0 / self.cfg['loop_rate']
        self.prompt_write = self.cfg['prompt_write']
        if not 200.0 <= self.cfg['loop_rate'] <= 500.0:
            self.get_logger().warning(f'loop_rate {self.cfg["loop_rate"]:g} Hz is outside the usual 200-500 Hz')
        self.bus = ServoBus(self.cfg.bus_config())
        self.core = BridgeCore(self.cfg, self.bus, log=self._log)
        self.core.cfg_period = self.period
        self.core.arm_id = self.arm_id
        self.to_ros = MonotonicToRos(self.get_clock())
        self.names = self.cfg.names
        self.frame_id = self.cfg['frame_id']

        self.pub_js = self.create_publisher(JointState, ros_names.JOINT_STATES, qos(10))
        # what the servos can tell of the flexible state (joints only: no strain sensing, `links` empty), so the
        # flexarm controllers, which read /flexarm/state, run on hardware unchanged (one codec: ros/flexstate.py)
        self.pub_state = self.create_publisher(FlexState, ros_names.STATE, qos(10))
        self.js_encoder = JointStateEncoder(self.names, frame_id=self.frame_id)
        self.state_encoder = FlexStateEncoder(
            joints_only_layout(self.names, self.arm_id.partition(':')[0], self.arm_id), self.frame_id)
        self.commands = CommandReader(len(self.names))
        self.n_state = 0
        self.pub_diag = self.create_publisher(DiagnosticArray, ros_names.DIAGNOSTICS, qos(10))
        self.create_subscription(Float64MultiArray, ros_names.EFFORT_COMMANDS, self._on_effort, qos(10),
                                 raw=True)
        # the stamped copy flexarm's controllers publish beside it: which readings each command answered, reported
        # with every write (/flexarm/applied_effort); while it comes, the unstamped copy is not applied (counted)
        self.create_subscription(JointEffortCommand, ros_names.STAMPED_COMMAND, self._on_stamped, qos(10),
                                 raw=True)
        self.pub_applied = self.create_publisher(AppliedEffort, ros_names.APPLIED_EFFORT, qos(50))
        self._applied_msg = AppliedEffort()
        self._applied_msg.header.frame_id = self.frame_id
        self._stamped_at = -math.inf
        self.unstamped_superseded = 0
        if self.core.position_mask.any():
            self.create_subscription(Float64MultiArray, ros_names.POSITION_COMMANDS, self._on_position,
                                     qos(10))
        self.create_service(Enable, '~/enable', self._enable)
        self.create_service(Trigger, '~/disable', lambda req, resp: self._serve('disable', resp))
        self.create_service(Trigger, '~/reboot', lambda req, resp: self._serve('reboot', resp))
        self.create_timer(self.cfg['diagnostics_period'], self._publish_diagnostics)
        self._warn_last = 0.0
        self._running = False
        self.loop_priority = 0              # SCHED_FIFO priority the loop thread got (0: normal scheduling)
        self.receive = ReceiveThreads(0)    # the DDS receive threads (commands), one below a FIFO loop thread
        self._thread = threading.Thread(target=self._loop, name='bridge-loop', daemon=True)
        wd = self.cfg['bus_watchdog']
        self.get_logger().info(
            f'{len(self.names)} joint(s) {self.names} on {self.cfg["port"]} @ {self.cfg["baud_rate"]} baud, '
            f'{self.cfg["loop_rate"]:g} Hz, command watchdog {self.cfg["command_timeout"]:g} s -> '
            f'{self.cfg["watchdog_action"]}, '
            + (f'servo Bus Watchdog {wd:g} s' if wd else 'servo Bus Watchdog NOT used (bus_watchdog: 0)')
            + f'; arm_id {self.arm_id}; torque off until ~/enable with this arm_id')
        if not wd:
            self.get_logger().warning('bus_watchdog is 0: if this process, the host or the link dies while the '
                                      'torque is on, the servos keep their last goal until power-off')

    # ------------------------------------------------------------------ logging / inputs
    def _log(self, level, message):
        log_at(self.get_logger(), level, message)

    def _reject(self, ok, reason, topic):
        if ok:
            return
        now = time.monotonic()
        if now - self._warn_last >= 2.0:
            self._warn_last = now
            self.get_logger().warning(f'rejected command on {topic}: {reason} (previous command kept; '
                                      f'{self.core.commands_rejected} rejected so far)')

    def _on_effort(self, data):
        if time.monotonic() - self._stamped_at <= self.core.timeout:
            self.unstamped_superseded += 1
            return
        ok, reason = self.core.submit_effort(self.commands.values(data))
        self._reject(ok, reason, ros_names.EFFORT_COMMANDS)

    def _on_stamped(self, data):
        _step, stamp_ns, values = self.commands.stamped_command(data)
        ok, reason = self.core.submit_effort(values, tag=int(stamp_ns))
        if ok:
            self._stamped_at = time.monotonic()
        self._reject(ok, reason, ros_names.STAMPED_COMMAND)

    def _publish_applied(self):
        """/flexarm/applied_effort: each write of efforts since the last call, stamped on the readings' clock."""
        m = self._applied_msg
        for t, effort, tag in self.core.take_applied():
            m.header.stamp = ros_time(self.to_ros(t))
            m.command_stamp = ros_time(tag)
            m.effort = [float(x) for x in effort]
            self.pub_applied.publish(m)

    def _on_position(self, msg):
        ok, reason = self.core.submit_position(msg.data)
        self._reject(ok, reason, ros_names.POSITION_COMMANDS)

    def _enable(self, req, resp):
        refused = confirm_enable(req.arm_id, self.arm_id)
        if refused is not None:
            resp.success, resp.message = False, f'enable refused: {refused}'
            self.get_logger().warning(f'~/enable refused: {refused}')
            return resp
        return self._serve('enable', resp)

    def _serve(self, kind, resp):
        r = self.core.request(kind, timeout=5.0)
        resp.success, resp.message = r.success, r.message
        if r.success:
            self.get_logger().info(f'~/{kind}: {r.message}')
        else:
            self.get_logger().warning(f'~/{kind} refused: {r.message}')
        return resp

    # ------------------------------------------------------------------ outputs
    def _publish_joint_state(self, r):
        ns = self.to_ros(r.stamp)
        self.pub_js.publish(self.js_encoder.fill(r.position, r.velocity, r.effort, ns))
        self.pub_state.publish(self.state_encoder.fill(r.position, r.velocity, r.effort, self.n_state, ns))
        self.n_state += 1

    def diagnostics_msg(self) -> DiagnosticArray:
        core = self.core
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        level, message = core.level()
        st = DiagnosticStatus(level=LEVELS[level], name='flexarm hardware_bridge', message=message,
                              hardware_id=self.cfg['port'])
        v = core.diagnostics()
        v['port'] = self.cfg['port']
        v['baud_rate'] = self.cfg['baud_rate']
        v['unstamped_superseded'] = self.unstamped_superseded
        v['loop_thread_fifo_priority'] = self.loop_priority
        v['dds_receive_threads_fifo'] = self.receive.update()
        st.values = [KeyValue(key=k, value=_fmt(x)) for k, x in v.items()]
        arr.status.append(st)
        for s in core.servo_status():
            lvl = 'error' if s['hardware_error'] or s['torque_off_unconfirmed'] else 'ok'
            msg = 'hardware error: ' + s['hardware_error_text'] if s['hardware_error'] else 'ok'
            if s['torque_off_unconfirmed']:
                msg += '; torque off NOT confirmed'
            sst = DiagnosticStatus(level=LEVELS[lvl], name=f'flexarm hardware_bridge: {s["joint"]}',
                                   message=msg, hardware_id=f'dynamixel id {s["servo_id"]}')
            sst.values = [KeyValue(key=k, value=_fmt(x)) for k, x in s.items()]
            arr.status.append(sst)
        return arr

    def _publish_diagnostics(self):
        try:
            self.pub_diag.publish(self.diagnostics_msg())
        except Exception as e:  # noqa: BLE001 - diagnostics must never stop the node
            self.get_logger().error(f'diagnostics: {e!r}')

    # ------------------------------------------------------------------ the loop
    def start(self):
        self._running = True
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop the loop thread, torque off, close the port. Idempotent; call it from the main thread
        before destroying the node. False if the loop thread did not end within *timeout* s (it then
        still owns the port and switches the torque off itself when its cycle returns)."""
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.get_logger().error(f'bridge loop did not stop within {timeout:g} s')
                return False
        self.core.shutdown()            # no-op if the loop thread already did it
        return True

    def _loop(self):
        set_timer_slack(1000)
        prio = self.cfg['realtime_priority']
        why = set_thread_fifo(prio)
        self.loop_priority = prio if why is None else 0
        self.receive = ReceiveThreads.beside(prio, why)
        report = fifo_report('bridge loop thread', 'realtime_priority', prio, why)
        if report is not None:
            log_at(self.get_logger(), *report)
        sched = FixedRateScheduler(self.period, max_catchup=0)
        core = self.core
        sched.start()
        try:
            while self._running:
                sched.wait()
                if not self._running:
                    break
                before = core.state
                reading = core.cycle()
                self._publish_applied()
                if reading is not None and self._running:
                    seq = core.command_seq()
                    self._publish_joint_state(reading)
                    # the controller answers this reading: write its command when it comes, not a cycle later
                    if self.prompt_write and core.state == ENABLED and \
                            core.wait_for_command(seq, 0.5 * self.period):
                        core.write_now()
                        self._publish_applied()
                core.stats.overruns = sched.stats.overruns
                if before not in (ENABLED, DISABLED) or core.state not in (ENABLED, DISABLED):
                    sched.start()     # recovery steps take their own time: re-anchor, not an overrun
        except Exception as e:  # noqa: BLE001
            if self._running and rclpy.ok(context=self.context):
                self.get_logger().fatal(f'bridge loop stopped: {e!r}; torque off')
        finally:
            core.shutdown()
