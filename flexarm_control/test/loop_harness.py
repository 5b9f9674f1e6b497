"""In-process closed loop of the real plant runtime and controller runtime over an emulated transport (no ROS, no
wall clock): faults in plant time, so every figure is reproducible.

The plant is flexarm_sim's PlantRuntime stepped here exactly as its timed loop steps it (command gate, the
watchdog's action, one integration step; a state every control period, stamped with its sample instant); the
controller is ControllerRuntime answering each state it is given. The transport between them:
  * `delay(t)`: the age of the state when it is answered (the command applies then);
  * `stopped(t)`: the controller process does not run (SIGSTOP / killed): states are not answered; when it runs
    again it answers the newest state first (a depth-1 subscription), as the node does;
  * `plant_restart_at`: the plant is killed at that time and a new one starts `plant_down` s later from its initial
    state, holding the arm until its first command (wait_for_command), as sim.launch.py starts it.
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
    def __init__(self, model, kind='modal', rate=500.0, loop_rate=1000.0, plant=None, controller=None):
        pv = dict(pconfig.TABLE.defaults(), loop_rate=loop_rate, **{'publish_rates.state': rate})
        pv.update(plant or {})
        self.plant = PlantRuntime(model, pconfig.resolved(pv, model))
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
        self.commands = []                               # (t applied, torque)
        self.awaiting = False

    def move(self, t0, angle=MOVE[0], T=MOVE[1]):
        q0 = self.plant.core.z[self.qi].copy()
        self.rt.hold(self.plant.core.z, 0.0)
        self.target = q0 + angle
        self.rt.law.references.set(PointToPoint(q0, self.target, T, t0), 0.0)
        self.t_move_end = t0 + T

    def run(self, t_end, delay=lambda t: 0.002, stopped=lambda t: False, restart_at=None, plant_down=0.0):
        p, core, model = self.plant, self.plant.core, self.model
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
                self._answer((t, core.z.copy(), core.zd.copy()), delay(t))
            while self.pending and self.pending[0][0] <= t + 1e-12:
                ta, u = self.pending.popleft()
                p.gate.submit(u, t)
                self.awaiting = False
                self.commands.append((t, u))
            if self.awaiting:                                # a new plant holds the arm until its first command
                p.total_steps += 1
                p.plant_time = p.total_steps * self.dt
                k += 1
                self._record()
                continue
            p.watchdog_state = p.gate.torque(p.plant_time, self.tau)
            p._watchdog_action(self.tau)
            assert p._advance(self.tau), core.diverged
            k += 1
            self._record()
        return self

    def _answer(self, st, age):
        t, z, zd = st
        tau = self.rt.on_state(z, zd, t, age)
        if tau is not None:
            self.pending.append((t + age, tau))

    def _record(self):
        z = self.plant.core.z
        rigid = z.copy()
        rigid[self.model.mode_index] = 0.0
        defl = float(np.linalg.norm(self.model.tip_pose(z)[1] - self.model.tip_pose(rigid)[1]))
        self.rows.append((self.plant.plant_time, *z[self.qi], defl, *self.tau))

    # ------------------------------------------------------------------ figures
    def array(self):
        return np.array(self.rows)

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
