"""The plant without ROS: configuration, integration core, command gate, lock-step inbox, joint servo, the timing
and lock-step loops, outputs and diagnostics. The ROS node (node.py) is an adapter: it hands this runtime a
`sink` that publishes, and feeds it commands, resets and parameter changes. Tests drive it in-process.

Threads (start/stop): the loop thread (realtime/simtime: absolute deadlines, scheduler.py; lockstep: one control
period per stamped command) calls the sink for /joint_states, /flexarm/state and /clock; a low-priority output
thread computes the marker geometry (~30 Hz) and the diagnostics from snapshots. `timing.realtime_priority` puts
the loop thread in SCHED_FIFO in realtime (and paced simtime) mode where permitted.

Time modes:
* realtime: one step per wall period; every stamp is the sample instant of the state, i.e. the wall-clock time
  of its tick's deadline (not the time the step happened to finish), so consecutive stamps are exactly one
  period apart unless periods were skipped.
* simtime: stamps are simulated time (0 at start, never reset, frozen while paused); paced at real_time_factor.
  A late step never catches up (simulated time owes the wall clock nothing): under load the factor achieved
  drops, as Gazebo's does, instead of steps running back to back ahead of the controller's answers.
* realtime and simtime take commands in two forms: unstamped (/effort_controller/commands, ros2_control's
  Float64MultiArray: acts from the next step after it arrives, whenever that is) and stamped
  (flexarm_msgs/JointEffortCommand: acts at the step it names, commands.DueCommands). A controller of this package
  names its state's step + 1 + the delay its gains are designed for, so the loop's delay is that design delay,
  not the transport's varying one (a command that arrives after its step acts at once, counted late). While stamped
  commands come (one within command_timeout), the unstamped copy a controller publishes beside them is not applied
  (counted: unstamped_superseded).
* lockstep: simulated time; the control period is publish_rates.state (a divisor of loop_rate): at every control
  instant k the plant publishes state k and waits for the flexarm_msgs/JointEffortCommand with step k+1 (stamped
  with state k's stamp, or zero), then integrates loop_rate/state_rate steps with that torque held (zero-order
  hold, as a sampled controller in real time). Reproducible bit for bit. It never hangs silently: a wait longer
  than lockstep.controller_timeout (wall) is logged and reported (/diagnostics WARN before the controller's first
  command, ERROR after it) and, once a controller has answered, lockstep.on_controller_timeout applies: `stop`
  (integration stands still, the state is re-sent, until the controller answers) or `zero_torque` (the plant goes on
  with zero torque, one control period per period of wall time, taking the controller's command again as soon as
  one for the expected step arrives).

Sink interface (called from the loop thread unless noted):
    joint_state(z, zd, tau, t_ns); state(z, zd, tau, step, t_ns); clock(t_ns)
    poll_commands()                                                 optional, realtime/simtime: hand the commands
                                                                    received since the last tick to submit_effort
    take_command(timeout_s) -> (step, stamp_ns, efforts) | None     optional, lock-step: the next stamped command
                                                                    straight from the transport; wake_commands()
                                                                    makes a pending take return (any thread)
    sensors(sample)                               sensor readings (flexarm_sim/sensors.py SensorSample): with
                                                  sensors.encoders.enabled they replace joint_state
    markers(joints, lines, tip, trail, t_ns)      output thread
    diagnostics(level, message, values)           output thread ('ok' | 'warn' | 'error')
    log(level, message)                           any thread ('info' | 'warn' | 'error')
"""
from __future__ import annotations

import collections
import math
import threading
import time

import numpy as np

from ..common.commands import Throttle
from .commands import TIMEOUT, CommandGate, DueCommands, LockstepInbox
from ..sensors import SimulatedSensors
from .config import ConfigError, check_against_arm, check_sensors, hold_gain_values
from .engine import PlantCore, initial_state
from .outputs import ArmOutputs
from ..common.scheduler import (FixedRateScheduler, ReceiveThreads, fifo_report, freeze_start_up_objects,
                                set_thread_fifo, set_thread_normal, set_timer_slack)
from .servo import RELEASE_S, JointServo, WatchdogHold

RESET_STAMP_SLACK_NS = 1_000_000   # realtime: a state stamped > 1 ms before a reset is a pre-reset state
MAX_COMMAND_AHEAD_S = 0.1     # s: a stamped command for a step further ahead is refused (a controller's input_delay <= 0.1 s)
# s: a stamped command for a step further past is refused - computed from a state older than any law's design (the
# hold law's: 30 ms), it would act as fresh (a controller starved of CPU answered states 1 s old in bursts: the
# plant applied each at once, between watchdog holds, and the De Luca elbow went to its stop)
MAX_COMMAND_LATE_S = 0.05
IDLE_PERIOD = 0.05        # s wall: loop period while paused / diverged / waiting (outputs keep flowing)


def every_n(loop_rate: float, rate: float) -> int:
    """Steps between publications for a publish rate (0 = never)."""
    if rate <= 0:
        return 0
    return max(1, int(round(loop_rate / rate)))


class PlantRuntime:
    def __init__(self, model, values: dict, arm_path: str = ''):
        check_against_arm(values, model)
        self.model = model
        self.cfg = dict(values)
        self.arm_path = arm_path
        self.mode = values['time_mode']
        self.rate = values['loop_rate']
        self.core = PlantCore(model, 1.0 / self.rate, values['substeps'], values['integrator'],
                              values['divergence.max_abs_position'], values['divergence.max_abs_velocity'])
        z0, zd0 = initial_state(model, values['initial.position'], values['initial.velocity'],
                                values['initial.modal_position'], values['initial.modal_velocity'])
        self.core.set_initial(z0, zd0)
        self.core.reset()
        self.spec_limits = np.array([j.effort_limit for j in model.spec.joints], dtype=float)
        self.position_lo = np.array([j.position_limits[0] for j in model.spec.joints], dtype=float)
        self.position_hi = np.array([j.position_limits[1] for j in model.spec.joints], dtype=float)
        limits = np.array(values['effort_limits'], dtype=float)
        self.gate = CommandGate(limits, values['command_timeout'])
        self.inbox = LockstepInbox(limits)
        self.due = DueCommands(limits, int(math.ceil(MAX_COMMAND_AHEAD_S * self.rate)),
                               int(math.ceil(MAX_COMMAND_LATE_S * self.rate)))
        self._stamped_at = None                 # plant time of the last stamped command taken (realtime/simtime)
        self.unstamped_superseded = 0
        self.n_position_rejected = 0
        if values['servo.enabled']:
            self.core.servo = JointServo(model, values['servo.kp'], values['servo.kv'], 1.0 / self.rate, limits)
            self.core.servo.q_c[:] = z0[model.q_index]
        hold = hold_gain_values(values, model)
        self.watchdog_hold = WatchdogHold(model, values['watchdog.action'], hold['watchdog.hold_kp'],
                                          hold['watchdog.hold_kv'], 1.0 / self.rate, limits)
        # one ArmOutputs (scratch arrays) per thread: the loop thread's is the sink's business, this one is the
        # output thread's (marker geometry)
        self.outputs_bg = ArmOutputs(model, values['markers.centerline_points'])
        self._lock = threading.Lock()           # core state: loop thread vs. reset / commands
        self._running = False
        self.paused = bool(values.get('start_paused', False))
        self._pause_at_done = False             # pause_at reached once (a resume goes on)
        self.awaiting_command = bool(values['wait_for_command']) and self.mode != 'lockstep'
        self.total_steps = 0                    # integrated steps since start (never reset): simulated clock
        self.plant_time = 0.0                   # s, watchdog clock
        self.ignored_unstamped = 0
        # lock-step controller watchdog (loop thread writes, output thread reads)
        self._wait_since = None                 # monotonic s since the plant waits for the current command
        self._wait_step = 0
        self.controller_answered = False        # a lock-step command was taken since start
        self.controller_silent = False          # the current wait passed lockstep.controller_timeout
        self.controller_timeouts = 0
        self.zero_torque_periods = 0
        self.loop_priority = 0
        self.receive = ReceiveThreads(0)        # the DDS receive threads (commands), one below the FIFO loop thread
        self.watchdog_state = self.gate.state
        self._trail = collections.deque(maxlen=max(1, values['markers.trail_length']))
        self._trail_ns = None                   # stamp of the newest trail point (a re-sent instant adds none)
        self._snapshot = None
        self._snap_cv = threading.Condition()
        self.warn_throttle = Throttle(2.0)
        self.sensors = None
        self._sensor_sample = None          # the last sample of every sensor (lock-step instants, idling)
        cfg = check_sensors(values, model)
        if cfg.any:
            self.sensors = SimulatedSensors(model, cfg, self.rate, values['publish_rates.joint_states'],
                                            self.mode == 'lockstep', values['publish_rates.state'])
        self._apply_rates(values)
        self._wall_period = self._period(values)
        self.sched = FixedRateScheduler(self._wall_period, self._catchup(values),
                                        spin_s=1e-6 * values['timing.spin_us'])
        self.sink = None
        self._threads = []

    # ------------------------------------------------------------------ configuration
    def _period(self, v):
        if self.mode == 'simtime':
            rtf = v['real_time_factor']
            return 0.0 if rtf == 0 else 1.0 / (self.rate * rtf)
        return 1.0 / self.rate

    def _catchup(self, v):
        """Periods a late step may trail its deadline by and still catch up: realtime only (module docstring)."""
        return v['max_catchup_steps'] if self.mode == 'realtime' else 0

    def _apply_rates(self, v):
        r = self.rate
        self.every_js = every_n(r, v['publish_rates.joint_states'])
        self.every_state = every_n(r, v['publish_rates.state'])
        self.every_markers = every_n(r, v['publish_rates.markers'])
        self.every_clock = every_n(r, v['publish_rates.clock'])
        self.diag_period = 1.0 / v['publish_rates.diagnostics']
        # lock-step: steps per control period (the state rate divides the loop rate: config.check_against_arm)
        self.control_steps = self.every_state if self.mode == 'lockstep' else 1
        if self.sensors is not None:
            self.sensors.every_js = self.every_js

    def apply(self, new: dict, changed=()):
        """Run-time parameter changes (already validated by the table); ConfigError for rules across parameters."""
        check_against_arm(new, self.model)
        if (self.mode == 'lockstep' and 'publish_rates.state' in changed
                and new['publish_rates.state'] != self.cfg['publish_rates.state']):     # (the same value: no change)
            raise ConfigError('publish_rates.state', 'the control period of a lock-step plant is fixed at start')
        limits = np.array(new['effort_limits'], dtype=float)
        self.gate.set_limits(limits)
        self.inbox.set_limits(limits)
        self.due.set_limits(limits)
        self.gate.set_timeout(new['command_timeout'])
        self.cfg = dict(new)
        self._apply_rates(new)
        self.core.max_abs_position = new['divergence.max_abs_position']
        self.core.max_abs_velocity = new['divergence.max_abs_velocity']
        self.sched.max_catchup = self._catchup(new)
        if 'pause_at' in changed:
            self._pause_at_done = False
        self._wall_period = self._period(new)
        if new['markers.trail_length'] != self._trail.maxlen:
            self._trail = collections.deque(self._trail, maxlen=max(1, new['markers.trail_length']))

    # ------------------------------------------------------------------ time
    def sim_ns(self) -> int:
        return int(round(self.total_steps * 1e9 / self.rate))

    def _log(self, level, msg):
        if self.sink is not None:
            self.sink.log(level, msg)

    # ------------------------------------------------------------------ inputs (any thread)
    def submit_effort(self, values):
        """/effort_controller/commands: (accepted, reason). Ignored (counted) in lock-step, and while stamped
        commands come (module docstring)."""
        if self.mode == 'lockstep':
            self.ignored_unstamped += 1
            return False, 'stale: unstamped command in lockstep'
        if self._stamped_at is not None and self.plant_time - self._stamped_at <= self.gate.timeout:
            self.unstamped_superseded += 1
            return True, ''
        return self._command_now(values)

    def _command_now(self, values):
        ok, reason = self.gate.submit(values, self.plant_time)
        if ok and self.awaiting_command:
            self.awaiting_command = False
            self._log('info', 'first torque command: integrating')
        return ok, reason

    def submit_stamped(self, step: int, stamp_ns: int, values):
        """/flexarm/effort_command (flexarm_msgs/JointEffortCommand): lock-step, the inbox; otherwise it acts at its
        step (queued until then; at once when late, or while the plant waits for its first command)."""
        if self.mode == 'lockstep':
            return self.inbox.submit(int(step), int(stamp_ns), values)
        status, out = self.due.submit(int(step), int(stamp_ns), values, self.core.step_index + 1,
                                      at_once=self.awaiting_command)
        if status == 'refused':
            return False, out
        self._stamped_at = self.plant_time
        if status != 'queued':
            return self._command_now(out)
        return True, ''

    def timed_step(self, tau) -> bool:
        """One step of the realtime/simtime loop into tau (caller holds the lock): the stamped command due for this
        step (if any) into the gate, the gate's torque or the watchdog's action, the integration. False: diverged."""
        eff = self.due.take(self.core.step_index + 1)
        if eff is not None:
            self._stamped_at = self.plant_time
            self.gate.submit(eff, self.plant_time)
        self.watchdog_state = self.gate.torque(self.plant_time, tau)
        self._watchdog_action(tau)
        return self._advance(tau)

    def submit_position(self, values):
        """/position_controller/commands for the plant-side servo: n angles (+ n rates), finite; angles clipped to
        the position limits. A bad one is counted and the previous set-point kept. Returns (accepted, reason)."""
        if self.core.servo is None:
            return False, 'no plant-side servo (servo.enabled is false)'
        v = np.asarray(values, dtype=float)
        n = self.model.n_joints
        if v.ndim != 1 or v.size not in (n, 2 * n) or not np.all(np.isfinite(v)):
            self.n_position_rejected += 1
            return False, f'expected {n} finite angles (+ {n} rates), got {list(values)}'
        q = np.clip(v[:n], self.position_lo, self.position_hi)
        with self._lock:
            self.core.servo.q_c[:] = q
            self.core.servo.qd_c[:] = v[n:] if v.size == 2 * n else 0.0
        if self.awaiting_command:
            self.awaiting_command = False
            self._log('info', 'first position command: integrating')
        return True, ''

    def reset(self, to_initial=True, position=(), velocity=(), modal_position=(), modal_velocity=()):
        """/flexarm/reset: (success, message). A given state must lie within the joint limits and the divergence
        bounds; the plant restarts at step 0 (a diverged plant resumes)."""
        if to_initial:
            z, zd = None, None
        else:
            try:
                z, zd = initial_state(self.model, position, velocity, modal_position, modal_velocity)
            except ValueError as e:
                return False, str(e)
            why = self.state_admissible(z, zd)
            if why:
                return False, why
        with self._lock:
            was = self.core.diverged
            self.watchdog_hold.release(self.core, fade=False)
            self.core.reset(z, zd)
            self.core.reset_counters()             # the envelope counters count this run
            if self.core.servo is not None:         # the servo holds where the arm was put
                self.core.servo.q_c[:] = self.core.z[self.model.q_index]
                self.core.servo.qd_c[:] = 0.0
            self.gate.clear()
            self.due.reset(self._idle_stamp() if self.mode == 'simtime' else time.time_ns() - RESET_STAMP_SLACK_NS)
            self._stamped_at = None
            self._trail.clear()
            self._trail_ns = None
            if self.sensors is not None:
                self.sensors.reset()
                self._sensor_sample = None
            self.sched.start()
        self.inbox.reset()
        self._wake_loop()
        msg = 'reset to the initial state' if to_initial else 'reset to the given state'
        if was:
            msg += f' (recovered from: {was})'
        self._log('info', msg)
        return True, msg

    def state_admissible(self, z, zd) -> str:
        """'' if (z, zd) is a state the plant may be put in, else why not: joint angles within the arm's position
        limits and joint rates within its velocity limits; each link's tip deflection within the model's validity
        (validity_limit of the link length) and each modal rate at most what that mode reaches oscillating at its
        frequency with that amplitude (omega_k delta_max,k); every coordinate and rate within the divergence bounds.
        (A reset to 99,999 rad/s or a modal coordinate of 5000 once passed: 'diverged at step 1', a 2e8 m tip.)"""
        model = self.model
        q, qd = z[model.q_index], zd[model.q_index]
        names = model.spec.joint_names
        for j, js in enumerate(model.spec.joints):
            if not self.position_lo[j] <= q[j] <= self.position_hi[j]:
                return (f'position[{j}] ({names[j]}) = {q[j]:g} rad is outside the joint limits '
                        f'[{self.position_lo[j]:g}, {self.position_hi[j]:g}]')
            if not abs(qd[j]) <= js.velocity_limit:
                return (f'velocity[{j}] ({names[j]}) = {qd[j]:g} rad/s exceeds the joint\'s velocity limit '
                        f'{js.velocity_limit:g} rad/s')
        limit = self.core.validity_limit
        phi = model.data.phi_tip
        k0 = 0
        for j, lm in enumerate(model.link_modes):
            m = lm.n_modes
            if not m:
                continue
            length = model.spec.joints[j].link.length
            ds = model.q_index[j] + 1
            d, dd = z[ds:ds + m], zd[ds:ds + m]
            P = phi[j, :, :m]
            tip = float(np.linalg.norm(P @ d))
            if not tip <= limit * length:
                return (f'modal_position of link {names[j]}: a tip deflection of {tip:.4g} m, beyond the model\'s '
                        f'validity ({100 * limit:g} % of its {length:g} m)')
            reach = np.linalg.norm(P, axis=0)                  # m of tip per unit of each modal coordinate
            for k in range(m):
                if reach[k] > 0 and not abs(dd[k]) <= lm.omega[k] * limit * length / reach[k]:
                    return (f'modal_velocity[{k0 + k}] (link {names[j]}, mode {k + 1}) = {dd[k]:g}: faster than the '
                            f'mode oscillating at its {lm.omega[k] / (2 * np.pi):.4g} Hz with the largest valid '
                            f'amplitude ({lm.omega[k] * limit * length / reach[k]:.4g})')
            k0 += m
        if np.max(np.abs(z)) > self.core.max_abs_position:
            return f'a coordinate exceeds divergence.max_abs_position ({self.core.max_abs_position:g})'
        if np.max(np.abs(zd)) > self.core.max_abs_velocity:
            return f'a rate exceeds divergence.max_abs_velocity ({self.core.max_abs_velocity:g})'
        return ''

    def pause(self, flag: bool):
        self.paused = bool(flag)
        self._wake_loop()

    def _pause_due(self) -> bool:
        """pause_at reached (loop thread): pause now, once. Compared as the stamps' readers compare times
        (seconds + 1e-9 nanoseconds), so a reader waiting for t >= pause_at sees the instant the plant stops at."""
        at = self.cfg.get('pause_at', 0.0)
        if not at or self._pause_at_done:
            return False
        sec, nsec = divmod(self.sim_ns(), 1_000_000_000)
        if sec + 1e-9 * nsec < at:
            return False
        self._pause_at_done = True
        self.paused = True
        self._log('info', f'paused at plant time {sec + 1e-9 * nsec:.9g} s (pause_at {at:g} s)')
        return True

    def _wake_loop(self):
        """Wake a lock-step loop waiting for a command (reset, pause, stop)."""
        self.inbox.wake()
        wake = getattr(self.sink, 'wake_commands', None)
        if wake is not None:
            wake()

    # ------------------------------------------------------------------ outputs
    def diagnostics(self):
        """(level, message, values) of the plant's /diagnostics status."""
        st = self.sched.stats.summary(self.sched.period if self.sched.period > 0 else float('nan'))
        c, g = self.core, self.gate
        v = {
            'time_mode': self.mode, 'arm': self.model.spec.name, 'loop_rate_hz': self.rate,
            'integrator': c.method, 'substeps': c.substeps,
            # steps per wall second (simtime: rate_hz counts ticks of period/real_time_factor; lockstep: one tick per
            # control period)
            'achieved_rate_hz': st.get('rate_hz', 0.0) * (self.control_steps if self.mode == 'lockstep' else
                                                           self.rate * self.sched.period if self.sched.period > 0
                                                           else 1.0),
            'period_error_p50_us': 1e6 * st.get('period_err_p50_s', float('nan')),
            'period_error_p99_us': 1e6 * st.get('period_err_p99_s', float('nan')),
            'period_error_max_us': 1e6 * st.get('period_err_max_s', float('nan')),
            'lateness_p99_us': 1e6 * st.get('lateness_p99_s', float('nan')),
            'overruns': st['overruns'], 'skipped_periods': st['skipped_periods'],
            'skipped_time_s': self.sched.lag_s,
            'step_compute_mean_us': 1e6 * st['compute_mean_s'], 'step_compute_max_us': 1e6 * st['compute_max_s'],
            'step_compute_p99_us': 1e6 * st.get('compute_p99_s', float('nan')),
            **({} if self.mode == 'lockstep' else dict(self.due.counts(),
                                                       unstamped_superseded=self.unstamped_superseded)),
            **self.command_counts(),
            'watchdog': self.watchdog_state if self.mode != 'lockstep' else 'n/a (lockstep)',
            'watchdog_timeouts': g.timeouts, 'watchdog_action': self.watchdog_hold.action,
            'step': c.step_index, 'sim_time_s': self.sim_ns() * 1e-9, 'paused': self.paused,
            'waiting_for_command': self.awaiting_command,
            'loop_thread_fifo_priority': self.loop_priority,
            'dds_receive_threads_fifo': self.receive.update(),
            'spin_us': 1e6 * self.sched.spin,
            'servo': (f'on, {c.servo.substeps} sub-steps per step, set-point '
                      f'{np.array2string(c.servo.q_c, precision=4)}, '
                      f'{self.n_position_rejected} rejected') if c.servo is not None else 'off',
            'diverged': c.diverged or 'no', 'divergences': c.divergences,
            # the arm's physical envelope (engine.py counters since the last reset)
            'joint_stop_contact_steps': c.stop_contact_steps.tolist(),
            'joint_stop_penetration_rad': np.round(c.stop_penetration, 6).tolist(),
            'velocity_limit_exceeded_steps': c.velocity_limit_violations.tolist(),
            'max_tip_deflection_over_length': c.relative_deflection,
            'model_validity_limit': c.validity_limit,
            'steps_beyond_model_validity': c.validity_exceeded_steps,
        }
        if self.sensors is not None:
            v.update(self.sensors.diagnostics())
        silent = ''
        if self.mode == 'lockstep':
            v['control_period_steps'] = self.control_steps
            v['lockstep_waiting_for_step'] = self.inbox.expected
            v['lockstep_stale_commands'] = self.inbox.stale
            v['lockstep_far_ahead_commands'] = self.inbox.far
            v['unstamped_commands_ignored'] = self.ignored_unstamped
            waited = self.controller_wait()
            v['lockstep_controller_wait_s'] = waited
            v['lockstep_controller_timeouts'] = self.controller_timeouts
            v['lockstep_zero_torque_periods'] = self.zero_torque_periods
            silent = self.silence_message(waited)
        if c.diverged:
            level, msg = 'error', c.diverged + ' — call /flexarm/reset'
        elif silent:
            level, msg = ('error' if self.controller_answered else 'warn'), silent
        elif self.paused:
            level, msg = 'warn', 'paused'
        elif self.awaiting_command:
            level, msg = 'ok', 'holding: waiting for the first torque command (wait_for_command)'
        elif self.watchdog_state == 'timeout':
            level, msg = 'warn', f'command watchdog timeout: {self.watchdog_hold.action.replace("_", " ")}'
        else:
            level, msg = 'ok', 'running'
        within, validity = c.validity()
        if not within and level == 'ok':
            level, msg = 'warn', validity             # deflections beyond what the model represents faithfully
        elif not within:
            msg += '; ' + validity
        return level, msg, v

    def controller_wait(self) -> float:
        """Lock-step: wall seconds the plant has been waiting for the current command (0 when not waiting)."""
        since = self._wait_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def silence_message(self, waited: float) -> str:
        """'' unless the lock-step controller is overdue (lockstep.controller_timeout), else what the plant does."""
        timeout = self.cfg['lockstep.controller_timeout']
        if waited <= timeout and not (self.controller_silent and self._wait_since is not None):
            return ''
        step = self._wait_step
        if not self.controller_answered:
            return (f'lock-step: no controller command yet after {waited:.1f} s (waiting for step {step} on '
                    'flexarm/effort_command; is a controller running with lockstep:=true?)')
        action = ('integration stopped until it answers' if self.cfg['lockstep.on_controller_timeout'] == 'stop'
                  else f'zero torque ({self.zero_torque_periods} periods so far) until it answers')
        return (f'lock-step: controller silent for {waited:.1f} s (> lockstep.controller_timeout {timeout:g} s, '
                f'waiting for step {step}): {action}')

    def marker_layout(self):
        """(joints, lines, tip) of the arm at rest: the shapes the marker encoder is built for."""
        return self.outputs_bg.geometry(np.zeros(self.model.n_coords))

    def _markers(self, z, t_ns):
        """Output thread: geometry and trail, handed to the sink."""
        length = self.cfg['markers.trail_length']
        joints, lines, tip = self.outputs_bg.geometry(z)
        if length > 0 and t_ns != self._trail_ns:
            self._trail.append(tip)
            self._trail_ns = t_ns
        trail = np.array(self._trail, dtype=float).reshape(-1, 3) if length > 0 else np.zeros((0, 3))
        self.sink.markers(joints, lines, tip, trail, t_ns)

    # ------------------------------------------------------------------ threads
    def start(self, sink):
        self.sink = sink
        freeze_start_up_objects()        # modules, numba, scipy: no full collection over them pauses the loop
        self._running = True
        self._threads = [threading.Thread(target=self._output_loop, name='plant-output', daemon=True),
                         threading.Thread(target=self._loop, name='plant-loop', daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self):
        self._running = False
        self._wake_loop()
        with self._snap_cv:
            self._snap_cv.notify_all()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout=2.0)

    def _marker_sample(self, z, t_ns):
        """Markers of the state z at t_ns: lock-step computes and publishes them in the loop thread (every marker of
        the plant's timeline, none dropped, whatever the machine's load: a lock-step run publishes the same messages
        every time); realtime/simtime hand a snapshot to the output thread (off the timing loop; one still pending is
        replaced by the newer)."""
        if self.mode == 'lockstep':
            self._markers(z, t_ns)
        else:
            self._take_snapshot(t_ns, z)

    def _take_snapshot(self, t_ns, z=None):
        snap = (self.core.z.copy() if z is None else z, t_ns)
        with self._snap_cv:
            self._snapshot = snap
            self._snap_cv.notify()

    def _output_loop(self):
        next_diag = time.monotonic()
        while self._running:
            with self._snap_cv:
                if self._snapshot is None:
                    self._snap_cv.wait(max(0.0, next_diag - time.monotonic()))
                snap, self._snapshot = self._snapshot, None
            try:
                if snap is not None and self._running:
                    self._markers(*snap)
                if time.monotonic() >= next_diag and self._running:
                    next_diag = time.monotonic() + self.diag_period
                    self.sink.diagnostics(*self.diagnostics())
            except Exception as e:  # noqa: BLE001 - keep publishing; stop() ends the loop
                if not self._running:
                    return
                self._log('error', f'output thread: {e!r}')

    def _loop(self):
        set_timer_slack(1000)
        prio = self.cfg['timing.realtime_priority']
        # realtime, and simtime paced at a real-time factor (it sleeps between steps too); not lock-step nor simtime
        # as fast as possible: a SCHED_FIFO thread that never sleeps would hog a core
        if prio > 0 and (self.mode == 'realtime' or (self.mode == 'simtime' and self._wall_period > 0)):
            why = set_thread_fifo(prio)
            self.loop_priority = prio if why is None else 0
            self._log(*fifo_report('timing loop thread', 'timing.realtime_priority', prio, why))
            self.receive = ReceiveThreads.beside(prio, why)
        try:
            if self.mode == 'lockstep':
                self._lockstep_loop()
            else:
                self._timed_loop()
        except Exception as e:  # noqa: BLE001
            if self._running:
                self._log('error', f'timing loop stopped: {e!r}')
                raise

    def _advance(self, tau) -> bool:
        """One step with torque tau (caller holds the lock); counts simulated time."""
        if self.core.advance(tau):
            self.total_steps += 1
            self.plant_time = self.total_steps / self.rate
            return True
        self._log('error', self.core.diverged + ' — integration stopped, waiting for /flexarm/reset')
        return False

    def _watchdog_action(self, tau):
        """The command watchdog's action (watchdog.action, servo.WatchdogHold) on the torque of this step (caller
        holds the lock)."""
        hold = self.watchdog_hold
        if self.watchdog_state == TIMEOUT:
            if not hold.engaged:
                hold.engage(self.core, tau)
                self._log('warn', f'no valid command for {self.gate.timeout:g} s: watchdog {hold.action}'
                                  + (f' at {np.array2string(hold.servo.q_c, precision=3)} rad'
                                     if hold.action == 'hold' else ''))
            else:
                hold.torque(tau)
                hold.held_step()
        elif hold.engaged:
            hold.release(self.core)
            hold.fade(tau)
            self._log('info', f'commands again: watchdog released (its torque fading out over {RELEASE_S:g} s)')
        elif hold.fading:
            hold.fade(tau)

    def _publish_due(self, t_ns, state=True):
        """Publications due after a step (loop thread): the one rule for both loops."""
        k = self.total_steps
        c = self.core
        sink = self.sink
        if self.every_js and k % self.every_js == 0 and not self._measured_joints:
            sink.joint_state(c.z, c.zd, c.tau, t_ns)
        if self.sensors is not None and self.mode != 'lockstep':
            self._sense(k, t_ns)
        if self.mode != 'realtime' and k % self.every_clock == 0:
            sink.clock(t_ns)
        if state and self.every_state and k % self.every_state == 0:
            sink.state(c.z, c.zd, c.tau, c.step_index, t_ns)
        if self.every_markers and k % self.every_markers == 0:
            self._marker_sample(c.z.copy(), t_ns)

    # ------------------------------------------------------------------ sensor models (flexarm_sim/sensors.py)
    @property
    def _measured_joints(self) -> bool:
        """/joint_states carries the encoders' and drives' readings (sensors.encoders.enabled)."""
        return self.sensors is not None and self.sensors.joints

    def _sense(self, k, t_ns):
        """The sensors due after step k to the sink (realtime/simtime; lock-step samples at the control instants)."""
        c = self.core
        sample = self.sensors.sample(k, c.z, c.zd, c.tau, c.step_index, t_ns)
        if sample is not None:
            self.sink.sensors(sample)

    def _idle_stamp(self):
        return time.time_ns() if self.mode == 'realtime' else self.sim_ns()

    def _idle(self):
        """Paused, diverged or waiting for the first command: keep the last good state flowing at a low rate."""
        poll = getattr(self.sink, 'poll_commands', None)
        if poll is not None:
            poll()
        t_ns = self._idle_stamp()
        c = self.core
        with self._lock:
            z, zd, tau, k = c.z.copy(), c.zd.copy(), c.tau.copy(), c.step_index
        if self.sensors is not None:
            last = self._sensor_sample
            if last is None or last.t_ns != t_ns or last.step != k:
                last = self._sensor_sample = self.sensors.sample_all(z, zd, tau, k, t_ns)
            self.sink.sensors(last)     # the instant's sample again, not a new draw of its noise (one sample, one
        if not self._measured_joints:   # message: a recording keeps one per stamp)
            self.sink.joint_state(z, zd, tau, t_ns)
        if self.mode != 'realtime':
            self.sink.clock(t_ns)
        if self.every_state:
            self.sink.state(z, zd, tau, k, t_ns)
        if self.every_markers and (self.mode != 'lockstep' or self.total_steps % self.every_markers == 0):
            # (lock-step: only at the markers' own instants, so a pause anywhere adds no sample to the timeline)
            self._marker_sample(z, t_ns)
        time.sleep(IDLE_PERIOD)

    def _timed_loop(self):
        sched = self.sched
        stats = sched.stats
        tau = np.zeros(self.model.n_joints)
        perf = time.perf_counter
        idle = True
        realtime = self.mode == 'realtime'
        poll = getattr(self.sink, 'poll_commands', None)
        while self._running:
            if self.paused or self.core.diverged or self.awaiting_command or self._pause_due():
                idle = True
                self._idle()
                continue
            if idle or sched.period != self._wall_period:
                idle = False
                if self.loop_priority and self._wall_period <= 0:     # simtime switched to as fast as possible
                    why = set_thread_normal()
                    if why is None:
                        self.loop_priority = 0
                        self._log('info', 'timing loop thread: normal scheduling (real_time_factor 0: never sleeps)')
                    else:
                        self._log('error', f'timing loop thread: still SCHED_FIFO at real_time_factor 0 ({why}): it '
                                           'never sleeps and may hog a core')
                sched.period = self._wall_period
                sched.start()
                # wall clock of the monotonic schedule: stamps are the ticks' deadlines on the ROS (wall) clock
                wall0 = time.time_ns() - int(round(time.monotonic() * 1e9))
            sched.wait()
            c0 = perf()
            if poll is not None:
                poll()                                   # commands straight from the transport (hot path)
            with self._lock:
                if not self.timed_step(tau):
                    continue
            t_ns = wall0 + int(round(sched.tick_deadline * 1e9)) if realtime else self.sim_ns()
            self._publish_due(t_ns)
            stats.record_compute(perf() - c0)

    def _lockstep_loop(self):
        tau = np.zeros(self.model.n_joints)
        inbox = self.inbox
        stats = self.sched.stats
        perf = time.perf_counter
        take = getattr(self.sink, 'take_command', None)      # commands straight from the transport (hot path)
        poll = getattr(self.sink, 'poll_commands', None)
        while self._running:
            if self.paused or self.core.diverged or self._pause_due():
                self._idle()
                continue
            with self._lock:
                gen = inbox.generation
                k = self.core.step_index
                t_ns = self.sim_ns()
                z, zd, tau_prev = self.core.z.copy(), self.core.zd.copy(), self.core.tau.copy()
            sample = None
            if self.sensors is not None:              # the sensors' sample of this control instant, before its state
                sample = self._sensor_sample
                if sample is None or sample.t_ns != t_ns or sample.step != k:     # (not sampled while idling)
                    sample = self._sensor_sample = self.sensors.sample(self.total_steps, z, zd, tau_prev, k, t_ns,
                                                                       instant=True)
                self.sink.sensors(sample)
            self.sink.state(z, zd, tau_prev, k, t_ns)
            inbox.expect(k + 1, t_ns)
            if poll is not None:
                poll()                                   # unstamped commands: counted as ignored
            if not self._await_command(tau, gen, take, lambda: self._resend(sample, z, zd, tau_prev, k, t_ns)):
                continue
            stats.record_tick(time.monotonic(), 0.0)
            c0 = perf()
            for _ in range(self.control_steps):       # zero-order hold over the control period
                with self._lock:
                    if inbox.generation != gen or not self._advance(tau):
                        break
                self._publish_due(self.sim_ns(), state=False)
            stats.record_compute(perf() - c0)

    def _resend(self, sample, z, zd, tau_prev, k, t_ns):
        """Lock-step re-send of a control instant: its sensor sample, then its state."""
        if sample is not None:
            self.sink.sensors(sample)
        self.sink.state(z, zd, tau_prev, k, t_ns)

    def _await_command(self, tau, gen, take, republish) -> bool:
        """Wait for the command of the expected step into tau; re-send the state every lockstep.republish_period
        meanwhile; watch the controller (lockstep.controller_timeout, module docstring). True with the command in
        tau (zero_torque: zeros once the controller is overdue); False if stopped, paused or reset first."""
        inbox = self.inbox
        now = time.monotonic()
        self._wait_since, self._wait_step = now, inbox.expected
        next_republish = now + self.cfg['lockstep.republish_period']
        try:
            while self._running and not self.paused and inbox.generation == gen:
                deadline = self._watchdog_deadline()
                wake = min(next_republish, deadline)
                with inbox.cond:
                    if inbox.take(tau):
                        self._answered()
                        return True
                    if take is None:
                        inbox.cond.wait(max(0.0, wake - time.monotonic()))
                if take is not None:
                    cmd = take(max(0.0, wake - time.monotonic()))
                    if cmd is not None:
                        ok, reason = inbox.submit(*cmd)
                        if not ok and not reason.startswith('stale'):
                            self._log_reject(reason)
                        continue
                now = time.monotonic()
                if now >= deadline and self._controller_overdue(now):
                    tau[:] = 0.0                         # zero_torque: this period without the controller
                    self.zero_torque_periods += 1
                    return True
                if now >= next_republish:
                    republish()
                    next_republish = time.monotonic() + self.cfg['lockstep.republish_period']
            return False
        finally:
            self._wait_since = None

    def _watchdog_deadline(self) -> float:
        """When the current wait next needs the watchdog: the timeout, or (zero_torque, overdue) one control period
        of wall time after the wait began."""
        if self.controller_silent and self.cfg['lockstep.on_controller_timeout'] == 'zero_torque':
            return self._wait_since + self.control_steps / self.rate
        if self.controller_silent or (self._timeout_reported and not self.controller_answered):
            return math.inf                      # reported already: wait on
        return self._wait_since + self.cfg['lockstep.controller_timeout']

    _timeout_reported = False               # the first-command warning was logged (once per run)

    def _controller_overdue(self, now) -> bool:
        """The watchdog fired at `now`: report once per silence; True if the period is to run with zero torque."""
        waited = now - self._wait_since
        if not self.controller_answered:
            if not self._timeout_reported:
                self._timeout_reported = True
                self._log('warn', self.silence_message(waited))
            return False
        if not self.controller_silent:
            self.controller_silent = True
            self.controller_timeouts += 1
            self._log('error', self.silence_message(waited))
        return self.cfg['lockstep.on_controller_timeout'] == 'zero_torque'

    def _answered(self):
        """The controller's command for the expected step was taken."""
        if self.controller_silent:
            self.controller_silent = False
            self._log('info', f'lock-step: the controller answers again (step {self._wait_step}; '
                              f'{self.zero_torque_periods} zero-torque periods so far)')
        self.controller_answered = True

    def command_counts(self) -> dict:
        """Torque commands accepted, rejected (the last reason), clamped: unstamped (the gate), stamped in lock-step
        (the inbox) and outside it (the due queue, whose commands are accepted by the gate when they act)."""
        parts = (self.gate, self.inbox, self.due)
        return {'commands_accepted': self.gate.accepted + self.inbox.accepted,
                'commands_rejected': sum(p.rejected for p in parts),
                'commands_clamped': sum(p.clamped for p in parts),
                'last_reject_reason': max(parts, key=lambda p: p.last_reject_order).last_reject_reason}

    def _log_reject(self, reason):
        if self.warn_throttle(time.monotonic()):
            self._log('warn', f'rejected stamped command: {reason} '
                              f'({self.command_counts()["commands_rejected"]} commands rejected so far)')
