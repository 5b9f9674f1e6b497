"""The parameters identification may fit (`flexarm identify --fit`), each with where it lives and how it is scaled.

A parameter is named `<joint>.<kind>` (joint: its name in the arm file, or `*` for every joint) or
`payload.<kind>`:

| kind | what | unit | in the calibrated arm file |
|---|---|---|---|
| EI_z, EI_y | bending stiffness of the joint's link, in / out of the plane | N m² | `joints[i].link.EI_z`, `EI_y` |
| damping_ratio | modal damping ratio of every mode of the link | | `joints[i].link.damping_ratio` |
| hub_inertia | the hub's inertia about the joint axis (the whole hub inertia scaled) | kg m² | `joints[i].hub.inertia` |
| viscous, coulomb | joint friction | N m s/rad, N m | `joints[i].friction` |
| torque_scale | true torque / reported torque (the drive's torque constant error) | | no: the bridge's `torque_constant` × it |
| encoder_offset | the encoder's zero error: reading − angle | rad | no: the bridge's offset − it |
| payload.mass, payload.inertia | the payload (inertia about the last joint's axis; the whole matrix scaled) | kg, kg m² | `payload` |
| loop.delay | a real-time loop's unrecorded timing: how much later than recorded each command acted, relative to the readings (transfer and sampling times of a bus; a recording with applied_at only) | s | no: a property of the loop |

Scaling (what the fit moves, theta): positive quantities (stiffness, inertia, mass, torque scale) by their logarithm
relative to the nominal value (theta = ln(v / v_0): a step of 0.1 is 10 %), sought within a factor FIT_FACTOR of
it; quantities that may be zero (damping, friction, offsets) linearly in units of a typical value
(theta = v / v_typ), clipped to their physical range.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from flexarm_sim.model.spec import FIELD_RANGES, arm_from_dict, arm_to_dict

__all__ = ['KINDS', 'Parameter', 'ParameterSet', 'FitError']

# kind -> (unit, log scaling, field path of its range (None: the kind's own), own range)
KINDS = {
    'EI_z': ('N m²', True, 'joints[].link.EI_z', None),
    'EI_y': ('N m²', True, 'joints[].link.EI_y', None),
    'damping_ratio': ('', False, None, (0.0, 0.95)),
    'hub_inertia': ('kg m²', True, None, (1e-12, 1e5)),
    'viscous': ('N m s/rad', False, 'joints[].friction.viscous', None),
    'coulomb': ('N m', False, 'joints[].friction.coulomb', None),
    'torque_scale': ('', True, None, (0.2, 5.0)),
    'encoder_offset': ('rad', False, None, (-0.5, 0.5)),
}
PAYLOAD_KINDS = {
    'mass': ('kg', True, None, (1e-6, 1e4)),
    'inertia': ('kg m²', True, None, (1e-12, 1e5)),
}
LOOP_KINDS = {'delay': ('s', False, None, (-0.01, 0.02))}
LOOP = -2                         # Parameter.joint of the loop's parameters (the payload's is -1)
TYPICAL_DELAY = 1e-3              # s
TYPICAL_DAMPING = 0.01            # a lightly damped metal link
TYPICAL_FRICTION = 0.005          # of the joint's effort limit: N m (Coulomb), N m per rad/s (viscous)
TYPICAL_OFFSET = 0.01             # rad
FIT_FACTOR = 10.0                 # a log-scaled parameter is sought within nominal / 10 .. nominal x 10 (an arm file
                                  # further off than that is no starting point; a fit at the bound says so)


class FitError(ValueError):
    """A parameter list that cannot be fitted: the message names the parameter and why."""


@dataclass(frozen=True)
class Parameter:
    name: str            # 'elbow.EI_z', 'payload.mass'
    kind: str
    joint: int           # joint index; -1 for the payload
    unit: str
    log: bool            # theta = ln(v / nominal) (else v / typical)
    nominal: float
    typical: float       # the value theta is measured in (log: the nominal)
    lo: float
    hi: float

    def value(self, theta: float) -> float:
        return self.nominal * math.exp(theta) if self.log else self.typical * theta

    def theta(self, value: float) -> float:
        return math.log(value / self.nominal) if self.log else value / self.typical

    def clip(self, theta: float) -> float:
        """theta within the parameter's physical range."""
        return min(max(theta, self.theta(self.lo)), self.theta(self.hi))


def _axis_moment(inertia) -> float:
    """The moment about the joint axis (z of the body frame) of a body's inertia (a 3x3 matrix)."""
    return float(np.asarray(inertia, dtype=float)[2, 2])


class ParameterSet:
    """The parameters of one fit on one nominal arm: theta <-> (arm spec, torque scale, encoder offset)."""

    def __init__(self, spec, names):
        self.spec = spec
        self.base = arm_to_dict(spec)
        self.n_joints = len(spec.joints)
        joint_names = [j.name for j in spec.joints]
        if isinstance(names, str):
            names = [s for s in (x.strip() for x in names.split(',')) if s]
        if not names:
            raise FitError('--fit: no parameter named (e.g. --fit shoulder.EI_z,elbow.EI_z,payload.mass)')
        params = []
        for text in names:
            who, _, kind = text.partition('.')
            if not kind:
                raise FitError(f"--fit {text!r}: expected <joint>.<kind>, payload.<kind> or loop.delay")
            if who == 'loop':
                if kind not in LOOP_KINDS:
                    raise FitError(f"--fit {text!r}: loop parameters are {', '.join(LOOP_KINDS)}")
                unit, _, _, (lo, hi) = LOOP_KINDS[kind]
                params.append(Parameter(f'loop.{kind}', kind, LOOP, unit, False, 0.0, TYPICAL_DELAY, lo, hi))
                continue
            if who == 'payload':
                if kind not in PAYLOAD_KINDS:
                    raise FitError(f"--fit {text!r}: payload parameters are {', '.join(PAYLOAD_KINDS)}")
                params.append(self._payload(kind))
                continue
            if kind not in KINDS:
                raise FitError(f"--fit {text!r}: a joint's parameters are {', '.join(KINDS)}")
            if who == '*':
                joints = range(self.n_joints)
            elif who in joint_names:
                joints = [joint_names.index(who)]
            else:
                raise FitError(f"--fit {text!r}: no joint {who!r} in arm {spec.name} (joints: "
                               f"{', '.join(joint_names)}; '*' for every joint)")
            for j in joints:
                params.append(self._joint(j, kind))
        seen = set()
        for p in params:
            if p.name in seen:
                raise FitError(f'--fit: {p.name} named twice')
            seen.add(p.name)
        self.params = tuple(params)

    # ------------------------------------------------------------------ construction
    def _joint(self, j, kind):
        js = self.spec.joints[j]
        unit, log, rng, own = KINDS[kind]
        lo, hi = own if own else (FIELD_RANGES[rng].lo, FIELD_RANGES[rng].hi)
        name = f'{js.name}.{kind}'
        effort = js.effort_limit if math.isfinite(js.effort_limit) else 1.0
        if kind in ('EI_z', 'EI_y'):
            nominal = getattr(js.link, kind)
            if not (js.link.length > 0 and nominal > 0):
                raise FitError(f'--fit {name}: link {js.name} is rigid or has no {kind} (nothing bends in that plane)')
            plane = 'n_in_plane' if kind == 'EI_z' else 'n_out_of_plane'
            if getattr(js.link, plane) == 0:
                raise FitError(f'--fit {name}: link {js.name} models no mode in that plane')
        elif kind == 'damping_ratio':
            if not (js.link.length > 0 and (js.link.n_in_plane + js.link.n_out_of_plane + js.link.n_torsion) > 0):
                raise FitError(f'--fit {name}: link {js.name} models no mode to damp')
            zeta = np.asarray(js.link.damping_ratio, dtype=float)
            if zeta.size and np.ptp(zeta) > 0:
                raise FitError(f'--fit {name}: the arm file gives link {js.name} a damping ratio per mode; one ratio '
                               'per link is fitted (give them all the same nominal value)')
            nominal = float(zeta[0]) if zeta.size else 0.0
        elif kind == 'hub_inertia':
            nominal = _axis_moment(self.base['joints'][j]['hub']['inertia'])
            if not nominal > 0:
                raise FitError(f'--fit {name}: the hub of {js.name} has no inertia about its axis to scale')
        elif kind == 'viscous':
            nominal = js.viscous
        elif kind == 'coulomb':
            nominal = js.coulomb
        elif kind == 'torque_scale':
            nominal = 1.0
        else:                                   # encoder_offset
            nominal = 0.0
        typical = {'damping_ratio': max(nominal, TYPICAL_DAMPING),
                   'viscous': max(nominal, TYPICAL_FRICTION * effort),
                   'coulomb': max(nominal, TYPICAL_FRICTION * effort),
                   'encoder_offset': TYPICAL_OFFSET}.get(kind, nominal)
        if log:
            lo, hi = max(lo, nominal / FIT_FACTOR), min(hi, nominal * FIT_FACTOR)
        return Parameter(name, kind, j, unit, log, float(nominal), float(typical), float(lo), float(hi))

    def _payload(self, kind):
        unit, log, _, (lo, hi) = PAYLOAD_KINDS[kind]
        body = self.base['payload']
        nominal = float(body['mass']) if kind == 'mass' else _axis_moment(body['inertia'])
        if not nominal > 0:
            raise FitError(f'--fit payload.{kind}: the arm file gives the payload no {kind} to scale (give a '
                           'nominal value > 0)')
        return Parameter(f'payload.{kind}', kind, -1, unit, log, nominal, nominal, max(lo, nominal / FIT_FACTOR),
                         min(hi, nominal * FIT_FACTOR))

    # ------------------------------------------------------------------ use
    @property
    def names(self):
        return [p.name for p in self.params]

    def theta0(self):
        return np.array([p.theta(p.nominal) for p in self.params])

    def clip(self, theta):
        return np.array([p.clip(float(x)) for p, x in zip(self.params, theta)])

    def values(self, theta):
        return np.array([p.value(float(x)) for p, x in zip(self.params, theta)])

    def arm_dict(self, theta) -> dict:
        """The nominal arm (plain-data form) with the arm-file parameters set to theta's values."""
        d = copy.deepcopy(self.base)
        for p, x in zip(self.params, theta):
            v = p.value(float(x))
            if p.joint == LOOP:
                continue
            if p.joint < 0:
                body = d['payload']
                if p.kind == 'mass':
                    body['mass'] = v
                else:
                    body['inertia'] = (np.asarray(body['inertia'], dtype=float) * (v / p.nominal)).tolist()
                continue
            jd = d['joints'][p.joint]
            if p.kind in ('EI_z', 'EI_y'):
                jd['link'][p.kind] = v
            elif p.kind == 'damping_ratio':
                jd['link']['damping_ratio'] = v
            elif p.kind == 'hub_inertia':
                jd['hub']['inertia'] = (np.asarray(jd['hub']['inertia'], dtype=float) * (v / p.nominal)).tolist()
            elif p.kind in ('viscous', 'coulomb'):
                jd['friction'][p.kind] = v
        return d

    def spec_of(self, theta):
        return arm_from_dict(self.arm_dict(theta), source=f'{self.spec.name} (identification)')

    def delay(self, theta) -> float:
        """loop.delay of theta (s; 0 when not fitted)."""
        for p, x in zip(self.params, theta):
            if p.joint == LOOP:
                return p.value(float(x))
        return 0.0

    @property
    def fits_delay(self) -> bool:
        return any(p.joint == LOOP for p in self.params)

    def drive(self, theta):
        """(torque scale, encoder offset) per joint of theta."""
        scale, offset = np.ones(self.n_joints), np.zeros(self.n_joints)
        for p, x in zip(self.params, theta):
            if p.kind == 'torque_scale':
                scale[p.joint] = p.value(float(x))
            elif p.kind == 'encoder_offset':
                offset[p.joint] = p.value(float(x))
        return scale, offset
