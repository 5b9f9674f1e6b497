"""Plants for the servo emulator: what turns the servos' goals into motion.

``plant(dt, goals, torque_enabled) -> (positions_rad, velocities_rad_s, currents_A)`` (arrays ordered like
``goals.ids``; :data:`PlantFn`) is called by :class:`servo_emulator.ServoEmulator` before each request with the wall
time since the previous call. :class:`MotorInertiaPlant` is a motor and an inertia per servo; :class:`ModelPlant` is
the flexible arm model driven by the servo currents (hardware in the loop without hardware).

``ModelPlant(model, joints)`` is a :data:`PlantFn`: for each emulated servo (order of the
emulator's ids = order of ``joints``) it turns the servo's current into a joint torque
``tau = direction * i * torque_constant * gear_ratio`` (the same convention as servo_bus), integrates
the arm (``flexarm_sim.model.step``, RK4, steps of ``dt`` up to the call's instant, the last one shorter: the state
is the arm's at that instant, and goals a request changes act from it, as on a servo) and reports servo-side
position/velocity ``theta = direction * (q - zero_offset) * gear_ratio``.

Servo current by operating mode (like MotorInertiaPlant): current mode -> Goal Current clipped to the
Current Limit; position modes -> ``kp (theta_goal - theta) - kd omega`` clipped (mode 5 also to
|Goal Current|); torque off -> 0.

``ArmRecording(plant)`` as the emulator's ``on_plant_step`` records the arm's motion (``dxl_emulator --record``).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from ..bridge import control_table as ct


@dataclass
class PlantGoals:
    """Commands seen by the plant, one entry per servo (order of ``ids``)."""
    ids: Tuple[int, ...]
    modes: np.ndarray            # operating mode (control_table.MODE_*)
    current_a: np.ndarray        # Goal Current (A)
    position_rad: np.ndarray     # Goal Position (rad, servo side)
    velocity_rad_s: np.ndarray   # Goal Velocity (rad/s)
    current_limit_a: np.ndarray  # Current Limit (A)


PlantFn = Callable[[float, PlantGoals, np.ndarray], Tuple[np.ndarray, np.ndarray, np.ndarray]]


def servo_current(g: PlantGoals, on: np.ndarray, theta, omega, kp: float, kd: float, kv: Optional[float] = None):
    """The servos' motor current (A) by operating mode, each servo's own loop on its shaft angle theta and rate
    omega (servo side): current mode the Goal Current clipped to the Current Limit; position modes (3, 4, 5)
    ``kp (theta_goal - theta) - kd omega`` clipped to the limit (mode 5 also to |Goal Current|); velocity mode
    ``kv (omega_goal - omega)`` clipped (with kv; without, as current mode); torque off 0."""
    lim = g.current_limit_a
    i = np.clip(g.current_a, -lim, lim)
    pos = (g.modes == ct.MODE_POSITION) | (g.modes == ct.MODE_EXTENDED_POSITION) \
        | (g.modes == ct.MODE_CURRENT_BASED_POSITION)
    if pos.any():
        ip = kp * (g.position_rad - theta) - kd * omega
        plim = np.where(g.modes == ct.MODE_CURRENT_BASED_POSITION, np.minimum(np.abs(g.current_a), lim), lim)
        i = np.where(pos, np.clip(ip, -plim, plim), i)
    vel = g.modes == ct.MODE_VELOCITY
    if kv is not None and vel.any():
        i = np.where(vel, np.clip(kv * (g.velocity_rad_s - omega), -lim, lim), i)
    return np.where(on, i, 0.0)


class MotorInertiaPlant:
    """Independent motor + inertia per servo: ``J w' = k_t i - b w``.

    * current mode: ``i = goal current`` (clipped to the current limit)
    * position modes (3, 4, 5): ``i = kp (q_goal - q) - kd w``, clipped to the
      current limit and, in mode 5, to ``|goal current|``
    * velocity mode: ``i = kv (w_goal - w)`` clipped
    * torque off: ``i = 0`` (the shaft coasts down through ``b``)
    """

    def __init__(self, n: int, inertia: float = 2e-3, damping: float = 0.05,
                 torque_constant: float = 1.78, kp: float = 40.0, kd: float = 0.8,
                 kv: float = 0.5, max_step: float = 5e-4, max_dt: float = 1.0,
                 initial_positions: Optional[Sequence[float]] = None):
        self.J = inertia
        self.b = damping
        self.kt = torque_constant
        self.kp, self.kd, self.kv = kp, kd, kv
        self.max_step = max_step
        self.max_dt = max_dt
        self.q = np.zeros(n) if initial_positions is None else np.asarray(initial_positions, float).copy()
        self.w = np.zeros(n)
        self.i = np.zeros(n)

    def _current(self, g: PlantGoals, on: np.ndarray) -> np.ndarray:
        return servo_current(g, on, self.q, self.w, self.kp, self.kd, self.kv)

    def __call__(self, dt: float, goals: PlantGoals, torque_enabled: np.ndarray):
        dt = min(max(dt, 0.0), self.max_dt)
        steps = max(1, int(math.ceil(dt / self.max_step))) if dt > 0 else 0
        h = dt / steps if steps else 0.0
        for _ in range(steps):
            self.i = self._current(goals, torque_enabled)
            acc = (self.kt * self.i - self.b * self.w) / self.J
            self.w = self.w + h * acc
            self.q = self.q + h * self.w
        if steps == 0:
            self.i = self._current(goals, torque_enabled)
        return self.q.copy(), self.w.copy(), self.i.copy()


class ModelPlant:
    def __init__(self, model, joints: Sequence, dt: float = 1e-3, method: str = 'rk4',
                 substeps: Optional[int] = None, kp: float = 5.0, kd: float = 0.2, max_dt: float = 0.1,
                 initial_q: Optional[Sequence[float]] = None):
        from flexarm_sim.model import ArmState, largest_stable_rk4_step, step
        if len(joints) != model.n_joints:
            raise ValueError(f'{len(joints)} servo joints for a {model.n_joints}-joint arm')
        self._step = step
        self.model = model
        self.dt = float(dt)
        self.method = method
        if substeps is None:
            h = largest_stable_rk4_step(model) if method == 'rk4' else math.inf
            substeps = max(1, int(math.ceil(self.dt / (0.5 * h)))) if math.isfinite(h) else 1
        self.substeps = int(substeps)
        self.dirs = np.array([j.direction for j in joints], float)
        self.kt = np.array([j.torque_constant for j in joints], float)
        self.gear = np.array([j.gear_ratio for j in joints], float)
        self.zero = np.array([j.zero_offset for j in joints], float)
        self.kp, self.kd = kp, kd
        self.max_dt = max_dt
        self.state = ArmState.zeros(model)
        if initial_q is not None:
            self.state.z[model.q_index] = np.asarray(initial_q, float)
        self.qi = model.q_index
        self.pending = 0.0
        self.i = np.zeros(len(joints))
        self.tau = np.zeros(len(joints))
        self.time = 0.0
        self.steps = 0
        # compile (or load) the integrator now: the first call must not stall the emulator's serving thread
        # for the seconds a numba compile takes (the bridge would see reply timeouts)
        scratch = ArmState.zeros(model)
        scratch.z[:] = self.state.z
        self._step(model, scratch, np.zeros(len(joints)), self.dt, self.substeps, self.method)

    def servo_position(self):
        q = self.state.z[self.qi]
        return self.dirs * (q - self.zero) * self.gear

    def servo_velocity(self):
        return self.dirs * self.state.zd[self.qi] * self.gear

    def _current(self, g: PlantGoals, on: np.ndarray) -> np.ndarray:
        return servo_current(g, on, self.servo_position(), self.servo_velocity(), self.kp, self.kd)

    def __call__(self, dt: float, goals: PlantGoals, torque_enabled: np.ndarray):
        self.pending += min(max(dt, 0.0), self.max_dt)
        while self.pending >= self.dt:
            self._advance(self.dt, goals, torque_enabled)
        # the rest, a shorter step: the state is the arm's at this instant and the goals a request changes act from
        # it, as on a real servo (carried over to the next call, a goal's effect and a reading were up to dt late)
        if self.pending > 1e-3 * self.dt:
            self._advance(self.pending, goals, torque_enabled)
        self.pending = 0.0
        if not self.steps:
            self.i = self._current(goals, torque_enabled)
        return self.servo_position(), self.servo_velocity(), self.i.copy()

    def _advance(self, h, goals, torque_enabled):
        self.i = self._current(goals, torque_enabled)
        self.tau = self.dirs * self.i * self.kt * self.gear
        self._step(self.model, self.state, self.tau, h, max(1, math.ceil(self.substeps * h / self.dt - 1e-9)),
                   self.method)
        self.pending -= h
        self.time += h
        self.steps += 1


class ArmRecording:
    """The emulated arm's motion, one row per plant advance (``ServoEmulator.on_plant_step``, called with the
    emulator's lock held): the emulator's clock (monotonic s), the coordinates z and rates zd (flexarm_sim layout) and
    the joint torques applied up to that instant, in one float64 buffer that doubles when full (15 floats a row for
    the De Luca arm: ~0.25 GB an hour at the bridge's 250 Hz, two requests a cycle). ``save(path)`` writes an .npz of
    those, the joint and mode indices, the arm's name and ``wall_minus_monotonic`` (add it to ``t`` for the wall
    clock, which stamps the bridge's /joint_states); the tip at a row is ``model.tip_pose(z)``."""

    def __init__(self, plant: ModelPlant, rows: int = 4096):
        self.plant = plant
        N, n = plant.model.n_coords, plant.model.n_joints
        self._cols = (1, 1 + N, 1 + 2 * N, 1 + 2 * N + n)
        self._buf = np.empty((max(int(rows), 1), self._cols[-1]))
        self.rows = 0
        self.wall_minus_monotonic = time.time() - time.monotonic()

    def __call__(self, t: float) -> None:
        if self.rows == self._buf.shape[0]:
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
        a, b, c, _ = self._cols
        row = self._buf[self.rows]
        row[0] = t
        row[a:b] = self.plant.state.z
        row[b:c] = self.plant.state.zd
        row[c:] = self.plant.tau
        self.rows += 1

    def arrays(self) -> dict:
        m = self.plant.model
        a, b, c, _ = self._cols
        buf = self._buf[:self.rows].copy()
        return dict(t=buf[:, 0], z=buf[:, a:b], zd=buf[:, b:c], tau=buf[:, c:],
                    q_index=np.asarray(m.q_index), mode_index=np.asarray(m.mode_index), arm=np.array(m.spec.name),
                    wall_minus_monotonic=np.array(self.wall_minus_monotonic))

    def save(self, path: str) -> int:
        """Write the recording (numpy .npz) to `path`, through a temporary file beside it (a stop during the write
        leaves no truncated file); returns the number of rows."""
        data = self.arrays()
        tmp = path + '.part'
        with open(tmp, 'wb') as f:
            np.savez(f, **data)
        os.replace(tmp, path)
        return int(data['t'].size)
