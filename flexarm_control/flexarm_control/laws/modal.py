"""Modal state feedback: LQR on joint and modal coordinates with integral action (LQI) and rigid feedforward.

    tau = tau_ff(q_d, qd_d, qdd_d) - K [z - z_r ; zd - zd_r] - K_i xi,     xi' = q - q_d
with z_r = (q_d, delta_eq) (delta_eq: static deflection at the linearization point — zero for a horizontal
arm, the gravity sag otherwise), zd_r = (qd_d, 0), tau_ff the rigid-body inverse dynamics of the reference.

The gain comes from the arm linearized at its static equilibrium at joint angles q_s (`linearize` about
(q_s, delta_eq), torque tau_eq), augmented with the integral of the joint error, and
  * discretized with a zero-order hold at the control period and solved with scipy's solve_discrete_are
    (default: the law runs at a finite rate, and a spatial arm has modes near the Nyquist frequency), or
  * solved with solve_continuous_are (`discrete=False`).
Gain scheduling: q_s is the measured configuration (`schedule_on='state'`; 'reference': the reference's, which
a real-time user can design ahead with `prefetch` — a tracking error then never asks for an unplanned design) on a
grid of `schedule_step` rad: gains are designed (and cached) at the grid points and interpolated multilinearly
between the 2^n points around q_s, so they vary continuously with the configuration (laws/schedule.py; on an arm
turning about gravity's axis joint 0 is cyclic and the grid spans the other joints only).

Weights (Bryson's rule: each quantity divided by its allowed excursion, each input by its allowed torque), on
physical quantities only:
  tip position (linearized, C_tip = d p_tip / dz)   C_tip^T C_tip / tip_max^2         tip_max: 0.6 mm per m of reach
  tip velocity                                      C_tip^T C_tip / tip_rate_max^2    tip_max w_f (w_f = 2 pi f_f, the
                                                                                      first whole-arm elastic frequency,
                                                                                      joints free)
  modal rates: vibration kinetic energy            J_dd / (M modal_rate_max^2)       modal_rate_max = tip_rate_max
    1/2 delta'^T J_dd delta' against 1/2 M v^2      (M: the arm's moving mass)
  joint angle, joint rate                           1 / dq_max^2, 1 / dq_rate_max^2   8 tip_max / reach,
                                                                                      16 tip_rate_max / reach
  joint error integral (only with `integral`)       1 / (dq_max T_i)^2                T_i = integral_time
  torque j                                          1 / (rho tau_max,j)^2             tau_max,j = effort limit, rho 0.15
Why these, measured on the De Luca arm (60 deg cycloid of both joints in 2.5 s, 500 Hz, lock-step, tip_tracking)
against a plant with +20 % payload and -15 % E.I (the controller's model nominal) and with the fed-back modal
coordinates scaled by 0.85 and 1.15 (a real arm's modal coordinates are only as good as its model):
  * weighting the tip tightly (0.5 mm/m) with light modal-rate weights gives the best perturbed tracking but a
    closed loop that goes unstable for a modal scale of 0.95 or 1.05: a fast loop (near the Nyquist frequency)
    through the modal rates whose high-frequency gain nearly cancels the joints' (non-collocated rate feedback);
  * heavy modal-rate and joint-rate weights keep the velocity feedback collocated-dominant: the loop stays stable
    for modal scales 0.85-1.15 and +-20 % payload / +-15 % E.I at every configuration of the schedule
    (test_modal_design.py checks the spectral radius), at the price of tip tracking under model error (the
    perturbed arm's tip: 6.0 mm RMS over 6 s, where the fragile tight design reaches 2.7 mm) - with a
    certainty-equivalent design; tip_tracking's robust lock-step design (below) has both.
Robust lock-step design (tip_tracking: `lockstep_robust_errors` = LOCKSTEP_ROBUST_ERRORS, `lockstep_joint_factor`
2, `lockstep_modal_rate_factor` 0.9; `robust` 0 makes it certainty-equivalent): the undelayed sampled LQR with
multiplicative noise (as the robust delay design below) whose directions are the spread of arms the law is to hold, the
model with +20 % payload and -15 % E.I and with -20 % and +15 % (size 1 each), and tighter joint and modal-rate
allowances than the modal law's rule. The noise keeps the gain from relying on the exact low whole-arm frequencies,
which lets the joints be held 4x tighter without losing the modal-scale robustness. De Luca arm, lock-step, the
standard move (perturbed arm +20 % payload, -15 % E.I: tip RMS / max / ringing; stable modal scale at the start,
middle and end of the move; every payload x stiffness corner stable in each row):
  certainty-equivalent, former rule (dq 8 tip_max / reach, modal rate 1x)   6.73 / 16.9 / 1.87 mm   x0.78-1.18
  certainty-equivalent, best weights of a search under the x0.85-1.15 bound 5.55 / 14.0 / 1.62 mm   (bound active)
  robust, ROBUST_ERRORS (the delay design's noise), dq 2, modal rate 0.93   7.39 / 17.4 / 2.36 mm   x0.66-1.17
  robust, LOCKSTEP_ROBUST_ERRORS, dq 2, modal rate 1.0                      3.33 / 8.92 / 2.64 mm   x0.34-1.15
  robust, LOCKSTEP_ROBUST_ERRORS, dq 2, modal rate 0.9 (the default)        3.58 / 9.57 / 2.96 mm   x0.33-1.16
  robust, LOCKSTEP_ROBUST_ERRORS, dq 2, modal rate 0.8                      3.90 / 10.4 / 3.36 mm   x0.31-1.17
(scale ranges scanned in steps of 0.01; the margin table of bench_controllers.py bisects: the default x0.32-1.17)
The nominal arm keeps the plan's figures (0.173 / 0.806 mm); slewing_beam x0.30-1.23 (perturbed 0.715 mm),
spatial_3r x0.66-1.19 (1.01 mm), rigid_puma3 0.079 mm; the lock-step loop now also stays stable for actual delays of
0-4 ms on the De Luca arm (certainty-equivalent: 0-1 ms). A cell costs the fixed point's iterations (De Luca arm:
59 ms of CPU against 10; in lock-step the plant waits for them). Delayed designs keep the rule's allowances: with
these, designed for 4 ms, the slewing beam's loop was stable for actual delays of 0-1 and 3-5 ms only (the rule's:
0-10 ms), spatial_3r's for 0-7 ms (0-12 ms), though the De Luca arm's tracked the perturbed arm better (below).
Damping floor (per-mode modal-rate weights): the kinetic-energy weight above is shared by all link modes, so a mode
the joints hardly move (the De Luca arm's 16 Hz mode: link 2's second clamped mode, 16.119 Hz clamped and 16.119 Hz
with the joints free) is left almost undamped by the design (closed-loop damping ratio 0.0002, decay 0.02 1/s: a
knock rings for minutes). After each design the sampled closed loop it is designed for (the linearization, with the
input delay) is examined; an elastic mode damped less than MODE_DAMPING_FLOOR (1 %) and within 10 % of a clamped
link mode's frequency gets that clamped mode's rate weight (eta_i' = v_i^T J_dd delta', mass-normalized clamped
shapes v_i) raised by (1.1 floor / zeta)^2 and the gain designed again (up to FLOOR_ITERATIONS times): for such a
weakly coupled mode the damping the LQR gives grows with the square root of its weight. De Luca arm: the 16 Hz mode
gets 1.1 % (decay 1.1 1/s); the other modes, the stable modal-scale range (modal x0.76-1.19, tip_tracking
x0.78-1.18) and the tip figures are unchanged; the payload x stiffness corners' spectral radius falls (0.99997 ->
0.99856); the other shipped arms' modes are already above the floor. A 2 % floor needs twice that gain, which on the
perturbed plant outside the model's validity (modal law, 22 % deflection) made the elbow torque chatter: 1 % it is.
No integrator unless the arm has friction (`integral` not set: on when a joint has viscous or Coulomb friction):
a flexible arm without friction or bias has no steady-state error to remove, and the integrator's slow poles only
add a lingering offset (the old design's -0.10 and -0.41 1/s). With friction it is fast (T_i = 0.2 s) with
conditional integration against windup.
Input delay (`input_delay` = tau = m dt + f > 0, s; over ROS the command computed from the state of instant k acts
only after the state's and the command's transport): the discrete design uses the exact ZOH model of the delayed
input, x_{k+1} = Phi x_k + G_new u_{k-m} + G_old u_{k-m-1} (G_new = int_0^{dt-f} e^{As} ds B, G_old = e^{A(dt-f)}
int_0^f e^{As} ds B: `delayed_discretization`), augmented with the previous commands (`delay_augmented`): the gain is
u_k = -K x_k - K_u (u_{k-1}, ..., u_{k-H}), the u being the feedback parts of the previous (saturated) commands.
Without this, the LQR designed for an undelayed sample drives the elbow's light high-frequency inertia (links free)
unstable behind 1-2 ms of delay. Which delay to design for (real time, `design_periods`): the actual delay over
DDS varies (the state's age p50 ~1 ms, p99 ~10 ms on the loaded 2-core machine, plus the command's transport). On
the De Luca arm at 500 Hz (the sampled loop's largest spectral radius at 0, 30 and 60 deg, actual delays 0-12 ms,
with the damping floor; the certainty-equivalent design, see below): designed for one period (2 ms) the loop is
stable for actual delays of 1-3 ms and 5 ms (0 ms: 1.37, 4 ms: 1.21); for two periods (4 ms) for 0-5 ms and 7 ms
(6 and 8 ms: 1.006-1.007, a growth of 3 1/s; 10 ms: 1.025); for three (6 ms) for 1-11 ms (0 ms: 1.02); a fractional
design (5 ms) for almost none. In process, tip_tracking with 20 % of the states skipped and delays of 2-10 ms: 0.9 mm
tip RMS designed for two periods, the arm lost designed for one. Over DDS (flexarm run, real time, load ~2): designed
for two periods 2 of 4 runs followed the plan to 0.73-0.76 mm, none was lost; for three, 2 of 4 lost the arm. At
500 Hz two periods it is (lock-step designs for none); with the robust design below one period still holds only 1-3 and 5 ms.
At other rates the delay, not the count of periods, is what matters: the design is for DESIGN_DELAY_S = 4 ms in whole
periods, at least one (`design_periods`). De Luca arm, robust design, stable actual delays (0 and 0.5 rad beyond the
nominal configuration): 250 Hz (the bridge's loop_rate) one period 0-9 ms, two periods (8 ms) 2-13 ms only; 1 kHz
four periods 0-8 ms, two 0-5 ms; 200 Hz one period 0-11 ms, two 3-14 ms but not 5; 100 Hz one period 1-14 ms, two
15-20 ms only (slewing_beam at 250 Hz: 0-9 against 2-14 ms; spatial_3r 0-20 ms both). The hardware path (bridge at
250 Hz, prompt writes: the command acts 1-4 ms after its reading) against the servo emulator, modal on the encoder
estimate, the 30 deg move (bench/bench_hardware_path.py, 2026-12-03): designed for 8 ms the tip rang 0.97-16.1 mm
(6 runs) 3.5 s after the move, the elbow chattering at up to 6.5 rad/s into the bridge's velocity limit (0-150 limit
interventions a run); for 4 ms 0.39-1.15 mm (8 runs; lock-step at 250 Hz 0.66 mm), no limit intervention.
Robust delay design (`robust`, ROBUST_ERRORS; delayed designs): the delayed
LQR above is certainty-equivalent - the optimal gain for the delay-augmented model is the undelayed gain applied to
the model's prediction of the state m periods ahead - and that prediction is only as good as the model: on the De
Luca arm designed for 4 ms, a plant with +20 % payload and -15 % E.I has its 1.8 and 3.0 Hz whole-arm closed-loop
modes at damping -0.10 and -0.18 (lock-step: +0.18, +0.13), every +-20 % payload x +-15 % E.I corner is unstable at
every actual delay 0-10 ms (4 ms: radius 1.0066), and in process the perturbed arm behind exactly 4 ms is lost (tip
RMS 43.6 mm, torque saturated) where the lock-step loop tracks it to 6.7 mm. Neither a larger torque weight (x2-x10:
1.0068-1.0072), weights on the previous commands or on the command's rate (1.0067-1.0080) nor a scaled-down
predictor (K_u x0.5-0.8: unstable) helps. The delayed design is therefore the LQR with multiplicative noise
(`multiplicative_noise_lqr`; Wonham 1968, Gravell et al. 2020): the sampled, delay-augmented model
A + sum_i w_i dA_i, w_i independent unit-variance noises, dA_i = size_i x (the erring arm's augmented A - the
model's), the erring arms being the model with -15 % E.I and G.J (size 3) and with +20 % payload (size 0.5): the
gain minimizes the expected cost over the spread of arms, so it stops relying on the exact low whole-arm frequencies.
The sizes, measured (De Luca arm, 4 ms design; corners stable at actual delays / nominal band / stable modal scale /
perturbed arm behind 4 ms, tip RMS, max, ringing): the combined +20 % payload, -15 % E.I direction x2: 0-10 ms /
0-11 ms / x0.66-1.13 / 13.6, 29.9, 7.3 mm (too cautious: the low modes barely fed back); E.I only x2: holes at 2 and
6 ms / 0-1, 3-5, 7 ms / x0.82-1.14 / 6.6, 15.2, 3.8 mm; E.I x3 and payload x0.5 (the default): 0-7 ms (<= 0.99928;
8 ms: 1.011) / 0-8 ms / x0.80-1.147 / 7.35, 15.3, 5.2 mm (actual 2 and 6 ms: 7.24 and 7.50 mm RMS; nominal arm
0.173 mm, the plan's); the modal law 0-7 ms / 0-8 ms / x0.78-1.17. A lighter modal-rate weight (modal_rate_max
0.01 m/s) would reach the issue's 5 / 12 / 4 mm (4.33, 10.0, 1.7 mm) at a modal scale range of x0.86-1.10 - the
trade-off of the certainty-equivalent lock-step design, not taken; with tip_tracking's lock-step allowances (dq 2,
modal rate 0.9: "Robust lock-step design") this delayed design holds that arm behind 4 ms to 4.81 / 8.66 / 4.99 mm
(De Luca, modal scale x0.78-1.15, corners 0-7 ms) but loses delay margin on the other arms (above), so delayed
designs keep the rule's allowances (LOCKSTEP_ROBUST_ERRORS as this design's noise: 7.68 / 15.5 mm). The 16 Hz mode
keeps its floor (2.1 %); the nominal loop's 2.6 Hz mode is damped 3-5 % (certainty-equivalent: 10.5 %).
slewing_beam and spatial_3r: margins as before or wider. Both laws design robustly (`robust_delay_design` 1). Without
its reference prediction (below) the modal law's delayed loop tracked the rigid reference half as well as the undelayed
one whatever the design (in process, the 30 deg move, the command acting exactly 4 ms after its state: tip RMS 34.5 mm
certainty-equivalent, 39.3 mm robust, undelayed 16.0 mm); with it 16.4 mm certainty-equivalent, 18.9 mm robust - and on
the +20 % payload / -15 % E.I arm 21.1 mm at 11.7 % deflection robust, where the certainty-equivalent one saturates
(34.6 / 80.1 mm, 16.9 %). A design costs the certainty-equivalent one's Riccati solve times the fixed point's iterations
(~24 on the De Luca arm: 44 ms a cell on the idle machine against 10 ms, 29 cells for the standard move; in real time
they are designed in a process of their own, controller/designer.py). A noise that cannot be mean-square stabilized (or
a failing Riccati solve) is halved, then quartered (ROBUST_FALLBACK_SCALES), at worst the certainty-equivalent gain, and
counted (`robust_unconverged`): the slewing beam sampled at 100 Hz behind 20 ms is not stabilizable at the full sizes,
and the fixed point's last iterate, which was taken as the gain, had a joint gain of 0.003 N m/rad (certainty-equivalent
19.0; that run's tip 240 mm off; halved: 17.9, tip 0.72 mm).
Reference over the delay (delayed designs; `prediction_periods` m, the whole periods of the input delay): the delayed
certainty-equivalent gain on (x_k, u_{k-1}, ..) is the undelayed gain on the error predicted m periods ahead by the
model from the feedback commands issued but not acting yet; that prediction takes the reference for a trajectory of
the model under its feedforward. A rigid reference under the rigid feedforward is not one (the flexible arm deflects
under that torque): its defect delta_k = Phi x_r,k + G ff_{k-m} - x_r,k+1 over the delay entered the loop m periods
late, and the tip tracked 2.2x worse than undelayed (figures above). The law adds it to the prediction, the error fed
back being e_k + sum_{j<m} Phi^-(1+j) delta_{k+j}, which telescopes to the state predicted with the feedforwards issued
too, against the reference m periods ahead:
    u_fb = -K x_k + K_0 x_r(t + m dt) - sum_i K_f,i (ff_{k-i} - tau_eq) - K_u (u_{k-1}, ..),   K_0 = K Phi^-m
(deviations from the linearization point; K_f: `reference_prediction`; G_new and G_old of a fractional delay each where
it acts), the feedforward sampled for the instant it acts (t + input_delay). For a reference that is a trajectory of
the sampled model the added terms cancel (test_modal_design); they are feedforward only: the loop's stability and
margins are the design's. The lock-step (undelayed) law is unchanged. For a certainty-equivalent K, K Phi^-m is the
undelayed gain (K = K_0 Phi^m, and K_f = K_u); the robust K has no such factor, and its own K Phi^-m tracks better
than K_0 of the certainty-equivalent design beside it (the De Luca move above: 18.9 against 26.7 mm; perturbed arm 21.1
against 28.0 mm). tip_tracking does not predict: its plan is a trajectory of the model (`predicts_reference`).
Integral action runs only while the reference is at rest (|qd_d| = |qdd_d| = 0): during a move the joint error of
a flexible arm is large and transient, integrating it would only wind up. Saturation: conditional integration.
"""
from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import scipy.linalg

from flexarm_sim.model import zero_order_hold
from flexarm_sim.model.equilibrium import static_equilibrium  # noqa: F401  (re-exported: laws API)

from flexarm_sim.common.params import DERIVED, Param, boolean, float_range

from .base import ControlLaw, rigid_model_of
from .lti import (delay_augmented, delayed_discretization, dlqr, history_length, lqr,  # noqa: F401 (laws API)
                  multiplicative_noise_lqr)
from .schedule import ScheduleGrid


def tip_jacobian(model, z, eps=1e-6):
    """(3, N) derivative of the deformed tip position with respect to z (central differences)."""
    N = model.n_coords
    C = np.zeros((3, N))
    for k in range(N):
        e = np.zeros(N)
        e[k] = eps
        C[:, k] = (model.tip_pose(z + e)[1] - model.tip_pose(z - e)[1]) / (2 * eps)
    return C


# real-time (delayed) designs: robust to model error (module docstring, "Robust delay design"): independent noises,
# each of `size` times the change from the model to the arm with its payload x `payload` and E.I, G.J x `stiffness`
# (payload, stiffness, size)
ROBUST_ERRORS = ((1.0, 0.85, 3.0), (1.2, 1.0, 0.5))
# lock-step (undelayed) designs of a law with `lockstep_robust_errors` (tip_tracking): the spread of arms the law is
# specified to hold, +20 % payload with -15 % E.I and -20 % with +15 % (module docstring, "Robust lock-step design")
LOCKSTEP_ROBUST_ERRORS = ((1.2, 0.85, 1.0), (0.8, 1.15, 1.0))
ROBUST_FALLBACK_SCALES = (1.0, 0.5, 0.25)        # of the noise sizes, tried in turn until the fixed point converges


# s of transport delay the real-time designs are made for, in whole control periods (ModalLQR.design_periods)
DESIGN_DELAY_S = 0.004
# Bryson allowances of the rule (module docstring): tip_max per metre of reach; joint allowances from the tip ones
TIP_MAX_PER_REACH = 0.6e-3
JOINT_FACTOR = 8.0
JOINT_RATE_FACTOR = 16.0
DEFAULT_RHO = 0.15
FRICTION_INTEGRAL_TIME = 0.2
# every elastic mode of the designed closed loop decays with at least this damping ratio (module docstring)
MODE_DAMPING_FLOOR = 0.01
FLOOR_ITERATIONS = 4
FLOOR_MAX_BOOST = 1e4      # per iteration
FLOOR_AIM = 1.1            # aim a little above the floor (zeta is only nearly proportional to sqrt(weight))
FLOOR_MATCH = 1.1          # a closed-loop mode within 10 % of a clamped mode's frequency is that mode
WEIGHT_NAMES = ('tip_max', 'tip_rate_max', 'modal_rate_max', 'dq_max', 'dq_rate_max', 'rho', 'integral_time',
                'schedule_step')


def _positive(lo=0.0, hi=10.0):
    return float_range(lo=lo, lo_open=True, hi=hi)


class ModalLQR(ControlLaw):
    name = 'modal'
    # real time: designed for DESIGN_DELAY_S of delay in whole periods, at least one (module docstring, "Input delay"):
    # two at 500 Hz (stable for actual delays of 0-8 ms on the De Luca arm, where one period holds 1-3 ms and 5), one at
    # 250 Hz (0-9 ms; two periods there: 2-13 ms, unstable without delay), four at 1 kHz (0-8 ms; two: 0-5 ms)
    @classmethod
    def design_periods(cls, rate: float) -> int:
        return max(1, int(math.floor(DESIGN_DELAY_S * float(rate) + 0.5 + 1e-9)))     # ties up: 375 Hz -> 2
    # the delayed designs' model-error noise, times ROBUST_ERRORS' sizes (module docstring, "Robust delay design"; 0:
    # certainty-equivalent)
    robust_delay_design = 1.0
    # the noise of its undelayed (lock-step) designs, ROBUST_ERRORS' form (module docstring, "Robust lock-step design");
    # None: certainty-equivalent
    lockstep_robust_errors = None
    # the rule's allowances not given, undelayed (lock-step) designs (module docstring, "Robust lock-step design"):
    # dq_max = lockstep_joint_factor tip_max / reach, modal_rate_max = lockstep_modal_rate_factor tip_rate_max;
    # delayed designs keep the rule's JOINT_FACTOR and 1
    lockstep_joint_factor = JOINT_FACTOR
    lockstep_modal_rate_factor = 1.0
    # a delayed design predicts the reference's defect over the delay (module docstring, "Reference over the delay");
    # a law tracking a trajectory of the model (tip_tracking: no defect) does not
    predicts_reference = True
    # the LQR's feedback returns the arm from off its reference (in process, a 0.15 s stall at the start of a 30 deg
    # move: tip 17.7 / 37.4 mm RMS / max handing back after recover_time, 22.5 / 75.1 mm after the hold law's return)
    returns_unaided = True
    GAINS = {
        'tip_max': Param(DERIVED, _positive(), 'm, allowed tip error (Bryson weight); not set = 1 cm per metre of '
                         'reach (tip_tracking: 0.6 mm)', runtime=True),
        'tip_rate_max': Param(DERIVED, _positive(hi=100.0), 'm/s, allowed tip velocity error; not set = tip_max times '
                              '2 pi f (the first whole-arm elastic frequency, joints free)', runtime=True),
        'modal_rate_max': Param(DERIVED, _positive(hi=100.0), 'm/s, allowed vibration velocity (the links\' '
                                'vibration kinetic energy against the moving mass at this speed); not set = '
                                'tip_rate_max', runtime=True),
        'dq_max': Param(DERIVED, _positive(), 'rad, allowed joint error; not set = 8 tip_max / reach', runtime=True),
        'dq_rate_max': Param(DERIVED, _positive(hi=1000.0), 'rad/s, allowed joint rate error; not set = '
                             '16 tip_rate_max / reach', runtime=True),
        'rho': Param(DEFAULT_RHO, _positive(), 'fraction of the effort limit available to the feedback',
                     runtime=True),
        'integral': Param(DERIVED, boolean(), 'integral of the joint error while the reference is at rest; not set = '
                          'on only if the arm has joint friction', runtime=True),
        'integral_time': Param(FRICTION_INTEGRAL_TIME, _positive(hi=1000.0), 's', runtime=True),
        'schedule_step': Param(0.1, float_range(lo=0.001, hi=10.0), 'rad, gain-scheduling grid', runtime=True),
        'feedforward': Param(True, boolean(), 'rigid-body inverse dynamics of the reference', runtime=True),
    }

    # tip_max per metre of reach when not given: tracking a rigid joint reference, whose tip path the flexible arm
    # cannot follow without deflecting, the tip is held loosely (1 cm/m); tip_tracking (a planned, consistent
    # trajectory) holds it tightly (TIP_MAX_PER_REACH)
    tip_max_per_reach = 0.01

    def __init__(self, model, tip_max=None, tip_rate_max=None, modal_rate_max=None, dq_max=None, dq_rate_max=None,
                 rho=DEFAULT_RHO, integral_time=FRICTION_INTEGRAL_TIME, integral=None, feedforward=True,
                 discrete=True, schedule_step=0.1, input_delay=0.0, schedule_on='state',
                 damping_floor=MODE_DAMPING_FLOOR, robust=None, **kw):
        super().__init__(model, **kw)
        self.damping_floor = float(damping_floor or 0.0)
        # delayed designs: the model-error noises are ROBUST_ERRORS' sizes times `robust` (module docstring, "Robust
        # delay design"; 0: the certainty-equivalent design; None: the class's robust_delay_design)
        self.robust = max(float(self.robust_delay_design if robust is None else robust), 0.0)
        self._error_models = None
        self.robust_unconverged = 0
        self.input_delay = max(float(input_delay or 0.0), 0.0)
        self.history = history_length(self.dt, self.input_delay) if discrete else 0
        if schedule_on not in ('state', 'reference'):
            raise ValueError("schedule_on must be 'state' or 'reference'")
        self.schedule_on = schedule_on
        # feedback parts of the previous commands u_{k-1} .. u_{k-H} (delay-augmented design)
        self._u_hist = np.zeros((self.history, self.n))
        # the rigid feedforwards of the previous commands ff_{k-1} .. ff_{k-H} (None: filled at the next call)
        self._ff_hist = None
        self._u_nominal = np.zeros(self.n)
        self.rigid = rigid_model_of(model)
        self.reach = sum(js.link.length + abs(js.offset) for js in model.spec.joints) or 1.0
        # the mass the joints move: links, hubs and attachments beyond the first joint's axis, and the payload
        self.moving_mass = float(np.sum(model.data.body_mass) + model.data.payload_mass) or 1.0
        from flexarm_sim.model import whole_arm_modes
        f_free = (whole_arm_modes(model, model.spec.nominal_configuration, free_joints=True).elastic_frequencies_hz
                  if self.mi.size else np.zeros(0))
        self.w_free = 2 * math.pi * (float(f_free[0]) if f_free.size else 5.0)
        self._params = {}
        self._requested = {}
        self._validate_set(dict(tip_max=tip_max, tip_rate_max=tip_rate_max, modal_rate_max=modal_rate_max,
                                dq_max=dq_max, dq_rate_max=dq_rate_max, rho=rho, integral_time=integral_time,
                                schedule_step=schedule_step))
        has_friction = any(js.viscous > 0 or js.coulomb > 0 for js in model.spec.joints)
        self.integral = has_friction if integral is None else bool(integral)
        self.feedforward = bool(feedforward)
        self.discrete = bool(discrete)
        self._configure_prediction()
        self.xi = np.zeros(self.n)
        self._cache = {}
        self._packed = {}                # grid cell -> its corners' designs, flattened (see _gain_for)
        self._pack_layout = None
        self._corner_bits = np.array(list(itertools.product((0, 1), repeat=self.n)), dtype=bool)
        self._active_Ki = None
        self._generation = 0
        # design_on_demand: a missing gain-schedule cell is designed inside the call (in-process, reproducible);
        # False (real time, flexarm_control.controller.designer designs ahead in its own thread): a missing cell is
        # put in `wanted` and the nearest designed cell is used meanwhile
        self.design_on_demand = True
        self.wanted = collections.deque()
        self.n_designs = 0

    @classmethod
    def from_params(cls, model, values, dt, input_delay):
        kw = {k: (None if values[k] is DERIVED else values[k]) for k in WEIGHT_NAMES}
        law = cls(model, dt=dt, input_delay=input_delay,
                  integral=None if values['integral'] is DERIVED else values['integral'],
                  feedforward=values['feedforward'], schedule_on='state' if values['lockstep'] else 'reference', **kw)
        law.design_on_demand = values['lockstep']       # real time: designed ahead by the GainDesigner
        return law

    def effective_values(self):
        return dict({k: float(self._params[k]) for k in WEIGHT_NAMES}, integral=self.integral)

    # ------------------------------------------------------------------ gains
    def _derived(self, p):
        """The allowances in force: the given ones, the rule's (module docstring) for those not given."""
        out = dict(p)
        out['tip_max'] = p.get('tip_max') or self.tip_max_per_reach * self.reach
        out['tip_rate_max'] = p.get('tip_rate_max') or out['tip_max'] * self.w_free
        lockstep = not self.history
        out['modal_rate_max'] = p.get('modal_rate_max') or \
            (self.lockstep_modal_rate_factor if lockstep else 1.0) * out['tip_rate_max']
        out['dq_max'] = p.get('dq_max') or \
            (self.lockstep_joint_factor if lockstep else JOINT_FACTOR) * out['tip_max'] / self.reach
        out['dq_rate_max'] = p.get('dq_rate_max') or JOINT_RATE_FACTOR * out['tip_rate_max'] / self.reach
        return out

    def _validate_set(self, p):
        for k, v in p.items():
            if v is None:
                continue
            v = float(v)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f'{k} must be finite and > 0')
        self._requested.update({k: (None if v is None else float(v)) for k, v in p.items()})
        self._params = self._derived(self._requested)
        self._schedule = ScheduleGrid(self.model, self._params['schedule_step'])
        self._cache = {}
        self._packed = {}
        self._active_Ki = None
        self._generation = getattr(self, '_generation', 0) + 1

    def gains(self):
        return dict(self._params, integral=self.integral, feedforward=self.feedforward, discrete=self.discrete)

    def set_gains(self, integral=None, feedforward=None, discrete=None, **p):
        unknown = set(p) - set(WEIGHT_NAMES)
        if unknown:
            raise ValueError(f'unknown modal gains {sorted(unknown)}')
        if p or discrete is not None or integral is not None:
            self._validate_set(p)
        if integral is not None:
            self.integral = bool(integral)
            if not self.integral:
                self.xi[:] = 0
        if feedforward is not None:
            self.feedforward = bool(feedforward)
        if discrete is not None:
            self.discrete = bool(discrete)
            self._configure_prediction()

    def weights(self, z_eq=None):
        """(Q, R) of the state (dz, dzd[, xi]) per Bryson's rule on physical quantities (module docstring)."""
        p, m = self._params, self.model
        N, n = m.n_coords, self.n
        z = np.zeros(N) if z_eq is None else z_eq
        C = tip_jacobian(m, z)
        Q = np.zeros((2 * N + n, 2 * N + n))
        Q[:N, :N] = C.T @ C / p['tip_max'] ** 2
        Q[N:2 * N, N:2 * N] = C.T @ C / p['tip_rate_max'] ** 2
        Q[self.qi, self.qi] += 1.0 / p['dq_max'] ** 2
        Q[N + self.qi, N + self.qi] += 1.0 / p['dq_rate_max'] ** 2
        # modal rates: the links' vibration kinetic energy 1/2 delta'^T J_dd delta' against that of the arm's moving mass
        # at modal_rate_max
        if self.mi.size:
            J_dd = m.mass_matrix(z)[np.ix_(self.mi, self.mi)]
            Q[np.ix_(N + self.mi, N + self.mi)] += J_dd / (self.moving_mass * p['modal_rate_max'] ** 2)
        if self.integral:
            Q[2 * N:, 2 * N:] = np.eye(n) / (p['dq_max'] * p['integral_time']) ** 2
        tmax = np.where(np.isfinite(self.effort_limit), self.effort_limit, 1.0)
        R = np.diag(1.0 / (p['rho'] * tmax) ** 2)
        return Q, R

    def design(self, q):
        """(K (n, 2N), K_i (n, n), z_eq, tau_eq) for the configuration q."""
        return self.design_delayed(q)[:4]

    def design_delayed(self, q):
        """(K, K_i, z_eq, tau_eq, K_u (n, H n)): K_u, the gain on the commands issued but not yet acting (H of them,
        none without input_delay). With the damping floor: designed again with a larger rate weight on each elastic
        mode the previous design left damped less than MODE_DAMPING_FLOOR (module docstring)."""
        return self._design_at(q)[0]

    def _design_at(self, q):
        """(design_delayed's design, (A, B) the linearization it is designed on)."""
        from flexarm_sim.model import linearize
        z_eq, tau_eq = static_equilibrium(self.model, q)
        A, B = linearize(self.model, z_eq, tau_eq).state_space()
        Q, R = self.weights(z_eq)
        err = self._model_error(q)
        K, Ki, Ku = self._design_lqr(A, B, Q, R, err)
        if self.mi.size and self.damping_floor:
            K, Ki, Ku = self._with_damping_floor(A, B, Q, R, z_eq, (K, Ki, Ku), err)
        return (K, Ki, z_eq, tau_eq, Ku), (A, B)

    def _configure_prediction(self):
        """prediction_periods m: the whole periods of the input delay the reference prediction covers (module
        docstring, "Reference over the delay"); 0 without a delayed design or for a law that does not predict
        (`predicts_reference`). A delay of whole periods: the feedforward acts at the instant the prediction
        reaches (one reference sample a step)."""
        m = 0
        if self.predicts_reference and self.discrete and self.history:
            m = int(math.floor(self.input_delay / self.dt + 1e-9))
        self.prediction_periods = m
        self._delay_fraction = self.input_delay - m * self.dt > 1e-9 * self.dt
        self._ff_hist = None

    def reference_prediction(self, K, A, B):
        """(K_0 (n, 2N), K_f (n, H n)) of the delayed law's reference prediction (module docstring, "Reference over
        the delay") for its gain K on the state: K_0 = K Phi^-m on the reference m periods ahead, K_f on the rigid
        feedforwards issued but not yet acting, ff_{k-1} .. ff_{k-H}:
        K_f,i = K_0 (Phi^(i-1) G_new [i <= m] + Phi^(i-2) G_old [2 <= i <= m+1])."""
        n, H, m = self.n, self.history, self.prediction_periods
        _, Phi, G_new, G_old = delayed_discretization(A, B, self.dt, self.input_delay)
        K0 = np.linalg.solve(np.linalg.matrix_power(Phi, m).T, K.T).T
        KPhi = [K0]                                 # K_0 Phi^j, j = 0 .. m - 1
        for _ in range(1, m):
            KPhi.append(KPhi[-1] @ Phi)
        Kf = np.zeros((n, n * H))
        for i in range(1, H + 1):
            if i <= m:
                Kf[:, (i - 1) * n: i * n] += KPhi[i - 1] @ G_new
            if 2 <= i <= m + 1:
                Kf[:, (i - 1) * n: i * n] += KPhi[i - 2] @ G_old
        return K0, Kf

    def _model_error(self, q):
        """[(A, B, size)] at q of the arms of ROBUST_ERRORS (delayed designs) or of the law's
        lockstep_robust_errors (undelayed ones; the model with its payload and its E.I and G.J scaled), each
        linearized in its own static equilibrium: the directions of model error the design is made robust to; None
        for a certainty-equivalent design (undelayed, and the law has no lockstep_robust_errors; continuous; robust
        0) or an arm without link modes."""
        delayed = bool(self.history)
        errors = ROBUST_ERRORS if delayed else self.lockstep_robust_errors
        if not (self.robust and self.discrete and errors and self.mi.size):
            return None
        from flexarm_sim.model import linearize, load_model
        if self._error_models is None:
            from ..moves import perturbed_spec
            self._error_models = [(load_model(perturbed_spec(self.model.spec, p, e)), self.robust * size)
                                  for p, e, size in errors]
        out = []
        for arm, size in self._error_models:
            z, tau = static_equilibrium(arm, q)
            out.append(linearize(arm, z, tau).state_space() + (size,))
        return out

    def _with_damping_floor(self, A, B, Q, R, z_eq, out, err=None):
        """The design (K, K_i, K_u) again, with the rate weight of each clamped link mode whose closed-loop mode it
        left damped less than the floor raised (module docstring), until none is (at most FLOOR_ITERATIONS designs
        more): by (floor / zeta)^2, as the damping an LQR gives a weakly coupled mode grows with the square root of
        its weight (the gain, like sqrt(Q / R))."""
        N = self.model.n_coords
        sl = N + self.mi
        J_dd, V, f_clamped = self._clamped_modes(z_eq)
        unit = 1.0 / (self.moving_mass * self._params['modal_rate_max'] ** 2)
        boost = np.ones(V.shape[1])
        target = FLOOR_AIM * self.damping_floor
        for _ in range(FLOOR_ITERATIONS):
            low = self._underdamped_modes(A, B, out[0], out[2], f_clamped)
            if not low:
                break
            for i, zeta in low:
                boost[i] *= min((target / max(zeta, 1e-9)) ** 2, FLOOR_MAX_BOOST)
            Qb = Q.copy()
            MV = J_dd @ V
            Qb[np.ix_(sl, sl)] += unit * (MV * (boost - 1.0)) @ MV.T
            out = self._design_lqr(A, B, Qb, R, err)
        return out

    def _clamped_modes(self, z):
        """(J_dd, V, f): the link modes with the joints clamped at z, K_dd v = w^2 J_dd v, V^T J_dd V = I, f in Hz.
        A weight on the amplitude rate of mode i, eta_i' = v_i^T J_dd delta', is (J_dd v_i)(J_dd v_i)^T."""
        from flexarm_sim.model import linearize
        mi = self.mi
        J_dd = self.model.mass_matrix(z)[np.ix_(mi, mi)]
        K_dd = linearize(self.model, z).stiffness[np.ix_(mi, mi)]
        w2, V = scipy.linalg.eigh(K_dd, J_dd)
        return J_dd, V, np.sqrt(np.maximum(w2, 0.0)) / (2 * math.pi)

    def _underdamped_modes(self, A, B, K, Ku, f_clamped):
        """[(clamped mode index, damping ratio)]: the oscillating modes of the sampled closed loop the gain is designed
        for (with its input delay, without the integrator) damped less than the floor, each attributed to the clamped
        link mode nearest in frequency (within FLOOR_MATCH: a mode the joints hardly move keeps its clamped
        frequency; others are left to the weights)."""
        if self.discrete and self.history:
            Aa, Ba = delay_augmented(delayed_discretization(A, B, self.dt, self.input_delay), self.history)
            Acl = Aa - Ba @ np.hstack([K, Ku])
        else:
            Ad, Bd = zero_order_hold(A, B, self.dt)
            Acl = Ad - Bd @ K
        lam = np.linalg.eigvals(Acl)
        out = {}
        for z in lam[lam.imag > 1e-12]:
            s = np.log(complex(z)) / self.dt
            zeta = -s.real / abs(s)
            f = abs(s.imag) / (2 * math.pi)
            if zeta >= self.damping_floor or f >= 0.499 / self.dt or not f_clamped.size:
                continue
            ratio = np.abs(np.log(np.maximum(f_clamped, 1e-9) / f))
            i = int(np.argmin(ratio))
            if ratio[i] <= math.log(FLOOR_MATCH):
                out[i] = min(out.get(i, math.inf), max(zeta, 0.0))
        return sorted(out.items())

    def _design_lqr(self, A, B, Q, R, err=None):
        """(K, K_i, K_u): the LQR of the weights (Q, R) on the continuous linearization (A, B) (module docstring:
        sampled, delay-augmented, integral-augmented as configured); a design given the erring arms' linearizations
        err = [(A_e, B_e, size)] (`_model_error`) is the LQR with size x the difference of each erring arm's sampled
        (delay-augmented) loop from the model's as multiplicative noise (module docstring)."""
        N, n = self.model.n_coords, self.n
        if self.integral:
            C = np.zeros((n, 2 * N))
            C[np.arange(n), self.qi] = 1.0
            A = np.block([[A, np.zeros((2 * N, n))], [C, np.zeros((n, n))]])
            B = np.vstack([B, np.zeros((n, n))])
            if err is not None:
                err = [(np.block([[Ae, np.zeros((2 * N, n))], [C, np.zeros((n, n))]]), np.vstack([Be, np.zeros((n, n))]),
                        size) for Ae, Be, size in err]
        else:
            Q = Q[:2 * N, :2 * N]
        Ku = np.zeros((n, n * self.history))
        if self.discrete and self.history:
            nx = A.shape[0]
            Aa, Ba = delay_augmented(delayed_discretization(A, B, self.dt, self.input_delay), self.history)
            Qa = np.zeros_like(Aa)
            Qa[:nx, :nx] = Q
            if err is None:
                Ka = dlqr(Aa, Ba, Qa, R)[0]
            else:
                # the error of the sampled, delay-augmented loop (the exact discretization of the erring arm)
                noise = []
                for Ae, Be, size in err:
                    Ae, Be = delay_augmented(delayed_discretization(Ae, Be, self.dt, self.input_delay), self.history)
                    noise.append((size * (Ae - Aa), size * (Be - Ba)))
                Ka = self._robust_gain(Aa, Ba, Qa, R, noise)
            K, Ku = Ka[:, :nx], Ka[:, nx:]
        elif self.discrete and err is not None:
            # undelayed, robust (module docstring, "Robust lock-step design"): the erring arms' sampled loops
            Ad, Bd = zero_order_hold(A, B, self.dt)
            noise = []
            for Ae, Be, size in err:
                Aed, Bed = zero_order_hold(Ae, Be, self.dt)
                noise.append((size * (Aed - Ad), size * (Bed - Bd)))
            K = self._robust_gain(Ad, Bd, Q, R, noise)
        elif self.discrete:
            K = dlqr(*zero_order_hold(A, B, self.dt), Q, R)[0]
        else:
            K = lqr(A, B, Q, R)[0]
        self.n_designs += 1
        Ki = K[:, 2 * N:] if self.integral else np.zeros((n, n))
        return K[:, :2 * N].copy(), Ki.copy(), Ku.copy()

    def _robust_gain(self, A, B, Q, R, noise):
        """The multiplicative-noise LQR's gain for the noise [(dA, dB)]; not mean-square stabilizable at the full
        size: the largest of ROBUST_FALLBACK_SCALES that is, at worst the certainty-equivalent gain, counted in
        robust_unconverged (a non-converged fixed point's gain is no design: on the slewing beam at 100 Hz, 20 ms,
        its joint gain was 0.003 N m/rad against 19 certainty-equivalent)."""
        for scale in ROBUST_FALLBACK_SCALES:
            K, converged = multiplicative_noise_lqr(A, B, Q, R, [(scale * a, scale * b) for a, b in noise])
            if converged:
                break
        self.robust_unconverged += scale < 1.0 or not converged
        return K

    def _corners(self, q):
        """Grid cells around q and their multilinear weights (cells of zero weight left out; laws/schedule.py)."""
        return self._schedule.corners(q)

    def _cell(self, key):
        g = self._cache.get(key)
        if g is None and not self.design_on_demand and self._cache:
            # real time: a design takes ~10 ms; ask the designer and keep the nearest designed cell meanwhile
            if key not in self.wanted:
                self.wanted.append(key)
            near = min(list(self._cache), key=lambda k: sum((a - b) ** 2 for a, b in zip(k, key)))
            return self._cache[near]
        if g is None:
            g = self.design_cell(key)
            self._cache[key] = g
        return g

    def design_cell(self, key):
        """The design of one grid cell (pure: no state of the law changes except the design count):
        design_delayed's (K, K_i, z_eq, tau_eq, K_u) and the reference prediction's (K_0, K_f) (module docstring,
        "Reference over the delay"; empty (n, 0) arrays when the law does not predict)."""
        design, (A, B) = self._design_at(self._schedule.configuration(key))
        if not self.prediction_periods:
            return design + (np.zeros((self.n, 0)),) * 2
        return design + self.reference_prediction(design[0], A, B)

    def design_recipe(self):
        """(class, keyword arguments): `cls(load_model(self.model.spec), **kwargs).design_cell(key)` equals
        `self.design_cell(key)` for the weights in force (a design process builds the law with it,
        controller/designer.py)."""
        kw = dict(self._requested, dt=self.dt, input_delay=self.input_delay, effort_limit=self.effort_limit.copy(),
                  robust=self.robust, damping_floor=self.damping_floor, discrete=self.discrete,
                  integral=self.integral)
        return type(self), kw

    def install(self, key, design, generation):
        """Store a cell designed elsewhere (a designer); ignored if the weights changed meanwhile."""
        if generation == self._generation:
            self._cache[key] = design

    @property
    def generation(self):
        """Changes whenever the weights change (designs of an older generation are stale)."""
        return self._generation

    def _gain_for(self, q):
        """(K, K_i, z_eq, tau_eq, K_u, K_0, K_f) at q (`design_cell`): multilinear interpolation between the
        designs at the corners of q's grid cell (2^n designs per cell, each cached), so the torque does not jump
        when q crosses a cell boundary (a nearest-cell schedule put steps of ~0.02 N m into the De Luca elbow torque
        at every crossing, 10 % of its range). Once all corners of a cell are designed, the cell's designs are kept
        flattened in one (2^n, L) array and the interpolation is one weighted sum. The static equilibrium is placed at
        the cyclic joints' angles of q (laws/schedule.py)."""
        x = self._schedule.grid(q)
        lo = np.floor(x)
        cell = tuple(lo.astype(int))
        packed = self._packed.get(cell)
        if packed is None:
            packed = self._pack(cell)
        if packed is None:                   # some corner not designed yet: per-corner path (designs / nearest)
            acc = None
            for key, w in self._corners(q):
                g = self._cell(key)
                acc = [w * v for v in g] if acc is None else [a + w * v for a, v in zip(acc, g)]
            self._schedule.place(acc[2], q)
            self._active_Ki = acc[1]
            return tuple(acc)
        frac = x - lo
        flat = np.prod(np.where(self._corner_bits, frac, 1.0 - frac), axis=1) @ packed
        out = tuple(flat[a:b].reshape(shape) for a, b, shape in self._pack_layout)
        self._schedule.place(out[2], q)
        self._active_Ki = out[1]
        return out

    def _pack(self, cell):
        """Flattened designs of all 2^n corners of `cell` (None unless all are designed; a cyclic joint's one grid
        coordinate stands for both of its corners, whose weights sum to 1)."""
        bits = self._corner_bits & ~self._schedule.cyclic
        corners = [tuple(c + b for c, b in zip(cell, row)) for row in bits.astype(int).tolist()]
        designs = [self._cache.get(k) for k in corners]
        if any(g is None for g in designs):
            return None
        if self._pack_layout is None:
            a, layout = 0, []
            for v in designs[0]:
                layout.append((a, a + v.size, v.shape))
                a += v.size
            self._pack_layout = layout
        packed = np.array([np.concatenate([np.ravel(v) for v in g]) for g in designs])
        self._packed[cell] = packed
        return packed

    # ------------------------------------------------------------------ designing ahead
    def cells_for(self, qs):
        """Grid cells (keys) the configurations qs need that are not designed yet, in order."""
        keys = []
        for q in qs:
            for k, _ in self._corners(q):
                if k not in self._cache and k not in keys:
                    keys.append(k)
        return keys

    def prefetch(self, qs):
        """Design now the cells of the configurations qs (a real-time user hands them to its designer instead)."""
        for k in self.cells_for(qs):
            self._cache[k] = self.design_cell(k)

    def feedback_matrix(self, q):
        return self.design(np.asarray(q, float))[0]

    def reset(self):
        super().reset()
        self.xi[:] = 0.0
        self._u_hist[:] = 0.0
        self._ff_hist = None

    # ------------------------------------------------------------------ law
    def _compute(self, t, z, zd, q_d, qd_d, qdd_d):
        K, Ki, z_eq, tau_eq, Ku, K0, Kf = self._gain_for(q_d if self.schedule_on == 'reference' else z[self.qi])
        e = z[self.qi] - q_d
        self._e = e
        self._xi_prev = self.xi.copy()
        if self.integral and not (np.any(qd_d != 0) or np.any(qdd_d != 0)):
            self.xi = self.xi + self._elapsed(t) * e
        m = self.prediction_periods
        if m:
            # delayed: the feedforward for the instant it acts; the state predicted over the delay with the
            # feedforwards issued but not yet acting, against the reference m periods ahead (module docstring,
            # "Reference over the delay")
            q_p, qd_p, qdd_p = (np.asarray(x, dtype=float) for x in self.reference.sample(t + m * self.dt))
            if self._delay_fraction:
                q_a, qd_a, qdd_a = (np.asarray(x, dtype=float) for x in self.reference.sample(t + self.input_delay))
            else:
                q_a, qd_a, qdd_a = q_p, qd_p, qdd_p
            nominal = self.rigid.inverse_dynamics(q_a, qd_a, qdd_a) if self.feedforward else tau_eq
            if self._ff_hist is None:
                self._ff_hist = np.tile(nominal, (self.history, 1))
            N = self.model.n_coords
            x_ahead = np.zeros(2 * N)
            x_ahead[self.qi], x_ahead[N + self.qi] = q_p - z_eq[self.qi], qd_p
            tau = (-K @ np.concatenate([z - z_eq, zd]) + K0 @ x_ahead - Kf @ (self._ff_hist - tau_eq).ravel()
                   - Ki @ self.xi - Ku @ self._u_hist.ravel())
        else:
            dz = z - z_eq
            dz[self.qi] = e
            dzd = zd.copy()
            dzd[self.qi] -= qd_d
            tau = -K @ np.concatenate([dz, dzd]) - Ki @ self.xi
            if self.history:
                tau = tau - Ku @ self._u_hist.ravel()
            nominal = self.rigid.inverse_dynamics(q_d, qd_d, qdd_d) if self.feedforward else tau_eq
        self._u_nominal = nominal
        return tau + nominal

    def _after_saturation(self, tau, sat):
        """Anti-windup: undo this step's integration on joints whose torque was clipped when the integral
        term pushed further into the limit. Remembers the feedback part of the applied command (input delay)."""
        if self.history:
            self._u_hist[1:] = self._u_hist[:-1].copy()
            self._u_hist[0] = sat - self._u_nominal
            if self._ff_hist is not None:
                self._ff_hist[1:] = self._ff_hist[:-1].copy()
                self._ff_hist[0] = self._u_nominal
        if not self.integral:
            return
        Ki = self._active_Ki
        clipped = sat != tau
        if np.any(clipped):
            push = -(Ki @ (self.xi - self._xi_prev))   # torque change due to this step's integration
            if np.any(clipped & (push * (tau - sat) > 0)):
                self.xi = self._xi_prev                 # conditional integration: freeze the integrator


def remembering_designs(law):
    """The law, its design_delayed remembered per joint configuration (for analyses that query one configuration many
    times: closed_loop_radius designs at every call, a robust delayed design takes ~0.3 s). Offline use only: the
    remembered designs ignore later changes of the law's weights."""
    design, cache = law.design_delayed, {}

    def remembered(q):
        key = tuple(np.round(np.asarray(q, dtype=float), 12))
        if key not in cache:
            cache[key] = design(q)
        return cache[key]
    law.design_delayed = remembered
    return law


def closed_loop_radius(law, plant, q, modal_scale=1.0, input_delay=None):
    """Spectral radius of the sampled closed loop of `plant` (linearized in static equilibrium at joint angles q)
    under the law's linear feedback at q, the fed-back modal coordinates and rates scaled by `modal_scale`, the
    command acting `input_delay` s after its state (default: the delay the law was designed for). < 1: stable.

    The plant may be another arm with the law's layout (a perturbed payload or stiffness): the law still designs on
    its own model. With the integrator on, its state is part of the loop."""
    from flexarm_sim.model import linearize
    K, Ki, _, _, Ku = law.design_delayed(np.asarray(q, dtype=float))
    N, n = plant.n_coords, plant.n_joints
    z_eq, tau_eq = static_equilibrium(plant, q)
    A, B = linearize(plant, z_eq, tau_eq).state_space()
    S = np.ones(2 * N)
    mi = np.asarray(plant.mode_index)
    S[mi] = modal_scale
    S[N + mi] = modal_scale
    Kx = K * S[None, :]
    dt = law.dt
    delay = law.input_delay if input_delay is None else max(float(input_delay), 0.0)
    nx = 2 * N
    # the integrator (on) as the design has it: xi' = q, part of the sampled plant; u = -[Kx Ki] x - Ku (u_{k-1}..)
    if law.integral:
        C = np.zeros((n, nx))
        C[np.arange(n), np.asarray(plant.q_index)] = 1.0
        A = np.block([[A, np.zeros((nx, n))], [C, np.zeros((n, n))]])
        B = np.vstack([B, np.zeros((n, n))])
        Kx = np.hstack([Kx, Ki])
    disc = delayed_discretization(A, B, dt, delay)
    H = max(law.history, history_length(dt, delay))
    Aa, Ba = delay_augmented(disc, H)
    Kfull = np.hstack([Kx, Ku, np.zeros((n, (H - law.history) * n))])
    Acl = Aa - Ba @ Kfull
    return float(np.max(np.abs(np.linalg.eigvals(Acl))))
