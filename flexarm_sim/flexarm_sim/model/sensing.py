"""What the sensors of a flexible arm read, as functions of its state (no noise, no ROS): the one owner of the
measurement equations, used by the plant's sensor models, the state estimator and the observability analysis.

    joint encoders   y = q                                          rad (motor-side joint angles)
    strain gauge     y = c w''(x) = c sum_k phi_k''(x) delta_k       m/m, bending strain at x along link j in one
                                                                    bending plane (Euler-Bernoulli: the strain of
                                                                    a fibre at distance c from the neutral axis is
                                                                    c times the curvature)
    tip accelerometer y = R_tip^T (a_tip - g)                        m/s^2, specific force at the deformed tip of the
                                                                    last link, in the tip section's frame (at rest it
                                                                    reads -g: +9.81 m/s^2 upwards)

Sign of c: the gauge lies on the face towards -y (in-plane bending) or -z (out-of-plane) of the link frame for
c > 0, so that a deflection curving towards +y (w'' > 0) stretches it.

The tip acceleration is the second derivative of the tip position along the motion, evaluated as the central
second difference of p(z(s)) with z(s) = z + s zd + s^2/2 zdd (zdd from the forward dynamics): p(z(s)) has the
same first and second derivatives at s = 0 as the true motion, so the difference is exact up to O(h^2).

Sensor sets are written as text (`flexarm modes --sensors`, the plant's and the estimator's parameters):
    encoders                     the joint encoders
    strain:<link>@<x>[:<plane>]  a strain gauge on link <link> (joint name, '<joint>_link' or index) at x metres
                                 from its joint; plane in_plane (default) or out_of_plane; `:c=<m>` sets c
    accel                        a tip accelerometer
joined by commas, e.g. ``encoders,strain:shoulder@0.05,strain:elbow@0.05,accel``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

IN_PLANE, OUT_OF_PLANE = 0, 1             # LinkDeflection.IN_PLANE / OUT_OF_PLANE
PLANES = {'in_plane': IN_PLANE, 'out_of_plane': OUT_OF_PLANE}
PLANE_NAMES = {v: k for k, v in PLANES.items()}
DEFAULT_GAUGE_DISTANCE = 1e-3             # m: c of a gauge on a ~2 mm thick strip
TIP_ACCEL_STEP = 1e-4                     # s: h of the second difference along the motion


class SensorSpecError(ValueError):
    """A sensor description that does not fit the arm; the message names the item."""


# ---------------------------------------------------------------------------------------------- strain gauges
@dataclass(frozen=True)
class StrainGauge:
    link: int                  # joint / link index j
    x: float                   # m from joint j along the undeformed neutral axis, 0 <= x <= length
    plane: int                 # IN_PLANE or OUT_OF_PLANE
    c: float                   # m, signed distance of the gauge from the neutral axis
    name: str                  # '<joint>_link@<x>' (+ ':out_of_plane')


def _link_index(model, link) -> int:
    names = list(model.spec.joint_names)
    if isinstance(link, (int, np.integer)) and not isinstance(link, bool):
        j = int(link)
    elif isinstance(link, str) and link.strip().lstrip('-').isdigit():
        j = int(link)
    elif isinstance(link, str) and link in names:
        j = names.index(link)
    elif isinstance(link, str) and link.endswith('_link') and link[:-5] in names:
        j = names.index(link[:-5])
    else:
        raise SensorSpecError(f'no link {link!r} (links: {", ".join(n + "_link" for n in names)})')
    if not 0 <= j < model.n_joints:
        raise SensorSpecError(f'link index {j} outside 0..{model.n_joints - 1}')
    return j


def strain_gauge(model, link, x, plane=None, c=DEFAULT_GAUGE_DISTANCE) -> StrainGauge:
    """A gauge on a flexible link, validated against the arm (SensorSpecError naming what does not fit)."""
    j = _link_index(model, link)
    js, lm = model.spec.joints[j], model.link_modes[j]
    lname = js.name + '_link'
    bending = [p for p in lm.planes if p in (IN_PLANE, OUT_OF_PLANE)]
    if not bending:
        raise SensorSpecError(f'{lname} has no bending modes: a strain gauge on it reads nothing the model has')
    if plane is None:
        plane = IN_PLANE if IN_PLANE in bending else OUT_OF_PLANE
    elif isinstance(plane, str):
        if plane not in PLANES:
            raise SensorSpecError(f'plane {plane!r}: expected in_plane or out_of_plane')
        plane = PLANES[plane]
    if plane not in bending:
        raise SensorSpecError(f'{lname} has no {PLANE_NAMES[plane]} modes')
    x = float(x)
    L = js.link.length
    if not (math.isfinite(x) and 0.0 <= x <= L):
        raise SensorSpecError(f'gauge position {x:g} m outside {lname} (0 .. {L:g} m)')
    c = float(c)
    if not (math.isfinite(c) and 0.0 < abs(c) <= 1.0):
        raise SensorSpecError(f'gauge distance from the neutral axis c = {c:g} m: expected 0 < |c| <= 1 m')
    name = f'{lname}@{x:.4g}' + (':out_of_plane' if plane == OUT_OF_PLANE else '')
    return StrainGauge(j, x, int(plane), c, name)


def gauge_spec(link: str, x: float, plane: str, c: float) -> str:
    """The text parse_gauge reads back exactly: '<link>@<x>:<plane>:c=<m>' (x and c written as repr: no rounding)."""
    return f'{link}@{float(x)!r}:{plane}:c={float(c)!r}'


def parse_gauge(model, text: str, c=DEFAULT_GAUGE_DISTANCE) -> StrainGauge:
    """'<link>@<x>[:<plane>][:c=<m>]' -> StrainGauge (gauge_spec writes it)."""
    if not isinstance(text, str) or '@' not in text:
        raise SensorSpecError(f'strain gauge {text!r}: expected <link>@<x metres>[:in_plane|out_of_plane][:c=<m>]')
    link, _, rest = text.strip().partition('@')
    parts = rest.split(':')
    try:
        x = float(parts[0])
    except ValueError:
        raise SensorSpecError(f'strain gauge {text!r}: position {parts[0]!r} is not a number (metres)') from None
    plane = None
    for p in parts[1:]:
        if p.startswith('c='):
            try:
                c = float(p[2:])
            except ValueError:
                raise SensorSpecError(f'strain gauge {text!r}: {p!r} is not c=<metres>') from None
        elif p:
            plane = p
    try:
        return strain_gauge(model, link.strip(), x, plane, c)
    except SensorSpecError as e:
        raise SensorSpecError(f'strain gauge {text!r}: {e}') from None


def strain_matrix(model, gauges) -> np.ndarray:
    """(len(gauges), N): strain = S @ z. Row i: c_i phi_k''(x_i) in the columns of the gauge's link's modes of its
    plane (link_modes.strain_derivative gives w'' of the scaled bending modes)."""
    S = np.zeros((len(gauges), model.n_coords))
    for i, g in enumerate(gauges):
        lm = model.link_modes[g.link]
        d2 = lm.strain_derivative([g.x])[:, 0]
        q = int(model.q_index[g.link])
        for k, p in enumerate(lm.planes):
            if p == g.plane:
                S[i, q + 1 + k] = g.c * d2[k]
    return S


# ---------------------------------------------------------------------------------------------- accelerometer
def tip_specific_force(model, z, zd, tau=None, h=TIP_ACCEL_STEP) -> np.ndarray:
    """R_tip^T (a_tip - g) (3,), m/s^2: what an accelerometer at the deformed tip of the last link reads, in the tip
    section's frame (module docstring)."""
    z = np.asarray(z, dtype=float)
    zd = np.asarray(zd, dtype=float)
    zdd = model.accelerations(z, zd, tau)
    R, p0 = model.tip_pose(z)
    _, pp = model.tip_pose(z + h * zd + 0.5 * h * h * zdd)
    _, pm = model.tip_pose(z - h * zd + 0.5 * h * h * zdd)
    a = (pp - 2.0 * p0 + pm) / (h * h)
    return R.T @ (a - np.asarray(model.data.gravity, dtype=float))


def tip_frame_jacobians(model, z0, eps=1e-6):
    """(C_p (3, N), dRg (3, N)): derivatives at z0 of the tip position, and of R_tip^T g, with respect to z
    (central differences)."""
    N = model.n_coords
    g = np.asarray(model.data.gravity, dtype=float)
    Cp, dRg = np.zeros((3, N)), np.zeros((3, N))
    for k in range(N):
        e = np.zeros(N)
        e[k] = eps
        Rp, pp = model.tip_pose(z0 + e)
        Rm, pm = model.tip_pose(z0 - e)
        Cp[:, k] = (pp - pm) / (2 * eps)
        dRg[:, k] = (Rp.T @ g - Rm.T @ g) / (2 * eps)
    return Cp, dRg


# ---------------------------------------------------------------------------------------------- sensor sets
@dataclass(frozen=True)
class SensorSet:
    """Which sensors an arm carries (their geometry; noise is the sensor models' and the estimator's business)."""

    encoders: bool = True
    gauges: tuple = ()
    accelerometer: bool = False
    encoder_counts: int = 0               # counts per revolution given in the text form (0: not given)
    text: str = field(default='', compare=False)

    @classmethod
    def parse(cls, model, spec: str) -> 'SensorSet':
        """From the text form (module docstring); SensorSpecError naming the bad item."""
        if not isinstance(spec, str) or not spec.strip():
            raise SensorSpecError('empty sensor list: expected e.g. encoders,strain:shoulder@0.05,accel')
        enc, acc, counts, gauges = False, False, 0, []
        for item in (s.strip() for s in spec.split(',')):
            kind, _, arg = item.partition(':')
            if kind == 'encoders':
                enc = True
                if arg:
                    try:
                        counts = int(arg)
                    except ValueError:
                        raise SensorSpecError(f'{item!r}: encoders[:<counts per revolution>]') from None
            elif kind == 'strain':
                gauges.append(parse_gauge(model, arg))
            elif kind in ('accel', 'accelerometer'):
                acc = True
            else:
                raise SensorSpecError(f'unknown sensor {item!r}: expected encoders, strain:<link>@<x> or accel')
        names = [g.name for g in gauges]
        if len(set(names)) != len(names):
            raise SensorSpecError(f'a strain gauge is listed twice: {names}')
        return cls(enc, tuple(gauges), acc, counts, spec)

    def labels(self, model) -> list:
        """One label per measured value, in the order of `measure`."""
        out = list(model.spec.joint_names) if self.encoders else []
        out += [g.name for g in self.gauges]
        if self.accelerometer:
            out += ['accel_x', 'accel_y', 'accel_z']
        return out

    def size(self, model) -> int:
        return (model.n_joints if self.encoders else 0) + len(self.gauges) + (3 if self.accelerometer else 0)

    def measure(self, model, z, zd, tau=None) -> np.ndarray:
        """The ideal readings, stacked: joint angles, strains, specific force."""
        parts = []
        if self.encoders:
            parts.append(np.asarray(z, float)[model.q_index])
        if self.gauges:
            parts.append(strain_matrix(model, self.gauges) @ np.asarray(z, float))
        if self.accelerometer:
            parts.append(tip_specific_force(model, z, zd, tau))
        return np.concatenate(parts) if parts else np.zeros(0)

    def jacobians(self, model, lin):
        """(C (m, 2N), D (m, n)) of the readings linearized about the static equilibrium of `lin`
        (flexarm_sim.model.linearize about (z_eq, 0, tau_eq)): y ~ y0 + C (dz, dzd) + D dtau.

        Accelerometer at rest: a_tip = C_p zdd (the velocity terms are quadratic), zdd = A21 dz + A22 dzd + B2 dtau
        from the linear model, and the tip frame turns against gravity: d(R^T g)/dz."""
        N, n = model.n_coords, model.n_joints
        rows_C, rows_D = [], []
        if self.encoders:
            C = np.zeros((n, 2 * N))
            C[np.arange(n), model.q_index] = 1.0
            rows_C.append(C)
            rows_D.append(np.zeros((n, n)))
        if self.gauges:
            S = strain_matrix(model, self.gauges)
            rows_C.append(np.hstack([S, np.zeros_like(S)]))
            rows_D.append(np.zeros((len(self.gauges), n)))
        if self.accelerometer:
            A, B = lin.state_space()
            R, _ = model.tip_pose(lin.z0)
            Cp, dRg = tip_frame_jacobians(model, lin.z0)
            rows_C.append(R.T @ Cp @ A[N:, :] - np.hstack([dRg, np.zeros((3, N))]))
            rows_D.append(R.T @ Cp @ B[N:, :])
        if not rows_C:
            return np.zeros((0, 2 * N)), np.zeros((0, n))
        return np.vstack(rows_C), np.vstack(rows_D)
