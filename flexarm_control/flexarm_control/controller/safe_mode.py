"""The controllers' safe mode (no ROS): when states come late, stop coming or are implausible, hold the arm on its
reference with a law designed for that degraded loop, and return to the reference smoothly when they are good again.

Why a law of its own. Over ROS on a loaded machine the controller answers states irregularly: measured with two CPU
hogs on the 2-core machine, the interval between answered states has p99 ~40 ms and p99.9 ~100 ms, the state's age
when acted on p99 ~7 ms and max ~30-50 ms. The torque is then held (zero-order hold) for those intervals and acts
those ages late. A law designed for one 2 ms period (the modal LQR) or with its velocity gains capped for 50 ms of delay
(the former fallback, elbow kp 4.8e-6 N m/rad) does not hold a flexible arm there: on the De Luca arm the elbow's
high-frequency inertia with the links free is 2.3e-4 kg m^2 (the 29 Hz whole-arm mode is mostly the elbow joint),
and any feedback of the joint states that sees that mode through a delay of a few ms gives it negative damping
(the discrete-time analysis below: every joint PD tried had spectral radius > 1 beyond 6 ms of delay).

The hold law (`SafeHoldLaw`): tau = tau_ff(q_d, qd_d, qdd_d) - K(q_s) [z - z_r; zd - zd_r] (z_r = (q_d, the static
deflection at q_s), zd_r = (qd_d, 0); tau_ff the rigid-body inverse dynamics of the reference), with K from
`design_hold`:
  1. the arm linearized at its static equilibrium at q_s (M dz'' + D dz' + K dz = B dtau) and its undamped modes
     K phi = w^2 M phi (mass-normalised, eta = Phi^T M dz);
  2. the modes the degraded loop can damp are controlled: |w| < w_cut = (pi/2 - PHASE_RESERVE) / max(T/2 + d) over
     the envelope (the zero-order hold over a period T lags T/2, the delay d; PHASE_RESERVE = 30 deg is kept for the
     loop's own phase), plus every unstable direction (w^2 < 0: gravity); the others are neither observed nor
     fed back (modal filter: the gain acts on Phi_c^T M z only), so the loop cannot destabilize them — their
     closed-loop poles are their open-loop ones (|lambda| = 1 for the undamped De Luca arm, its own damping else).
     On an arm that differs from the model the filter sees a little of them (spillover): the links' own damping
     must outweigh it — on the De Luca arm with payload +-20 % and E.I -+15 % 0.3 % modal damping does, 0.1 % does
     not, and undamped no authority is stable (test_safe_mode.py, bench_estimation.py's third table);
  3. a continuous LQR on the controlled modal coordinates: joint angles weighted 1/DQ^2 (their controlled part),
     elastic energy (w^2 eta^2 + eta'^2) / ENERGY_REF, torque 1/(a tau_max)^2 with the authority a; the feedback
     torque is low-passed (time constant FILTER_S, over the time that really passed between two states): behind a
     stall the arm has moved and the next feedback would step by it, and a torque step kicks the modes left alone
     (undamped in the De Luca model: in process, random stalls rang the elbow's 29 Hz mode up to 0.25 rad without
     the low-pass, 0.03-0.1 with it);
  4. the authority a (a fraction of each joint's effort limit) maximizes the worst decay rate over the envelope:
     for every state period T and age d of the envelope (a grid of ENVELOPE_GRID x ENVELOPE_GRID points from
     (1/rate, 0) to (design_period, design_delay)), the sampled loop with the delay — x_{k+1} = Phi x_k +
     G_old u_{k-m-1} + G_new u_{k-m}, d = m T + f, G_old = e^{A(T-f)} int_0^f e^{As} ds B, G_new = int_0^{T-f}
     e^{As} ds B, augmented with the inputs held and the low-pass — must have spectral radius rho < 1, and its decay
     rate -ln(rho) / T is what is maximized (golden-section search on log a, `choose_authority`). A cell whose loop
     is not stable over the envelope is not used (`HoldDesign.stable`).
Within a plan (tip_tracking: a planned state and torque trajectory z*(t), tau*(t), laws/tip_tracking.py) the hold
law follows the plan instead: tau = tau*(t + d) - K(q_s) [z - z* - e; zd - zd* - e'] (d the loop's input delay, e
the return's offset on the joints): the plan's torque is what moves the arm along the planned path, the low-gain
feedback keeps it there. In process (test_safe_mode.py, the standard move, two entries into the safe mode on a
loaded transport with a trigger_count of 3) the tip stays within 1.2 mm RMS of its path; tracking the rigid reference
it lagged 69 mm.
Gains are scheduled on the reference configuration on a grid (`schedule_step`, laws/schedule.py: joint 0 of an arm
turning about gravity's axis is cyclic, not gridded) and interpolated multilinearly (no torque steps between cells);
cells are designed ahead by a GainDesigner thread in real time, on demand in process.

The supervisor (`SafeMode`) per state:
  * implausible (joint angle beyond its limits + JOINT_MARGIN, joint rate beyond RATE_FACTOR x its limit, a link's
    tip deflection beyond DEFLECTION_LIMIT x its length, or a joint jump that no motion within the velocity limits
    explains): not acted on (no command: the plant's or the bridge's command watchdog takes over if it lasts),
    counted, and counted as late;
  * late (older than max_state_age, each period skipped since the previous state counted as one period of age: the
    previous command was held that long beyond its design): `trigger_count` late states within TRIGGER_WINDOW_S, or
    one held beyond `stall_limit`, switch to the safe mode. Two states arriving together over DDS (one skipped) are on
    time for the modal laws, designed for 4 ms of delay (two periods at 500 Hz; laws/modal.py: stable for actual
    delays of 0-8 ms); a stall of 10-30 ms (about one a second on the 2-core machine) is ridden through - and it makes
    several late states in a row (the states queued behind it come held longer), hence a trigger_count of 6, not 3: with 3
    the modal law on the strain_accel estimate entered at idle in 4 of 6 runs over DDS (32-40 mm tip RMS against
    13.8-14.4 mm on its own law; 2026-12-03, issue 28). Measured with 3 over DDS, De Luca standard move under
    tip_tracking (2026-11-26): at load ~2 2 of 4 runs on its own law all along (tip 0.8 mm RMS, 2.6-2.8 max), the
    others entered once (bursts of 3 late states) and none was lost; every late state a trigger kept nearly every run
    on the hold law (72-78 mm); 3 late states *in a row* lost the arm in 3 of 4 runs under two CPU hogs (late states
    interleaved with on-time ones never made a row);
  * in the safe mode, YIELD_COUNT states in a row older than design_delay, or fewer states in the last
    YIELD_WINDOW_S than one per YIELD_GAP_FACTOR x design_period (single longer gaps are commands held longer, which
    the soft hold loop rides through as transients; a state rate that low for a second is not), are beyond what the
    hold law is designed for: the controller stops commanding ("yields"), so the drives' command watchdog (the plant's
    `watchdog.action` hold, the bridge's) holds the arm — a drive-level loop, undelayed, which also damps the modes
    the hold law leaves alone — until `recover_time` of states within that envelope bring the hold law back
    (returning from the current state; a plant waiting for its first command publishes every 50 ms: within it);
  * `recover_time` of states on time switch back to the normal law (its integrators reset): at once when the law
    returns the arm by itself (`ControlLaw.returns_unaided`: the modal laws; the return re-planned from the arm's
    state) and not one state was late in that time (an isolated stall: late states still coming would catch the
    normal law, designed for 4 ms of delay, in the next stall), else once the hold law has brought the arm
    back: its return ended and the arm within RETURN_TOLERANCE of the reference (at most RETURN_SETTLE_S later).
Every switch is bumpless: for SWITCH_FADE_S the torque is (1 - w) of the previous law's plus w of the new one's (w a
raised cosine from 0 to 1; two laws give different torques for the same state, and a step of torque rings the
stiffest modes); back to the normal law for HANDBACK_MODE_PERIODS periods of the lowest elastic mode
(`handback_fade_time`: a raised cosine of duration T leaves a mode of frequency f the residual of a step times
|cos(pi f T)| / |1 - (2 f T)^2|, 0.92 for 0.2 s on the De Luca arm's 1.42 Hz mode, zero at f T = 1.5; handed back
mid-move, the modal law takes an arm the hold law let lag, and a 0.2 s fade bent link 1 to 15.4 % of its length
in process, 9.7 % with 1.06 s, the move's own) — unless the previous law was not in the loop (no state answered for
longer than design_period: the controller was stopped, the plant restarted; the plant's watchdog release fades
then) — and it re-plans from the
current state: the reference the active law tracks becomes the user's reference plus
an offset that starts at the arm's measured position (of the controlled modes: `SafeHoldLaw.slow_joints`; after a
stall or within a plan at its rate too) and at the reference's rate and acceleration so far (`SafeMode.replan`), and
decays to zero along a quintic (`Blend`) in the time that keeps its rate below return_speed and its acceleration
below return_speed / RETURN_RAMP_S (`blend_time`), and not shorter than two periods of the arm's lowest elastic mode
(`return_time_min`: a faster return rings the links as a faster move would), so neither switch makes a jump in the
reference nor a burst of feed-forward torque.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..laws.base import ControlLaw, rigid_model_of
from ..laws.lti import delayed_discretization, lqr
from ..laws.schedule import ScheduleGrid
from ..laws.reference import ReferenceManager

PHASE_RESERVE = math.radians(30.0)   # phase kept for the hold loop itself when choosing the controlled modes
DQ = 0.05                            # rad, joint excursion of the LQR weights
ENERGY_REF = 0.003                   # J, elastic energy of a controlled mode of the LQR weights
AUTHORITY_RANGE = (1e-4, 1.0)        # fraction of the effort limit the feedback may use (search range)
ENVELOPE_GRID = 3                    # points per axis of the envelope checked (periods x delays)
SEARCH_STEPS = 16                    # golden-section steps on log(authority)
BLEND_MIN_S = 0.25                   # s, shortest return to the reference
RETURN_MODE_PERIODS = 2.0            # a return lasts at least this many periods of the arm's lowest elastic mode
RETURN_RAMP_S = 0.5                  # s: a return's acceleration is at most return_speed / RETURN_RAMP_S
SWITCH_FADE_S = 0.2                  # s: after a switch of law the torque fades from the old law's to the new one's
HANDBACK_MODE_PERIODS = 1.5          # the fade back to the normal law lasts this many periods of the lowest mode
FILTER_S = 0.02                      # s: time constant of the hold law's low-pass on its feedback torque
RETURN_TOLERANCE = 0.02              # rad: the hold law has brought the arm back when it is this close to the reference
RETURN_SETTLE_S = 3.0                # s after a return's end the normal law takes over anyway
JOINT_MARGIN = 0.5                   # rad beyond the joint limits: an implausible angle
RATE_FACTOR = 3.0                    # x the velocity limit: an implausible joint rate
DEFLECTION_LIMIT = 0.5               # x the link length: an implausible (linearized) tip deflection
JUMP_WINDOW_S = 0.25                 # s: consecutive states closer than this must be joined by a possible motion
STATS_WINDOW = 2000                  # states in the rolling age / interval statistics
WARN_EVERY_S = 2.0                   # s of state time between two warnings of implausible states
YIELD_WINDOW_S = 1.0                 # s: the window over which the safe mode's state rate is judged
YIELD_COUNT = 3                      # states in a row older than design_delay: the safe mode yields
TRIGGER_WINDOW_S = 0.25             # s: trigger_count late states within it switch to the safe mode (module docstring)
YIELD_GAP_FACTOR = 2.0               # states fewer than one per this x design_period in the window: the safe mode yields


# ---------------------------------------------------------------------------------------------- the analysis
def closed_loop_matrix(disc, K, a=0.0):
    """The transition matrix of the sampled, delayed loop (delayed_discretization) with the controller
    u_k = a u_{k-1} - (1 - a) K x_k (a first-order low-pass of the feedback; a = 0: u_k = -K x_k), on the state
    (x_k, u_{k-1}, ..., u_{k-m-1})."""
    m, Phi, G_new, G_old = disc
    nx, nu = G_new.shape
    L = m + 1
    F = np.zeros((nx + L * nu, nx + L * nu))
    F[:nx, :nx] = Phi
    if m == 0:
        F[:nx, :nx] -= (1.0 - a) * G_new @ K
        F[:nx, nx:nx + nu] += a * G_new
    else:
        F[:nx, nx + (m - 1) * nu: nx + m * nu] += G_new
    F[:nx, nx + m * nu:] += G_old
    F[nx:nx + nu, :nx] = -(1.0 - a) * K
    F[nx:nx + nu, nx:nx + nu] += a * np.eye(nu)
    for i in range(1, L):
        F[nx + i * nu: nx + (i + 1) * nu, nx + (i - 1) * nu: nx + i * nu] = np.eye(nu)
    return F


def sampled_delayed_loop(A, B, K, T, d, filter_s=0.0):
    """Closed-loop transition matrix of x' = A x + B u with the feedback -K x(kT) computed at kT, low-passed (time
    constant filter_s; 0: none) and applied from kT + d on, held until the next command applies (zero-order hold).
    State (x_k, u_{k-1}, ..., u_{k-m-1}), d = m T + f."""
    return closed_loop_matrix(delayed_discretization(A, B, T, d), K,
                              math.exp(-T / filter_s) if filter_s > 0 else 0.0)


def spectral_radius(F) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(F)))) if F.size else 0.0


@dataclass(frozen=True)
class Envelope:
    """The sampled loops the hold law is designed for: every state period in [period, max_period], every state age
    (sample instant to command) in [0, max_delay]."""

    period: float
    max_period: float
    max_delay: float

    def points(self, grid=ENVELOPE_GRID):
        Ts = np.linspace(self.period, max(self.period, self.max_period), grid)
        ds = np.linspace(0.0, self.max_delay, grid)
        return [(float(T), float(d)) for T in Ts for d in ds]

    @property
    def largest_lag(self) -> float:
        """s: the largest phase lag over the envelope as a delay (half the hold period + the age)."""
        return 0.5 * max(self.period, self.max_period) + self.max_delay

    @property
    def cut_frequency(self) -> float:
        """rad/s: modes below it are controlled."""
        return (0.5 * math.pi - PHASE_RESERVE) / max(self.largest_lag, 1e-9)


@dataclass
class HoldDesign:
    K: np.ndarray                 # (n, 2N) feedback on (dz, dzd)
    z_eq: np.ndarray              # static equilibrium at the design configuration
    tau_eq: np.ndarray
    authority: float              # fraction of the effort limits
    decay_rate: float             # 1/s, worst over the envelope (-ln rho / T); <= 0: not stable there
    controlled_hz: np.ndarray     # the controlled modes (0 for rigid, negative: unstable directions' rates)
    uncontrolled_hz: np.ndarray
    P: np.ndarray = None          # (N, nc) the controlled mode shapes; dz_c = P W dz is the controlled part of dz
    W: np.ndarray = None          # (nc, N) their modal filter Phi_c^T M

    @property
    def stable(self) -> bool:
        return self.decay_rate > 0.0


class HoldModel:
    """The linearization and modal split at one configuration, and the LQR / envelope analysis on it."""

    def __init__(self, model, q, envelope: Envelope):
        from flexarm_sim.model import linearize
        from flexarm_sim.model.equilibrium import static_equilibrium
        self.model = model
        N, n = model.n_coords, model.n_joints
        self.qi = np.asarray(model.q_index)
        self.z_eq, self.tau_eq = static_equilibrium(model, np.asarray(q, dtype=float))
        lin = linearize(model, self.z_eq, self.tau_eq)
        M, D, B = lin.mass, lin.damping, lin.input
        K = 0.5 * (lin.stiffness + lin.stiffness.T)
        w2, Phi = scipy.linalg.eigh(K, M)
        w = np.sqrt(np.abs(w2))
        ctl = (w < envelope.cut_frequency) | (w2 < 0.0)
        self.w2 = w2
        self.controlled = ctl
        Pc = Phi[:, ctl]
        nc = Pc.shape[1]
        self.P = Pc
        self.W = Pc.T @ M                                # eta_c = W dz (mass-orthogonal projection)
        self.A = np.block([[np.zeros((nc, nc)), np.eye(nc)], [-np.diag(w2[ctl]), -(Pc.T @ D @ Pc)]])
        self.B = np.vstack([np.zeros((nc, n)), Pc.T @ B])
        Cq = Pc[self.qi, :]
        Q = np.zeros((2 * nc, 2 * nc))
        Q[:nc, :nc] = Cq.T @ Cq / DQ ** 2
        elastic = np.abs(w2[ctl]) > 1e-6 * max(1.0, float(np.max(np.abs(w2))))
        Q[:nc, :nc] += np.diag(np.where(elastic, np.abs(w2[ctl]), 0.0)) / ENERGY_REF
        Q[nc:, nc:] += np.diag(np.where(elastic, 1.0, 0.0)) / ENERGY_REF
        self.Q = Q + 1e-12 * np.eye(2 * nc)
        lims = np.array([js.effort_limit for js in model.spec.joints], dtype=float)
        self.tau_max = np.where(np.isfinite(lims) & (lims > 0), lims, 1.0)
        self.envelope = envelope
        self.N, self.n = N, n
        self._disc = None

    def hz(self, mask):
        w2 = self.w2[mask]
        return np.where(w2 >= 0, np.sqrt(np.abs(w2)), -np.sqrt(np.abs(w2))) / (2 * math.pi)

    def modal_gain(self, authority):
        return lqr(self.A, self.B, self.Q, np.diag(1.0 / (authority * self.tau_max) ** 2))[0]

    def decay_rate(self, Kc) -> float:
        """Worst decay rate (1/s) of the controlled loop over the envelope (negative: unstable somewhere)."""
        if self._disc is None:
            self._disc = [(T, delayed_discretization(self.A, self.B, T, d)) for T, d in self.envelope.points()]
        worst = math.inf
        for T, disc in self._disc:
            rho = spectral_radius(closed_loop_matrix(disc, Kc, math.exp(-T / FILTER_S)))
            worst = min(worst, -math.log(max(rho, 1e-300)) / T)
        return worst

    def full_gain(self, Kc):
        nc = self.W.shape[0]
        return np.hstack([Kc[:, :nc] @ self.W, Kc[:, nc:] @ self.W])

    def design(self, authority) -> HoldDesign:
        if self.A.shape[0] == 0:          # nothing to control (no joints can move anything: not an arm we accept)
            return HoldDesign(np.zeros((self.n, 2 * self.N)), self.z_eq, self.tau_eq, 0.0, 0.0,
                              np.zeros(0), self.hz(~self.controlled), self.P, self.W)
        Kc = self.modal_gain(authority)
        return HoldDesign(self.full_gain(Kc), self.z_eq, self.tau_eq, float(authority), self.decay_rate(Kc),
                          self.hz(self.controlled), self.hz(~self.controlled), self.P, self.W)


def choose_authority(hm: HoldModel, lo=AUTHORITY_RANGE[0], hi=AUTHORITY_RANGE[1], steps=SEARCH_STEPS) -> HoldDesign:
    """The design whose worst decay rate over the envelope is largest: golden-section search on log(authority)."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(lo), math.log(hi)
    cache = {}

    def f(x):
        if x not in cache:
            try:
                cache[x] = hm.design(math.exp(x))
            except (np.linalg.LinAlgError, ValueError):
                cache[x] = None
        d = cache[x]
        return -math.inf if d is None else d.decay_rate
    c, e = b - g * (b - a), a + g * (b - a)
    for _ in range(steps):
        if f(c) >= f(e):
            b, e = e, c
            c = b - g * (b - a)
        else:
            a, c = c, e
            e = a + g * (b - a)
    best = max((x for x in cache if cache[x] is not None), key=f, default=None)
    if best is None:
        raise ValueError('no hold design: the LQR has no solution on this envelope')
    return cache[best]


def design_hold(model, q, envelope: Envelope, authority=None) -> HoldDesign:
    """The hold design at joint configuration q (module docstring); authority None: the best over the envelope."""
    hm = HoldModel(model, q, envelope)
    if authority is None:
        return choose_authority(hm)
    d = hm.design(authority)
    if not d.stable:                      # this cell needs its own authority
        d = choose_authority(hm)
    return d


# ---------------------------------------------------------------------------------------------- the hold law
class SafeHoldLaw(ControlLaw):
    """The safe mode's law (module docstring); gain-scheduled on the reference like the modal LQR in real time:
    with `design_on_demand` False a missing cell is listed in `wanted` (a GainDesigner designs it) and the nearest
    designed cell is used meanwhile."""

    name = 'safe_hold'

    def __init__(self, model, envelope: Envelope, schedule_step=0.2, feedforward=True, schedule_on='state', **kw):
        super().__init__(model, **kw)
        self.schedule_on = schedule_on
        self.envelope = envelope
        self.schedule_step = float(schedule_step)
        self.feedforward = bool(feedforward)
        self.rigid = rigid_model_of(model)
        self._schedule = ScheduleGrid(model, self.schedule_step)        # laws/schedule.py
        self._cache = {}
        self.design_on_demand = True
        self.wanted = collections.deque()
        self.n_designs = 0
        self.unstable_cells = 0
        self._fb = None                  # (t, feedback torque) of the last call: the low-pass's state
        q0 = np.asarray(model.spec.nominal_configuration, dtype=float)
        self.nominal = design_hold(model, q0, envelope)          # the authority every cell starts from
        self._cache[self._key(q0)] = self.nominal
        self.n_designs += 1

    # a law that plans its references (tip_tracking; set by the runtime): while its plan is in force the hold law
    # follows the plan (planned(): its torque as feed-forward, its states as the reference), not the rigid reference
    plan_law = None
    ff_lead = 0.0                        # s: the plan's torque is taken this much ahead (the loop's input delay)

    def planned(self, t):
        """(z*, zd*, tau*) of the planning law's plan at plant time t, or None (no plan in force at t)."""
        plan = getattr(self.plan_law, 'plan', None)
        if plan is None or not plan.t0 - 0.5 * plan.dt <= t <= plan.t_end:
            return None
        zs, zds, _ = plan.sample(t)
        return zs, zds, plan.sample(t + self.ff_lead)[2]

    # the GainDesigner's interface (controller/designer.py)
    generation = 0

    def _key(self, q):
        return self._schedule.nearest(q)

    def _corners(self, q):
        return self._schedule.corners(q)

    def design_cell(self, key):
        d = design_hold(self.model, self._schedule.configuration(key), self.envelope, self.nominal.authority)
        self.n_designs += 1
        return d

    def design_recipe(self):
        """(class, keyword arguments) that build a law of the same designs (controller/designer.py)."""
        return type(self), dict(envelope=self.envelope, schedule_step=self.schedule_step, dt=self.dt,
                                effort_limit=self.effort_limit.copy())

    def install(self, key, design, generation):
        self._cache[key] = design

    def cells_for(self, qs):
        keys = []
        for q in qs:
            for k, _ in self._corners(q):
                if k not in self._cache and k not in keys:
                    keys.append(k)
        return keys

    def prefetch(self, qs):
        for k in self.cells_for(qs):
            self._cache[k] = self.design_cell(k)

    def _cell(self, key):
        d = self._cache.get(key)
        if d is None and not self.design_on_demand:
            if key not in self.wanted:
                self.wanted.append(key)
            near = min(list(self._cache), key=lambda k: sum((a - b) ** 2 for a, b in zip(k, key)))
            return self._cache[near]
        if d is None:
            d = self._cache[key] = self.design_cell(key)
        return d

    def gain(self, q):
        """(K, z_eq) at q: multilinear interpolation of the corner designs (unstable cells: the nominal design), the
        static equilibrium placed at q's cyclic joint angles (laws/schedule.py)."""
        K = z_eq = None
        for key, w in self._corners(q):
            d = self._cell(key)
            if not d.stable:
                d = self.nominal
            K = w * d.K if K is None else K + w * d.K
            z_eq = w * d.z_eq if z_eq is None else z_eq + w * d.z_eq
        return K, self._schedule.place(z_eq, q)

    def feedback_matrix(self, q):
        return self.gain(q)[0]

    def slow_joints(self, z, zd):
        """(q, qd) of the controlled modes only (the modal filter of the design nearest z): the arm's motion without
        the vibration of the modes the hold leaves alone (a return starts from it: the instantaneous joint rate of
        the De Luca elbow carries its 29 Hz mode, several rad/s when it rings)."""
        d = self._cell(self._key(z[self.qi]))
        z_eq = self._schedule.place(d.z_eq.copy(), z[self.qi])
        dz = d.P @ (d.W @ (z - z_eq)) + z_eq
        dzd = d.P @ (d.W @ zd)
        return dz[self.qi], dzd[self.qi]

    def reset(self):
        super().reset()
        self._fb = None

    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        N = self.model.n_coords
        p = self.planned(t)
        if p is not None:                # on the plan: its torque, its states (+ the return's offset on the joints)
            zs, zds, ff = p
            K, _ = self.gain(z[self.qi] if self.schedule_on == 'state' else zs[self.qi])
            dz, dzd = z - zs, zd - zds
            b = getattr(self.references, 'blend', None)
            if b is not None and t <= b.end_time:
                e, ed, _ = b.sample(t)
                dz[self.qi] -= e
                dzd[self.qi] -= ed
        else:
            K, z_eq = self.gain(z[self.qi] if self.schedule_on == 'state' else q_d)
            dz = z - z_eq
            dz[self.qi] = z[self.qi] - q_d
            dzd = zd.copy()
            dzd[self.qi] = zd[self.qi] - qd_d
            ff = self.rigid.inverse_dynamics(q_d, qd_d, qdd_d) if self.feedforward else \
                self.rigid.inverse_dynamics(q_d, np.zeros(self.n), np.zeros(self.n))
        fb = -K[:, :N] @ dz - K[:, N:] @ dzd
        prev = self._fb
        if prev is not None and t > prev[0]:           # the low-pass over the time that really passed
            a = math.exp(-min(t - prev[0], 10 * FILTER_S) / FILTER_S)
            fb = a * prev[1] + (1.0 - a) * fb
        elif prev is not None:
            fb = prev[1]
        self._fb = (t, fb)
        return ff + fb

    def summary(self) -> str:
        d = self.nominal
        e = self.envelope
        return (f'hold law designed for state periods {1e3 * e.period:g}-{1e3 * e.max_period:g} ms and ages up to '
                f'{1e3 * e.max_delay:g} ms: authority {100 * d.authority:.1f} % of the effort limits, worst decay '
                f'{d.decay_rate:.2f} 1/s, modes controlled {_hz(d.controlled_hz)} Hz, left to their own damping '
                f'{_hz(d.uncontrolled_hz)} Hz')


def _hz(f):
    return '[' + ', '.join(f'{x:.3g}' for x in f) + ']'


# ---------------------------------------------------------------------------------------------- the return
def _quintic_to_zero(s):
    """The quintics that start at value 1 (h0), slope 1 (h1), curvature 1 (h2) — the others zero — and end at rest at
    zero (value, slope and curvature 0 at s = 1): an offset p(s) = e0 h0 + v0 T h1 + a0 T^2 h2. Returns the values,
    first and second derivatives in s of (h0, h1, h2)."""
    s = min(max(s, 0.0), 1.0)
    s2, s3, s4, s5 = s * s, s ** 3, s ** 4, s ** 5
    h = (1.0 - 10 * s3 + 15 * s4 - 6 * s5, s - 6 * s3 + 8 * s4 - 3 * s5, 0.5 * s2 - 1.5 * s3 + 1.5 * s4 - 0.5 * s5)
    dh = (-30 * s2 + 60 * s3 - 30 * s4, 1.0 - 18 * s2 + 32 * s3 - 15 * s4, s - 4.5 * s2 + 6 * s3 - 2.5 * s4)
    ddh = (-60 * s + 180 * s2 - 120 * s3, -36 * s + 96 * s2 - 60 * s3, 1.0 - 9 * s + 18 * s2 - 10 * s3)
    return h, dh, ddh


def blend_time(e0, v0, speed, t_min=BLEND_MIN_S):
    """s: the duration of a return from offset e0 (rate v0) whose offset rate stays below `speed` and acceleration
    below speed / RETURN_RAMP_S (the quintics' peaks: |h0'| 1.875, |h0''| 5.774, |h1''| 3.940; |v0| itself may
    exceed `speed`: it is where the arm is), and at least t_min (`return_time_min`)."""
    e, v = float(np.max(np.abs(e0))), float(np.max(np.abs(v0)))
    a = speed / RETURN_RAMP_S
    t_acc = (3.940 * v + math.sqrt((3.940 * v) ** 2 + 4.0 * a * 5.774 * e)) / (2.0 * a)
    return max(BLEND_MIN_S, float(t_min), 1.875 * e / speed, t_acc)      # (BLEND_MIN_S: whatever t_min is)


def lowest_elastic_hz(model, design: HoldDesign) -> float:
    """Hz: the lowest elastic frequency of the arm with its joints free (zero torque) at the design's configuration
    (inf for a rigid arm): of the free arm's n + m frequencies (n joints, m elastic coordinates) the m highest are
    the elastic ones; the n lowest are its rigid motions (0) or their gravity pendulum."""
    m = len(model.mode_index)
    f = np.sort(np.concatenate([design.controlled_hz, design.uncontrolled_hz]))
    f = f[len(f) - m:] if m else f[:0]
    f = f[f > 0.0]
    return float(f.min()) if f.size else math.inf


def lowest_mode_periods(model, design: HoldDesign, periods: float, floor: float) -> float:
    """s: `periods` periods of the arm's lowest elastic mode (`lowest_elastic_hz`), at least `floor` (a rigid arm:
    `floor`)."""
    f = lowest_elastic_hz(model, design)
    return max(floor, periods / f if math.isfinite(f) else 0.0)


def return_time_min(model, design: HoldDesign) -> float:
    """s: the shortest return to the reference after a switch of law: RETURN_MODE_PERIODS periods of the arm's
    lowest elastic mode (`lowest_elastic_hz`), at least BLEND_MIN_S. A rest-to-rest quintic of duration T leaves in a
    mode of frequency f the residual vibration of a step of the same size times 0.46 at f T = 1, 0.12 at 1.5, 0.03
    at 2 (|int h''(t) e^{-i w t} dt| / w): a return timed by the rate and acceleration limits alone (0.62 s for 0.054
    rad) is f T = 0.88 on the De Luca arm's 1.42 Hz mode — handed back to the modal law 0.054 rad off after the
    move, it bent link 1 to 0.15 m of tip deflection and swung the elbow 0.17 rad (in process); 2 periods: 0.03 m."""
    return lowest_mode_periods(model, design, RETURN_MODE_PERIODS, BLEND_MIN_S)


def handback_fade_time(model, design: HoldDesign) -> float:
    """s: the fade from the hold law's torque to the normal law's when the normal law resumes (`SafeMode.bumpless`):
    HANDBACK_MODE_PERIODS periods of the arm's lowest elastic mode, at least SWITCH_FADE_S."""
    return lowest_mode_periods(model, design, HANDBACK_MODE_PERIODS, SWITCH_FADE_S)


@dataclass
class Fade:
    """A switch of law in progress (`SafeMode.bumpless`): the previous law, evaluated with the blend it tracked, fades
    out over `duration` from t0; `carry`: the applied torque minus the previous law's at the switch, fading with it
    (set when the switch interrupted another fade; `pending` until the first evaluation after the switch)."""

    law: object
    t0: float
    blend: object
    duration: float
    pending: bool = False
    carry: np.ndarray = None

    def running(self, t) -> bool:
        return 0.0 <= t - self.t0 < self.duration


@dataclass
class Blend:
    """An offset added to a reference from t0: e0 (rate v0, acceleration a0) at t0, decaying to zero at rest at t0 + T
    (quintic); constant e0 before t0 (a shaper samples the past)."""

    t0: float
    T: float
    e0: np.ndarray
    v0: np.ndarray
    a0: np.ndarray = None

    @property
    def end_time(self):
        return self.t0 + self.T

    def sample(self, t):
        if t < self.t0:
            z = np.zeros_like(self.e0)
            return self.e0.copy(), z, z
        h, dh, ddh = _quintic_to_zero((t - self.t0) / self.T)
        T = self.T
        c = (self.e0, self.v0 * T, (np.zeros_like(self.e0) if self.a0 is None else self.a0) * T * T)
        return (sum(ci * hi for ci, hi in zip(c, h)), sum(ci * hi for ci, hi in zip(c, dh)) / T,
                sum(ci * hi for ci, hi in zip(c, ddh)) / (T * T))


class BlendedReferences(ReferenceManager):
    """The reference manager of a runtime's laws, plus the offset of the current return (Blend) if any. A new
    reference ends the offset: it starts from the blended reference state (ReferenceManager.from_msg / move_to
    sample this manager), so it is continuous too."""

    def __init__(self, reference=None):
        super().__init__(reference)
        self.blend = None

    @classmethod
    def adopt(cls, manager: ReferenceManager):
        out = cls()
        out._segments = list(manager._segments)
        return out

    def sample(self, t):
        q, qd, qdd = super().sample(t)
        b = self.blend
        if b is None:
            return q, qd, qdd
        if t > b.end_time:
            return q, qd, qdd
        e, ed, edd = b.sample(t)
        return np.asarray(q, float) + e, np.asarray(qd, float) + ed, np.asarray(qdd, float) + edd

    def set(self, reference, t_now=-math.inf):
        super().set(reference, t_now)
        self.blend = None


# ---------------------------------------------------------------------------------------------- plausibility
class StateCheck:
    """Is a state physically possible for this arm? (module docstring) '' or why not."""

    def __init__(self, model):
        self.model = model
        js = model.spec.joints
        self.names = list(model.spec.joint_names)
        self.qi = np.asarray(model.q_index)
        lims = np.array([j.position_limits for j in js], dtype=float)
        self.lo, self.hi = lims[:, 0] - JOINT_MARGIN, lims[:, 1] + JOINT_MARGIN
        v = np.array([j.velocity_limit for j in js], dtype=float)
        self.vmax = np.where(np.isfinite(v) & (v > 0), v, np.inf) * RATE_FACTOR
        d = model.data
        self.links = []
        for j in range(model.n_joints):
            m = model.link_modes[j].n_modes
            if m:
                start = int(d.q_index[j]) + 1
                self.links.append((j, slice(start, start + m), np.asarray(d.phi_tip[j][:, :m], dtype=float),
                                   DEFLECTION_LIMIT * float(js[j].link.length)))
        self._prev = None        # (t, q) of the last plausible state

    def __call__(self, t, z, zd) -> str:
        q, qd = z[self.qi], zd[self.qi]
        bad = np.nonzero((q < self.lo) | (q > self.hi))[0]
        if bad.size:
            j = int(bad[0])
            return f'{self.names[j]} at {q[j]:.4g} rad, beyond its limits + {JOINT_MARGIN} rad'
        bad = np.nonzero(np.abs(qd) > self.vmax)[0]
        if bad.size:
            j = int(bad[0])
            return f'{self.names[j]} at {qd[j]:.4g} rad/s, beyond {RATE_FACTOR:g}x its velocity limit'
        for j, sl, phi, lim in self.links:
            defl = float(np.linalg.norm(phi @ z[sl]))
            if defl > lim:
                return (f'link of {self.names[j]}: tip deflection {defl:.3g} m, beyond {DEFLECTION_LIMIT:g}x its '
                        'length')
        prev = self._prev
        if prev is not None and 0.0 < t - prev[0] < JUMP_WINDOW_S:
            step = np.abs(q - prev[1])
            allowed = self.vmax * (t - prev[0]) + 1e-3
            bad = np.nonzero(step > allowed)[0]
            if bad.size:
                j = int(bad[0])
                return (f'{self.names[j]} jumped {step[j]:.4g} rad in {1e3 * (t - prev[0]):.1f} ms (faster than '
                        f'{RATE_FACTOR:g}x its velocity limit)')
        self._prev = (t, q.copy())
        return ''


# ---------------------------------------------------------------------------------------------- the supervisor
NORMAL, SAFE = 'normal', 'safe'


class SafeMode:
    """Decides per state which law answers it (or none) and re-plans the return at every switch (module
    docstring). `on_state` returns the law to call, or None (do not command)."""

    def __init__(self, law, hold: SafeHoldLaw, references: BlendedReferences, values: dict, max_state_age: float,
                 log=None):
        self.law = law
        self.hold = hold
        self.refs = references
        self.log = log or (lambda level, msg: None)
        self.max_state_age = float(max_state_age)
        self.trigger_count = int(values['safe_mode.trigger_count'])
        self.stall_limit = float(values['safe_mode.stall_limit'])
        self.recover_time = float(values['safe_mode.recover_time'])
        self.return_speed = float(values['safe_mode.return_speed'])
        self.return_time_min = return_time_min(law.model, hold.nominal)
        self.handback_fade = handback_fade_time(law.model, hold.nominal)
        self.check = StateCheck(law.model)
        self.mode = NORMAL
        self.entries = 0
        self.reason = ''
        self.late_states = 0
        self.implausible = 0
        self.too_old = 0
        self.last_implausible = ''
        self._late_times = collections.deque()      # plant times of the late states within TRIGGER_WINDOW_S
        self._t_late = -math.inf           # plant time of the last late or implausible state
        self._t_on_time = None
        self._t_last_acted = None
        self._paced = False                # states seen one control period apart (the loop is closed)
        self._ages = collections.deque(maxlen=STATS_WINDOW)
        self._gaps = collections.deque(maxlen=STATS_WINDOW)
        self.max_age_seen = 0.0
        self.time_in_safe_mode = 0.0
        self._t_entered = None
        self.on_switch = None              # callback(new_mode, t): the runtime's designer hooks
        self._fade = None                  # Fade: bumpless transfer after a switch
        self._last_out = None              # the torque of the last answer (bumpless)
        self.yielding = False              # in the safe mode, beyond the hold law's envelope: not commanding
        self.yields = 0
        self._window = collections.deque()           # stamps of the states of the last YIELD_WINDOW_S
        self._old_run = 0
        self._t_within = None
        self._t_warned = None

    @property
    def active(self) -> bool:
        return self.mode == SAFE

    def on_state(self, t, z, zd, age, skipped, next_period=False):
        """The law that answers this state (normal or hold), or None: not acted on. `skipped`: state periods skipped
        since the previous state; `next_period`: it came one period after the previous one."""
        self.max_age_seen = max(self.max_age_seen, age)
        self._ages.append(age)
        why = self.check(t, z, zd)
        if why:
            self.implausible += 1
            self.last_implausible = why
            if self._t_warned is None or not 0.0 <= t - self._t_warned < WARN_EVERY_S:
                self._t_warned = t
                self.log('warn', f'implausible state not acted on: {why} ({self.implausible} so far)')
            self._late(t, z, zd, f'implausible state: {why}', act=False)
            return None
        # skipped periods count once the states come at the control rate: until a command of ours takes effect, a
        # plant waiting for it (wait_for_command) publishes every 50 ms, gaps no command of ours was held over (they
        # put every real-time run in the safe mode at its start)
        if next_period:
            self._paced = True
        elif not self._paced:
            skipped = 0
        held = age + skipped * self.law.dt            # the previous command acted this long beyond its design
        late = held > self.max_state_age
        if late:
            self.late_states += 1
            reason = (f'{skipped} state periods skipped (state {1e3 * age:.1f} ms old: {1e3 * held:.1f} ms, limit '
                      f'{1e3 * self.max_state_age:.1f} ms)' if skipped > 0 else
                      f'state {1e3 * age:.1f} ms old (limit {1e3 * self.max_state_age:.1f} ms)')
            self._late(t, z, zd, reason, stall=held > self.stall_limit)
        else:
            if self.mode == SAFE:
                if self._t_on_time is None:
                    self._t_on_time = t
                elif t - self._t_on_time >= self.recover_time and self._returned(t, z, zd):
                    self._switch(NORMAL, t, z, zd, 'states on time again')
        if self._window and t > self._window[-1]:
            self._gaps.append(t - self._window[-1])
        self._window.append(t)
        while self._window and self._window[0] < t - YIELD_WINDOW_S:
            self._window.popleft()
        if self.mode == SAFE:
            env = self.hold.envelope
            self._old_run = self._old_run + 1 if age > env.max_delay else 0
            beyond = ''
            if self._old_run >= YIELD_COUNT:
                beyond = f'{self._old_run} states older than {1e3 * env.max_delay:g} ms'
            elif self._t_entered is not None and t - self._t_entered >= YIELD_WINDOW_S and \
                    len(self._window) * YIELD_GAP_FACTOR * env.max_period < YIELD_WINDOW_S:
                beyond = f'{len(self._window)} states in the last {YIELD_WINDOW_S:g} s'
            if beyond:
                self._t_within = None
                if not self.yielding:
                    self.yielding = True
                    self.yields += 1
                    self.log('warn', f'safe mode: {beyond}, beyond what the hold law is designed for '
                                     f'({1e3 * env.max_delay:g} ms of age, {1e3 * env.max_period:g} ms periods): not '
                                     'commanding, the drives\' command watchdog holds the arm')
            elif self.yielding:
                if self._t_within is None:
                    self._t_within = t
                elif t - self._t_within >= self.recover_time:
                    self.yielding = False
                    self._pending_replan = True
                    self.log('info', 'states within the hold law\'s design again: hold law, returning to the '
                                     'reference from the current state')
        if self.mode == SAFE and self.yielding:
            self.too_old += 1
            return None
        gap = t - self._t_last_acted if self._t_last_acted is not None else 0.0
        self._t_last_acted = t
        if self.mode == SAFE:
            # entered on implausible states, back from yielding, or after a stall longer than the drives' command
            # watchdog may wait (they may have held the arm away from the reference): the return starts here
            if self._pending_replan or gap > YIELD_GAP_FACTOR * self.hold.envelope.max_period:
                self.replan(t, z, zd, in_loop=False)
                self.hold.reset()
            return self.hold
        return self.law

    def _late(self, t, z, zd, reason, stall=False, act=True):
        """One late (or implausible) state: `trigger_count` of them within TRIGGER_WINDOW_S, or one `stall`, switch to
        the safe mode; in the safe mode they restart its recover_time (an isolated late state does not)."""
        self._t_late = t
        late = self._late_times
        late.append(t)
        while late and late[0] < t - TRIGGER_WINDOW_S:
            late.popleft()
        triggered = stall or len(late) >= self.trigger_count
        if triggered:
            self._t_on_time = None
        if self.mode == NORMAL and triggered:
            self.reason = reason
            if act:
                self._switch(SAFE, t, z, zd, reason)
            else:                          # nothing plausible to start the return from yet: at the next good state
                self.mode = SAFE
                self.entries += 1
                self._t_entered = t
                self._pending_replan = True
                self.log('warn', f'safe mode ({reason}): not commanding until a plausible state')
                if self.on_switch is not None:
                    self.on_switch(SAFE, t)

    _pending_replan = False

    def _switch(self, mode, t, z, zd, reason):
        if mode == SAFE:
            self.entries += 1
            self._t_entered = t
            self.reason = reason
            self.log('warn', f'safe mode: {reason}: hold law ({self.hold.summary()}) until the states are on time for '
                             f'{self.recover_time:g} s; returning to the reference from the current state')
        else:
            if self._t_entered is not None:
                self.time_in_safe_mode += max(0.0, t - self._t_entered)
            self._t_entered = None
            self.law.reset()
            self.log('info', f'{reason}: normal law resumed, returning to the reference from the current state')
        in_loop = self._t_last_acted is not None and t - self._t_last_acted <= self.hold.envelope.max_period
        # a switch while the previous one still fades: the torque applied, a mix of both laws, is what must continue
        interrupted = self._fade is not None and self._fade.running(t)
        self._fade = Fade(self.law if mode == SAFE else self.hold, t, self.refs.blend,
                          SWITCH_FADE_S if mode == SAFE else self.handback_fade, interrupted) if in_loop else None
        self.mode = mode
        self.yielding = False
        self._t_on_time = None
        self._late_times.clear()
        self.replan(t, z, zd, in_loop)
        if self.on_switch is not None:
            self.on_switch(mode, t)

    def _returned(self, t, z, zd) -> bool:
        """May the normal law take over: it returns the arm by itself (`returns_unaided`), or the hold law has
        brought the arm back (its return ended, the arm within RETURN_TOLERANCE of the reference, or RETURN_SETTLE_S
        after the return's end)? Otherwise the normal law takes over an arm on its reference: pd_servo's soft joint
        gains (elbow kp ~0.004 N m/rad at 500 Hz) would not bring it back themselves."""
        if self.yielding:
            return True                    # nothing was being returned: the drives hold the arm
        if self.law.returns_unaided and t - self._t_late >= self.recover_time:
            return True                    # not one late state for recover_time: the stall was an isolated one
        b = self.refs.blend
        if b is not None and t < b.end_time:
            return False
        if b is not None and t >= b.end_time + RETURN_SETTLE_S:
            return True
        q, _ = self.hold.slow_joints(z, zd)
        p = self.hold.planned(t)
        q_r = p[0][self.hold.qi] if p is not None else np.asarray(self.hold.reference.sample(t)[0], float)
        return float(np.max(np.abs(q - q_r))) <= RETURN_TOLERANCE

    def bumpless(self, t, z, zd, tau):
        """The torque to apply: tau (the active law's) while no switch fades, else (1 - w) of the previous law's —
        evaluated with the reference it tracked — plus w tau. A switch during a fade (the states late again while the
        normal law fades back in) fades from the torque then applied, the mix: the previous law's torque plus the
        difference at the switch (`carry`, fading with it); from the previous law's alone the torque stepped by up to
        1 N m (two bursts of late states 1.1 s apart on the De Luca arm, in process)."""
        f = self._fade
        if f is not None:
            if not f.running(t):
                self._fade = None
            else:
                w = 0.5 - 0.5 * math.cos(math.pi * (t - f.t0) / f.duration)
                new_blend, self.refs.blend = self.refs.blend, f.blend
                try:
                    tau_old = f.law(t, z, zd)
                finally:
                    self.refs.blend = new_blend
                if f.pending:              # the switch interrupted a fade: start from the torque applied then
                    f.pending = False
                    if self._last_out is not None:
                        f.carry = self._last_out - tau_old
                if f.carry is not None:
                    tau_old = tau_old + f.carry
                lim = self.law.effort_limit
                tau = np.clip(w * tau + (1.0 - w) * tau_old, -lim, lim)
        self._last_out = np.array(tau, dtype=float)
        return tau

    def replan(self, t, z, zd, in_loop=True):
        """Start the return to the user's reference from the arm's measured position at t (z, zd).

        in_loop (a law was answering states until the switch): the offset starts at the arm's position but with the
        reference's rate and acceleration so far (the torque it asks stays): the arm's rate off the reference at such a
        switch is the running law's transient (the modal law swings the De Luca elbow +-0.15 rad about a 30 deg move,
        at up to 1 rad/s), and a quintic started at that rate carries the reference on by ~0.1 T |v0|, T growing with
        |v0| under the acceleration limit (4.3 s for 1.07 rad/s): the reference went 0.5 rad away and the arm with it.
        In process, one burst of late states at each of 26 instants of the standard 30 deg move (0.1 s apart): 8 ended
        more than 0.2 rad off 1.5 s after the move (worst 0.56 rad), none now (worst 0.074).
        Otherwise (after a stall, a yield, implausible states: no law was in the loop, the arm coasted or the drives
        held it) and within a plan (tip_tracking: the plan's torque drives the arm, the offset only the feedback) it
        starts at the arm's rate, with the user's reference's acceleration."""
        refs = self.refs
        if refs.active is None:
            return
        active = self.hold if self.mode == SAFE else self.law
        _, qd_was, qdd_was = (np.asarray(x, float) for x in active.reference.sample(t))
        refs.blend = None
        q, qd = self.hold.slow_joints(z, zd)
        planned = self.hold.planned(t)
        p = planned if self.mode == SAFE else None
        if p is not None:                # the hold law follows the plan: the return is to the plan's joints
            qi = self.hold.qi
            q_r, qd_r = p[0][qi], p[1][qi]
        else:
            q_r, qd_r, qdd_r = active.reference.sample(t)
        in_plan = planned is not None
        e0 = q - np.asarray(q_r, float)
        v0 = (qd_was if in_loop and not in_plan else qd) - np.asarray(qd_r, float)
        a0 = qdd_was - np.asarray(qdd_r, float) if in_loop and p is None else np.zeros_like(e0)
        # a return along a plan may be short; one along the rigid reference (its inverse dynamics as feed-forward) is
        # a move of its own and must not ring the links (return_time_min)
        t_min = BLEND_MIN_S if in_plan else self.return_time_min
        refs.blend = Blend(t, blend_time(e0, v0, self.return_speed, t_min), e0, v0, a0)
        self._pending_replan = False

    def diagnostics(self) -> dict:
        ages = np.array(self._ages) if self._ages else np.zeros(1)
        gaps = np.array(self._gaps) if self._gaps else np.zeros(1)
        return {'safe_mode': 'on' if self.active else 'off', 'safe_mode_entries': self.entries,
                'safe_mode_reason': self.reason, 'safe_mode_time_s': self.time_in_safe_mode + (
                    max(0.0, self._t_last_acted - self._t_entered)
                    if self._t_entered is not None and self._t_last_acted is not None else 0.0),
                'late_states': self.late_states, 'states_implausible': self.implausible,
                'last_implausible': self.last_implausible, 'safe_mode_not_commanding': self.yielding,
                'safe_mode_yields': self.yields, 'states_not_acted_on': self.too_old,
                'max_state_age_ms': 1e3 * self.max_age_seen,
                'state_age_p99_ms': 1e3 * float(np.percentile(ages, 99)),
                'state_interval_p99_ms': 1e3 * float(np.percentile(gaps, 99)),
                'state_interval_max_ms': 1e3 * float(gaps.max()),
                'hold_design': self.hold.summary(), 'hold_cells_designed': self.hold.n_designs}
