"""Joint PD with rigid-body feedforward (Naganathan's servo-compliance model) and its gain rules.

Law (thesis eq. 2.29 read as a restoring torque on the perturbation about the commanded motion):
    tau = tau_ff + k_p (q_d - q) + k_v (qd_d - qd),   tau_ff = rigid-body inverse dynamics of (q_d, qd_d, qdd_d)
`velocity='actual'` uses eq. 2.26's rate feedback instead: k_v (0 - qd) (no velocity feedforward in the loop).

Gain rules (eqs. 2.27, 2.28; Paul: the servo natural frequency sqrt(k_p/J) stays below half of the structural
frequency; the structural resonance scales as w_0 sqrt(J_0/J), so k_p does not depend on J):
    k_p,j = pi^2 f_0^2 J_0,j        k_v,j = 2 sqrt(J_max,j k_p,j)
Choices made here (`naganathan_gains`):
  * f_0 = the first elastic frequency of the whole arm with the joints clamped, at the nominal configuration
    (`whole_arm_modes(..., free_joints=False)`): the structure as a stiff position servo sees it;
  * J_0,j = the reflected inertia of joint j (diagonal of the rigid J_qq) at that same configuration, i.e. the
    inertia with which f_0 was obtained;
  * J_max,j = the largest J_qq[j, j] over the task (sampled joint configurations, default: the nominal one and
    the move's target), so the servo is critically damped at J_max and overdamped at smaller inertia (p.46).

Sampled-data limit (`laws.base.velocity_gain_cap`): a law held for dt (no further delay) can only use
k_v,j <= 0.70 J_hf,j / dt (J_hf: the joint's inertia with the links free). Where the rule's k_v is above it, k_v is
capped and, for rule gains, k_p lowered to at most k_v^2 / (4 zeta_min^2 J_max) (zeta_min = `min_damping`, 0.3: the
rule's critical damping cannot be kept with a capped k_v without a servo too soft to hold the arm; measured on the
spatial 3R arm at 1 kHz, 60 deg move: zeta_min 1.0 / 0.5 / 0.3 -> joint RMS error 0.38 / 0.084 / 0.0009 rad; the
De Luca arm at 500 Hz: 0.115 / 0.115 / 0.124 rad). On the spatial arm (hubs of 0.05 / 0.02 kg m^2 behind 1 m steel
links) the servos are then at 3.6 / 0.5 / 0.6 Hz instead of the rule's 9.4 Hz: the thesis's servo is a drive-level
loop much faster than a 1 kHz torque controller (`gain_info['kv_sample_capped']` says where).

Two places the servo can live:
  * `PDServo` is a controller: it runs at the control rate, its torque is held for a control period
    (zero-order hold) and, over ROS, it acts on a state that is at least one period old.
  * `ServoCompliantActuator` is a plant-side actuator: the same law evaluated at every plant (integration)
    step with the state of that instant — no hold, no delay — so it models the finite stiffness k_p and damping
    k_v of a position servo, following a commanded motion that a controller may update at its own slower rate
    (`hold_period`). With a stiff servo the joint follows the command; the tip error that remains is due to the
    servo compliance and the link flexibility (thesis case 3).
"""
from __future__ import annotations

import math

import numpy as np

from flexarm_sim.common.params import DERIVED, Param, boolean, choice, float_list
from flexarm_sim.model.linearize import largest_servo_step

from .base import ControlLaw, as_vector, rigid_model_of, velocity_gain_cap


def reflected_inertia(model, q):
    """Diagonal of the rigid joint-space inertia J_qq(q)."""
    rigid = rigid_model_of(model)
    return np.diag(rigid.mass_matrix(np.asarray(q, dtype=float))).copy()


def naganathan_gains(model, q_nominal=None, task=None, f0_hz=None, free_joints=False):
    """(k_p, k_v, info) by eqs. 2.27-2.28 with the choices documented in the module docstring.

    task: iterable of joint configurations visited by the task (for J_max); default the nominal one.
    f0_hz: override the structural frequency."""
    from flexarm_sim.model import whole_arm_modes
    q0 = np.asarray(model.spec.nominal_configuration if q_nominal is None else q_nominal, dtype=float)
    if f0_hz is None:
        if model.n_coords == model.n_joints:
            raise ValueError('rigid arm: no structural frequency, give f0_hz')
        f = whole_arm_modes(model, q0, free_joints=free_joints).elastic_frequencies_hz
        f0_hz = float(f[0])
    J0 = reflected_inertia(model, q0)
    qs = [q0] if task is None else [np.asarray(q, dtype=float) for q in task]
    Jmax = np.max([reflected_inertia(model, q) for q in qs] + [J0], axis=0)
    kp = math.pi ** 2 * f0_hz ** 2 * J0
    kv = 2.0 * np.sqrt(Jmax * kp)
    return kp, kv, {'f0_hz': f0_hz, 'J0': J0, 'Jmax': Jmax,
                    'servo_hz': np.sqrt(kp / J0) / (2 * math.pi)}


def gain_vector(v, n):
    """A node's per-joint gain list (one value for all joints, or one per joint) as constructor input; None if
    DERIVED (not set: the law's rule)."""
    return None if v is DERIVED else (list(v) * n if len(v) == 1 else list(v))


class PDServo(ControlLaw):
    name = 'pd_servo'
    GAINS = {
        'kp': Param(DERIVED, float_list(lo=0.0, hi=1e6),
                    'N m/rad per joint, tau = tau_ff + kp (q_d - q) + kv (qd_d - qd); not set = Naganathan\'s '
                    'rule kp = pi^2 f0^2 J0', runtime=True),
        'kv': Param(DERIVED, float_list(lo=0.0, hi=1e5),
                    'N m s/rad per joint; not set = 2 sqrt(Jmax kp) (critically damped at the largest inertia), '
                    'capped by the sampling rate and delay', runtime=True),
        'feedforward': Param(True, boolean(), 'add the rigid-body inverse dynamics of the reference', runtime=True),
        'command_interface': Param('effort', choice(('effort', 'position')),
                                   'effort: the PD torque on /effort_controller/commands; position: the plant\'s '
                                   'joint servo (servo.enabled) is the PD, set-points on /position_controller/commands '
                                   'and the rigid feed-forward as effort'),
    }

    @classmethod
    def from_params(cls, model, values, dt, input_delay):
        n = model.n_joints
        law = cls(model, dt=dt, input_delay=input_delay or None, kp=gain_vector(values['kp'], n),
                  kv=gain_vector(values['kv'], n), feedforward=values['feedforward'])
        law.servo_in_plant = values['command_interface'] == 'position'
        return law

    def effective_values(self):
        return {'kp': [float(x) for x in self.kp], 'kv': [float(x) for x in self.kv]}

    def __init__(self, model, kp=None, kv=None, feedforward=True, velocity='error', task=None, input_delay=None,
                 sample_cap=True, min_damping=0.3, **kw):
        super().__init__(model, **kw)
        # sampled-data limit: the law runs every dt (zero-order hold) and, over ROS, acts input_delay (s) later;
        # k_v is capped by velocity_gain_cap(dt, input_delay) so the joint's high-frequency velocity loop (the hub
        # with the links free) stays stable. With rule gains, a capped joint keeps the rule's k_p down to a damping
        # ratio of min_damping at J_max: k_p <= k_v^2 / (4 min_damping^2 J_max) (module docstring).
        self.input_delay = input_delay
        self.kv_cap = (velocity_gain_cap(model, self.dt, 0.0 if input_delay is None else input_delay) if sample_cap
                       else np.full(self.n, np.inf))
        from_rule = kp is None
        if kp is None or kv is None:
            kp0, kv0, self.gain_info = naganathan_gains(model, task=task)
            kp = kp0 if kp is None else kp
            kv = kv0 if kv is None else kv
        else:
            self.gain_info = {}
        kp = as_vector(kp, self.n, 'kp', nonnegative=True)
        kv_wanted = as_vector(kv, self.n, 'kv', nonnegative=True)
        self.kv = np.minimum(kv_wanted, self.kv_cap)
        capped = self.kv < kv_wanted
        if from_rule and np.any(capped):
            Jmax = self.gain_info['Jmax']
            kp = np.where(capped, np.minimum(kp, self.kv ** 2 / (4.0 * float(min_damping) ** 2 * Jmax)), kp)
        self.kp = kp
        self.gain_info = dict(self.gain_info, kv_sample_capped=capped, kv_cap=self.kv_cap.copy())
        if velocity not in ('error', 'actual'):
            raise ValueError("velocity must be 'error' (eq. 2.29) or 'actual' (eq. 2.26)")
        self.velocity = velocity
        self.feedforward = bool(feedforward)
        self.rigid = rigid_model_of(model)
        # servo_in_plant: the PD runs as the plant's joint servo (plant parameter servo.enabled, set-points from
        # `setpoint`); the law then returns only the feed-forward torque
        self.servo_in_plant = False
        self.setpoint = np.zeros(self.n)
        self.setpoint_rate = np.zeros(self.n)

    def gains(self):
        return {'kp': self.kp.tolist(), 'kv': self.kv.tolist(), 'feedforward': self.feedforward}

    def set_gains(self, kp=None, kv=None, feedforward=None):
        kp = self.kp if kp is None else as_vector(kp, self.n, 'kp', nonnegative=True)
        kv = self.kv if kv is None else np.minimum(as_vector(kv, self.n, 'kv', nonnegative=True), self.kv_cap)
        self.kp, self.kv = kp, kv
        if feedforward is not None:
            self.feedforward = bool(feedforward)

    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        self.setpoint = q_d
        self.setpoint_rate = qd_d if self.velocity == 'error' else np.zeros(self.n)
        ff = self.rigid.inverse_dynamics(q_d, qd_d, qdd_d) if self.feedforward else 0.0
        if self.servo_in_plant:     # the plant's joint servo closes the PD loop on the set-point: feed-forward only
            return ff + np.zeros(self.n)
        q, qd = z[self.qi], zd[self.qi]
        return ff + self.kp * (q_d - q) + self.kv * ((qd_d if self.velocity == 'error' else 0.0) - qd)

    def feedback_matrix(self, q=None):
        N = self.model.n_coords
        K = np.zeros((self.n, 2 * N))
        K[np.arange(self.n), self.qi] = self.kp
        K[np.arange(self.n), N + self.qi] = self.kv
        return K


class ServoCompliantActuator(PDServo):
    """Plant-side finite-stiffness position servo: call it at the plant (integration) rate.

    The commanded motion comes from its reference (set it with `set_reference` / `references.move_to` or
    `command(q_d, qd_d, tau_ff)` from a controller); with `hold_period` the command is sampled only every
    hold_period seconds (a controller running slower than the plant) and held in between."""

    name = 'servo_actuator'

    def __init__(self, model, kp=None, kv=None, hold_period=None, **kw):
        """dt: the plant's integration step. The servo stands for a continuous (drive-level) loop, so its gains are
        not capped by a sample rate; instead the step must resolve it: k_v,j dt / J_hf,j <= 1 (the held velocity
        loop is then critically damped at worst), else ValueError naming the largest usable step."""
        kw['sample_cap'] = False
        super().__init__(model, kp=kp, kv=kv, **kw)
        self.max_step = self.largest_step(model, self.kv)
        if self.dt > self.max_step * (1 + 1e-9):
            raise ValueError(f'integration step {self.dt:.3g} s is too long for this servo (k_v = '
                             f'{np.array2string(self.kv, precision=3)}): use <= {self.max_step:.3g} s')
        self.hold_period = hold_period
        self._held = None           # (t_sample, q_d, qd_d, tau_ff)
        self._external = None

    @staticmethod
    def largest_step(model, kv):
        """Largest integration step (s) that resolves the velocity loop (the plant servo's rule)."""
        return largest_servo_step(model, kv)

    def command(self, q_d, qd_d=None, tau_ff=None):
        """Set the commanded motion directly (used when a controller drives the servo)."""
        q_d = np.asarray(q_d, dtype=float)
        self._external = (q_d, np.zeros(self.n) if qd_d is None else np.asarray(qd_d, float),
                          np.zeros(self.n) if tau_ff is None else np.asarray(tau_ff, float))

    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        q, qd = z[self.qi], zd[self.qi]
        if self._external is not None:
            q_c, qd_c, ff = self._external
        else:
            if self.hold_period:
                k = math.floor(t / self.hold_period + 1e-9)
                if self._held is None or self._held[0] != k:
                    ff = self.rigid.inverse_dynamics(q_d, qd_d, qdd_d) if self.feedforward else np.zeros(self.n)
                    self._held = (k, q_d, qd_d, ff)
                _, q_c, qd_c, ff = self._held
            else:
                q_c, qd_c = q_d, qd_d
                ff = self.rigid.inverse_dynamics(q_d, qd_d, qdd_d) if self.feedforward else 0.0
        return ff + self.kp * (q_c - q) + self.kv * ((qd_c if self.velocity == 'error' else 0.0) - qd)
