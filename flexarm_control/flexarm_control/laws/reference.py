"""Joint references: every reference answers `sample(t) -> (q_d, qd_d, qdd_d)` (arrays, one per joint).

* `cycloidal`, `quintic`: scalar point-to-point profiles s(tau), tau in [0, 1] (position, velocity, acceleration
  of the normalised move). The cycloid is Naganathan's profile (case 1: 60 deg in 2.5 s):
  theta = Theta (tau - sin(2 pi tau) / 2 pi), omega_max = 2 Theta / T, alpha_max = 2 pi Theta / T^2.
* `PointToPoint`: a move q0 -> q1 starting at t0 lasting T with one of those profiles; holds q0 before and q1 after.
  When the move starts from a moving reference state (preemption) it becomes a quintic Hermite segment
  matching that state's position, velocity and acceleration.
* `TrajectoryReference`: JointTrajectory-like interpolation. Points with times (time_from_start), positions and
  optionally velocities/accelerations. The start state (the current reference state) is prepended at t0.
  Segments are quintic Hermite when every point has accelerations, otherwise cubic Hermite; velocities missing
  in the message are estimated (mean of the adjacent slopes when they have the same sign, else 0; 0 at the last
  point), so the reference is always C1; the first segment (from the start state) is always quintic, so a
  preemption is continuous in position, velocity and acceleration. After the last point it holds the last position with zero rate.
* `Hold`: constant position.
* `ReferenceManager`: the active reference; a new trajectory preempts the old one starting from the old
  reference's state at the preemption time (no jump in q_d, qd_d).
* `BangBang`: open-loop torque test, +A for the first half of T, -A for the second half, then 0.
"""
from __future__ import annotations

import math

import numpy as np


def elapsed(t, t0):
    """t - t0 in seconds, rounded to whole nanoseconds. Times here are ROS stamps (integer ns) as float seconds,
    whose difference is often inexact (2.506 s - 0.006 s = 2.5000000000000004; 41 of 200 random starts on the ns
    grid): a reference's end, where the modal law starts integrating, fell on one control step or the next by the
    plant time the move happened to start at. Rounded, the same stamps give the same elapsed time in every run.
    Exact while the stamps are below ~4e6 s (plant time); wall-clock stamps (~1.8e9 s) carry ~2e-7 s of float
    error either way (real time is not reproducible). Infinite differences pass through."""
    d = t - t0
    if np.ndim(d):                                   # an array of times (TrajectoryReference.sample_many)
        return np.where(np.abs(d) < 1e9, np.round(d * 1e9) / 1e9, d)
    return round(d * 1e9) / 1e9 if abs(d) < 1e9 else d


# --------------------------------------------------------------------------- scalar profiles
def cycloidal(tau):
    """(s, s', s'') of the cycloid on tau in [0, 1] (derivatives w.r.t. tau); clamped outside."""
    tau = min(max(float(tau), 0.0), 1.0)
    w = 2.0 * math.pi
    return tau - math.sin(w * tau) / w, 1.0 - math.cos(w * tau), w * math.sin(w * tau)


def quintic(tau):
    """(s, s', s'') of the rest-to-rest quintic 10 tau^3 - 15 tau^4 + 6 tau^5."""
    tau = min(max(float(tau), 0.0), 1.0)
    t2, t3 = tau * tau, tau * tau * tau
    return (10 * t3 - 15 * t3 * tau + 6 * t3 * t2, 30 * t2 - 60 * t3 + 30 * t2 * t2,
            60 * tau - 180 * t2 + 120 * t3)


PROFILES = {'cycloidal': cycloidal, 'quintic': quintic}


def _unit(s, h):
    """s / h clamped to [0, 1]: a scalar (a control step's sample, no numpy call) or an array of instants."""
    return min(max(s / h, 0.0), 1.0) if np.ndim(s) == 0 else np.clip(s / h, 0.0, 1.0)


def _hermite5(p0, v0, a0, p1, v1, a1, h, s):
    """Quintic Hermite on a segment of length h at local time s (vectorised over joints; and over instants: rows of
    (m, n) segment ends with h, s of shape (m, 1), h > 0 - TrajectoryReference.sample_many)."""
    if np.ndim(h) == 0 and h <= 0:
        return p1.copy(), v1.copy(), a1.copy()
    u = _unit(s, h)
    # coefficients in u of p(u) with derivatives scaled by h
    V0, V1, A0, A1 = v0 * h, v1 * h, a0 * h * h, a1 * h * h
    c0, c1, c2 = p0, V0, 0.5 * A0
    d = p1 - p0 - V0 - 0.5 * A0
    e = V1 - V0 - A0
    f = A1 - A0
    c3 = 10 * d - 4 * e + 0.5 * f
    c4 = -15 * d + 7 * e - f
    c5 = 6 * d - 3 * e + 0.5 * f
    p = c0 + u * (c1 + u * (c2 + u * (c3 + u * (c4 + u * c5))))
    dp = c1 + u * (2 * c2 + u * (3 * c3 + u * (4 * c4 + u * 5 * c5)))
    ddp = 2 * c2 + u * (6 * c3 + u * (12 * c4 + u * 20 * c5))
    return p, dp / h, ddp / (h * h)


def _hermite3(p0, v0, p1, v1, h, s):
    """Cubic Hermite, as _hermite5 (over joints; and over instants)."""
    if np.ndim(h) == 0 and h <= 0:
        return p1.copy(), v1.copy(), np.zeros_like(p1)
    u = _unit(s, h)
    V0, V1 = v0 * h, v1 * h
    c2 = 3 * (p1 - p0) - 2 * V0 - V1
    c3 = -2 * (p1 - p0) + V0 + V1
    p = p0 + u * (V0 + u * (c2 + u * c3))
    dp = V0 + u * (2 * c2 + u * 3 * c3)
    ddp = 2 * c2 + u * 6 * c3
    return p, dp / h, ddp / (h * h)


def move_target(q0, angle, lo, hi):
    """The target of a move of every joint by `angle` from q0 within the position limits [lo, hi]: a joint that
    +angle would take beyond its limits moves by -angle instead if that fits, else as far as its limits allow
    (rigid_puma3's shoulder, upper limit 45 deg, from 0 by 60 deg: to -60 deg; the desired tip path of a move into a
    hard stop cannot be followed)."""
    q0 = np.asarray(q0, dtype=float)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    step = np.broadcast_to(np.asarray(angle, dtype=float), q0.shape).copy()
    flip = ((q0 + step > hi) | (q0 + step < lo)) & (q0 - step >= lo) & (q0 - step <= hi)
    step[flip] = -step[flip]
    return np.clip(q0 + step, lo, hi)


class Reference:
    """Base: subclasses implement sample(t)."""

    n_joints = 0
    end_time = 0.0

    def sample(self, t):
        raise NotImplementedError

    def sample_many(self, ts):
        """(Q, QD, QDD), each (len(ts), n_joints): sample at every time of ts."""
        rows = [self.sample(t) for t in ts]
        return tuple(np.array([r[i] for r in rows], dtype=float).reshape(len(rows), -1) for i in range(3))

    def __call__(self, t):
        return self.sample(t)


class Hold(Reference):
    def __init__(self, q):
        self.q = np.array(q, dtype=float)
        self.n_joints = self.q.size
        self.end_time = -math.inf

    def sample(self, t):
        z = np.zeros_like(self.q)
        return self.q.copy(), z, z.copy()


class PointToPoint(Reference):
    """Move q0 -> q1 in T seconds from t0 with a rest-to-rest profile ('cycloidal' | 'quintic').

    start_velocity / start_acceleration (preemption from a moving reference): the move becomes a quintic
    Hermite segment from (q0, v0, a0) to (q1, 0, 0)."""

    def __init__(self, q0, q1, T, t0=0.0, profile='cycloidal', start_velocity=None, start_acceleration=None):
        if profile not in PROFILES:
            raise ValueError(f'unknown profile {profile!r}; choose one of {sorted(PROFILES)}')
        if not (T > 0 and math.isfinite(T)):
            raise ValueError('move duration T must be positive and finite')
        self.q0, self.q1 = np.array(q0, dtype=float), np.array(q1, dtype=float)
        if self.q0.shape != self.q1.shape:
            raise ValueError('q0 and q1 must have the same length')
        self.T, self.t0, self.profile = float(T), float(t0), profile
        self.n_joints = self.q0.size
        self.end_time = self.t0 + self.T
        z = np.zeros_like(self.q0)
        self.v0 = z if start_velocity is None else np.array(start_velocity, dtype=float)
        self.a0 = z if start_acceleration is None else np.array(start_acceleration, dtype=float)
        self._hermite = bool(np.any(self.v0 != 0) or np.any(self.a0 != 0))
        self._f = PROFILES[profile]

    def sample(self, t):
        s = elapsed(t, self.t0)
        if self._hermite:
            z = np.zeros_like(self.q0)
            if s <= 0:
                return self.q0.copy(), self.v0.copy(), self.a0.copy()
            return _hermite5(self.q0, self.v0, self.a0, self.q1, z, z, self.T, s)
        d = self.q1 - self.q0
        if s <= 0:
            return self.q0.copy(), np.zeros_like(d), np.zeros_like(d)
        if s >= self.T:
            return self.q1.copy(), np.zeros_like(d), np.zeros_like(d)
        p, v, a = self._f(s / self.T)
        return self.q0 + d * p, d * (v / self.T), d * (a / (self.T * self.T))


class TrajectoryReference(Reference):
    """Interpolates trajectory points (times relative to t0) starting from a given reference state at t0."""

    def __init__(self, times, positions, velocities=None, accelerations=None, t0=0.0, start=None):
        times = np.asarray(times, dtype=float).ravel()
        P = np.atleast_2d(np.asarray(positions, dtype=float))
        if P.shape[0] != times.size:
            raise ValueError('one position vector per point required')
        if times.size == 0:
            raise ValueError('empty trajectory')
        if not (np.all(np.isfinite(times)) and np.all(np.isfinite(P))):
            raise ValueError('non-finite trajectory')
        if np.any(np.diff(times) <= 0) or times[0] < 0:
            raise ValueError('time_from_start must be non-negative and strictly increasing')
        n = P.shape[1]
        V = None if velocities is None else np.atleast_2d(np.asarray(velocities, dtype=float))
        A = None if accelerations is None else np.atleast_2d(np.asarray(accelerations, dtype=float))
        for X, name in ((V, 'velocities'), (A, 'accelerations')):
            if X is not None and (X.shape != P.shape or not np.all(np.isfinite(X))):
                raise ValueError(f'{name} must be finite with the shape of positions')
        if start is not None:
            q_s, v_s, a_s = (np.asarray(x, dtype=float) for x in start)
            if q_s.size != n:
                raise ValueError('start state has the wrong number of joints')
            if times[0] > 0:
                times = np.concatenate([[0.0], times])
                P = np.vstack([q_s, P])
                V = None if V is None else np.vstack([v_s, V])
                A = None if A is None else np.vstack([a_s, A])
                self._start_given = True
            else:
                self._start_given = False
        else:
            self._start_given = False
        if V is None:
            V = self._estimate_velocities(times, P)
            if self._start_given:
                V[0] = v_s
        self.quintic_segments = A is not None
        self.times, self.P, self.V = times, P, V
        self.A = A if A is not None else np.zeros_like(P)
        if self._start_given:
            self.A[0] = a_s      # first segment: quintic from the full start state (C2 at a preemption)
        self.t0 = float(t0)
        self.n_joints = n
        self.end_time = self.t0 + times[-1]

    @staticmethod
    def _estimate_velocities(times, P):
        V = np.zeros_like(P)
        if len(times) > 2:
            slopes = np.diff(P, axis=0) / np.diff(times)[:, None]
            left, right = slopes[:-1], slopes[1:]
            same = np.sign(left) == np.sign(right)
            V[1:-1] = np.where(same, 0.5 * (left + right), 0.0)
        return V

    def sample(self, t):
        s = elapsed(t, self.t0)
        tm = self.times
        if s <= tm[0]:
            return self.P[0].copy(), (self.V[0] if self._start_given else 0 * self.V[0]).copy(), \
                (self.A[0] if self._start_given else 0 * self.A[0]).copy()
        if s >= tm[-1]:
            z = np.zeros(self.n_joints)
            return self.P[-1].copy(), z, z.copy()
        k = int(np.searchsorted(tm, s, side='right')) - 1
        h = tm[k + 1] - tm[k]
        if self.quintic_segments or (k == 0 and self._start_given):
            return _hermite5(self.P[k], self.V[k], self.A[k], self.P[k + 1], self.V[k + 1], self.A[k + 1], h,
                             s - tm[k])
        return _hermite3(self.P[k], self.V[k], self.P[k + 1], self.V[k + 1], h, s - tm[k])

    def sample_many(self, ts):
        """sample() at every time of ts at once, the same values (a controller checks a new reference at ~450
        instants, ReferenceLimits: one call at a time that was 13 ms of Python, 22-95 ms in a real-time controller
        beside its state thread, which waits for the interpreter lock meanwhile; issue 28)."""
        s = elapsed(np.asarray(ts, dtype=float).ravel(), self.t0)
        tm, m, n = self.times, s.size, self.n_joints
        Q, QD, QDD = np.empty((m, n)), np.zeros((m, n)), np.zeros((m, n))
        before, after = s <= tm[0], s >= tm[-1]
        Q[before], Q[after] = self.P[0], self.P[-1]
        if self._start_given:
            QD[before], QDD[before] = self.V[0], self.A[0]
        inside = ~(before | after)
        k = np.searchsorted(tm, s[inside], side='right') - 1
        h = (tm[k + 1] - tm[k])[:, None]
        local = (s[inside] - tm[k])[:, None]
        quintic = np.full(k.shape, self.quintic_segments) | ((k == 0) & self._start_given)
        out = [np.empty((k.size, n)) for _ in range(3)]
        for sel, is_quintic in ((quintic, True), (~quintic, False)):
            if not np.any(sel):
                continue
            a, b = k[sel], k[sel] + 1
            if is_quintic:
                vals = _hermite5(self.P[a], self.V[a], self.A[a], self.P[b], self.V[b], self.A[b], h[sel], local[sel])
            else:
                vals = _hermite3(self.P[a], self.V[a], self.P[b], self.V[b], h[sel], local[sel])
            for o, v in zip(out, vals):
                o[sel] = v
        Q[inside], QD[inside], QDD[inside] = out
        return Q, QD, QDD


MAX_POINTS = 10000            # points of one trajectory (100 Hz for 100 s); beyond, refused before any work


def _names_text(names, k=6):
    """The first k names of a list (an input's size never sets a message's)."""
    shown = ', '.join(repr(str(x)[:40]) for x in list(names)[:k])
    return f'[{shown}{", ..." if len(names) > k else ""}] ({len(names)} names)'


def trajectory_from_msg(msg, joint_names, t0, start):
    """TrajectoryReference from a trajectory_msgs/JointTrajectory (joints reordered to joint_names).

    Joints not named in the message keep their start position. Raises ValueError on malformed messages (more joint
    names than the arm's or MAX_POINTS points are refused before anything is built)."""
    if len(msg.joint_names) > len(joint_names):
        raise ValueError(f'{len(msg.joint_names)} joint names for an arm of {len(joint_names)} joints')
    if len(msg.points) > MAX_POINTS:
        raise ValueError(f'{len(msg.points)} points: at most {MAX_POINTS} per trajectory')
    names = list(msg.joint_names) if len(msg.joint_names) else list(joint_names)
    if len(set(names)) != len(names) or any(nm not in joint_names for nm in names):
        raise ValueError(f'trajectory joints {_names_text(names)} not a subset of {list(joint_names)} '
                         '(each at most once)')
    if not msg.points:
        raise ValueError('trajectory has no points')
    cols = [joint_names.index(nm) for nm in names]
    n, k = len(joint_names), len(msg.points)
    q_s = np.asarray(start[0], dtype=float)
    times = np.zeros(k)
    P = np.tile(q_s, (k, 1))
    V = np.zeros((k, n))
    A = np.zeros((k, n))
    have_v = have_a = True
    for i, pt in enumerate(msg.points):
        times[i] = pt.time_from_start.sec + 1e-9 * pt.time_from_start.nanosec
        if len(pt.positions) != len(names):
            raise ValueError('every point needs one position per joint')
        P[i, cols] = pt.positions
        if len(pt.velocities) == len(names):
            V[i, cols] = pt.velocities
        else:
            have_v = False
        if len(pt.accelerations) == len(names):
            A[i, cols] = pt.accelerations
        else:
            have_a = False
    return TrajectoryReference(times, P, V if have_v else None, A if (have_a and have_v) else None, t0=t0,
                               start=start)


MAX_LATE_S = 1.0             # s: a trajectory stamped this much before it arrives is re-timed to start now; later: refused


class ReferenceManager(Reference):
    """The active reference; `preempt` / `move_to` switch smoothly from the current reference state.

    The manager keeps the recent history of (switch time, reference) so that sampling a past time (as a
    shaper in front of it does) still returns what was commanded then: no jump in a shaped reference at a
    preemption either."""

    HISTORY = 16

    def __init__(self, reference: Reference | None = None):
        self._segments = [] if reference is None else [(-math.inf, reference)]

    @property
    def active(self):
        return self._segments[-1][1] if self._segments else None

    @property
    def n_joints(self):
        return self.active.n_joints if self._segments else 0

    @property
    def end_time(self):
        return self.active.end_time if self._segments else -math.inf

    def sample(self, t):
        if not self._segments:
            raise RuntimeError('no reference set')
        for t_switch, ref in reversed(self._segments):
            if t >= t_switch:
                return ref.sample(t)
        return self._segments[0][1].sample(t)

    def set(self, reference: Reference, t_now=-math.inf):
        self._segments.append((t_now, reference))
        del self._segments[:-self.HISTORY]

    def hold(self, q, t_now=-math.inf):
        self.set(Hold(q), t_now)

    def move_to(self, q1, T, t_now, profile='cycloidal'):
        """Point-to-point move from the current reference state, starting now."""
        q0, v0, a0 = self.sample(t_now)
        self.set(PointToPoint(q0, q1, T, t_now, profile, v0, a0), t_now)
        return self.active

    def preempt(self, times, positions, velocities=None, accelerations=None, t_now=0.0):
        start = self.sample(t_now)
        self.set(TrajectoryReference(times, positions, velocities, accelerations, t0=t_now, start=start), t_now)
        return self.active

    def from_msg(self, msg, joint_names, t_now, start=None):
        """The reference of a trajectory_msgs/JointTrajectory, starting from the current reference state (not
        installed: check it, then `set` it). As in ROS's JointTrajectory convention, a nonzero header.stamp (in the
        controller's time base, the plant time) is the trajectory's start time; zero means now. Before its start
        the reference holds the first point.

        A stamp in the past would start the trajectory partway, a jump from the current reference: up to
        MAX_LATE_S late (the transport's delay of a trajectory stamped "now") it is re-timed to start now, with the
        lateness in `retimed_s` for a warning; later it is refused. `start` = the current reference state (q, qd,
        qdd) at t_now, when the caller sampled it already (outside its lock)."""
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        if not math.isfinite(stamp) or stamp < 0.0:
            raise ValueError(f'header.stamp {stamp!r} is not a time')
        late = t_now - stamp if stamp > 0.0 else 0.0
        if late > MAX_LATE_S:
            raise ValueError(f'header.stamp is {late:.3f} s in the past (more than {MAX_LATE_S:g} s): it would start '
                             'partway through, a jump from the current reference; stamp it 0 (now) or ahead')
        t0 = stamp if stamp > 0.0 and late <= 0.0 else t_now
        ref = trajectory_from_msg(msg, joint_names, t0, self.sample(t_now) if start is None else start)
        ref.retimed_s = max(late, 0.0)
        return ref



class BangBang:
    """Open-loop torque test: tau = +A on [t0, t0 + T/2), -A on [t0 + T/2, t0 + T), 0 otherwise.

    Callable as a torque law (t, z, zd) -> tau (usable with `simulate`)."""

    def __init__(self, amplitude, T, t0=0.0):
        self.amplitude = np.array(amplitude, dtype=float)
        self.T, self.t0 = float(T), float(t0)

    def torque(self, t):
        s = elapsed(t, self.t0)
        if 0.0 <= s < 0.5 * self.T:
            return self.amplitude.copy()
        if 0.5 * self.T <= s < self.T:
            return -self.amplitude
        return np.zeros_like(self.amplitude)

    def __call__(self, t, z=None, zd=None):
        return self.torque(t)


class ReferenceLimits:
    """What a reference may ask of the arm, from the current reference state and the time it actually starts:

    * continuity: at its start the reference is where the current one is, within what the joint covers in one
      control period at its velocity limit (a trajectory whose first point has time_from_start 0 somewhere else
      is a step: a 1 rad step once saturated both joints and drove the elbow to 39.7 rad/s, limit 10);
    * joint positions within the position limits and rates within the velocity limits, on the interpolated
      reference (its points and SAMPLES instants between its start and end: interpolation can overshoot);
    * accelerations the drives can give: |qdd_j| M_jj(q) <= the effort limit (the inertial torque alone, with the
      links straight at the reference's configuration: a necessary condition);
    * a start at most MAX_START_DELAY s ahead.

    A reference that violates them is refused whole (the previous one stays in force): clipping a trajectory would
    change its timing and shape behind the planner's back."""

    SAMPLES = 400
    MAX_START_DELAY = 3600.0
    TOLERANCE = 1e-9

    def __init__(self, model, period=None):
        js = model.spec.joints
        self.model = model
        self.names = list(model.spec.joint_names)
        self.lo = np.array([j.position_limits[0] for j in js], dtype=float)
        self.hi = np.array([j.position_limits[1] for j in js], dtype=float)
        self.vmax = np.array([j.velocity_limit for j in js], dtype=float)
        self.effort = np.array([j.effort_limit for j in js], dtype=float)
        self.step = self.vmax * (period if period is not None else 0.0) + 1e-6     # rad: the largest jump at start

    @classmethod
    def of(cls, model, period=None):
        return cls(model, period)

    def _inertia(self, q):
        """Diagonal of the mass matrix at joint angles q, links straight (kg m^2 per joint)."""
        z = np.zeros(self.model.n_coords)
        z[self.model.q_index] = q
        M = self.model.mass_matrix(z)
        return np.diag(M)[self.model.q_index]

    def violation(self, ref, t_now, current=None) -> str:
        """'' if the reference is within the limits from t_now on, else the first violation, naming the joint.
        `current`: the current reference state (q, qd, qdd) at t_now, for the continuity check."""
        t0 = getattr(ref, 't0', t_now)
        t1 = getattr(ref, 'end_time', t0)
        if not (math.isfinite(t0) and math.isfinite(t1)):
            return 'start or end time not finite'
        if t0 - t_now > self.MAX_START_DELAY:
            return f'starts {t0 - t_now:.0f} s from now (more than {self.MAX_START_DELAY:.0f} s ahead)'
        tol = self.TOLERANCE
        for k, q in enumerate(getattr(ref, 'P', ())):            # the points first: the clearest message
            bad = np.nonzero(~((q >= self.lo - tol) & (q <= self.hi + tol)))[0]
            if bad.size:
                j = int(bad[0])
                return (f'joint {self.names[j]}: position {q[j]:.6g} rad of point {k} is outside its limits '
                        f'[{self.lo[j]:g}, {self.hi[j]:g}]')
        t_start = max(t0, t_now)
        if current is not None:
            with np.errstate(all='ignore'):
                q_start = np.asarray(ref.sample(t_start)[0], float)
            jump = np.abs(q_start - np.asarray(current[0], float))
            bad = np.nonzero(~(jump <= self.step))[0]
            if bad.size:
                j = int(bad[0])
                return (f'joint {self.names[j]}: a step of {jump[j]:.6g} rad at its start (its first point, at '
                        f'time_from_start 0, is not where the current reference is; at most {self.step[j]:.3g} rad): '
                        'give the first point time to get there')
        times = np.linspace(t_start, max(t1, t_now), self.SAMPLES)
        if hasattr(ref, 'times'):
            times = np.union1d(times, ref.t0 + ref.times[ref.t0 + ref.times >= t_start])
        with np.errstate(all='ignore'):
            sample_many = getattr(ref, 'sample_many', None) or (lambda ts: Reference.sample_many(ref, ts))
            Q, QD, QDD = (np.asarray(x, float) for x in sample_many(times))
        for name, X in (('position', Q), ('velocity', QD), ('acceleration', QDD)):
            if not np.all(np.isfinite(X)):
                k = int(np.nonzero(~np.all(np.isfinite(X), axis=1))[0][0])
                return f'{name} not finite at t = {times[k]:.3f} s'
        for what, X, lo, hi, unit in (('position', Q, self.lo - tol, self.hi + tol, 'rad'),
                                      ('velocity', QD, -self.vmax - tol, self.vmax + tol, 'rad/s')):
            bad = np.argwhere((X < lo) | (X > hi))
            if bad.size:
                k, j = (int(x) for x in bad[0])
                limit = (f'outside its limits [{self.lo[j]:g}, {self.hi[j]:g}]' if what == 'position'
                         else f'exceeds its limit {self.vmax[j]:g}')
                return f'joint {self.names[j]}: {what} {X[k, j]:.6g} {unit} at t = {times[k]:.3f} s {limit}'
        need = np.abs(QDD)
        if np.any(need > tol):
            worst = np.argsort(-need.max(axis=1))[:50]          # the hardest instants: the inertia where they are
            for k in worst:
                torque = need[k] * self._inertia(Q[k])
                bad = np.nonzero(torque > self.effort * (1 + 1e-9))[0]
                if bad.size:
                    j = int(bad[0])
                    return (f'joint {self.names[j]}: acceleration {QDD[k, j]:.6g} rad/s^2 at t = {times[k]:.3f} s '
                            f'needs {torque[j]:.4g} N m, beyond its effort limit {self.effort[j]:g} N m')
        return ''
