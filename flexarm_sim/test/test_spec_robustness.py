"""Issue 18 point 5: plausibility ranges, bounded and checked mode solvers, errors that name the field.

* The README's ranges section is spec.ranges_markdown() (one table, in spec.py).
* Every numeric field of the schema has a FIELD_RANGES row, and the validator enforces each row at every place
  the field occurs (a value just outside either end is refused naming the field).
* The testers' findings (a hang on a 1e308 payload, bare OverflowErrors, absurd values accepted) give
  ArmSpecErrors naming the field.
* The mode solvers are verified up to the tip ratios they accept (spec.TIP_RATIO_LIMITS) against
  independent limits: the heavy-tip two-DOF system K = EI/L^3 [[12, -6L], [-6L, 4L^2]], M = diag(M, J), and
  the clamped-clamped roots for the higher modes; the FE solver against the analytic one. Beyond those
  ratios, and on non-finite input, they raise ModeSolverError at once (the old bracket search grew forever).
* load_model names the link when a solver refuses, and the joint when the mass matrix is singular; hand-built
  specs (dataclasses.replace) go through the same checks in load_model and rigid_limit.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from arm_mutations import path_str, range_key, walk
from flexarm_sim.model import ArmSpecError, arm_from_dict, load_arm, load_model, rigid_limit
from flexarm_sim.model.beam_modes import (_clamped_mass_roots, check_frequencies, clamped_mass_modes,
                                          torsion_modes)
from flexarm_sim.model.fe_beam import fe_bending_modes
from flexarm_sim.model.spec import (FIELD_RANGES, TIP_RATIO_LIMITS, ModeSolverError, check_arm,
                                    ranges_markdown)
from flexarm_sim.arms import shipped_arms_dir

ROOT = Path(__file__).resolve().parents[2]
ARMS_DIR = Path(shipped_arms_dir())


# ------------------------------------------------------------------------------------------ the table
def test_readme_ranges_section_is_the_table():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- BEGIN arm-ranges[^>]*-->\n(.*?)<!-- END arm-ranges -->", text, re.S)
    assert m, "README lacks the arm-ranges section"
    assert m.group(1) == ranges_markdown(), (
        "README arm-ranges section is stale: replace it with flexarm_sim.model.spec.ranges_markdown()")


def _full_arm(section):
    """An arm that uses every numeric field of the schema (link 2's section: tube, circle or rectangle)."""
    sections = {
        "tube": ({"shape": "tube", "outer_diameter": 0.02, "inner_diameter": 0.016},
                 {"youngs_modulus": 70e9, "density": 2700.0, "poisson_ratio": 0.33}),
        "circle": ({"shape": "circle", "diameter": 0.01}, {"youngs_modulus": 70e9, "density": 2700.0,
                                                           "shear_modulus": 26e9}),
        "rectangle": ({"shape": "rectangle", "width": 0.003, "height": 0.02},
                      {"youngs_modulus": 200e9, "density": 7850.0, "poisson_ratio": 0.3}),
    }
    sec, mat = sections[section]
    return {
        "name": "full", "description": "every field", "planar": False, "geometric_nonlinearity": True,
        "gravity": [0.0, 0.0, -9.81],
        "base": {"xyz": [0.0, 0.0, 0.1], "rpy": [0.0, 0.0, 0.2]},
        "nominal_configuration": [0.1, 0.2],
        "joints": [
            {"name": "j0", "angle_offset": 0.1, "offset": 0.2, "twist": 0.3,
             "limits": {"position": [-1.0, 1.0], "velocity": 2.0, "effort": 3.0, "stop_stiffness": 200.0,
                        "stop_damping": 0.5},
             "friction": {"viscous": 0.1, "coulomb": 0.2}, "gear_ratio": 10.0, "rotor_inertia": 1e-4,
             "hub": {"mass": 1.0, "com": [0.0, 0.0, 0.01],
                     "inertia": [[0.01, 0.001, 0.0], [0.001, 0.01, 0.0], [0.0, 0.0, 0.02]]},
             "link": {"length": 0.5, "linear_density": 0.2, "EI_z": 1.0, "EI_y": 2.0, "GJ": 0.5,
                      "polar_density": 1e-4, "modes": {"in_plane": 1, "out_of_plane": 1, "torsion": 1},
                      "damping_ratio": [0.01, 0.02, 0.03], "mode_solver": "fem", "fem_elements": 8,
                      "extra_mass": {"mass": 0.1, "com": [0.1, 0.0, 0.0], "inertia": [1e-4, 1e-4, 2e-4]}}},
            {"name": "j1", "hub": {"mass": 0.5, "inertia": 0.01},
             "link": {"length": 0.4, "section": sec, "material": mat, "modes": {"in_plane": 1},
                      "damping_ratio": 0.01}},
        ],
        "payload": {"mass": 0.1, "com": [0.01, 0.0, 0.0], "inertia": 1e-4},
    }


FULL = [_full_arm(s) for s in ("tube", "circle", "rectangle")]
LEAVES = [(i, p, range_key(p)) for i, d in enumerate(FULL) for p, v in walk(d)
          if isinstance(v, (int, float)) and not isinstance(v, bool)]


def test_full_arms_are_valid_models():
    for d in FULL:
        assert load_model(arm_from_dict(d)).n_coords == 2 + 3 + 1


def test_every_numeric_field_has_a_range_row():
    assert [path_str(p) for _, p, k in LEAVES if k is None] == []
    used = {k for _, _, k in LEAVES} | {"joints"}
    assert used == set(FIELD_RANGES), "rows not exercised by the full arms / fields without a row"


def _outside(r):
    """Values just outside each end of a FieldRange."""
    if isinstance(r.lo, int):
        return [r.lo - 1, r.hi + 1]
    lo = r.lo if r.lo_open else (r.lo / 2 if r.lo > 0 else (r.lo * 1.5 if r.lo < 0 else -1e-3))
    hi = r.hi if r.hi_open else (r.hi * 1.5 if r.hi > 0 else r.hi / 2)
    return [lo, hi]


@pytest.mark.parametrize("arm,path,key", LEAVES, ids=[f"{i}:{path_str(p)}" for i, p, _ in LEAVES])
def test_range_row_enforced(arm, path, key):
    for value in _outside(FIELD_RANGES[key]):
        d = copy.deepcopy(FULL[arm])
        cur = d
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
        with pytest.raises(ArmSpecError) as ei:
            arm_from_dict(d, source="full.yaml")
        assert path_str(path) + ":" in str(ei.value), (value, str(ei.value))


def test_joint_count_range():
    d = copy.deepcopy(FULL[0])
    d["joints"] = [copy.deepcopy(d["joints"][1]) for _ in range(33)]
    for i, j in enumerate(d["joints"]):
        j["name"] = f"j{i}"
    d.pop("nominal_configuration")
    with pytest.raises(ArmSpecError, match=r"joints: must contain \[1, 32\], got 33"):
        arm_from_dict(d)


def test_message_states_range_unit_and_reason():
    d = copy.deepcopy(FULL[0])
    d["joints"][0]["link"]["length"] = 1e308
    with pytest.raises(ArmSpecError) as ei:
        arm_from_dict(d, source="x.yaml")
    assert ("joints[0].link.length: must be 0 or [0.001, 100] m (a link between 1 mm and 100 m; 0: no rod), "
            "got 1e+308") in str(ei.value)


def test_cross_field_rules():
    d = copy.deepcopy(FULL[0])
    d["joints"][1]["hub"] = {"mass": 1e-6, "inertia": 0.02}          # radius of gyration 141 m
    d["joints"][0]["link"]["fem_elements"] = 0
    with pytest.raises(ArmSpecError) as ei:
        arm_from_dict(d)
    assert "joints[1].hub: radius of gyration" in str(ei.value)
    d = copy.deepcopy(FULL[0])
    d["joints"][0]["link"].update(fem_elements=1, modes={"in_plane": 3})
    d["joints"][0]["link"]["damping_ratio"] = 0.0
    with pytest.raises(ArmSpecError, match=r"joints\[0\]\.link\.fem_elements: 1 Hermite elements give at most 2"):
        arm_from_dict(d)
    d = copy.deepcopy(FULL[2])                                       # steel strip 10 m x 10 m: 785 t/m
    d["joints"][1]["link"]["section"].update(width=10.0, height=10.0)
    with pytest.raises(ArmSpecError, match=r"joints\[1\]\.link\.section: with this material gives "
                                           r"linear_density = 7\.85e\+05"):
        arm_from_dict(d)


# ------------------------------------------------------------------------------------------ tester findings
def _edit(name, path, value):
    d = yaml.safe_load((ARMS_DIR / f"{name}.yaml").read_text())
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


FINDINGS = [   # issue 18: hung, raised bare OverflowError, or was accepted
    ("payload.mass 1e308 (hung)", "deluca_two_link", ("payload", "mass"), 1e308),
    ("payload.inertia 1e308 (hung)", "deluca_two_link", ("payload", "inertia"), 1e308),
    ("length 1e308 (OverflowError)", "deluca_two_link", ("joints", 1, "link", "length"), 1e308),
    ("section.width 1e308 (OverflowError)", "slewing_beam", ("joints", 0, "link", "section", "width"), 1e308),
    ("velocity limit 1e308", "deluca_two_link", ("joints", 0, "limits", "velocity"), 1e308),
    ("extra_mass.inertia 1e308", "spatial_3r", ("joints", 0, "link", "extra_mass", "inertia"), 1e308),
    ("coulomb 1e308", "slewing_beam", ("joints", 0, "friction", "coulomb"), 1e308),
    ("hub inertia 1e-300", "deluca_two_link", ("joints", 0, "hub", "inertia"), 1e-300),
    ("hub mass 1e-300", "deluca_two_link", ("joints", 1, "hub", "mass"), 1e-300),
    ("integer 10**400 (OverflowError)", "spatial_3r", ("payload", "mass"), 10 ** 400),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,path,value", [f[1:] for f in FINDINGS], ids=[f[0] for f in FINDINGS])
def test_tester_findings_refused_naming_the_field(name, path, value, tmp_path):
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(_edit(name, path, value)))
    with pytest.raises(ArmSpecError) as ei:
        load_model(f)
    assert f"{path_str(path)}: must be" in str(ei.value) and str(f) in str(ei.value)


def test_load_arm_unreadable_inputs(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ArmSpecError, match="not UTF-8"):
        load_arm(f)
    f.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ArmSpecError, match=str(f).replace(".", r"\.")):
        load_arm(f)
    # aliases: 10^9 references to one string; refused without walking or printing them
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    f.write_text("\n".join(lines) + "\nname: a\ndescription: *l8\ngravity: *l8\njoints: *l8\n")
    with pytest.raises(ArmSpecError) as ei:
        load_arm(f)
    msg = str(ei.value)
    assert len(msg) < 3000 and "description: must be a string" in msg and "joints[9]: must be a mapping" in msg
    with pytest.raises(OSError):
        load_arm(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------------------ mode solvers
def _two_dof(EI, L, M, J):
    """Heavy-tip limit of the clamped-mass link: massless cantilever tip stiffness with the tip body."""
    K = EI / L ** 3 * np.array([[12.0, -6.0 * L], [-6.0 * L, 4.0 * L ** 2]])
    lam = np.linalg.eigvals(np.linalg.solve(np.diag([M, J]), K))
    return np.sqrt(np.sort(lam.real))


CLAMPED_CLAMPED_BL = (4.730040744862704, 7.853204624095838)


@pytest.mark.parametrize("alpha,gamma", [(1e8, 1e8), (1e10, 1e12), (1e10, 1e8), (1e8, 1e12)])
def test_analytic_modes_at_the_cap_match_heavy_tip_limits(alpha, gamma):
    L, EI, mu = 0.7, 3.0, 0.4
    M, J = 0.999999 * alpha * mu * L, 0.999999 * gamma * mu * L ** 3       # just inside the cap
    m = clamped_mass_modes(L, EI, mu, 4, M, J)
    # relative truncation of the two-DOF limit ~ 1/alpha, 1/gamma <= 1e-8; measured solver error <= 7e-8
    np.testing.assert_allclose(m.omega[:2], _two_dof(EI, L, M, J), rtol=1e-6)
    # tip pinned and clamped in the limit: the higher modes are the clamped-clamped ones
    np.testing.assert_allclose(m.omega[2:] * L ** 2 / math.sqrt(EI / mu), np.square(CLAMPED_CLAMPED_BL),
                               rtol=1e-6)


def test_torsion_at_the_cap_is_the_rigid_rotor():
    L, GJ, rIp = 0.7, 3.0, 0.4
    J = 0.999999 * TIP_RATIO_LIMITS["analytic"]["torsion"] * rIp * L
    m = torsion_modes(L, GJ, rIp, 2, J)
    assert m.omega[0] == pytest.approx(math.sqrt(GJ / L / J), rel=1e-9)           # shaft spring, tip inertia
    assert m.omega[1] * L / math.sqrt(GJ / rIp) == pytest.approx(math.pi, rel=1e-9)   # tip held: b = pi


@pytest.mark.parametrize("alpha,gamma", [(1e6, 1e6), (1e6, 0.0), (0.0, 1e6), (1e6, 1e-6)])
def test_fe_modes_at_the_cap_match_analytic(alpha, gamma):
    L, EI, mu = 0.7, 3.0, 0.4
    M, J = 0.999999 * alpha * mu * L, 0.999999 * gamma * mu * L ** 3
    fe = fe_bending_modes(L, 64, EI, mu, 4, M, J)
    an = clamped_mass_modes(L, EI, mu, 4, M, J)
    np.testing.assert_allclose(fe.omega, an.omega, rtol=1e-6)     # measured <= 3e-7


@pytest.mark.timeout(60)
def test_solvers_refuse_beyond_caps_and_non_finite_input():
    cap = TIP_RATIO_LIMITS["analytic"]
    L, EI, mu = 0.5, 1.0, 0.2
    with pytest.raises(ModeSolverError, match=r"M/\(mu L\) = 1\.1e\+10 exceeds 1e\+10"):
        clamped_mass_modes(L, EI, mu, 2, 1.1 * cap["mass"] * mu * L, 0.0)
    with pytest.raises(ModeSolverError, match=r"J/\(mu L\^3\)"):
        clamped_mass_modes(L, EI, mu, 2, 0.0, 1.1 * cap["inertia"] * mu * L ** 3)
    with pytest.raises(ModeSolverError, match="exceeds"):          # issue 18: this input hung
        clamped_mass_modes(L, EI, mu, 2, 1e308, 0.0)
    with pytest.raises(ModeSolverError, match="not finite"):
        clamped_mass_modes(L, EI, mu, 2, math.inf, 0.0)
    with pytest.raises(ModeSolverError, match=r"J/\(rho_Ip L\)"):
        torsion_modes(L, 1.0, 1e-4, 1, 1.1 * cap["torsion"] * 1e-4 * L)
    with pytest.raises(ModeSolverError, match="fem mode solver"):
        fe_bending_modes(L, 8, EI, mu, 2, 1.1e6 * mu * L, 0.0)
    with pytest.raises(ModeSolverError, match="finite and positive"):
        fe_bending_modes(L, 8, lambda x: np.full_like(x, np.nan), mu, 2)
    # the root scan itself: no open-ended search on a NaN characteristic function
    for alpha, gamma in ((math.nan, 0.0), (1e308, 1e308), (math.inf, 1.0)):
        with pytest.raises(ModeSolverError, match="not finite"):
            _clamped_mass_roots(2, alpha, gamma)


def test_check_frequencies():
    check_frequencies([1.0, 2.0], "x")
    for bad in ([1.0, 1.0], [2.0, 1.0], [0.0, 1.0], [1.0, math.nan]):
        with pytest.raises(ModeSolverError):
            check_frequencies(bad, "x")


# ------------------------------------------------------------------------------------------ load_model
def _deluca():
    return yaml.safe_load((ARMS_DIR / "deluca_two_link.yaml").read_text())


def test_load_model_names_the_link_a_solver_refuses():
    d = _deluca()
    d["joints"][1]["link"]["linear_density"] = 1e-6                 # 0.1 kg payload on 0.5 mg of link:
    d["payload"] = {"mass": 1e4, "inertia": 1e-3}                     # M/(mu L) = 2e10 > 1e10
    with pytest.raises(ArmSpecError) as ei:
        load_model(arm_from_dict(d, source="heavy.yaml"))
    assert re.search(r"heavy\.yaml:\n  joints\[1\]\.link: tip mass / link mass M/\(mu L\) = 2e\+10 exceeds",
                     str(ei.value)), str(ei.value)


def test_load_model_names_a_joint_without_inertia():
    d = {"name": "a", "joints": [
        {"name": "j0", "hub": {"inertia": 0.1}, "link": {"length": 0.5, "linear_density": 0.2}},
        {"name": "j1", "link": {"length": 0.0}}]}                    # nothing turns with joint 1
    spec = arm_from_dict(d, source="a.yaml")
    with pytest.raises(ArmSpecError, match=r"joints\[1\]: mass matrix at the nominal configuration singular"):
        load_model(spec)
    d["payload"] = {"mass": 0.1, "inertia": 1e-4}
    load_model(arm_from_dict(d))                                     # the payload turns with it


def test_hand_built_specs_are_checked():
    spec = load_arm(ARMS_DIR / "deluca_two_link.yaml")
    bad = replace(spec, payload=replace(spec.payload, mass=1e308))
    for entry in (load_model, rigid_limit, check_arm):
        with pytest.raises(ArmSpecError, match=r"payload\.mass: must be"):
            entry(bad)
    bad = replace(spec, gravity=np.array([0.0, 0.0, math.nan]))
    with pytest.raises(ArmSpecError, match=r"gravity\[2\]: must be finite"):
        load_model(bad)
    for entry, arg in ((rigid_limit, {"name": "not a spec"}), (check_arm, 42)):
        with pytest.raises(ArmSpecError, match="expected an ArmSpec"):
            entry(arg)
    assert check_arm(spec) is spec and load_model(rigid_limit(spec)).n_coords == 2
