"""Fuzz test of the arm description (issue 18, point 5): no arm file makes load_model hang or raise anything
but an ArmSpecError naming a field.

Every shipped arm (flexarm_description/arms/*.yaml) gets N_MUTATIONS deterministic mutations (seeded per
file): extreme numbers (0, -1, ±1e-300, 5e-324, ±1e308, ±inf, nan, ±10**400), scalings by 1e-12..1e12 and -1,
wrong types, missing and extra keys, lists of the wrong length, values anywhere inside a field's plausibility
range (its ends included: these reach the mode solvers and the model checks), and optional keys the file does
not use inserted with extreme values; one to three per file.  Each mutated description is validated
(arm_from_dict, or load_arm from a YAML file for every 10th) and built (load_model); the model of an accepted
one must be finite with positive increasing link frequencies, and its rigid_limit must build too.  A refusal
must name a field: a validation error the mutated field or one related to it (ancestor, descendant, sibling,
or the nominal configuration / planar rules that tie fields together); a model-level error a joint or link.

Time: hangs are excluded by construction (every root search, bracket and eigen-solve is capped; pytest's
timeout guards the test); the test also asserts the slowest single load stays under max(100 x the unmutated
file's load time, 5 s), a bound a loaded 2-core machine cannot reach without a real regression.
The mutations themselves are in arm_mutations.py.
"""
from __future__ import annotations

import collections
import re
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from arm_mutations import mutate, path_str
from flexarm_sim.model import ArmSpecError, arm_from_dict, load_arm, load_model, rigid_limit
from flexarm_sim.arms import shipped_arms_dir

ARMS_DIR = Path(shipped_arms_dir())
SHIPPED = sorted(p.stem for p in ARMS_DIR.glob("*.yaml"))
N_MUTATIONS = 1000

# ------------------------------------------------------------------------------------------ outcome checks
_NAMED = re.compile(r"^\s+(\S+?): ", re.M)
_TOP = ("name", "description", "planar", "gravity", "base", "nominal_configuration", "joints", "payload")


def _components(p: str):
    return re.findall(r"[^.\[\]]+|\[\d+\]", p)


def _related(named: str, mutated: str) -> bool:
    E, M = _components(named), _components(mutated)
    return (E[:len(M)] == M or M[:len(E)] == E or E[:-1] == M[:-1]
            or (E[0] == "nominal_configuration" and M[0] == "joints")
            or (E[0] == "joints" and M[0] == "planar"))


def naming_problem(err: ArmSpecError, paths, model_level: bool):
    """None if the error names a field as required (module docstring), else what is wrong."""
    named = _NAMED.findall(str(err))
    mutated = [path_str(p) for p in paths]
    fields = [p for p in named if _components(p) and (_components(p)[0] in _TOP or p in mutated)]
    if not fields:
        return f"names no field: {err}"
    if model_level:
        return None if any(p.startswith("joints[") for p in fields) else f"names no joint or link: {err}"
    if any(_related(f, m) for f in fields for m in mutated):
        return None
    return f"names {fields}, none related to the mutated {mutated}: {err}"


def model_problem(model):
    """None if the model's arrays are finite and its link frequencies positive and increasing per plane."""
    for name, arr in zip(model.data._fields, model.data):
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            return f"model data {name} not finite"
    for j, lm in enumerate(model.link_modes):
        for _plane, src in lm.sources:
            w = src.omega
            if not (np.all(np.isfinite(w)) and np.all(w > 0) and np.all(np.diff(w) > 0)):
                return f"link {j} frequencies {w}"
    return None


# ------------------------------------------------------------------------------------------ the test
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", SHIPPED)
def test_fuzz_shipped_arm(name, tmp_path):
    path = ARMS_DIR / f"{name}.yaml"
    base = yaml.safe_load(path.read_text())
    t_base = []
    for _ in range(3):
        t0 = time.perf_counter()
        load_model(path)
        t_base.append(time.perf_counter() - t0)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    outcomes, times, problems = collections.Counter(), [], []
    for i in range(N_MUTATIONS):
        d, paths = mutate(base, rng)
        where = f"mutation {i} {[path_str(p) for p in paths]}"
        stage = "validation"
        t0 = time.perf_counter()
        try:
            if i % 10 == 0:            # through a YAML file and load_arm
                f = tmp_path / f"m{i}.yaml"
                f.write_text(yaml.safe_dump(d))
                spec = load_arm(f)
            else:
                spec = arm_from_dict(d, source=f"{name}#{i}")
            stage = "model"
            model = load_model(spec)
            stage = "rigid_limit"
            rigid = load_model(rigid_limit(spec))
        except ArmSpecError as e:
            outcomes[f"refused ({stage})"] += 1
            problem = naming_problem(e, paths, model_level=stage != "validation")
            if problem:
                problems.append(f"{where}: {problem}")
        except Exception as e:  # noqa: BLE001 - the point of the test
            problems.append(f"{where}: {stage} raised {type(e).__name__}: {e}")
        else:
            outcomes["accepted"] += 1
            problem = model_problem(model) or model_problem(rigid)
            if problem:
                problems.append(f"{where}: accepted, but {problem}")
        times.append(time.perf_counter() - t0)
    times = np.array(times)
    bound = max(100.0 * min(t_base), 5.0)
    print(f"\n{name}: {N_MUTATIONS} mutations {dict(outcomes)}; load time median {1e3 * np.median(times):.2f} ms, "
          f"slowest {1e3 * times.max():.1f} ms, total {times.sum():.2f} s; unmutated {1e3 * min(t_base):.1f} ms, "
          f"bound {bound:.1f} s")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:25])
    assert outcomes["accepted"] >= N_MUTATIONS // 10         # both outcomes really exercised
    assert sum(v for k, v in outcomes.items() if k.startswith("refused")) >= N_MUTATIONS // 2
    assert times.max() <= bound, f"slowest load {times.max():.2f} s > {bound:.1f} s"
