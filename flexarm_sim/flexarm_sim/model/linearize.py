"""Linearization of the arm about a configuration, and the natural modes of the whole arm.

About an equilibrium (z0, zd = 0, tau0) the equations J(z) z'' = R(z, zd, tau) give
J0 dz'' + D_lin dz' + K_lin dz = B dtau with K_lin = -dR/dz, D_lin = -dR/dzd and B = dR/dtau, all by
central differences of the (exact) kernel terms. For free joints (tau = 0) the whole-arm natural
frequencies solve the symmetric generalized eigenproblem K_lin v = w^2 J0 v (undamped).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg


@dataclass(frozen=True)
class Linearization:
    z0: np.ndarray
    tau0: np.ndarray
    mass: np.ndarray        # J(z0)
    stiffness: np.ndarray   # K_lin = -dR/dz
    damping: np.ndarray     # D_lin = -dR/dzd
    input: np.ndarray       # B = dR/dtau, (N, n)

    def state_space(self):
        """(A, B) of x' = A x + B u with x = (dz, dzd)."""
        N = self.mass.shape[0]
        Jinv_K = np.linalg.solve(self.mass, self.stiffness)
        Jinv_D = np.linalg.solve(self.mass, self.damping)
        Jinv_B = np.linalg.solve(self.mass, self.input)
        A = np.block([[np.zeros((N, N)), np.eye(N)], [-Jinv_K, -Jinv_D]])
        B = np.vstack([np.zeros_like(Jinv_B), Jinv_B])
        return A, B


def linearize(model, z0, tau0=None, eps=1e-6) -> Linearization:
    """Linearize J z'' = R about (z0, 0, tau0) by central differences of R."""
    N, n = model.n_coords, model.n_joints
    z0 = np.asarray(z0, dtype=float)
    tau0 = np.zeros(n) if tau0 is None else np.asarray(tau0, dtype=float)
    zd0 = np.zeros(N)
    K = np.zeros((N, N))
    D = np.zeros((N, N))
    B = np.zeros((N, n))
    for k in range(N):
        e = np.zeros(N)
        e[k] = eps
        K[:, k] = -(model.rhs(z0 + e, zd0, tau0) - model.rhs(z0 - e, zd0, tau0)) / (2 * eps)
        D[:, k] = -(model.rhs(z0, zd0 + e, tau0) - model.rhs(z0, zd0 - e, tau0)) / (2 * eps)
    for k in range(n):
        e = np.zeros(n)
        e[k] = 1.0
        B[:, k] = model.rhs(z0, zd0, tau0 + e) - model.rhs(z0, zd0, tau0)
    return Linearization(z0, tau0, model.mass_matrix(z0), K, D, B)


@dataclass(frozen=True)
class ArmModes:
    frequencies_hz: np.ndarray   # ascending, including the (near-)zero rigid-body modes of free joints
    shapes: np.ndarray           # (N, N) columns mass-normalised: v^T J v = 1
    n_rigid: int                 # number of rigid-body (zero-frequency) modes

    @property
    def elastic_frequencies_hz(self) -> np.ndarray:
        return self.frequencies_hz[self.n_rigid:]


def whole_arm_modes(model, q, free_joints=True, eps=1e-6) -> ArmModes:
    """Undamped natural modes of the whole arm at joint angles q (deflections zero).

    free_joints: joints carry zero torque (rigid-body modes at 0 Hz when gravity does not restrain them);
    otherwise the joints are clamped (joint coordinates removed).
    """
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = np.asarray(q, dtype=float)
    lin = linearize(model, z0, eps=eps)
    J, K = lin.mass, 0.5 * (lin.stiffness + lin.stiffness.T)
    if not free_joints:
        keep = model.mode_index
        J, K = J[np.ix_(keep, keep)], K[np.ix_(keep, keep)]
    w2, V = scipy.linalg.eigh(K, J)
    tol = 1e-8 * max(1.0, float(np.max(np.abs(w2))))
    n_rigid = int(np.sum(np.abs(w2) < tol)) if free_joints else 0
    freqs = np.sqrt(np.clip(w2, 0.0, None)) / (2 * np.pi)
    return ArmModes(freqs, V, n_rigid)


def joint_hf_inertia(model, q=None):
    """Effective inertia of each joint with the links free, 1 / diag(J^-1) (joint rows), at joint angles q
    (deflections zero; default the nominal configuration): what a joint torque accelerates above the elastic
    modes. A sampled or fast joint loop (velocity gain k_v) must be slow against it. Rigid arm: 1 / diag(J^-1)."""
    z = np.zeros(model.n_coords)
    z[model.q_index] = model.spec.nominal_configuration if q is None else q
    return 1.0 / np.diag(np.linalg.inv(model.mass_matrix(z)))[np.asarray(model.q_index)]
