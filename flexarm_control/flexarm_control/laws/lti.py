"""Linear time-invariant design, as pure functions (python-control's style: arrays in, arrays out): the sampled
model with an input delay and its delay-augmented state, and the Riccati gains (LQR, discrete LQR, the LQR with
multiplicative noise, the stationary Kalman filter). Every law, the safe mode and the estimator design with these;
the zero-order hold itself is flexarm_sim.model.zero_order_hold (the model's).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from flexarm_sim.model import zero_order_hold


def delayed_discretization(A, B, T, d):
    """(m, Phi, G_new, G_old) of x' = A x + B u sampled every T with the input acting d = m T + f late:
    x_{k+1} = Phi x_k + G_old u_{k-m-1} + G_new u_{k-m} (G_old: the older input, over [0, f); zero when f = 0)."""
    m = int(math.floor(d / T + 1e-9))
    f = max(d - m * T, 0.0)
    Phi, _ = zero_order_hold(A, B, T)
    E_new, G_new = zero_order_hold(A, B, T - f)
    _, G_f = zero_order_hold(A, B, f)
    return m, Phi, G_new, E_new @ G_f


def history_length(dt, delay):
    """Past commands u_{k-1} .. u_{k-H} a design for `delay` = m dt + f feeds back: H = m + 1 (m when f = 0)."""
    if delay <= 0:
        return 0
    m = int(math.floor(delay / dt + 1e-9))
    return m + (1 if delay - m * dt > 1e-9 * dt else 0)


def delay_augmented(disc, H):
    """(Aa, Ba) of the sampled loop with its input delay (`delayed_discretization`) on the state
    s_k = (x_k, u_{k-1}, ..., u_{k-H}), H >= the commands the delay reaches back to: s_{k+1} = Aa s_k + Ba u_k."""
    m, Phi, G_new, G_old = disc
    nx, n = G_new.shape
    S = nx + H * n
    Aa, Ba = np.zeros((S, S)), np.zeros((S, n))
    Aa[:nx, :nx] = Phi
    for lag, G in ((m, G_new), (m + 1, G_old)):
        if lag == 0:
            Ba[:nx] += G
        elif lag <= H:
            Aa[:nx, nx + (lag - 1) * n: nx + lag * n] += G
        elif np.any(G):
            raise ValueError(f'a history of {H} commands does not reach the delay ({lag} periods)')
    if H:
        Ba[nx:nx + n] = np.eye(n)
        for j in range(1, H):
            Aa[nx + j * n: nx + (j + 1) * n, nx + (j - 1) * n: nx + j * n] = np.eye(n)
    return Aa, Ba


ROBUST_ITERATIONS = 100
ROBUST_TOLERANCE = 1e-6


def lqr(A, B, Q, R):
    """(K, P): u = -K x minimizing int x'Qx + u'Ru for x' = A x + B u (continuous Riccati equation; K = R^-1 B'P)."""
    P = scipy.linalg.solve_continuous_are(A, B, Q, R)
    return np.linalg.solve(R, B.T @ P), P


def dlqr(A, B, Q, R):
    """(K, P): u_k = -K x_k minimizing sum x'Qx + u'Ru for x_{k+1} = A x_k + B u_k (discrete Riccati equation;
    K = (R + B'PB)^-1 B'PA)."""
    P = scipy.linalg.solve_discrete_are(A, B, Q, R)
    return np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A), P


def multiplicative_noise_lqr(A, B, Q, R, D, iterations=ROBUST_ITERATIONS, tol=ROBUST_TOLERANCE):
    """(K, converged): the gain u = -K x minimizing E sum x'Qx + u'Ru for x+ = (A + sum_i w_i dA_i) x +
    (B + sum_i w_i dB_i) u, D = [(dA_i, dB_i)], the w_i independent, zero mean, unit variance (the LQR with
    multiplicative noise, Wonham 1968 "Random differential equations in control theory"; Gravell, Mohajerin Esfahani
    and Summers 2020, IEEE TAC 66(11)). Its Riccati equation
        P = Q + A'PA + sum dA_i'P dA_i - (B'PA + sum dB_i'P dA_i)' (R + B'PB + sum dB_i'P dB_i)^-1 (...)
    is solved by the fixed point P_{j+1} = DARE(A, B; Q + sum dA_i'P_j dA_i, R + sum dB_i'P_j dB_i, cross term
    sum dA_i'P_j dB_i) from the noiseless P_0, which increases to the solution when the noise is mean-square
    stabilizable. Not converged in `iterations` (or a Riccati solve failing): the noiseless gain, converged False
    (the iterate's gain is then no design)."""
    def sym(X):
        return 0.5 * (X + X.T)

    def terms(P):
        Qx, Rx, Sx = np.array(Q, dtype=float), np.array(R, dtype=float), np.zeros(B.shape)
        for dA, dB in D:
            Qx += dA.T @ P @ dA
            Rx += dB.T @ P @ dB
            Sx += dA.T @ P @ dB
        return sym(Qx), sym(Rx), Sx

    def gain(P, Rx, Sx):
        return np.linalg.solve(Rx + B.T @ P @ B, B.T @ P @ A + Sx.T)
    P = sym(scipy.linalg.solve_discrete_are(A, B, Q, R))
    noiseless = gain(P, R, np.zeros(B.shape))
    for _ in range(iterations):
        Qx, Rx, Sx = terms(P)
        try:
            Pn = scipy.linalg.solve_discrete_are(A, B, Qx, Rx, s=Sx)
        except (np.linalg.LinAlgError, ValueError):
            return noiseless, False
        if not np.all(np.isfinite(Pn)):
            return noiseless, False
        step = np.max(np.abs(Pn - P))
        P = sym(Pn)
        if step <= tol * np.max(np.abs(P)):
            return gain(P, *terms(P)[1:]), True
    return noiseless, False


def dlqe(A, C, Q, R):
    """(L, P, P_post): the stationary Kalman filter of x_{k+1} = A x_k + w_k, y_k = C x_k + v_k (cov w = Q, cov v = R):
    the a-priori covariance P from the dual discrete Riccati equation (solve_discrete_are with A', C'), the gain
    L = P C' (C P C' + R)^-1 and the a-posteriori covariance P_post = P - L C P (symmetrized)."""
    P = scipy.linalg.solve_discrete_are(A.T, C.T, Q, R)
    L = np.linalg.solve(C @ P @ C.T + R, C @ P).T
    P_post = P - L @ C @ P
    return L, P, 0.5 * (P_post + P_post.T)
