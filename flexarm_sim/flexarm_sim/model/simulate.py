"""Offline simulation API (scripts, notebooks, tests): build an arm, simulate, get arrays back.

    from flexarm_sim.model import load_model, simulate
    model = load_model('deluca_two_link.yaml')
    res = simulate(model, T=5.0, dt=1e-3, torque=lambda t, z, zd: [0.2, 0.2] if t < 1 else [0, 0])
    res.t, res.q, res.delta, res.tau, res.tip, res.energy

`torque` is a function (t, z, zd) -> tau or any object with a `__call__` of that signature (a control
law); it is sampled once per control period dt (zero-order hold), the dynamics are integrated with
`substeps` sub-steps per period.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .integrators import ArmState, step


@dataclass
class SimulationResult:
    t: np.ndarray          # (K,)
    z: np.ndarray          # (K, N)
    zd: np.ndarray         # (K, N)
    tau: np.ndarray        # (K, n) torque applied from t[k] to t[k+1] (last row repeats)
    tip: np.ndarray        # (K, 3) deformed tip position of the last link
    energy: np.ndarray     # (K,) total mechanical energy (kinetic + elastic + gravity)
    q_index: np.ndarray
    mode_index: np.ndarray

    @property
    def q(self):
        return self.z[:, self.q_index]

    @property
    def qd(self):
        return self.zd[:, self.q_index]

    @property
    def delta(self):
        return self.z[:, self.mode_index]


def simulate(model, T: float, dt: float, torque=None, z0=None, zd0=None, substeps: int = 1,
             method: str = 'rk4', record_energy: bool = True) -> SimulationResult:
    """Simulate for T seconds with control period dt; returns the sampled trajectory."""
    n_steps = int(round(T / dt))
    N, n = model.n_coords, model.n_joints
    state = ArmState.zeros(model)
    if z0 is not None:
        state.z[:] = z0
    if zd0 is not None:
        state.zd[:] = zd0
    t = np.arange(n_steps + 1) * dt
    Z, ZD = np.zeros((n_steps + 1, N)), np.zeros((n_steps + 1, N))
    TAU, TIP, E = np.zeros((n_steps + 1, n)), np.zeros((n_steps + 1, 3)), np.full(n_steps + 1, np.nan)
    tau = np.zeros(n)
    for k in range(n_steps + 1):
        Z[k], ZD[k] = state.z, state.zd
        TIP[k] = model.tip_pose(state.z)[1]
        if record_energy:
            E[k] = model.energies(state.z, state.zd)['total']
        if torque is not None:
            tau = np.asarray(torque(t[k], state.z.copy(), state.zd.copy()), dtype=float)
        TAU[k] = tau
        if k < n_steps:
            step(model, state, tau, dt, substeps, method)
    return SimulationResult(t, Z, ZD, TAU, TIP, E, model.q_index, model.mode_index)
