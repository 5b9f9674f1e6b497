"""ROS 2 controller nodes: one base class, three control laws (pd_servo, modal, computed_torque).

Topics: subscribes /flexarm/state (flexarm_msgs/FlexState), /flexarm/reference (trajectory_msgs/JointTrajectory);
publishes /effort_controller/commands (std_msgs/Float64MultiArray, arm joint order), /diagnostics and, in
lock-step mode, /flexarm/effort_command (flexarm_msgs/JointEffortCommand, step = state.step + 1, computed from
exactly that state, published from the state callback).

Parameters: arm (YAML path, required), rate (Hz, 1000), state_timeout (s, 0.1: no fresh state for that long ->
stop publishing so the plant's watchdog takes over), shaping (none|zv|zvd: shaper from the closed-loop modes of
the law at the move target), shaping_modes (2), lockstep (false), default_move (false: on the first state start a
cycloidal move of every joint by move_angle in move_time), move_angle (pi/3), move_time (2.5), and the law's gains
(settable at run time, validated; a rejected value leaves the law unchanged):
  pd_servo: kp, kv (arrays; empty = Naganathan's rule), feedforward; command_interface (effort | position:
            the plant's joint servo is the PD, this node sends its set-points and the rigid feed-forward)
  modal: dq_max, tip_max, rho, integral_time, schedule_step, integral, feedforward
  computed_torque: omega_n, zeta (arrays or one value; empty = default), include_deflection
Law time t is the plant's time (FlexState.header.stamp).

Sampling and delay (not lock-step): the law runs once per received state (event_driven, default), so its period is
the plant's state period (`rate` must equal the plant's publish_rates.state) and its torque acts after the state's
and the command's transport and the plant's next step. `input_delay` (s; -1 = auto = one period 1/rate, 0 = ignore)
makes the laws delay-aware: pd_servo and computed_torque cap their velocity gains by the sample rate and delay
(laws.base.velocity_gain_cap: the elbow of the De Luca arm has only ~2.3e-4 kg m^2 with the links free, and the
in-process gains ring it unstable behind 1-2 ms), modal designs its discrete LQR with the input delay in the model
(laws/modal.py). In lock-step there is no delay (the plant waits for the command of each state) and the laws are
the in-process ones. In real time the modal law schedules its gains on the reference's configuration and
designs the cells in a background thread (a received reference's cells are queued at once), so a design never
stalls a control call and a tracking error never triggers unplanned designs (CPU load that delays the plant).

Run: `python -m flexarm_control.nodes.controller_node pd_servo --ros-args -p arm:=<yaml>` or the entry points.
"""
from __future__ import annotations

import math
import sys
import threading
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from flexarm_msgs.msg import FlexState, JointEffortCommand

from ..laws import ComputedTorque, ModalLQR, PDServo, PointToPoint, make_shaper, model_modes


def state_to_z(model, msg, link_names):
    """(z, zd) of the model from a FlexState (links matched by name). A state without any link entries (the
    hardware bridge: joints only, no strain sensing) gives zero modal coordinates; a state that has link entries
    but not this arm's raises ValueError, as does one that does not fit the arm."""
    n = model.n_joints
    if len(msg.position) != n or len(msg.velocity) != n:
        raise ValueError(f'state has {len(msg.position)} positions, arm has {n} joints')
    z, zd = np.zeros(model.n_coords), np.zeros(model.n_coords)
    qi = model.q_index
    z[qi] = msg.position
    zd[qi] = msg.velocity
    by_name = {lk.link_name: lk for lk in msg.links}
    for j, name in enumerate(link_names):
        m = model.link_modes[j].n_modes
        if m == 0:
            continue
        lk = by_name.get(name)
        if lk is None:
            if msg.links:
                raise ValueError(f'state has no modal data for {name}')
            continue        # no modal sensing at all (e.g. the hardware bridge): modal coordinates taken as zero
        if len(lk.modal_position) != m or len(lk.modal_velocity) != m:
            raise ValueError(f'{name}: expected {m} modal coordinates')
        z[qi[j] + 1:qi[j] + 1 + m] = lk.modal_position
        zd[qi[j] + 1:qi[j] + 1 + m] = lk.modal_velocity
    return z, zd


class ControllerNode(Node):
    LAW = None
    GAIN_PARAMS = {}      # name -> default

    def __init__(self, name):
        super().__init__(name)
        from flexarm_sim.model import load_model
        p = self.declare_parameter
        arm = p('arm', '').value
        if not arm:
            raise RuntimeError('parameter arm (YAML path) is required')
        self.rate = float(p('rate', 1000.0).value)
        self.state_timeout = float(p('state_timeout', 0.1).value)
        self.shaping = str(p('shaping', 'none').value)
        self.shaping_modes = int(p('shaping_modes', 2).value)
        self.lockstep = bool(p('lockstep', False).value)
        self.default_move = bool(p('default_move', False).value)
        # event_driven: compute and publish a command for every received state (the plant's state rate sets the
        # control rate, delay = transport only); false: a timer at `rate` uses the newest state (adds up to one
        # period of delay and its jitter)
        self.event_driven = bool(p('event_driven', True).value)
        self.input_delay = float(p('input_delay', -1.0).value)
        if self.input_delay < 0:
            self.input_delay = 0.0 if self.lockstep else 1.0 / self.rate
        self._last_publish = 0.0
        self.move_angle = float(p('move_angle', math.pi / 3).value)
        self.move_time = float(p('move_time', 2.5).value)
        for k, v in self.GAIN_PARAMS.items():
            p(k, v)
        if self.shaping not in ('none', 'zv', 'zvd'):
            raise RuntimeError('shaping must be none, zv or zvd')
        self.model = load_model(arm)
        self.link_names = [nm + '_link' for nm in self.model.spec.joint_names]
        self.joint_names = list(self.model.spec.joint_names)
        kw = self._gain_kwargs()
        kw['input_delay'] = self.input_delay if self.input_delay > 0 else None
        self.law = self.make_law(self.model, 1.0 / self.rate, kw)
        if not self.lockstep and hasattr(self.law, 'start_background_design'):
            self.law.prefetch([self.model.spec.nominal_configuration])
            self.law.start_background_design()
        self.add_on_set_parameters_callback(self._on_params)

        self._lock = threading.Lock()
        self._state = None           # (z, zd, t_sim, step, t_received)
        self._started_move = False
        self._stale = True
        self.n_published = 0
        self.n_rejected = 0
        self.n_states_skipped = 0    # state periods (1/rate of plant time) this node never answered
        self._last_t = None
        self._loop_times = []
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.create_publisher(Float64MultiArray, '/effort_controller/commands', qos)
        self.pub_stamped = self.create_publisher(JointEffortCommand, '/flexarm/effort_command', qos) \
            if self.lockstep else None
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        # real time: keep only the newest state, so a stalled process answers the current state when it resumes
        # instead of working through a backlog of stale ones (each stale answer is a long input delay, which the
        # delay-aware laws are not designed for); lock-step: every state must be answered
        state_qos = QoSProfile(depth=100 if self.lockstep else 1, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(FlexState, '/flexarm/state', self._on_state, state_qos)
        self.create_subscription(JointTrajectory, '/flexarm/reference', self._on_reference, qos)
        if not self.lockstep:
            self.create_timer(1.0 / self.rate, self._on_timer)
        self.create_timer(1.0, self._publish_diagnostics)

    # ------------------------------------------------------------------ parameters / gains
    def _gain_kwargs(self, overrides=None):
        kw = {}
        for k in self.GAIN_PARAMS:
            v = self.get_parameter(k).value if overrides is None or k not in overrides else overrides[k]
            if isinstance(v, (list, tuple)) or hasattr(v, 'tolist'):
                v = list(v)
                if not v:
                    continue
            kw[k] = v
        return kw

    def _on_params(self, params):
        gains = {pm.name: pm.value for pm in params if pm.name in self.GAIN_PARAMS}
        if not gains:
            return SetParametersResult(successful=True)
        try:
            with self._lock:
                self.law.set_gains(**{k: (list(v) if hasattr(v, '__len__') and not isinstance(v, str) else v)
                                      for k, v in gains.items()
                                      if not (hasattr(v, '__len__') and not isinstance(v, str) and len(v) == 0)})
        except (ValueError, TypeError) as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg):
        try:
            z, zd = state_to_z(self.model, msg, self.link_names)
        except ValueError as e:
            self.n_rejected += 1
            self.get_logger().warn(f'rejected state: {e}', throttle_duration_sec=1.0)
            return
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if self._last_t is not None and t - self._last_t > 1.5 / self.rate:
            self.n_states_skipped += int(round((t - self._last_t) * self.rate)) - 1
        self._last_t = t
        with self._lock:
            self._state = (z, zd, t, msg.step, time.monotonic())
            if self.default_move and not self._started_move and np.all(np.isfinite(z)):
                self._start_default_move(z, t)
        if not self.lockstep:
            if self.event_driven:          # answer each state at once: no sampling delay on top of transport
                self._stale = False
                self._last_publish = time.monotonic()
                self._publish(self._compute(z, zd, t))
            return
        if self.lockstep:
            tau = self._compute(z, zd, t)
            cmd = JointEffortCommand()
            cmd.header.stamp = msg.header.stamp
            cmd.step = msg.step + 1
            cmd.effort = [float(x) for x in tau]
            self.pub_stamped.publish(cmd)
            self._publish(tau)

    def _start_default_move(self, z, t):
        q0 = z[self.model.q_index]
        q1 = q0 + self.move_angle
        self.law.references.set(PointToPoint(q0, q1, self.move_time, t), t)
        self._apply_shaping(q1)
        self._prefetch(self.law.references.active)
        self._started_move = True
        self.get_logger().info(f'default move: {self.move_angle:.3f} rad of every joint in {self.move_time} s')

    def _apply_shaping(self, q_target):
        if self.shaping == 'none':
            self.law.set_shaper(None)
            return
        f, zeta = model_modes(self.model, q_target, 'closed_loop', K=self.law.feedback_matrix(q_target))
        sel = (zeta < 0.6) & (f < 0.25 * self.rate)
        self.law.set_shaper(make_shaper(self.shaping, f[sel][:self.shaping_modes], zeta[sel][:self.shaping_modes])
                            if np.any(sel) else None)

    def _on_reference(self, msg):
        with self._lock:
            t = self._state[2] if self._state is not None else 0.0
            if self.law.references.active is None and self._state is not None:
                self.law.references.hold(self._state[0][self.model.q_index])
            if self.law.references.active is None:
                self.get_logger().warn('reference before the first state: ignored')
                return
            try:
                ref = self.law.references.preempt_msg(msg, self.joint_names, t)
            except ValueError as e:
                self.n_rejected += 1
                self.get_logger().warn(f'rejected trajectory: {e}')
                return
            self._apply_shaping(ref.sample(ref.end_time)[0])
            self._prefetch(ref)

    def _prefetch(self, ref):
        """Queue the gain-schedule cells a reference visits (modal law, real time: designed in the background)."""
        if self.lockstep or not hasattr(self.law, 'prefetch') or ref is None:
            return
        try:
            t0 = getattr(ref, 't0', None)
            t1 = getattr(ref, 'end_time', None)
            if t0 is None or t1 is None or not (math.isfinite(t0) and math.isfinite(t1)):
                return
            self.law.prefetch([ref.sample(t)[0] for t in np.linspace(t0, t1, 50)])
        except Exception as e:  # noqa: BLE001 - prefetching is an optimisation only
            self.get_logger().warn(f'gain prefetch failed: {e!r}')

    # ------------------------------------------------------------------ loop
    def _compute(self, z, zd, t):
        t0 = time.perf_counter()
        with self._lock:
            tau = self.law(t, z, zd)
        self._loop_times.append(time.perf_counter() - t0)
        if len(self._loop_times) > 5000:
            del self._loop_times[:2500]
        return tau

    def _publish(self, tau):
        self.pub.publish(Float64MultiArray(data=[float(x) for x in tau]))
        self.n_published += 1

    def _on_timer(self):
        st = self._state
        if st is None or time.monotonic() - st[4] > self.state_timeout:
            if not self._stale and st is not None:
                self.get_logger().warn('state timed out: not commanding (plant watchdog takes over)')
            self._stale = True
            return
        if self.event_driven:
            return
        self._stale = False
        z, zd, t = st[0], st[1], st[2] + (time.monotonic() - st[4])
        self._publish(self._compute(z, zd, t))

    def _publish_diagnostics(self):
        lt = np.array(self._loop_times[-1000:]) * 1e6 if self._loop_times else np.zeros(1)
        st = DiagnosticStatus(name=f'flexarm_control/{self.get_name()}', hardware_id=self.model.spec.name)
        if self.law.fault:
            st.level, st.message = DiagnosticStatus.ERROR, f'fault: {self.law.fault}'
        elif self._stale:
            st.level, st.message = DiagnosticStatus.WARN, 'no fresh state: not commanding'
        else:
            st.level, st.message = DiagnosticStatus.OK, 'running'
        vals = {'law': self.law.name, 'rate_hz': self.rate, 'loop_time_mean_us': float(lt.mean()),
                'loop_time_max_us': float(lt.max()), 'published': self.n_published, 'rejected': self.n_rejected,
                'states_skipped': self.n_states_skipped,
                'faults': self.law.n_faults, 'saturated': ','.join(str(int(x)) for x in self.law.saturated),
                'stale': self._stale, 'lockstep': self.lockstep}
        st.values = [KeyValue(key=k, value=str(v)) for k, v in vals.items()]
        arr = DiagnosticArray(status=[st])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)


class PDServoNode(ControllerNode):
    GAIN_PARAMS = {'kp': [0.0], 'kv': [0.0], 'feedforward': True}

    def _gain_kwargs(self, overrides=None):
        kw = super()._gain_kwargs(overrides)
        for k in ('kp', 'kv'):             # [0.0] / [] placeholder = use the thesis rule
            if k in kw and (len(kw[k]) == 0 or (len(kw[k]) == 1 and kw[k][0] == 0.0)):
                del kw[k]
        return kw

    def make_law(self, model, dt, kw):
        law = PDServo(model, dt=dt, **kw)
        # command_interface: 'effort' (the PD torque on /effort_controller/commands) or 'position' (the plant's
        # joint servo, servo.enabled, is the PD: set-points on /position_controller/commands, the rigid
        # feed-forward torque on /effort_controller/commands)
        self.command_interface = str(self.declare_parameter('command_interface', 'effort').value)
        if self.command_interface not in ('effort', 'position'):
            raise RuntimeError("command_interface must be 'effort' or 'position'")
        law.servo_in_plant = self.command_interface == 'position'
        if law.servo_in_plant:
            self.pub_position = self.create_publisher(
                Float64MultiArray, '/position_controller/commands',
                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
            self._publish = self._publish_with_setpoint
            return law
        capped = np.asarray(law.gain_info.get('kv_sample_capped', np.zeros(law.n, bool)))
        if np.any(capped):
            names = [model.spec.joint_names[j] for j in np.nonzero(capped)[0]]
            self.get_logger().warning(
                f'pd_servo: at {1.0 / dt:.0f} Hz with {law.input_delay or 0.0:.4f} s of input delay the velocity '
                f'gain of {names} is capped at {np.array2string(law.kv_cap[capped], precision=3)} N m s/rad '
                f'(the joint inertia with the links free is small); those servos are soft (k_p = '
                f'{np.array2string(law.kp[capped], precision=3)} N m/rad). A stiffer servo belongs in the drive '
                f'(plant-side ServoCompliantActuator) or needs a higher rate.')
        return law


    def _publish_with_setpoint(self, tau):
        """command_interface position: the set-point (angles, then rates) for the plant's servo, then the
        feed-forward torque."""
        law = self.law
        self.pub_position.publish(Float64MultiArray(data=law.setpoint.tolist() + law.setpoint_rate.tolist()))
        ControllerNode._publish(self, tau)


class ModalNode(ControllerNode):
    GAIN_PARAMS = {'dq_max': 0.1, 'tip_max': 0.0, 'rho': 0.1, 'integral_time': 1.0, 'schedule_step': 0.1,
                   'integral': True, 'feedforward': True}

    def make_law(self, model, dt, kw):
        if kw.get('tip_max', 0.0) == 0.0:
            kw.pop('tip_max', None)
        if not self.lockstep:       # real time: gains of the reference's cells, designed ahead (background)
            kw['schedule_on'] = 'reference'
        return ModalLQR(model, dt=dt, **kw)


class ComputedTorqueNode(ControllerNode):
    GAIN_PARAMS = {'omega_n': [0.0], 'zeta': [1.0], 'include_deflection': False}

    def _gain_kwargs(self, overrides=None):
        kw = super()._gain_kwargs(overrides)
        if 'omega_n' in kw and len(kw['omega_n']) == 1 and kw['omega_n'][0] == 0.0:
            del kw['omega_n']
        return kw

    def make_law(self, model, dt, kw):
        law = ComputedTorque(model, dt=dt, **kw)
        J = law.rigid.mass_matrix(np.asarray(model.spec.nominal_configuration, float))
        kv, kp = law.sampled_gains(J)
        if np.any(kp < law.kp * (1 - 1e-9)):
            self.get_logger().warning(
                f'computed_torque: at {1.0 / dt:.0f} Hz with {law.input_delay or 0.0:.4f} s of input delay the '
                f'joint bandwidth is capped at w_n = {np.array2string(np.sqrt(kp), precision=3)} rad/s (set '
                f'{np.array2string(law.omega_n, precision=3)}) and the damping at zeta = '
                f'{np.array2string(kv / (2 * np.sqrt(kp)), precision=3)} by the hubs\' inertia with the links free')
        return law


NODES = {'pd_servo': PDServoNode, 'modal': ModalNode, 'computed_torque': ComputedTorqueNode}


def _main(kind, args=None):
    sys.setswitchinterval(0.0005)      # the callback gets the GIL back quickly from the gain-design thread
    rclpy.init(args=args)
    node = NODES[kind](f'flexarm_{kind}')
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


def main_pd_servo(args=None):
    _main('pd_servo', args)


def main_modal(args=None):
    _main('modal', args)


def main_computed_torque(args=None):
    _main('computed_torque', args)


if __name__ == '__main__':
    kind = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in NODES else 'pd_servo'
    _main(kind, [a for a in sys.argv if a != kind])
