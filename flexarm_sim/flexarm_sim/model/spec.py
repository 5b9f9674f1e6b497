"""Arm description: load and validate an arm YAML into immutable dataclasses.

Geometry (standard DH, one row per joint):
``F_j = Tip_{j-1} . Rz(angle_offset_j + q_j)`` (``Tip_0 = base_transform``),
``L_j = F_j . Tz(offset_j)``; link j lies along x of ``L_j`` with length ``a_j``;
``Tip_j = ElasticTip_j . Rx(twist_j)``.  Hub j is a rigid body in ``F_j``; the
payload is a rigid body in the elastic tip frame of the last link; a link's
``extra_mass`` is a rigid body fixed in ``L_j`` (it follows the rigid motion of
the link root, not the deformation).  In-plane bending is deflection along y of
``L_j`` (EI_z), out-of-plane bending along z (EI_y), torsion about x (GJ).

All quantities are SI.  Every numeric field has a physical plausibility range
(:data:`FIELD_RANGES`, rendered into the README by :func:`ranges_markdown`) and the
cross-field rules of :data:`CROSS_FIELD_RULES`.  Validation errors raise
:class:`ArmSpecError` with the full field path (e.g. ``joints[1].link.EI_z``) and the
source file; :class:`ModeSolverError` (a subclass) is what the mode solvers raise.
"""

from __future__ import annotations

import math
import numbers
import re
import reprlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = [
    "ArmSpecError",
    "ModeSolverError",
    "FieldRange",
    "FIELD_RANGES",
    "CROSS_FIELD_RULES",
    "ranges_markdown",
    "check_arm",
    "RigidBody",
    "LinkSpec",
    "JointSpec",
    "ArmSpec",
    "load_arm",
    "arm_from_dict",
    "arm_to_dict",
    "rigid_limit",
    "section_properties",
    "MATERIALS",
    "MAX_MODES_PER_KIND",
]

MAX_MODES_PER_KIND = 8
DEFAULT_GRAVITY = (0.0, 0.0, -9.81)
DEFAULT_FEM_ELEMENTS = 16
BOUNDARIES = ("clamped_mass", "clamped_free")
MODE_SOLVERS = ("analytic", "fem")
# Named material presets: Young's modulus [Pa], density [kg/m^3], Poisson ratio.
MATERIALS = {
    "steel": {"youngs_modulus": 200e9, "density": 7850.0, "poisson_ratio": 0.3},
    "aluminium": {"youngs_modulus": 70e9, "density": 2700.0, "poisson_ratio": 0.33},
}
_MATERIAL_ALIASES = {"aluminum": "aluminium"}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIRECT_KEYS = ("linear_density", "EI_z", "EI_y", "GJ", "polar_density")


class ArmSpecError(ValueError):
    """Invalid arm description; the message names the field path and the source."""


class ModeSolverError(ArmSpecError):
    """A mode solver cannot produce verified modes for the given link data (ratio out of its verified
    range, non-finite intermediate, iteration cap reached).  The model builder adds the link's path."""


# ----------------------------------------------------------------------------------
# plausibility ranges (the one table; README's "Arm description: ranges" is rendered from it)
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRange:
    """Plausible values of one numeric field: [lo, hi] (ends open when flagged), or exactly 0 if ``zero``."""

    field: str
    unit: str
    lo: float
    hi: float
    why: str
    zero: bool = False
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, x: float) -> bool:
        if self.zero and x == 0.0:
            return True
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def text(self) -> str:
        """'0 or [1e-06, 10000] kg' style description of the accepted set."""
        ends = f"{'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"
        return f"{'0 or ' if self.zero else ''}{ends}{' ' + self.unit if self.unit else ''}"

    def interval(self) -> str:
        """The accepted set without the unit (README table)."""
        return FieldRange(self.field, "", self.lo, self.hi, self.why, self.zero, self.lo_open,
                          self.hi_open).text()


def _num(x: float) -> str:
    """1e-06 -> '1e-6', 10000 -> '1e4', 2*pi -> '2π'."""
    if x in (math.tau, -math.tau):
        return "-2π" if x < 0 else "2π"
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:g}"
    m, e = f"{x:e}".split("e")
    return f"{float(m):g}e{int(e)}"


_BODY = "<body>"    # joints[].hub, joints[].link.extra_mass, payload
_R = FieldRange
_TURN = math.tau
FIELD_RANGES = {r.field: r for r in (
    _R("gravity[]", "m/s²", -100.0, 100.0, "up to ~10 g per axis; Earth 9.81"),
    _R("base.xyz[]", "m", -1000.0, 1000.0, "base within 1 km of the world origin"),
    _R("base.rpy[]", "rad", -_TURN, _TURN, "one turn either way"),
    _R("nominal_configuration[]", "rad", -100.0, 100.0, "joint angle; multi-turn joints up to ±16 turns"),
    _R("joints", "", 1, 32, "joints per arm"),
    _R("joints[].angle_offset", "rad", -_TURN, _TURN, "one turn either way"),
    _R("joints[].offset", "m", -100.0, 100.0, "DH offset d, up to 100 m"),
    _R("joints[].twist", "rad", -_TURN, _TURN, "one turn either way"),
    _R("joints[].limits.position[]", "rad", -100.0, 100.0, "multi-turn joints up to ±16 turns"),
    _R("joints[].limits.velocity", "rad/s", 1e-3, 1e3, "0.06 °/s to ~10⁴ rpm at the joint"),
    _R("joints[].limits.effort", "N m", 1e-4, 1e6, "micro servo to the largest industrial joints"),
    _R("joints[].limits.stop_stiffness", "N m/rad", 1e-3, 1e9,
       "hard stop: the smallest effort limit over 5° to the largest over 0.05°; default: from the limits"),
    _R("joints[].limits.stop_damping", "N m s/rad", 0.0, 1e7,
       "hard stop: up to half-critical damping of the stiffest stop on 10 t at 3 m; default: ratio 0.5"),
    _R("joints[].friction.viscous", "N m s/rad", 0.0, 1e6, "up to the largest efforts per rad/s"),
    _R("joints[].friction.coulomb", "N m", 0.0, 1e6, "up to the largest efforts"),
    _R("joints[].gear_ratio", "", 1e-2, 1e4, "1:100 step-up to 10⁴:1 reduction"),
    _R("joints[].rotor_inertia", "kg m²", 1e-12, 10.0, "micro motor to the largest servo motors", zero=True),
    _R(f"{_BODY}.mass", "kg", 1e-6, 1e4, "1 mg to 10 t; 0: no body", zero=True),
    _R(f"{_BODY}.com[]", "m", -100.0, 100.0, "within the arm's size"),
    _R(f"{_BODY}.inertia (moments)", "kg m²", 1e-12, 1e5,
       "1 mg at 1 mm to 10 t at 3 m radius of gyration; 0: none about that axis", zero=True),
    _R(f"{_BODY}.inertia (products)", "kg m²", -1e5, 1e5, "off-diagonal entries of a 3×3 inertia"),
    _R("joints[].link.length", "m", 1e-3, 100.0, "a link between 1 mm and 100 m; 0: no rod", zero=True),
    _R("joints[].link.linear_density", "kg/m", 1e-6, 1e4, "fine wire to a heavy girder", zero=True),
    _R("joints[].link.EI_z", "N m²", 1e-6, 1e12, "thin plastic strip to a steel box girder", zero=True),
    _R("joints[].link.EI_y", "N m²", 1e-6, 1e12, "thin plastic strip to a steel box girder", zero=True),
    _R("joints[].link.GJ", "N m²", 1e-6, 1e12, "thin plastic strip to a steel box girder", zero=True),
    _R("joints[].link.polar_density", "kg m", 1e-15, 1e4, "ρ(I_y + I_z) of a 0.1 mm wire to a girder",
       zero=True),
    _R("joints[].link.section.diameter", "m", 1e-4, 10.0, "0.1 mm to 10 m"),
    _R("joints[].link.section.outer_diameter", "m", 1e-4, 10.0, "0.1 mm to 10 m"),
    _R("joints[].link.section.inner_diameter", "m", 1e-4, 10.0, "0.1 mm to 10 m; 0: solid", zero=True),
    _R("joints[].link.section.width", "m", 1e-4, 10.0, "0.1 mm to 10 m"),
    _R("joints[].link.section.height", "m", 1e-4, 10.0, "0.1 mm to 10 m"),
    _R("joints[].link.material.youngs_modulus", "Pa", 1e5, 2e12, "soft rubber to diamond"),
    _R("joints[].link.material.density", "kg/m³", 1.0, 3e4, "aerogel to osmium"),
    _R("joints[].link.material.poisson_ratio", "", -1.0, 0.5, "bounds of an isotropic solid", lo_open=True),
    _R("joints[].link.material.shear_modulus", "Pa", 3e4, 1e12, "soft rubber to diamond"),
    _R("joints[].link.modes.*", "", 0, 8, "modes per bending plane / torsion"),
    _R("joints[].link.damping_ratio", "", 0.0, 1.0, "modal damping ratio of an underdamped mode",
       hi_open=True),
    _R("joints[].link.fem_elements", "", 1, 200, "Hermite elements per link, mode_solver: fem"),
)}
del _R

# Clamped-mass tip ratios (outboard bodies at the nominal configuration) up to which each mode solver is
# verified (test_spec_robustness): analytic roots against the heavy-tip two-DOF limit, FE against analytic.
TIP_RATIO_LIMITS = {
    "analytic": {"mass": 1e10, "inertia": 1e12, "torsion": 1e12},   # M/(mu L), J/(mu L^3), J/(rho Ip L)
    "fem": {"mass": 1e6, "inertia": 1e6},
}
# load_model: smallest/largest eigenvalue of the mass matrix at the nominal configuration.
MIN_MASS_EIGEN_RATIO = 1e-12

MAX_FILE_BYTES = 256 * 1024       # an arm description is a few KiB; beyond this it is refused before it is parsed
MAX_LINK_MODES = 16               # modes of one link, all planes
MODE_COST_BUDGET = 3.0e5          # sum of (modes per link)^4: 2 links of 8+8+8 modes loaded in 4.2 s of CPU (6.6e5)

CROSS_FIELD_RULES = (
    "`joints[].limits.position`: lower < upper; `nominal_configuration[i]` within joint i's limits",
    "`section.inner_diameter` < `section.outer_diameter`; the linear_density, EI_y, EI_z, GJ and "
    "polar_density a section and material give lie in the ranges of those fields",
    f"`{_BODY}.inertia`: symmetric, positive semidefinite; with mass > 0 its radius of gyration "
    "√(I_max/mass) is at most 100 m",
    "`mode_solver: fem`: 2·`fem_elements` ≥ the modes of each bending plane",
    "`joints[].limits`: in an arm file `velocity` and `effort` are required (the plant clamps commands to the "
    "effort limit, references and resets are checked against both); without `position` the joint turns without end",
    f"size: a file of at most {MAX_FILE_BYTES // 1024} KiB; at most {MAX_LINK_MODES} modes per link (all planes); "
    f"Σ over links of (modes of the link)⁴ ≤ {MODE_COST_BUDGET:g} (the cost of the fourth-order curvature "
    "integrals: any accepted arm loads within 5 s)",
    "YAML 1.2 core schema: `1:30`, `yes`/`no`/`on`/`off`, `0o17`-style octal of YAML 1.1 are text, not numbers "
    "or booleans (refused where a number or a boolean is expected, saying so)",
    "`load_model`: the clamped-mass tip ratios (everything outboard at the nominal configuration) stay where "
    "the mode solvers are verified — analytic: M/(μL) ≤ {a[mass]:g}, J/(μL³) ≤ {a[inertia]:g}, torsion "
    "J/(ρI_p L) ≤ {a[torsion]:g}; fem: M/(μL) ≤ {f[mass]:g}, J/(μL³) ≤ {f[inertia]:g}".format(
        a=TIP_RATIO_LIMITS["analytic"], f=TIP_RATIO_LIMITS["fem"]),
    "`load_model`: modes finite, positive, increasing; every model array finite; the mass matrix at the "
    f"nominal configuration positive definite with smallest/largest eigenvalue ≥ {MIN_MASS_EIGEN_RATIO:g} "
    "(every joint has inertia about its axis)",
)


def ranges_markdown() -> str:
    """The README table of FIELD_RANGES and CROSS_FIELD_RULES (test_spec checks the README against it)."""
    lines = [f"`{_BODY}` is `joints[].hub`, `joints[].link.extra_mass` or `payload`; `[]` is any index.", "",
             "| field | accepted | unit | why |", "|---|---|---|---|"]
    for r in FIELD_RANGES.values():
        lines.append(f"| `{r.field}` | {r.interval()} | {r.unit} | {r.why} |")
    lines += ["", "Cross-field rules:", ""] + [f"* {rule}" for rule in CROSS_FIELD_RULES]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------
# dataclasses
# ----------------------------------------------------------------------------------


def _frozen_array(x, shape=None) -> np.ndarray:
    a = np.array(x, dtype=float)  # always a copy
    if shape is not None:
        a = a.reshape(shape)
    a.setflags(write=False)
    return a


def _canon(v):
    """Hashable, exactly comparable form of a field value."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.shape, tuple(float(x) for x in v.ravel()))
    if isinstance(v, tuple):
        return tuple(_canon(x) for x in v)
    return v


class _ArrayEq:
    """Value equality/hash for frozen dataclasses holding numpy arrays.

    Fields listed in ``_NO_COMPARE`` are ignored.
    """

    _NO_COMPARE: tuple = ()

    def _key(self):
        return tuple(_canon(getattr(self, f.name)) for f in fields(self)
                     if f.name not in self._NO_COMPARE)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class RigidBody(_ArrayEq):
    """Rigid body: mass [kg], COM (3,) [m] and inertia (3,3) about the COM [kg m^2], in the body frame."""

    mass: float
    com: np.ndarray
    inertia: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "mass", float(self.mass))
        object.__setattr__(self, "com", _frozen_array(self.com, (3,)))
        object.__setattr__(self, "inertia", _frozen_array(self.inertia, (3, 3)))

    @classmethod
    def zero(cls) -> "RigidBody":
        return cls(0.0, np.zeros(3), np.zeros((3, 3)))


@dataclass(frozen=True, eq=False)
class LinkSpec(_ArrayEq):
    """Link j: uniform Euler-Bernoulli beam along x of L_j plus an optional rigid attachment."""

    length: float
    linear_density: float
    EI_y: float
    EI_z: float
    GJ: float
    polar_density: float
    n_in_plane: int
    n_out_of_plane: int
    n_torsion: int
    boundary: str
    damping_ratio: np.ndarray
    mode_solver: str
    fem_elements: int
    extra: RigidBody

    def __post_init__(self):
        for name in ("length", "linear_density", "EI_y", "EI_z", "GJ", "polar_density"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("n_in_plane", "n_out_of_plane", "n_torsion", "fem_elements"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "damping_ratio", _frozen_array(self.damping_ratio, (-1,)))

    @property
    def n_modes(self) -> int:
        """Modes in order: in-plane..., out-of-plane..., torsion..."""
        return self.n_in_plane + self.n_out_of_plane + self.n_torsion

    @property
    def is_flexible(self) -> bool:
        return self.n_modes > 0

    @property
    def mass(self) -> float:
        return self.linear_density * self.length + self.extra.mass


@dataclass(frozen=True, eq=False)
class JointSpec(_ArrayEq):
    """Revolute joint j (DH row), its actuator data, hub and link."""

    name: str
    angle_offset: float
    offset: float
    twist: float
    position_limits: tuple
    velocity_limit: float
    effort_limit: float
    viscous: float
    coulomb: float
    gear_ratio: float
    rotor_inertia: float
    hub: RigidBody
    link: LinkSpec
    # hard stop at the position limits (N m/rad, N m s/rad); None: the model's physically based default
    # (arm_model.joint_stops)
    stop_stiffness: Any = None
    stop_damping: Any = None

    def __post_init__(self):
        lo, hi = self.position_limits
        object.__setattr__(self, "position_limits", (float(lo), float(hi)))
        for name in ("angle_offset", "offset", "twist", "velocity_limit", "effort_limit", "viscous",
                     "coulomb", "gear_ratio", "rotor_inertia"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("stop_stiffness", "stop_damping"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def reflected_rotor_inertia(self) -> float:
        """Rotor inertia seen at the joint: rotor_inertia * gear_ratio^2 [kg m^2]."""
        return self.rotor_inertia * self.gear_ratio ** 2


@dataclass(frozen=True, eq=False)
class ArmSpec(_ArrayEq):
    """Whole arm.  ``source`` (file path or '<dict>') is not part of equality."""

    name: str
    description: str
    planar: bool
    gravity: np.ndarray
    base_transform: np.ndarray
    nominal_configuration: np.ndarray
    joints: tuple
    payload: RigidBody
    source: str = "<dict>"
    # second-order axial foreshortening of the flexible links (link_modes.py); False: transverse-only kinematics
    geometric_nonlinearity: bool = True

    _NO_COMPARE = ("source",)

    def __post_init__(self):
        object.__setattr__(self, "gravity", _frozen_array(self.gravity, (3,)))
        object.__setattr__(self, "base_transform", _frozen_array(self.base_transform, (4, 4)))
        object.__setattr__(self, "nominal_configuration",
                           _frozen_array(self.nominal_configuration, (-1,)))
        object.__setattr__(self, "joints", tuple(self.joints))

    @property
    def n_joints(self) -> int:
        return len(self.joints)

    @property
    def joint_names(self) -> tuple:
        return tuple(j.name for j in self.joints)

    @property
    def n_modes_total(self) -> int:
        return sum(j.link.n_modes for j in self.joints)


# ----------------------------------------------------------------------------------
# geometry helpers
# ----------------------------------------------------------------------------------


def _rpy_matrix(r, p, y) -> np.ndarray:
    """URDF convention: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def _matrix_rpy(R) -> tuple:
    sp = -R[2, 0]
    if abs(sp) < 1.0 - 1e-12:
        return (math.atan2(R[2, 1], R[2, 2]), math.asin(sp), math.atan2(R[1, 0], R[0, 0]))
    # gimbal lock: put everything in yaw
    p = math.copysign(math.pi / 2, sp)
    return (0.0, p, math.atan2(-R[0, 1], R[1, 1]))


def _pose_matrix(xyz, rpy) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = _rpy_matrix(*rpy)
    T[:3, 3] = xyz
    return T


def _rect_torsion_constant(w: float, h: float, terms: int = 50) -> float:
    """Saint-Venant torsion constant of a w x h rectangle (exact series, odd n)."""
    a, b = max(w, h), min(w, h)
    s = sum(math.tanh(n * math.pi * a / (2 * b)) / n ** 5 for n in range(1, 2 * terms, 2))
    return a * b ** 3 / 3.0 * (1.0 - 192.0 / math.pi ** 5 * (b / a) * s)


def section_properties(shape: str, dims: dict) -> dict:
    """Area A, second moments I_y (about y), I_z (about z) and torsion constant J [SI].

    ``rectangle``: ``width`` along y, ``height`` along z, so I_z = h w^3/12, I_y = w h^3/12.
    """
    if shape == "circle":
        d = dims["diameter"]
        A = math.pi / 4 * d ** 2
        I = math.pi / 64 * d ** 4
        return {"A": A, "I_y": I, "I_z": I, "J": 2 * I}
    if shape == "tube":
        do, di = dims["outer_diameter"], dims.get("inner_diameter", 0.0)
        A = math.pi / 4 * (do ** 2 - di ** 2)
        I = math.pi / 64 * (do ** 4 - di ** 4)
        return {"A": A, "I_y": I, "I_z": I, "J": 2 * I}
    if shape == "rectangle":
        w, h = dims["width"], dims["height"]
        return {"A": w * h, "I_y": w * h ** 3 / 12, "I_z": h * w ** 3 / 12,
                "J": _rect_torsion_constant(w, h)}
    raise ValueError(f"unknown section shape {shape!r}")


# ----------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------

class _Invalid(Exception):
    """Internal: a field failed; already recorded."""


class _Checker:
    def __init__(self, source: str):
        self.source = source
        self.errors: list[str] = []
        self.require_limits = False

    def fail(self, path: str, msg: str):
        self.errors.append(f"{path}: {msg}")
        raise _Invalid

    def soft(self, path: str, msg: str):
        self.errors.append(f"{path}: {msg}")

    def guard(self, fn, *args, default=None, **kw):
        """Run fn; on a recorded failure return default."""
        try:
            return fn(*args, **kw)
        except _Invalid:
            return default

    # --- containers ---
    def mapping(self, v, path, allowed, required=()):
        if not isinstance(v, dict):
            self.fail(path or "<root>", f"must be a mapping, got {_tname(v)}")
        for k in v:
            if not isinstance(k, str) or k not in allowed:
                self.soft(_join(path, _short(k) if not isinstance(k, str) else k[:80]),
                          f"unknown key (allowed: {', '.join(allowed)})")
        for k in required:
            if k not in v:
                self.soft(_join(path, k), "required key missing")
        return v

    def sequence(self, v, path):
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, (list, tuple)):
            self.fail(path, f"must be a list, got {_tname(v)}")
        return list(v)

    # --- scalars ---
    def number(self, v, path, *, gt=None, ge=None, lt=None, le=None, rng=None):
        """A finite real; then the bounds given, then the plausibility range FIELD_RANGES[rng]."""
        if isinstance(v, str) and _YAML11_NUMBER.match(v.strip()):
            self.fail(path, f"must be a number, got the text {v!r}: arm files are read as YAML 1.2, where this is no "
                            "number (YAML 1.1 read 1:30 as the sexagesimal 90); write the number itself")
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            self.fail(path, f"must be a number, got {_tname(v)} {_short(v)}")
        try:
            x = float(v)
        except (OverflowError, ValueError):
            self.fail(path, f"must be a finite number, got {_short(v)}")
        if not math.isfinite(x):
            self.fail(path, f"must be finite, got {x}")
        if gt is not None and not x > gt:
            self.fail(path, f"must be > {gt:g}, got {x}")
        if ge is not None and not x >= ge:
            self.fail(path, f"must be >= {ge:g}, got {x}")
        if lt is not None and not x < lt:
            self.fail(path, f"must be < {lt:g}, got {x}")
        if le is not None and not x <= le:
            self.fail(path, f"must be <= {le:g}, got {x}")
        if rng is not None:
            self.in_range(x, path, rng)
        return x

    def in_range(self, x, path, rng, what=""):
        r = FIELD_RANGES[rng]
        if not r.contains(x):
            self.fail(path, f"{what}must be {r.text()} ({r.why}), got {x:g}")

    def integer(self, v, path, *, ge=None, le=None, rng=None):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            self.fail(path, f"must be an integer, got {_tname(v)} {_short(v)}")
        i = int(v)
        if ge is not None and i < ge:
            self.fail(path, f"must be >= {ge}, got {_short(i)}")
        if le is not None and i > le:
            self.fail(path, f"must be <= {le}, got {_short(i)}")
        if rng is not None and not FIELD_RANGES[rng].contains(i):
            r = FIELD_RANGES[rng]
            self.fail(path, f"must be {r.text()} ({r.why}), got {_short(i)}")
        return i

    def boolean(self, v, path):
        if not isinstance(v, (bool, np.bool_)):
            self.fail(path, f"must be true or false, got {_tname(v)} {_short(v)}")
        return bool(v)

    def string(self, v, path, *, choices=None, pattern=None):
        if not isinstance(v, str):
            self.fail(path, f"must be a string, got {_tname(v)} {_short(v)}")
        if choices is not None and v not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}; got {_short(v)}")
        if pattern is not None and not pattern.match(v):
            self.fail(path, f"must match {pattern.pattern} (ROS-safe name), got {_short(v)}")
        return v

    def vector(self, v, path, n=None, **bounds):
        seq = self.sequence(v, path)
        if n is not None and len(seq) != n:
            self.fail(path, f"must have {n} elements, got {len(seq)}")
        out, ok = [], True
        for i, x in enumerate(seq):
            try:
                out.append(self.number(x, f"{path}[{i}]", **bounds))
            except _Invalid:
                ok = False
        if not ok:
            raise _Invalid
        return np.array(out, dtype=float)

    # --- inertia ---
    def inertia(self, v, path):
        """Scalar J (thin disc about z: diag(J/2,J/2,J)), [Ixx,Iyy,Izz], or 3x3 symmetric PSD.

        Moments (scalar, diagonal entries) and products (off-diagonal entries) are checked against
        their FIELD_RANGES rows as written; the matrix must be symmetric and positive semidefinite.
        """
        moments, products = f"{_BODY}.inertia (moments)", f"{_BODY}.inertia (products)"
        if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
            J = self.number(v, path, ge=0.0, rng=moments)
            self.in_range(J / 2, path, moments, what=f"gives the moments J/2 = {J / 2:g} about x and y, which ")
            return np.diag([J / 2, J / 2, J])
        seq = self.sequence(v, path)
        if len(seq) == 3 and all(not isinstance(r, (list, tuple, np.ndarray)) for r in seq):
            return np.diag(self.vector(seq, path, 3, ge=0.0, rng=moments))
        if len(seq) != 3:
            self.fail(path, f"must be a scalar, 3 diagonal values or a 3x3 matrix, got {len(seq)} entries")
        rows, ok = [], True
        for i, r in enumerate(seq):
            try:
                row = self.vector(r, f"{path}[{i}]", 3)
                for k in range(3):
                    self.in_range(row[k], f"{path}[{i}][{k}]", moments if k == i else products)
                rows.append(row)
            except _Invalid:
                ok = False
        if not ok:
            raise _Invalid
        M = np.array(rows)
        scale = max(1.0, float(np.max(np.abs(M))))
        if not np.allclose(M, M.T, rtol=0.0, atol=1e-12 * scale):
            self.fail(path, "inertia matrix must be symmetric")
        M = 0.5 * (M + M.T)
        ev = np.linalg.eigvalsh(M)
        if ev[0] < -1e-12 * scale:
            self.fail(path, f"inertia matrix must be positive semidefinite, eigenvalues {ev.tolist()}")
        return M


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlevel = 2


def _short(v) -> str:
    """Bounded repr for messages (an aliased YAML list or a 10**400 integer must not flood them)."""
    r = _REPR.repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _tname(v) -> str:
    return "null" if v is None else type(v).__name__


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


MAX_RADIUS_OF_GYRATION = 100.0   # m: no body of an arm is larger


def _rigid_body(c: _Checker, v, path) -> RigidBody:
    c.mapping(v, path, ("mass", "com", "inertia"))
    mass = c.guard(c.number, v.get("mass", 0.0), _join(path, "mass"), ge=0.0, rng=f"{_BODY}.mass",
                   default=0.0)
    com = c.guard(c.vector, v.get("com", [0.0, 0.0, 0.0]), _join(path, "com"), 3, rng=f"{_BODY}.com[]",
                  default=np.zeros(3))
    inertia = c.guard(c.inertia, v.get("inertia", 0.0), _join(path, "inertia"), default=None)
    if inertia is None:
        inertia = np.zeros((3, 3))
    elif mass > 0.0:
        k = math.sqrt(max(0.0, float(np.linalg.eigvalsh(inertia)[-1])) / mass)
        if k > MAX_RADIUS_OF_GYRATION:
            c.soft(path, f"radius of gyration sqrt(I_max/mass) = {k:.3g} m exceeds "
                   f"{MAX_RADIUS_OF_GYRATION:g} m (mass {mass:g} kg): inertia or mass mistyped?")
    return RigidBody(mass, com, inertia)


def _material(c: _Checker, v, path) -> dict:
    if isinstance(v, str):
        name = _MATERIAL_ALIASES.get(v, v)
        c.string(name, path, choices=tuple(MATERIALS))
        return dict(MATERIALS[name])
    c.mapping(v, path, ("youngs_modulus", "density", "poisson_ratio", "shear_modulus"),
              required=("youngs_modulus", "density"))
    if "youngs_modulus" not in v or "density" not in v:
        raise _Invalid
    out = {}
    R = "joints[].link.material."
    for k in ("youngs_modulus", "density"):
        if k in v:
            out[k] = c.guard(c.number, v[k], _join(path, k), gt=0.0, rng=R + k)
    if "poisson_ratio" in v and "shear_modulus" in v:
        c.soft(path, "give either poisson_ratio or shear_modulus, not both")
    elif "poisson_ratio" in v:
        out["poisson_ratio"] = c.guard(c.number, v["poisson_ratio"], _join(path, "poisson_ratio"),
                                       gt=-1.0, le=0.5, rng=R + "poisson_ratio")
    elif "shear_modulus" in v:
        out["shear_modulus"] = c.guard(c.number, v["shear_modulus"], _join(path, "shear_modulus"), gt=0.0,
                                       rng=R + "shear_modulus")
    if any(x is None for x in out.values()):
        raise _Invalid
    return out


def _section(c: _Checker, v, path) -> dict:
    shapes = {"tube": (("outer_diameter", "inner_diameter"), ("outer_diameter", "inner_diameter")),
              "circle": (("diameter",), ("diameter",)),
              "rectangle": (("width", "height"), ("width", "height"))}
    c.mapping(v, path, ("shape", "outer_diameter", "inner_diameter", "diameter", "width", "height"),
              required=("shape",))
    shape = c.string(v.get("shape"), _join(path, "shape"), choices=tuple(shapes))
    allowed, required = shapes[shape]
    dims, ok = {}, True
    for k in v:
        if k != "shape" and k not in allowed:
            c.soft(_join(path, k), f"not a parameter of shape {shape!r} (allowed: {', '.join(allowed)})")
            ok = False
    for k in required:
        if k not in v:
            c.soft(_join(path, k), f"required for shape {shape!r}")
            ok = False
        else:
            try:
                dims[k] = c.number(v[k], _join(path, k),
                                   ge=0.0 if k == "inner_diameter" else None,
                                   gt=None if k == "inner_diameter" else 0.0,
                                   rng=f"joints[].link.section.{k}")
            except _Invalid:
                ok = False
    if not ok:
        raise _Invalid
    if shape == "tube" and dims["inner_diameter"] >= dims["outer_diameter"]:
        c.fail(_join(path, "inner_diameter"),
               f"must be < outer_diameter ({dims['outer_diameter']}), got {dims['inner_diameter']}")
    return section_properties(shape, dims)


def _link(c: _Checker, v, path) -> LinkSpec:
    allowed = ("length", *_DIRECT_KEYS, "section", "material", "modes", "boundary", "damping_ratio",
               "mode_solver", "fem_elements", "extra_mass")
    c.mapping(v, path, allowed, required=("length",))
    P = lambda k: _join(path, k)  # noqa: E731

    # modes
    n_ip = n_op = n_t = 0
    if "modes" in v:
        try:
            m = c.mapping(v["modes"], P("modes"), ("in_plane", "out_of_plane", "torsion"))
            R = "joints[].link.modes.*"
            n_ip = c.guard(c.integer, m.get("in_plane", 0), P("modes.in_plane"), ge=0,
                           le=MAX_MODES_PER_KIND, rng=R, default=0)
            n_op = c.guard(c.integer, m.get("out_of_plane", 0), P("modes.out_of_plane"), ge=0,
                           le=MAX_MODES_PER_KIND, rng=R, default=0)
            n_t = c.guard(c.integer, m.get("torsion", 0), P("modes.torsion"), ge=0,
                          le=MAX_MODES_PER_KIND, rng=R, default=0)
        except _Invalid:
            pass
    n_modes = n_ip + n_op + n_t

    length = 0.0
    if "length" in v:
        length = c.guard(c.number, v["length"], P("length"), **({"gt": 0.0} if n_modes else {"ge": 0.0}),
                         rng="joints[].link.length", default=0.0)

    extra = RigidBody.zero()
    if "extra_mass" in v:
        extra = c.guard(_rigid_body, c, v["extra_mass"], P("extra_mass"), default=extra)

    # stiffness / density
    needs = {
        "linear_density": n_modes > 0 or (length > 0.0 and "extra_mass" not in v),
        "EI_z": n_ip > 0, "EI_y": n_op > 0, "GJ": n_t > 0, "polar_density": n_t > 0,
    }
    why = {"linear_density": "the link has modes, or length > 0 and no extra_mass",
           "EI_z": "modes.in_plane > 0", "EI_y": "modes.out_of_plane > 0",
           "GJ": "modes.torsion > 0", "polar_density": "modes.torsion > 0"}
    props = dict.fromkeys(_DIRECT_KEYS, 0.0)
    direct_given = [k for k in _DIRECT_KEYS if k in v]
    if "section" in v or "material" in v:
        if direct_given:
            c.soft(P(direct_given[0]),
                   "section/material and direct values (linear_density, EI_y, EI_z, GJ, polar_density) "
                   "are mutually exclusive")
        for k, other in (("section", "material"), ("material", "section")):
            if k not in v:
                c.soft(P(k), f"required when {other} is given")
        if "section" in v and "material" in v:
            sec = c.guard(_section, c, v["section"], P("section"))
            mat = c.guard(_material, c, v["material"], P("material"))
            if sec is not None and mat is not None:
                E, rho = mat["youngs_modulus"], mat["density"]
                props["linear_density"] = rho * sec["A"]
                props["EI_y"] = E * sec["I_y"]
                props["EI_z"] = E * sec["I_z"]
                props["polar_density"] = rho * (sec["I_y"] + sec["I_z"])
                if "shear_modulus" in mat:
                    props["GJ"] = mat["shear_modulus"] * sec["J"]
                elif "poisson_ratio" in mat:
                    props["GJ"] = E / (2.0 * (1.0 + mat["poisson_ratio"])) * sec["J"]
                elif needs["GJ"]:
                    c.soft(P("material"), "needs poisson_ratio or shear_modulus because modes.torsion > 0")
                for k in _DIRECT_KEYS:     # what the section and material give must be plausible too
                    if props[k] != 0.0 or needs[k]:
                        c.guard(c.in_range, props[k], P("section"), f"joints[].link.{k}",
                                what=f"with this material gives {k} = {props[k]:.3g}, which ")
    else:
        for k in _DIRECT_KEYS:
            if k in v:
                bound = {"gt": 0.0} if needs[k] else {"ge": 0.0}
                props[k] = c.guard(c.number, v[k], P(k), **bound, rng=f"joints[].link.{k}", default=0.0)
            elif needs[k]:
                c.soft(P(k), f"required (> 0) because {why[k]}")

    boundary = c.guard(c.string, v.get("boundary", "clamped_mass"), P("boundary"), choices=BOUNDARIES,
                       default="clamped_mass")
    mode_solver = c.guard(c.string, v.get("mode_solver", "analytic"), P("mode_solver"),
                          choices=MODE_SOLVERS, default="analytic")
    fem_elements = c.guard(c.integer, v.get("fem_elements", DEFAULT_FEM_ELEMENTS), P("fem_elements"),
                           ge=1, rng="joints[].link.fem_elements", default=DEFAULT_FEM_ELEMENTS)
    if mode_solver == "fem" and 2 * fem_elements < max(n_ip, n_op):
        c.soft(P("fem_elements"), f"{fem_elements} Hermite elements give at most {2 * fem_elements} modes per "
               f"bending plane, modes asks for {max(n_ip, n_op)}")

    zeta = np.zeros(n_modes)
    dr = v.get("damping_ratio", 0.0)
    try:
        if isinstance(dr, numbers.Real) and not isinstance(dr, (bool, np.bool_)):
            zeta = np.full(n_modes, c.number(dr, P("damping_ratio"), ge=0.0, lt=1.0,
                                             rng="joints[].link.damping_ratio"))
        else:
            zeta = c.vector(dr, P("damping_ratio"), n_modes, ge=0.0, lt=1.0, rng="joints[].link.damping_ratio")
    except _Invalid:
        pass

    return LinkSpec(length=length, linear_density=props["linear_density"], EI_y=props["EI_y"],
                    EI_z=props["EI_z"], GJ=props["GJ"], polar_density=props["polar_density"],
                    n_in_plane=n_ip, n_out_of_plane=n_op, n_torsion=n_t, boundary=boundary,
                    damping_ratio=zeta, mode_solver=mode_solver, fem_elements=fem_elements, extra=extra)


def _joint(c: _Checker, v, path) -> JointSpec:
    allowed = ("name", "angle_offset", "offset", "twist", "limits", "friction", "gear_ratio",
               "rotor_inertia", "hub", "link")
    c.mapping(v, path, allowed, required=("name", "link"))
    P = lambda k: _join(path, k)  # noqa: E731
    g = c.guard
    name = g(c.string, v["name"], P("name"), pattern=_NAME_RE, default="") if "name" in v else ""
    angle_offset = g(c.number, v.get("angle_offset", 0.0), P("angle_offset"), rng="joints[].angle_offset",
                     default=0.0)
    offset = g(c.number, v.get("offset", 0.0), P("offset"), rng="joints[].offset", default=0.0)
    twist = g(c.number, v.get("twist", 0.0), P("twist"), rng="joints[].twist", default=0.0)

    lo, hi, vel, eff = -math.inf, math.inf, math.inf, math.inf
    stop_k = stop_c = None
    if c.require_limits and "limits" not in v:
        c.soft(P("limits"), "required: {velocity: <rad/s>, effort: <N m>} (and position: [lower, upper] unless the "
                            "joint turns without end)")
    elif c.require_limits and isinstance(v["limits"], dict):
        for key, unit in (("velocity", "rad/s"), ("effort", "N m")):
            if key not in v["limits"]:
                c.soft(P(f"limits.{key}"), f"required ({unit}): the joint's {key} limit")
    if "limits" in v:
        try:
            lim = c.mapping(v["limits"], P("limits"), ("position", "velocity", "effort", "stop_stiffness",
                                                       "stop_damping"))
            if "position" in lim:
                pl = g(c.vector, lim["position"], P("limits.position"), 2, rng="joints[].limits.position[]")
                if pl is not None:
                    if pl[0] < pl[1]:
                        lo, hi = float(pl[0]), float(pl[1])
                    else:
                        c.soft(P("limits.position"), f"lower limit must be < upper limit, got {pl.tolist()}")
            if "velocity" in lim:
                vel = g(c.number, lim["velocity"], P("limits.velocity"), gt=0.0, rng="joints[].limits.velocity",
                        default=math.inf)
            if "effort" in lim:
                eff = g(c.number, lim["effort"], P("limits.effort"), gt=0.0, rng="joints[].limits.effort",
                        default=math.inf)
            if "stop_stiffness" in lim:
                stop_k = g(c.number, lim["stop_stiffness"], P("limits.stop_stiffness"), gt=0.0,
                           rng="joints[].limits.stop_stiffness")
            if "stop_damping" in lim:
                stop_c = g(c.number, lim["stop_damping"], P("limits.stop_damping"), ge=0.0,
                           rng="joints[].limits.stop_damping")
        except _Invalid:
            pass

    viscous = coulomb = 0.0
    if "friction" in v:
        try:
            fr = c.mapping(v["friction"], P("friction"), ("viscous", "coulomb"))
            viscous = g(c.number, fr.get("viscous", 0.0), P("friction.viscous"), ge=0.0,
                        rng="joints[].friction.viscous", default=0.0)
            coulomb = g(c.number, fr.get("coulomb", 0.0), P("friction.coulomb"), ge=0.0,
                        rng="joints[].friction.coulomb", default=0.0)
        except _Invalid:
            pass
    gear = g(c.number, v.get("gear_ratio", 1.0), P("gear_ratio"), gt=0.0, rng="joints[].gear_ratio", default=1.0)
    rotor = g(c.number, v.get("rotor_inertia", 0.0), P("rotor_inertia"), ge=0.0, rng="joints[].rotor_inertia",
              default=0.0)
    hub = g(_rigid_body, c, v.get("hub", {}), P("hub"), default=RigidBody.zero())
    link = _link(c, v.get("link", {"length": 0.0}), P("link"))
    return JointSpec(name=name, angle_offset=angle_offset, offset=offset, twist=twist,
                     position_limits=(lo, hi), velocity_limit=vel, effort_limit=eff, viscous=viscous,
                     coulomb=coulomb, gear_ratio=gear, rotor_inertia=rotor, hub=hub, link=link,
                     stop_stiffness=stop_k, stop_damping=stop_c)


def arm_from_dict(d: Any, source: str = "<dict>", require_limits: bool = False) -> ArmSpec:
    """Validate a parsed arm description (see module docstring) and build an :class:`ArmSpec`. An arm *file*
    (load_arm) must give every joint's velocity and effort limits (require_limits); a dict built in code may leave
    them out: unlimited (infinite) joints, for the model alone (the nodes load files)."""
    c = _Checker(str(source))
    c.require_limits = require_limits
    try:
        spec = _arm(c, d)
    except _Invalid:
        spec = None
    if c.errors or spec is None:
        msg = "\n  ".join(c.errors) if c.errors else "invalid arm description"
        raise ArmSpecError(f"invalid arm description in {c.source}:\n  {msg}")
    return spec


def _arm(c: _Checker, d) -> ArmSpec:
    allowed = ("name", "description", "planar", "gravity", "base", "nominal_configuration", "joints",
               "payload", "geometric_nonlinearity")
    c.mapping(d, "", allowed, required=("name", "joints"))
    g = c.guard
    name = g(c.string, d.get("name", "arm"), "name", pattern=_NAME_RE, default="arm")
    description = g(c.string, d.get("description", ""), "description", default="")
    planar = g(c.boolean, d.get("planar", False), "planar", default=False)
    nonlinear = g(c.boolean, d.get("geometric_nonlinearity", True), "geometric_nonlinearity", default=True)
    gravity = g(c.vector, d.get("gravity", list(DEFAULT_GRAVITY)), "gravity", 3, rng="gravity[]",
                default=np.array(DEFAULT_GRAVITY))

    xyz, rpy = np.zeros(3), np.zeros(3)
    if "base" in d:
        try:
            b = c.mapping(d["base"], "base", ("xyz", "rpy"))
            xyz = g(c.vector, b.get("xyz", [0.0, 0.0, 0.0]), "base.xyz", 3, rng="base.xyz[]", default=np.zeros(3))
            rpy = g(c.vector, b.get("rpy", [0.0, 0.0, 0.0]), "base.rpy", 3, rng="base.rpy[]", default=np.zeros(3))
        except _Invalid:
            pass

    joints = []
    if "joints" in d:
        seq = c.sequence(d["joints"], "joints")
        if not FIELD_RANGES["joints"].contains(len(seq)):
            c.fail("joints", f"must contain {FIELD_RANGES['joints'].text()}, got {len(seq)}")
        for i, jv in enumerate(seq):
            j = g(_joint, c, jv, f"joints[{i}]")
            if j is not None:
                joints.append(j)
        if len(joints) != len(seq):
            raise _Invalid
        cost = 0.0
        for i, j in enumerate(joints):
            m = j.link.n_modes
            if m > MAX_LINK_MODES:
                c.soft(f"joints[{i}].link.modes", f"{m} modes in all (at most {MAX_LINK_MODES} per link)")
            cost += float(m) ** 4
        if cost > MODE_COST_BUDGET:
            c.soft("joints", f"too many modes to load in time: the sum over links of (modes)^4 is {cost:g} (at most "
                             f"{MODE_COST_BUDGET:g}); use fewer modes per link")
        seen = {}
        for i, j in enumerate(joints):
            if j.name in seen:
                c.soft(f"joints[{i}].name", f"duplicate joint name {j.name!r} (also joints[{seen[j.name]}])")
            seen.setdefault(j.name, i)
    n = len(joints)

    q0 = np.zeros(n)
    if "nominal_configuration" in d:
        q = g(c.vector, d["nominal_configuration"], "nominal_configuration", n, rng="nominal_configuration[]")
        if q is not None:
            q0 = q
            for i, j in enumerate(joints):
                lo, hi = j.position_limits
                if not lo <= q0[i] <= hi:
                    c.soft(f"nominal_configuration[{i}]",
                           f"{q0[i]} outside joints[{i}].limits.position [{lo}, {hi}]")

    if planar:
        for i, j in enumerate(joints):
            if j.twist != 0.0:
                c.soft(f"joints[{i}].twist", f"must be 0 for a planar arm, got {j.twist}")
            if j.link.n_out_of_plane:
                c.soft(f"joints[{i}].link.modes.out_of_plane",
                       f"must be 0 for a planar arm, got {j.link.n_out_of_plane}")
            if j.link.n_torsion:
                c.soft(f"joints[{i}].link.modes.torsion", f"must be 0 for a planar arm, got {j.link.n_torsion}")

    payload = RigidBody.zero()
    if "payload" in d:
        payload = g(_rigid_body, c, d["payload"], "payload", default=payload)

    spec = ArmSpec(name=name, description=description, planar=planar, gravity=gravity,
                   base_transform=_pose_matrix(xyz, rpy), nominal_configuration=q0, joints=tuple(joints),
                   payload=payload, source=c.source, geometric_nonlinearity=nonlinear)
    object.__setattr__(spec, "_base_pose", (tuple(map(float, xyz)), tuple(map(float, rpy))))
    return spec


# ----------------------------------------------------------------------------------
# YAML
# ----------------------------------------------------------------------------------


_YAML11_NUMBER = re.compile(r"^[-+]?([0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?|0[0-7_]+|0b[01_]+|[0-9][0-9_]*_[0-9_]*"
                            r"(\.[0-9_]*)?)$")


class _Loader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema's scalars (null; true/false only; decimal, 0o octal and 0x hex
    integers; floats with or without a dot, ``1e-3`` included; .inf/.nan) and no others: YAML 1.1's sexagesimal
    ``1:30`` (90), ``yes/no/on/off`` booleans, ``017`` octal, ``1_000`` and timestamps are text, which the checker
    refuses where it expects a number or a boolean. Duplicate keys are refused."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:
                    continue
                if dup:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {}          # none of SafeLoader's YAML 1.1 resolvers: the 1.2 core schema's
for _tag, _regexp, _first in (
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?(?:0|[1-9][0-9]*)|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
        ("tag:yaml.org,2002:float",
         r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
         list("-+0123456789.")),
):
    _Loader.add_implicit_resolver(_tag, re.compile(_regexp), _first)


def _int_12(loader, node):
    text = loader.construct_scalar(node)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


_Loader.add_constructor("tag:yaml.org,2002:int", _int_12)


def load_arm(path) -> ArmSpec:
    """Load and validate an arm description YAML file (a missing/unreadable file raises OSError)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ArmSpecError(f"invalid arm description in {path}: {size} bytes; an arm description is at most "
                           f"{MAX_FILE_BYTES // 1024} KiB (refused before it is read)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ArmSpecError(f"invalid arm description in {path}: not UTF-8 text ({e})") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (SafeLoader subclass)
    except yaml.YAMLError as e:
        raise ArmSpecError(f"invalid arm description in {path}: YAML error: {e}") from None
    except RecursionError:
        raise ArmSpecError(f"invalid arm description in {path}: YAML nested too deeply") from None
    return arm_from_dict(data, source=str(path), require_limits=True)


def _rb_to_dict(rb: RigidBody) -> dict:
    return {"mass": rb.mass, "com": rb.com.tolist(), "inertia": rb.inertia.tolist()}


def arm_to_dict(spec: ArmSpec) -> dict:
    """Plain-data form (direct stiffness values, explicit inertias) that round-trips via arm_from_dict."""
    pose = getattr(spec, "_base_pose", None)
    if pose is None or not np.array_equal(_pose_matrix(*pose), spec.base_transform):
        T = spec.base_transform
        pose = (T[:3, 3].tolist(), _matrix_rpy(T[:3, :3]))
    joints = []
    for j in spec.joints:
        L = j.link
        limits = {}
        if all(math.isfinite(x) for x in j.position_limits):
            limits["position"] = list(j.position_limits)
        if math.isfinite(j.velocity_limit):
            limits["velocity"] = j.velocity_limit
        if math.isfinite(j.effort_limit):
            limits["effort"] = j.effort_limit
        if j.stop_stiffness is not None:
            limits["stop_stiffness"] = j.stop_stiffness
        if j.stop_damping is not None:
            limits["stop_damping"] = j.stop_damping
        link = {
            "length": L.length, "linear_density": L.linear_density, "EI_z": L.EI_z, "EI_y": L.EI_y,
            "GJ": L.GJ, "polar_density": L.polar_density,
            "modes": {"in_plane": L.n_in_plane, "out_of_plane": L.n_out_of_plane, "torsion": L.n_torsion},
            "boundary": L.boundary, "damping_ratio": L.damping_ratio.tolist(), "mode_solver": L.mode_solver,
            "fem_elements": L.fem_elements, "extra_mass": _rb_to_dict(L.extra),
        }
        joints.append({
            "name": j.name, "angle_offset": j.angle_offset, "offset": j.offset, "twist": j.twist,
            "limits": limits, "friction": {"viscous": j.viscous, "coulomb": j.coulomb},
            "gear_ratio": j.gear_ratio, "rotor_inertia": j.rotor_inertia, "hub": _rb_to_dict(j.hub),
            "link": link,
        })
    return {
        "name": spec.name, "description": spec.description, "planar": spec.planar,
        "gravity": spec.gravity.tolist(),
        "base": {"xyz": [float(x) for x in pose[0]], "rpy": [float(x) for x in pose[1]]},
        "nominal_configuration": spec.nominal_configuration.tolist(),
        "joints": joints, "payload": _rb_to_dict(spec.payload),
        "geometric_nonlinearity": spec.geometric_nonlinearity,
    }


def check_arm(spec) -> ArmSpec:
    """Re-run every check of :func:`arm_from_dict` on an ArmSpec (one built with dataclasses.replace or by
    hand skips them); returns ``spec`` or raises ArmSpecError naming the field."""
    if not isinstance(spec, ArmSpec):
        raise ArmSpecError(f"invalid arm description: expected an ArmSpec, got {_tname(spec)}")
    try:
        d = arm_to_dict(spec)
    except Exception as e:  # a malformed hand-built ArmSpec (wrong member types): name what broke
        raise ArmSpecError(f"invalid arm description in {spec.source}: malformed ArmSpec "
                           f"({type(e).__name__}: {e})") from None
    arm_from_dict(d, source=spec.source)
    return spec


def rigid_limit(spec: ArmSpec) -> ArmSpec:
    """The same arm with every flexible mode removed (distributed link mass kept)."""
    check_arm(spec)
    joints = tuple(
        replace(j, link=replace(j.link, n_in_plane=0, n_out_of_plane=0, n_torsion=0,
                                damping_ratio=np.zeros(0)))
        for j in spec.joints)
    out = replace(spec, joints=joints)
    if hasattr(spec, "_base_pose"):
        object.__setattr__(out, "_base_pose", spec._base_pose)
    return out


def conservative(spec: ArmSpec, gravity: bool = True) -> ArmSpec:
    """The same arm without modal damping, joint friction and position limits (so without hard stops), and without
    gravity unless `gravity`: a system whose free motion keeps its energy (the integrators' accuracy tests and
    bench_integrators)."""
    d = arm_to_dict(spec)
    for j in d["joints"]:
        j.pop("friction", None)
        j.get("limits", {}).pop("position", None)
        if "link" in j and "damping_ratio" in j["link"]:
            j["link"]["damping_ratio"] = 0.0
    if not gravity:
        d["gravity"] = [0.0, 0.0, 0.0]
    return arm_from_dict(d)
