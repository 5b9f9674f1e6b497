"""Plant-side joint position servo: the actuator as a finite-stiffness position loop (no ROS).

Naganathan's servo compliance (notes/seed_001_naganathan.md §2, eqs. 2.26-2.29): each joint's motor angle
follows a commanded position through a proportional gain k_p and rate feedback k_v, so the joint itself is
compliant. As a plant option the servo torque

    tau_j = tau_ff,j + k_p,j (q_c,j - q_j) + k_v,j (qdot_c,j - qdot_j),   clipped to the joint's effort limit

is evaluated at every integration sub-step (a drive-level loop, much faster than a controller over ROS),
with the commanded positions q_c (and rates qdot_c, zero unless given: eq. 2.26 vs 2.29) from
/position_controller/commands and tau_ff the (optional) effort command. The sub-step must resolve the velocity loop on the joint's inertia with the links free,
h <= J_hf / k_v (flexarm_control.laws.ServoCompliantActuator uses the same rule), so `substeps` is
chosen from the gains: a stiff servo on a light hub needs short steps.

The same servo is the plant's command-watchdog hold (`WatchdogHold`, `hold_gains`): when no valid torque command has
come for `command_timeout`, the drives hold the joints where they are instead of letting the arm coast.
"""
from __future__ import annotations

import math

import numpy as np

from ..model.linearize import largest_servo_step


def servo_substeps(model, kv, dt) -> int:
    """Equal sub-steps of dt that resolve the servo (largest_servo_step)."""
    h_max = largest_servo_step(model, kv)
    return 1 if not math.isfinite(h_max) else max(1, int(math.ceil(dt / h_max - 1e-9)))


class JointServo:
    def __init__(self, model, kp, kv, dt, effort_limit=None):
        n = model.n_joints
        self.kp = np.asarray(kp, dtype=float).ravel()
        self.kv = np.asarray(kv, dtype=float).ravel()
        for name, g in (('servo.kp', self.kp), ('servo.kv', self.kv)):
            if g.size != n or not np.all(np.isfinite(g)) or np.any(g < 0):
                raise ValueError(f'{name}: expected {n} finite values >= 0, got {g.tolist()}')
        self.qi = np.asarray(model.q_index)
        self.effort_limit = (np.full(n, np.inf) if effort_limit is None
                             else np.asarray(effort_limit, dtype=float) * np.ones(n))
        self.substeps = servo_substeps(model, self.kv, dt)
        self.q_c = np.zeros(n)
        self.qd_c = np.zeros(n)
        self._tau = np.zeros(n)

    def torque(self, z, zd, tau_ff):
        """Servo torque at the state (z, zd) (the array is reused)."""
        t = self._tau
        t[:] = tau_ff + self.kp * (self.q_c - z[self.qi]) + self.kv * (self.qd_c - zd[self.qi])
        np.clip(t, -self.effort_limit, self.effort_limit, out=t)
        return t


# ---------------------------------------------------------------------------------------------- watchdog hold
WATCHDOG_ACTIONS = ('hold', 'damp', 'zero_torque')
HOLD_MAX_HZ = 1.0         # the hold's servo frequency at most (an arm without elastic modes: this one)
HOLD_DAMPING = 2.0        # damping ratio of the hold on the rigid joint inertia (overdamped: it brakes, then holds)
RELEASE_S = 0.2           # s of plant time over which a released hold's torque fades out


def hold_gains(model):
    """(kp, kv) per joint of the command watchdog's hold: Naganathan's servo rule (notes/seed_001_naganathan.md, eqs.
    2.27-2.28) kp_j = w^2 J0_j with the servo at half the first elastic frequency f0 of the arm with its joints
    clamped (nominal configuration), w = pi f0, at most 2 pi HOLD_MAX_HZ (a hold need not be stiffer; an arm
    without modes gets that), and kv_j = 2 HOLD_DAMPING sqrt(kp_j J0_j) (J0_j the rigid joint inertia there). The
    hold is evaluated at every sub-step with the state of that instant (a drive-level loop: no sampling, no delay),
    so the collocated PD is passive for any positive gains and damps every mode; the sub-steps resolve its velocity
    loop (servo_substeps). Stiffer is not safer: with the joints held hard the links ring about them (undamped in the
    De Luca model). Measured on the De Luca arm, controller killed mid-move (plant time, flexarm_control/test/
    loop_harness.py; command_timeout 0.2 s), w x1 / x2 / x4 of the rule with HOLD_DAMPING 1 / 2: largest joint
    excursion after the kill 0.65 / 0.50 rad (x1), 0.41 / 0.32 (x2), 0.24 / 0.21 (x4); joint rate 3 s later
    0.20 / 0.008 rad/s (x1), 0.14 / 0.12 (x2); tip deflection then 24 / 51 mm (x1), 128 / 118 (x2), 234 / 261 (x4).
    The rule's w with HOLD_DAMPING 2 (a brake first) stops the arm and leaves the links calm."""
    from ..model import load_model, rigid_limit, whole_arm_modes
    q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
    rigid = model if model.n_coords == model.n_joints else load_model(rigid_limit(model.spec))
    J0 = np.diag(rigid.mass_matrix(q0)).copy()
    w = 2.0 * math.pi * HOLD_MAX_HZ
    if model.n_coords > model.n_joints:
        f = whole_arm_modes(model, q0, free_joints=False).elastic_frequencies_hz
        if f.size:
            w = min(w, math.pi * float(f[0]))
    kp = w ** 2 * J0
    return kp, 2.0 * HOLD_DAMPING * np.sqrt(kp * J0)


class WatchdogHold:
    """What the plant does when its command watchdog trips (plant parameter `watchdog.action`), as a drive would:
      hold         a joint servo (JointServo) to the joint angles at the trip, with zero set-point rate, plus the
                   static torque that holds that configuration (gravity: model.equilibrium.static_equilibrium);
      damp         rate feedback only (kp = 0, no static torque): the arm is braked where it is (a gravity-loaded
                   arm sinks slowly);
      zero_torque  no torque: the arm coasts (the former behaviour; a real motor switched off).
    `engage(core, tau)` at the trip (replaces the plant's servo, if any, and writes the static torque as the servo's
    feed-forward into tau), `torque(tau)` at every later step of the lapse, `release(core)` when commands return.
    The release is not a step: over RELEASE_S (or as long as the hold was engaged, if shorter: a brief hold's braking
    torque is not drawn out) the torque the hold applied last fades out (raised cosine) while the command fades in
    (`fade(tau)` on the command of each step), so neither the arm's slow motion nor its stiffest modes (the De Luca
    elbow's 29 Hz, undamped in the model) get a torque step from the hand-over."""

    def __init__(self, model, action, kp, kv, dt, effort_limit):
        if action not in WATCHDOG_ACTIONS:
            raise ValueError(f'watchdog.action must be one of {", ".join(WATCHDOG_ACTIONS)}, got {action!r}')
        self.model = model
        self.action = action
        self.servo = None
        if action != 'zero_torque':
            self.servo = JointServo(model, np.zeros(model.n_joints) if action == 'damp' else kp, kv, dt,
                                    effort_limit)
        self.static = np.zeros(model.n_joints)
        self._saved = None
        self.engaged = False
        self.engagements = 0
        self._fade_from = None           # the hold's last torque, fading out after a release
        self._release_steps = max(1, int(round(RELEASE_S / dt)))
        self._fade_steps = self._release_steps
        self._fade_k = 0
        self._held_steps = 0

    def engage(self, core, tau):
        self.engaged = True
        self.engagements += 1
        self._held_steps = 0
        if self.servo is None:
            tau[:] = 0.0
            return
        from ..model.equilibrium import static_equilibrium
        q = core.z[self.model.q_index].copy()
        self.servo.q_c[:] = q
        self.servo.qd_c[:] = 0.0
        self.static[:] = static_equilibrium(self.model, q)[1] if self.action == 'hold' else 0.0
        self._saved = core.servo
        core.servo = self.servo
        tau[:] = self.static

    def torque(self, tau):
        tau[:] = self.static if self.servo is not None else 0.0

    def release(self, core, fade=True):
        if self.engaged and self.servo is not None:
            core.servo = self._saved
            self._fade_from = core.tau.copy() if fade else None
            self._fade_k = 0
            # a hold engaged only briefly fades out as briefly: its braking torque acted only that long
            self._fade_steps = max(1, min(self._release_steps, self._held_steps))
        self.engaged = False

    def held_step(self):
        """One more plant step with the hold engaged."""
        self._held_steps += 1

    @property
    def fading(self) -> bool:
        return self._fade_from is not None

    def fade(self, tau):
        """After a release: tau <- w tau + (1 - w) (the hold's last torque), w rising from 0 to 1 over RELEASE_S."""
        if self._fade_from is None:
            return
        self._fade_k += 1
        w = 0.5 - 0.5 * math.cos(math.pi * min(1.0, self._fade_k / self._fade_steps))
        tau[:] = w * tau + (1.0 - w) * self._fade_from
        if self._fade_k >= self._fade_steps:
            self._fade_from = None
