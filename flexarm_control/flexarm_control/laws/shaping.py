"""Input shaping (Singer & Seering): ZV and ZVD shapers and a shaped reference.

For a mode with natural frequency w (rad/s) and damping ratio zeta, K = exp(-zeta pi / sqrt(1 - zeta^2)) and
the damped half period is Td/2 = pi / (w sqrt(1 - zeta^2)):
  ZV : amplitudes [1, K] / (1 + K)               at times [0, Td/2]
  ZVD: amplitudes [1, 2K, K^2] / (1 + K)^2        at times [0, Td/2, Td]
A shaper for several modes is the convolution of the single-mode shapers. A shaped reference is
q_s(t) = sum_i A_i q_d(t - t_i) (and the same for the rates), so it reaches the target after the shaper's
duration and the vibration that a rest-to-rest move leaves in the shaped modes cancels.

Frequencies from the model (`model_modes`): the oscillatory poles of the arm linearized at the target
configuration, either with the joints clamped ('clamped': an ideal stiff servo), free ('free') or closed by a
given linear feedback u = -K x on x = (dz, dzd) ('closed_loop': the frequencies and damping the controller
actually produces; this is what the shaper should cancel).
"""
from __future__ import annotations

import math

import numpy as np

from .reference import Reference


class Shaper:
    def __init__(self, amplitudes, times):
        a = np.asarray(amplitudes, dtype=float)
        t = np.asarray(times, dtype=float)
        order = np.argsort(t, kind='stable')
        self.amplitudes, self.times = a[order], t[order]

    @property
    def duration(self):
        return float(self.times[-1]) if self.times.size else 0.0

    def convolve(self, other: 'Shaper') -> 'Shaper':
        a = np.outer(self.amplitudes, other.amplitudes).ravel()
        t = np.add.outer(self.times, other.times).ravel()
        return Shaper(a, t)

    def residual_vibration(self, omega, zeta=0.0):
        """Percentage vibration V(w, zeta) of the shaper relative to a single unit impulse (0 = none)."""
        wd = omega * math.sqrt(max(1.0 - zeta * zeta, 0.0))
        tN = self.duration
        e = self.amplitudes * np.exp(-zeta * omega * (tN - self.times))
        return float(math.hypot(np.sum(e * np.cos(wd * self.times)), np.sum(e * np.sin(wd * self.times))))

    def __repr__(self):
        return f'Shaper(amplitudes={self.amplitudes.tolist()}, times={self.times.tolist()})'


def _k(zeta):
    if not (0.0 <= zeta < 1.0):
        raise ValueError('damping ratio must be in [0, 1)')
    return math.exp(-zeta * math.pi / math.sqrt(1.0 - zeta * zeta))


def zv(freq_hz, zeta=0.0) -> Shaper:
    if not (freq_hz > 0 and math.isfinite(freq_hz)):
        raise ValueError('shaper frequency must be positive')
    K = _k(zeta)
    half = 0.5 / (freq_hz * math.sqrt(1.0 - zeta * zeta))
    return Shaper([1.0 / (1.0 + K), K / (1.0 + K)], [0.0, half])


def zvd(freq_hz, zeta=0.0) -> Shaper:
    if not (freq_hz > 0 and math.isfinite(freq_hz)):
        raise ValueError('shaper frequency must be positive')
    K = _k(zeta)
    half = 0.5 / (freq_hz * math.sqrt(1.0 - zeta * zeta))
    s = (1.0 + K) ** 2
    return Shaper([1.0 / s, 2.0 * K / s, K * K / s], [0.0, half, 2.0 * half])


SHAPERS = {'zv': zv, 'zvd': zvd}        # the choices are controller.kinds.SHAPINGS (a test holds them equal)


def make_shaper(kind, freqs_hz, zetas=None) -> Shaper | None:
    """Convolved shaper for the given modes; kind 'none' gives None."""
    if kind in (None, 'none', ''):
        return None
    if kind not in SHAPERS:
        raise ValueError(f'unknown shaper {kind!r}; choose none, zv or zvd')
    freqs_hz = np.atleast_1d(np.asarray(freqs_hz, dtype=float))
    zetas = np.zeros_like(freqs_hz) if zetas is None else np.broadcast_to(np.asarray(zetas, float), freqs_hz.shape)
    sh = Shaper([1.0], [0.0])
    for f, z in zip(freqs_hz, zetas):
        sh = sh.convolve(SHAPERS[kind](f, z))
    return sh


def model_modes(model, q, source='clamped', K=None, eps=1e-6):
    """(freqs_hz, zetas) of the oscillatory modes of the arm linearized at joint angles q, ascending.

    source: 'clamped' (joint coordinates removed), 'free' (zero joint torque) or 'closed_loop' (u = -K x).
    Damping from the model's modal damping (and the feedback for closed_loop)."""
    from flexarm_sim.model import linearize
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = np.asarray(q, dtype=float)
    lin = linearize(model, z0, eps=eps)
    A, B = lin.state_space()
    N = model.n_coords
    if source == 'clamped':
        keep = np.asarray(model.mode_index)
        sub = np.ix_(keep, keep)
        M, Kc, Dc = lin.mass[sub], lin.stiffness[sub], lin.damping[sub]
        m = keep.size
        A = np.block([[np.zeros((m, m)), np.eye(m)], [-np.linalg.solve(M, Kc), -np.linalg.solve(M, Dc)]])
    elif source == 'closed_loop':
        if K is None:
            raise ValueError('closed_loop needs the feedback matrix K')
        A = A - B @ np.asarray(K, dtype=float)[:, :2 * N]
    elif source != 'free':
        raise ValueError(f'unknown mode source {source!r}')
    lam = np.linalg.eigvals(A)
    lam = lam[lam.imag > 1e-6]
    w = np.abs(lam)
    zeta = -lam.real / w
    order = np.argsort(w)
    return w[order] / (2 * np.pi), np.clip(zeta[order], 0.0, 0.99)


class ShapedReference(Reference):
    """q_s(t) = sum_i A_i q_d(t - t_i) for any reference (which must hold its start state before it starts)."""

    def __init__(self, reference: Reference, shaper: Shaper):
        self.reference, self.shaper = reference, shaper
        self.n_joints = reference.n_joints

    @property
    def end_time(self):
        return self.reference.end_time + self.shaper.duration

    def sample(self, t):
        q = v = a = 0.0
        for A, ti in zip(self.shaper.amplitudes, self.shaper.times):
            qi, vi, ai = self.reference.sample(t - ti)
            q, v, a = q + A * qi, v + A * vi, a + A * ai
        return q, v, a
