"""Computed torque (inverse dynamics) control of the joints.

    v   = qdd_d + K_v (qd_d - qd) + K_p (q_d - q),      K_p = w_n^2, K_v = 2 zeta w_n (per joint)
    tau = J_qq(q) v + n(q, qd)                           (rigid model: deflections taken as zero)

with n = -R_rigid(q, qd, 0) the velocity, gravity and friction terms of the rigid arm (Lee et al.).
On a rigid arm the closed loop is e'' + K_v e' + K_p e = 0 for every joint.

`include_deflection=True` inverts the joint rows of the flexible model at the measured z instead: with
q'' = v imposed, the modal rows J_dq v + J_dd d'' = R_d give d'' and
    tau = J_qq(z) v + J_qd(z) d'' - R_q(z, zd, 0)
which cancels the measured elastic coupling on the joints (the links still vibrate: the modes are then the
zero dynamics of the joint output, i.e. the clamped-joint modes).

Sampled-data limit (the law runs every dt, zero-order hold, and its torque acts `input_delay` s later, as over
ROS; default 0): the torque per joint rate J_qq,jj K_v,j is capped by `velocity_gain_cap`, so the joint's
high-frequency velocity loop (inertia with the links free) stays stable. Without the cap the spatial 3R arm at
1 kHz (w_n = pi f_0 = 59 rad/s on J_qq ~ 30 kg m^2 behind hubs of 0.05 kg m^2) rang into its torque limits; with
it the same move tracks with 2e-4 rad RMS (the joint loop is lightly damped but the rigid model feeds forward
nearly all of the torque). The position gain is capped the same way (J_qq K_p <= J_hf (phase / lag)^2, the hub
loop crossing over no faster than the velocity loop): over ROS (500 Hz, 2 ms delay) the uncapped K_p = (pi f_0)^2
put the spatial arm's shoulder hub loop near 180 Hz and it diverged into the torque limits.
"""
from __future__ import annotations

import numpy as np

from flexarm_sim.common.params import DERIVED, Param, boolean, float_list

from .base import ControlLaw, as_vector, joint_hf_inertia, rigid_model_of, velocity_gain_cap
from .pd import gain_vector


class ComputedTorque(ControlLaw):
    name = 'computed_torque'
    GAINS = {
        'omega_n': Param(DERIVED, float_list(lo=0.0, lo_open=True, hi=1e4),
                         'rad/s per joint, tau = J(q) (qdd_d + kv e\' + kp e) + n(q, qd), kp = omega_n^2; not set = '
                         'pi f0 (half the first clamped-joint frequency)', runtime=True),
        'zeta': Param(DERIVED, float_list(lo=0.0, lo_open=True, hi=100.0),
                      'damping ratio per joint (kv = 2 zeta omega_n); not set = 1', runtime=True),
        'include_deflection': Param(False, boolean(),
                                    'invert the flexible model\'s joint rows at the measured deflection',
                                    runtime=True),
    }

    @classmethod
    def from_params(cls, model, values, dt, input_delay):
        n = model.n_joints
        kw = {}
        if values['omega_n'] is not DERIVED:
            kw['omega_n'] = gain_vector(values['omega_n'], n)
        if values['zeta'] is not DERIVED:
            kw['zeta'] = gain_vector(values['zeta'], n)
        return cls(model, dt=dt, input_delay=input_delay or None, include_deflection=values['include_deflection'],
                   **kw)

    def effective_values(self):
        return {'omega_n': [float(x) for x in self.omega_n], 'zeta': [float(x) for x in self.zeta]}

    def __init__(self, model, omega_n=None, zeta=1.0, include_deflection=False, input_delay=None, **kw):
        super().__init__(model, **kw)
        self.input_delay = input_delay
        delay = 0.0 if input_delay is None else input_delay
        self.kv_torque_cap = velocity_gain_cap(model, self.dt, delay)
        # position gain of the hub-level loop: J_qq K_p on J_hf must cross over no faster than the velocity loop,
        # J_qq K_p <= J_hf (phase / lag)^2, i.e. w_n,j <= (phase / lag) sqrt(J_hf,j / J_qq,jj)
        self.kp_torque_cap = self.kv_torque_cap ** 2 / joint_hf_inertia(model)
        if omega_n is None:
            omega_n = self.default_bandwidth(model)
        self.omega_n = as_vector(omega_n, self.n, 'omega_n', positive=True)
        self.zeta = as_vector(zeta, self.n, 'zeta', positive=True)
        self.include_deflection = bool(include_deflection)
        self.rigid = rigid_model_of(model)
        self._zero_tau = np.zeros(self.n)

    @staticmethod
    def default_bandwidth(model):
        """Half of the first clamped-joint elastic frequency (the servo rule of eq. 2.27) in rad/s; for a rigid
        arm 2 pi * 5 Hz."""
        if model.n_coords == model.n_joints:
            return 2 * np.pi * 5.0
        from flexarm_sim.model import whole_arm_modes
        f0 = whole_arm_modes(model, model.spec.nominal_configuration, free_joints=False).elastic_frequencies_hz[0]
        return np.pi * f0

    @property
    def kp(self):
        return self.omega_n ** 2

    @property
    def kv(self):
        return 2.0 * self.zeta * self.omega_n

    def gains(self):
        return {'omega_n': self.omega_n.tolist(), 'zeta': self.zeta.tolist(),
                'include_deflection': self.include_deflection}

    def set_gains(self, omega_n=None, zeta=None, include_deflection=None):
        w = self.omega_n if omega_n is None else as_vector(omega_n, self.n, 'omega_n', positive=True)
        zt = self.zeta if zeta is None else as_vector(zeta, self.n, 'zeta', positive=True)
        self.omega_n, self.zeta = w, zt
        if include_deflection is not None:
            self.include_deflection = bool(include_deflection)

    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        q, qd = z[self.qi], zd[self.qi]
        Jr = self.rigid.mass_matrix(q)
        kv, kp = self.sampled_gains(Jr)
        v = qdd_d + kv * (qd_d - qd) + kp * (q_d - q)
        if self.include_deflection and self.mi.size:
            J = self.model.mass_matrix(z)
            R = self.model.rhs(z, zd, self._zero_tau)
            qi, mi = self.qi, self.mi
            dd = np.linalg.solve(J[np.ix_(mi, mi)], R[mi] - J[np.ix_(mi, qi)] @ v)
            return J[np.ix_(qi, qi)] @ v + J[np.ix_(qi, mi)] @ dd - R[qi]
        return Jr @ v - self.rigid.rhs(q, qd, self._zero_tau)

    def sampled_gains(self, J):
        """(K_v, K_p) in use at rigid inertia J: the set gains limited by the sampled-data caps."""
        Jd = np.diag(J)
        return (np.minimum(self.kv, self.kv_torque_cap / Jd), np.minimum(self.kp, self.kp_torque_cap / Jd))

    def feedback_matrix(self, q):
        N = self.model.n_coords
        J = self.rigid.mass_matrix(np.asarray(q, float))
        kv, kp = self.sampled_gains(J)
        K = np.zeros((self.n, 2 * N))
        K[:, self.qi] = J * kp[None, :]
        K[:, N + self.qi] = J * kv[None, :]
        return K
