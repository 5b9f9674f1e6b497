"""In-process closed loop of the real plant runtime and controller runtime over an emulated transport (no ROS, no
wall clock): faults in plant time, so every figure is reproducible.

The plant is flexarm_sim's PlantRuntime stepped here exactly as its timed loop steps it (command gate, the
watchdog's action, one integration step; a state every control period, stamped with its sample instant); the
controller is ControllerRuntime answering each state it is given. The transport between them:
  * `delay(t)`: the age of the state when it is answered (the command applies then);
  * `stopped(t)`: the controller process does not run (SIGSTOP / killed): states are not answered; when it runs
    again it answers the newest state first (a depth-1 subscription), as the node does;
  * `plant_restart_at`: the plant is killed at that time and a new one starts `plant_down` s later from its initial
    state, holding the arm until its first command (wait_for_command), as sim.launch.py starts it;
  * `stamped`: each command reaches the plant as the controller node sends it in real time, stamped with the step at
    which its design delay has passed (PlantRuntime.submit_stamped: it acts there, or at once when it arrives later);
    otherwise it acts when it arrives (an unstamped command).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from flexarm_control.controller import config as cconfig
from flexarm_control.controller.runtime import ControllerRuntime
from flexarm_control.laws import PointToPoint
from flexarm_sim.plant import config as pconfig
from flexarm_sim.plant.runtime import PlantRuntime

MOVE = (math.pi / 3, 2.5)          # the standard move: every joint 60 deg in 2.5 s (cycloidal)


class Loop:
    def __init__(self, model, kind='modal', rate=500.0, loop_rate=1000.0, plant=None, controller=None,
                 plant_model=None):
        """plant_model: the arm the plant integrates when it is not the controller's `model` (model error)."""
        pv = dict(pconfig.TABLE.defaults(), loop_rate=loop_rate, **{'publish_rates.state': rate})
        pv.update(plant or {})
        arm = model if plant_model is None else plant_model
        self.plant = PlantRuntime(arm, pconfig.resolved(pv, arm))
        cv = dict(cconfig.TABLES[kind].defaults(), rate=rate)
        cv.update(controller or {})
        self.rt = ControllerRuntime(kind, model, cv)
        self.rt.law.design_on_demand = True                  # in-process: designs inside the call (reproducible)
        if self.rt.fallback is not None:
            self.rt.fallback.design_on_demand = True
        self.model = model
        self.dt = 1.0 / loop_rate
        self.every = int(round(loop_rate / rate))
        self.qi = np.asarray(model.q_index)
        self.pending = collections.deque()               # (apply at plant time, torque)
        self.tau = np.zeros(model.n_joints)
        self.rows = []                                   # (t, q..., tip deflection, tau...)
        self.tips = []                                   # the end effector's position at each row
        self.states = []                                 # z at each row
        self.commands = []                               # (t applied, torque)
        self.awaiting = False

    def move(self, t0, angle=MOVE[0], T=MOVE[1]):
        q0 = self.plant.core.z[self.qi].copy()
        self.rt.hold(self.plant.core.z, 0.0)
        self.target = q0 + angle
        self.rt.law.references.set(PointToPoint(q0, self.target, T, t0), 0.0)
        self.t_move_end = t0 + T

    def run(self, t_end, delay=lambda t: 0.002, stopped=lambda t: False, restart_at=None, plant_down=0.0,
            stamped=False):
        p, core = self.plant, self.plant.core
        delay_steps = int(round(self.rt.input_delay / self.dt))
        restart_done = False
        k = 0
        while p.plant_time < t_end - 1e-12:
            t = p.plant_time
            if restart_at is not None and not restart_done and t >= restart_at:
                restart_done = True
                self.pending.clear()
                core.reset()
                p.gate.clear()
                p.watchdog_hold.release(core, fade=False)
                # the plant is down for plant_down s: nothing happens to the arm (its new process starts from the
                # initial state); the controller sees no state meanwhile (time runs on for its stamps)
                p.total_steps += int(round(plant_down / self.dt))
                p.plant_time = p.total_steps * self.dt
                self.awaiting = True
                continue
            if k % self.every == 0 and not stopped(t):     # back from a stop: the newest state first
                self._answer((t, core.z.copy(), core.zd.copy()), delay(t), core.step_index)
            while self.pending and self.pending[0][0] <= t + 1e-12:
                ta, u, step, t_state = self.pending.popleft()
                if stamped:
                    assert p.submit_stamped(step + 1 + delay_steps, int(round(t_state * 1e9)), u)[0]
                else:
                    p.gate.submit(u, t)
                self.awaiting = False
                self.commands.append((t, u))
            if self.awaiting:                                # a new plant holds the arm until its first command
                p.total_steps += 1
                p.plant_time = p.total_steps * self.dt
                k += 1
                self._record()
                continue
            assert p.timed_step(self.tau), core.diverged
            k += 1
            self._record()
        return self

    def _answer(self, st, age, step):
        t, z, zd = st
        tau = self.rt.on_state(z, zd, t, age)
        if tau is not None:
            self.pending.append((t + age, tau, step, t))

    def _record(self):
        z = self.plant.core.z
        rigid = z.copy()
        rigid[self.model.mode_index] = 0.0
        tip = self.model.tip_pose(z)[1]
        defl = float(np.linalg.norm(tip - self.model.tip_pose(rigid)[1]))
        self.rows.append((self.plant.plant_time, *z[self.qi], defl, *self.tau))
        self.tips.append(tip)
        self.states.append(z.copy())

    # ------------------------------------------------------------------ figures
    def array(self):
        return np.array(self.rows)

    def tip_errors(self, reference):
        """(t, m): the distance of the end effector from the rigid arm's at the joint reference's angles, per row."""
        a = self.array()
        z = np.zeros(self.model.n_coords)
        err = np.empty(len(a))
        for k, (row, tip) in enumerate(zip(a, self.tips)):
            z[self.qi] = np.asarray(reference.sample(row[0])[0], float)
            err[k] = np.linalg.norm(tip - self.model.tip_pose(z)[1])
        return a[:, 0], err

    def largest_relative_deflection(self):
        """(n,): each link's largest |tip deflection| / length over the run (the model's validity: <= 0.15)."""
        from flexarm_sim.model.trajectory import relative_deflections
        return relative_deflections(self.model, np.array(self.states)).max(axis=0)

    def final_error(self):
        return float(np.max(np.abs(self.array()[-1, 1:1 + self.model.n_joints] - self.target)))

    def peak_tip(self):
        return float(self.array()[:, 1 + self.model.n_joints].max())

    def largest_command_step(self, after=-math.inf):
        """N m: the largest change between consecutive commands (one control period apart) applied after `after`."""
        t = np.array([c[0] for c in self.commands])
        u = np.array([c[1] for c in self.commands])
        close = (np.diff(t) < 1.5 * self.every * self.dt) & (t[1:] >= after)
        return float(np.max(np.abs(np.diff(u, axis=0))[close])) if close.any() else 0.0

    def q_at(self, t):
        a = self.array()
        return a[np.searchsorted(a[:, 0], t), 1:1 + self.model.n_joints]


class EstimatorLoop:
    """The plant with the sensors of a sensor set (as sim.launch.py estimator:= configures them: every sensor at the
    control rate), the state estimator woken when a joint reading arrives — or, after a stall, later — and the modal
    law on the TRUE state (so the estimator alone is under test). Each command reaches the plant `jitter` after its
    state, uniformly within (0.5, 3.5) ms: it acts from somewhere within a period, as over DDS.

    `delivery`: 'all' (every reading queued, as the node's subscriptions with depth > 1) or 'newest' (depth 1: only
    the newest reading of each sensor at a wake-up, the node before issue 28)."""

    def __init__(self, model, sensor_set, seed=1, estimator=None):
        from flexarm_control.estimation import config as econfig
        from flexarm_control.estimation.runtime import EstimatorRuntime
        from flexarm_sim.sensors import preset_values
        pre = preset_values(model, sensor_set)
        pv = dict(pconfig.TABLE.defaults(), **{k: v for k, v in pre.items() if k != 'sensors.strain.gauges'})
        if pre['sensors.strain.gauges']:
            pv['sensors.strain.gauges'] = pre['sensors.strain.gauges']
        pv.update({'publish_rates.joint_states': 500.0, 'sensors.strain.rate': 500.0,
                   'sensors.accelerometer.rate': 500.0})
        self.plant = PlantRuntime(model, pconfig.resolved(pv, model))
        ev = dict(econfig.TABLE.defaults(), rate=500.0, input='measured_effort',
                  **{'sensors.accelerometer.enabled': pre['sensors.accelerometer.enabled']})
        if pre['sensors.strain.gauges']:
            ev['sensors.strain.gauges'] = pre['sensors.strain.gauges']
        ev.update(estimator or {})
        self.est = EstimatorRuntime(model, ev)
        self.rt = ControllerRuntime('modal', model, dict(cconfig.TABLES['modal'].defaults(), rate=500.0))
        self.rt.law.design_on_demand = True
        self.rt.safe_mode_applies = False
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.max_sigma = collections.defaultdict(float)
        self.modal_error = []

    def run(self, duration, stall_probability=0.0, stall_mean=0.05, delivery='all', move=(0.5, MOVE[0], MOVE[1]),
            on_estimate=False, jitter=(0.0005, 0.0035)):
        """on_estimate: the law answers the estimate (else the true state); jitter: the range of the commands' delay
        after their state (each is also handed to the estimator when sent, as the node takes them)."""
        p, est, model = self.plant, self.est, self.model
        qi = np.asarray(model.q_index)
        q0 = p.core.z[qi].copy()
        self.rt.hold(p.core.z, 0.0)
        self.rt.law.references.set(PointToPoint(q0, q0 + move[1], move[2], move[0]), 0.0)
        tau = np.zeros(model.n_joints)
        pending = collections.deque()
        inbox = {'strain': [], 'accel': [], 'joints': []}
        feed = {'strain': est.strain, 'accel': est.accel}
        next_wake, k = 0.0, 0
        while p.plant_time < duration - 1e-12:
            t = p.plant_time
            while pending and pending[0][0] <= t + 1e-12:
                p.gate.submit(pending.popleft()[1], t)
            assert p.timed_step(tau)
            k += 1
            t = p.plant_time
            s = p.sensors.sample(p.total_steps, p.core.z, p.core.zd, p.core.tau, p.core.step_index,
                                 int(round(t * 1e9)))
            if s is not None:
                for key, value in (('strain', s.strain), ('accel', s.accel), ('joints', s.joints)):
                    if value is not None:
                        inbox[key].append((t, value))
            if t + 1e-12 >= next_wake and inbox['joints']:
                for key in ('strain', 'accel', 'joints'):
                    got = inbox[key] if delivery == 'all' else inbox[key][-1:]
                    inbox[key] = []
                    for ts, value in got:
                        if key == 'joints':
                            est.joints(ts, *value)
                            est.tick(ts)
                        else:
                            feed[key](ts, value)
                for key, tr in est.tracks.items():
                    self.max_sigma[key] = max(self.max_sigma[key], tr.max_sigma)
                    tr.max_sigma = 0.0
                if est.filter.initialized:
                    self.modal_error.append((est.filter.z - p.core.z)[model.mode_index])
                stalled = self.rng.random() < stall_probability
                next_wake = t + (self.rng.exponential(stall_mean) if stalled else 0.0)
            if k % 2 == 0:
                src = est.filter if on_estimate and est.filter.initialized else p.core
                u = self.rt.on_state(src.z.copy(), src.zd.copy(), t, 0.002)
                pending.append((t + self.rng.uniform(*jitter), u))
                est.command(u)
        return self
