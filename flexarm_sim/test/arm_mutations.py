"""Deterministic mutations of arm descriptions for test_spec_fuzz and test_spec_robustness: extreme numbers,
scalings, wrong types, missing/extra keys, lists of the wrong length, values inside a field's plausibility
range (FIELD_RANGES), optional keys with extreme values."""
from __future__ import annotations

import copy
import math
import re

from flexarm_sim.model.spec import FIELD_RANGES

EXTREMES = (0, 0.0, -0.0, -1.0, 1e-300, -1e-300, 5e-324, 1e308, -1e308, math.inf, -math.inf, math.nan,
            10 ** 400, -(10 ** 400))
SCALES = (1e-12, 1e-6, 1e-3, 1e3, 1e6, 1e12, -1.0)
WRONG_TYPES = (True, "1.0", None, [], {}, [1.0, 2.0], "abc", [[1.0]])


# ------------------------------------------------------------------------------------------ mutations
def path_str(path) -> str:
    """('joints', 1, 'link', 'EI_z') -> 'joints[1].link.EI_z' (the validator's notation)."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def walk(node, path=()):
    """(path, value) of every node below the root."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), v
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,), v
            yield from walk(v, path + (i,))


def _get(d, path):
    for k in path:
        d = d[k]
    return d


def _set(d, path, value):
    _get(d, path[:-1])[path[-1]] = value


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def range_key(path):
    """The FIELD_RANGES row of a numeric leaf, or None: ('joints', 0, 'hub', 'mass') -> '<body>.mass'."""
    s = re.sub(r"\[\d+\]", "[]", path_str(path))
    s = re.sub(r"^(joints\[\]\.hub|joints\[\]\.link\.extra_mass|payload)\.", "<body>.", s)
    m = re.match(r"^<body>\.inertia(\[\])?(\[\])?$", s)
    if m:
        off_diagonal = m.group(2) is not None and path[-1] != path[-2]
        return "<body>.inertia (products)" if off_diagonal else "<body>.inertia (moments)"
    s = re.sub(r"^joints\[\]\.link\.modes\.\w+$", "joints[].link.modes.*", s)
    s = re.sub(r"^(joints\[\]\.link\.damping_ratio)\[\]$", r"\1", s)
    return s if s in FIELD_RANGES else None


def in_range_value(key, rng):
    """A value inside FIELD_RANGES[key]: either end, or log-uniform magnitude in between."""
    r = FIELD_RANGES[key]
    u = rng.random()
    if isinstance(r.lo, int):
        return int(r.lo if u < 0.25 else r.hi if u < 0.5 else rng.integers(r.lo, r.hi + 1))
    if u < 0.25 and not r.lo_open:
        return r.lo
    if u < 0.5 and not r.hi_open:
        return r.hi
    if r.lo < 0 < r.hi:
        x = 10.0 ** rng.uniform(-6, math.log10(r.hi))
        return -x if rng.random() < 0.5 else x
    x = 10.0 ** rng.uniform(math.log10(max(r.lo, 1e-15)), math.log10(r.hi))
    return min(max(x, r.lo), r.hi * (1 - 1e-12))


def _value(rng):
    """An extreme, or a log-uniform magnitude over 1e-14 .. 1e14 with a random sign."""
    if rng.random() < 0.5:
        return EXTREMES[rng.integers(len(EXTREMES))]
    x = 10.0 ** rng.uniform(-14, 14)
    return -x if rng.random() < 0.2 else x


def _optional_insert(d, rng):
    """(path, value) of an optional key (maybe absent from the file) with extreme or random values."""
    n = len(d["joints"])
    J = ("joints", int(rng.integers(n)))
    L = J + ("link",)
    x = _value(rng)
    choices = [
        (J + ("friction",), {"viscous": x, "coulomb": _value(rng)}),
        (J + ("gear_ratio",), x),
        (J + ("rotor_inertia",), x),
        (J + ("angle_offset",), x),
        (J + ("offset",), x),
        (J + ("limits",), {"position": [-abs(x), abs(x)], "velocity": _value(rng), "effort": _value(rng)}),
        (J + ("hub",), {"mass": x, "com": [_value(rng), 0.0, 0.0], "inertia": _value(rng)}),
        (L + ("extra_mass",), {"mass": x, "com": [0.0, _value(rng), 0.0],
                               "inertia": [_value(rng), _value(rng), _value(rng)]}),
        (L + ("mode_solver",), "fem"),
        (L + ("fem_elements",), int(rng.choice([0, 1, 2, 3, 200, 201, 10 ** 9]))),
        (L + ("boundary",), "clamped_free"),
        (L + ("damping_ratio",), x),
        (("payload",), {"mass": x, "com": [0.0, 0.0, _value(rng)], "inertia": _value(rng)}),
        (("payload", "inertia"), [[x, 0.0, 0.0], [0.0, x, 0.0], [0.0, 0.0, _value(rng)]]),
        (("base",), {"xyz": [x, 0.0, 0.0], "rpy": [0.0, _value(rng), 0.0]}),
        (("nominal_configuration",), [x] * n),
        (("gravity",), [0.0, 0.0, x]),
    ]
    return choices[int(rng.integers(len(choices)))]


def mutate(base: dict, rng) -> tuple[dict, list]:
    """One to three mutations of a deep copy of `base`; returns (mutated dict, mutated paths)."""
    d = copy.deepcopy(base)
    paths = []
    for _ in range(int(rng.choice([1, 1, 1, 2, 3]))):
        nodes = list(walk(d))
        numeric = [(p, v) for p, v in nodes if _is_number(v)]
        kind = rng.random()
        if kind < 0.35 and numeric:                           # extreme value of a numeric field
            p, _ = numeric[rng.integers(len(numeric))]
            _set(d, p, EXTREMES[rng.integers(len(EXTREMES))])
        elif kind < 0.5 and numeric:                          # scaled numeric field
            p, v = numeric[rng.integers(len(numeric))]
            try:
                _set(d, p, v * SCALES[rng.integers(len(SCALES))])
            except OverflowError:                             # 10**400 * 1e-12
                _set(d, p, math.inf)
        elif kind < 0.6:                                      # wrong type anywhere
            p, _ = nodes[rng.integers(len(nodes))]
            _set(d, p, copy.deepcopy(WRONG_TYPES[rng.integers(len(WRONG_TYPES))]))
        elif kind < 0.68:                                     # missing key
            keyed = [p for p, _ in nodes if isinstance(p[-1], str)]
            p = keyed[rng.integers(len(keyed))]
            del _get(d, p[:-1])[p[-1]]
        elif kind < 0.73:                                     # extra key
            maps = [((), d)] + [(p, v) for p, v in nodes if isinstance(v, dict)]
            p, m = maps[rng.integers(len(maps))]
            key = str(rng.choice(["bogus", "mass", "length", "EIz", "inertia", "modes"]))
            key = "bogus" if key in m else key
            m[key] = 1.0
            p = p + (key,)
        elif kind < 0.78:                                     # list of the wrong length
            lists = [(p, v) for p, v in nodes if isinstance(v, list)]
            if not lists:
                continue
            p, lst = lists[rng.integers(len(lists))]
            if lst and rng.random() < 0.5:
                lst.pop()
            else:
                lst.append(copy.deepcopy(lst[-1]) if lst else 1.0)
        elif kind < 0.9:                                      # a plausible extreme, inside the field's range
            ranged = [(p, range_key(p)) for p, _ in numeric]
            ranged = [(p, k) for p, k in ranged if k is not None]
            if not ranged:
                continue
            p, key = ranged[rng.integers(len(ranged))]
            _set(d, p, in_range_value(key, rng))
        else:                                                 # an optional key with an extreme value
            joints = d.get("joints")
            if not (isinstance(joints, list) and joints
                    and all(isinstance(j, dict) and isinstance(j.get("link"), dict) for j in joints)):
                continue
            p, v = _optional_insert(d, rng)
            try:
                _set(d, p, v)
            except (KeyError, TypeError, IndexError):         # parent mutated away
                continue
        paths.append(p)
    return d, paths
