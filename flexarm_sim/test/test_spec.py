"""Tests for flexarm_sim.model.spec (arm description loading and validation)."""

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import yaml


from flexarm_sim.model.spec import (
    ArmSpec,
    ArmSpecError,
    RigidBody,
    arm_from_dict,
    arm_to_dict,
    load_arm,
    rigid_limit,
    section_properties,
)
from flexarm_sim.arms import shipped_arms_dir

ARMS_DIR = Path(shipped_arms_dir())
SHIPPED = ["deluca_two_link", "slewing_beam", "spatial_3r", "rigid_puma3"]


def _base():
    """A small valid two-joint description to mutate in rejection tests."""
    return {
        "name": "test_arm",
        "planar": True,
        "gravity": [0.0, 0.0, -9.81],
        "joints": [
            {"name": "j1", "hub": {"mass": 0.0, "inertia": 0.1},
             "link": {"length": 0.5, "linear_density": 0.2, "EI_z": 1.0, "modes": {"in_plane": 2}}},
            {"name": "j2", "limits": {"position": [-1.0, 1.0], "effort": 2.0},
             "link": {"length": 0.5, "linear_density": 0.2, "EI_z": 1.0, "modes": {"in_plane": 1}}},
        ],
        "payload": {"mass": 0.1, "inertia": 0.0005},
    }


# ---------------------------------------------------------------- shipped arms

@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_arm_loads_and_round_trips(name):
    path = ARMS_DIR / f"{name}.yaml"
    spec = load_arm(path)
    assert isinstance(spec, ArmSpec)
    assert spec.name == name
    assert spec.source == str(path)
    again = arm_from_dict(arm_to_dict(spec))
    assert again == spec
    assert hash(again) == hash(spec)
    assert again.source == "<dict>"
    # round trip through YAML text as well
    import yaml
    assert arm_from_dict(yaml.safe_load(yaml.safe_dump(arm_to_dict(spec)))) == spec


def test_deluca_values():
    s = load_arm(ARMS_DIR / "deluca_two_link.yaml")
    assert s.planar and s.n_joints == 2 and s.n_modes_total == 4
    assert s.joint_names == ("shoulder", "elbow")
    for j in s.joints:
        assert j.link.length == 0.5 and j.link.linear_density == 0.2 and j.link.EI_z == 1.0
        assert j.link.n_in_plane == 2 and j.link.boundary == "clamped_mass"
        assert j.link.mass == pytest.approx(0.1)
        assert j.hub.inertia[2, 2] == 0.1
    assert s.joints[0].hub.mass == 0.0 and s.joints[1].hub.mass == 1.0
    assert s.payload.mass == 0.1 and s.payload.inertia[2, 2] == 0.0005
    np.testing.assert_array_equal(s.base_transform, np.eye(4))


def test_spatial_3r_tube_properties():
    s = load_arm(ARMS_DIR / "spatial_3r.yaml")
    assert not s.joints[0].link.is_flexible
    assert s.joints[0].offset == 0.5 and s.joints[0].twist == pytest.approx(math.pi / 2)
    A = math.pi / 4 * (0.1 ** 2 - 0.094 ** 2)
    I = math.pi / 64 * (0.1 ** 4 - 0.094 ** 4)
    for j in s.joints[1:]:
        L = j.link
        assert L.n_in_plane == 2 and L.n_out_of_plane == 2 and L.n_modes == 4
        np.testing.assert_allclose(L.damping_ratio, 0.05)
        assert L.linear_density == pytest.approx(7850 * A)
        assert L.EI_y == pytest.approx(200e9 * I) and L.EI_z == pytest.approx(200e9 * I)
        assert L.GJ == pytest.approx(200e9 / 2.6 * 2 * I)
        assert L.polar_density == pytest.approx(7850 * 2 * I)


def test_rigid_puma3():
    s = load_arm(ARMS_DIR / "rigid_puma3.yaml")
    assert s.n_modes_total == 0 and np.linalg.norm(s.gravity) > 9
    assert [j.link.mass for j in s.joints] == [10.0, 15.0, 5.0]
    assert [j.link.length for j in s.joints] == [0.0, 0.4318, 0.4318]


# ---------------------------------------------------------------- section properties

def test_tube_section_naganathan():
    p = section_properties("tube", {"outer_diameter": 0.1, "inner_diameter": 0.094})
    assert p["A"] == pytest.approx(9.142e-4, rel=1e-3)      # 914 mm^2
    assert p["I_y"] == pytest.approx(1.07625e-6, rel=1e-4)  # 1.076e6 mm^4
    assert p["I_z"] == p["I_y"] and p["J"] == pytest.approx(2 * p["I_y"])


def test_circle_and_rectangle_sections():
    c = section_properties("circle", {"diameter": 0.0211})
    assert c["A"] == pytest.approx(3.4967e-4, rel=1e-4)
    assert c["I_y"] == pytest.approx(9.7305e-9, rel=1e-4)   # Naganathan case 1: ~1e4 mm^4
    r = section_properties("rectangle", {"width": 0.003, "height": 0.05})
    assert r["A"] == pytest.approx(1.5e-4)
    assert r["I_z"] == pytest.approx(0.05 * 0.003 ** 3 / 12)  # bending in y (thin direction)
    assert r["I_y"] == pytest.approx(0.003 * 0.05 ** 3 / 12)
    # square: beta = 0.1406 (Roark); thin strip: J -> a b^3 (1 - 0.630 b/a) / 3
    sq = section_properties("rectangle", {"width": 0.02, "height": 0.02})
    assert sq["J"] == pytest.approx(0.1406 * 0.02 ** 4, rel=1e-3)
    assert r["J"] == pytest.approx(0.05 * 0.003 ** 3 / 3 * (1 - 0.630 * 0.06), rel=1e-3)


def test_section_material_link_derivation():
    d = _base()
    d["planar"] = False
    L = d["joints"][0]["link"]
    for k in ("linear_density", "EI_z"):
        del L[k]
    L["section"] = {"shape": "rectangle", "width": 0.003, "height": 0.05}
    L["material"] = {"youngs_modulus": 70e9, "density": 2700.0, "shear_modulus": 26e9}
    L["modes"] = {"in_plane": 1, "out_of_plane": 1, "torsion": 1}
    link = arm_from_dict(d).joints[0].link
    assert link.linear_density == pytest.approx(2700 * 1.5e-4)
    assert link.EI_z == pytest.approx(70e9 * 0.05 * 0.003 ** 3 / 12)
    assert link.EI_y == pytest.approx(70e9 * 0.003 * 0.05 ** 3 / 12)
    assert link.polar_density == pytest.approx(2700 * (0.05 * 0.003 ** 3 + 0.003 * 0.05 ** 3) / 12)
    assert link.GJ == pytest.approx(26e9 * section_properties(
        "rectangle", {"width": 0.003, "height": 0.05})["J"])
    L["material"] = "aluminium"
    link2 = arm_from_dict(d).joints[0].link
    assert link2.GJ == pytest.approx(70e9 / 2.66 * section_properties(
        "rectangle", {"width": 0.003, "height": 0.05})["J"])


# ---------------------------------------------------------------- defaults, API

def test_defaults_and_immutability():
    d = {"name": "one", "joints": [{"name": "j", "link": {"length": 0.3, "linear_density": 1.0}}]}
    s = arm_from_dict(d)
    np.testing.assert_array_equal(s.gravity, [0, 0, -9.81])
    j = s.joints[0]
    assert j.position_limits == (-math.inf, math.inf)
    assert j.velocity_limit == math.inf and j.effort_limit == math.inf
    assert j.gear_ratio == 1.0 and j.reflected_rotor_inertia == 0.0
    assert j.link.damping_ratio.shape == (0,) and not j.link.is_flexible
    assert j.link.boundary == "clamped_mass" and j.link.mode_solver == "analytic"
    assert s.payload == RigidBody.zero()
    with pytest.raises(ValueError):
        s.gravity[0] = 1.0
    with pytest.raises(ValueError):
        j.hub.inertia[0, 0] = 1.0
    with pytest.raises(AttributeError):
        s.name = "x"  # frozen
    assert arm_from_dict(arm_to_dict(s)) == s


def test_inertia_forms_and_reflected_rotor():
    d = _base()
    d["joints"][0].update(gear_ratio=50.0, rotor_inertia=2e-4)
    d["joints"][0]["hub"]["inertia"] = [1.0, 2.0, 3.0]
    d["joints"][1]["hub"] = {"mass": 1.0, "com": [0.01, 0, 0],
                            "inertia": [[2.0, 0.1, 0.0], [0.1, 2.0, 0.0], [0.0, 0.0, 1.0]]}
    s = arm_from_dict(d)
    assert s.joints[0].reflected_rotor_inertia == pytest.approx(0.5)
    np.testing.assert_array_equal(s.joints[0].hub.inertia, np.diag([1.0, 2.0, 3.0]))
    assert s.joints[1].hub.inertia[0, 1] == 0.1
    np.testing.assert_array_equal(s.payload.inertia, np.diag([0.00025, 0.00025, 0.0005]))
    assert arm_from_dict(arm_to_dict(s)) == s


def test_damping_ratio_list_and_base_pose():
    d = _base()
    d["joints"][0]["link"]["damping_ratio"] = [0.01, 0.02]
    d["base"] = {"xyz": [0.1, 0.2, 0.3], "rpy": [0.1, -0.2, 0.3]}
    s = arm_from_dict(d)
    np.testing.assert_array_equal(s.joints[0].link.damping_ratio, [0.01, 0.02])
    T = s.base_transform
    np.testing.assert_allclose(T[:3, 3], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(T[:3, :3] @ T[:3, :3].T, np.eye(3), atol=1e-14)
    assert arm_from_dict(arm_to_dict(s)) == s


def test_rigid_limit_removes_modes():
    s = load_arm(ARMS_DIR / "spatial_3r.yaml")
    r = rigid_limit(s)
    assert r.n_modes_total == 0
    for a, b in zip(s.joints, r.joints):
        assert b.link.n_modes == 0 and b.link.damping_ratio.shape == (0,)
        assert b.link.mass == a.link.mass and b.link.length == a.link.length
        assert b.hub == a.hub
    assert r.payload == s.payload and r.name == s.name
    assert arm_from_dict(arm_to_dict(r)) == r
    assert s.n_modes_total == 8  # original untouched


def test_yaml_scientific_and_duplicate_keys(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("name: a\njoints:\n  - name: j\n    limits: {velocity: 1, effort: 1}\n"
                 "    link: {length: 1, linear_density: 2e-1, EI_z: 1e0, modes: {in_plane: 1}}\n")
    s = load_arm(p)
    assert s.joints[0].link.linear_density == 0.2
    p.write_text("name: a\nname: b\njoints: []\n")
    with pytest.raises(ArmSpecError, match="duplicate key"):
        load_arm(p)


_ONE_JOINT = ("name: a\njoints:\n  - name: j\n    limits: {{velocity: {v}, effort: 1}}\n"
              "    link: {{length: 1, linear_density: 0.2, EI_z: 1, modes: {{in_plane: 1}}}}\n")


def test_arm_files_need_velocity_and_effort_limits(tmp_path):
    """Deleting `limits` once gave infinite limits silently (the plant then blamed its effort_limits[0]): an arm
    file must give each joint's velocity and effort limits, the message naming the field; a joint without
    position limits turns without end. (A dict built in code may leave them out: unlimited, for the model alone.)"""
    p = tmp_path / "a.yaml"
    p.write_text("name: a\njoints:\n  - name: j\n    link: {length: 1, linear_density: 0.2, EI_z: 1}\n")
    with pytest.raises(ArmSpecError, match=r"joints\[0\]\.limits: required"):
        load_arm(p)
    p.write_text("name: a\njoints:\n  - name: j\n    limits: {velocity: 2}\n"
                 "    link: {length: 1, linear_density: 0.2, EI_z: 1}\n")
    with pytest.raises(ArmSpecError, match=r"joints\[0\]\.limits\.effort: required"):
        load_arm(p)
    p.write_text(_ONE_JOINT.format(v=2))
    assert load_arm(p).joints[0].position_limits == (-math.inf, math.inf)


@pytest.mark.parametrize("text,words", [("1:30", "sexagesimal"), ("017", "YAML 1.2"), ("1_0", "YAML 1.2"),
                                        ("yes", "must be a number"), ("2001-12-14", "must be a number")])
def test_yaml_1_1_quirks_are_refused_not_reread(tmp_path, text, words):
    """Arm files are YAML 1.2 (core schema): `velocity: 1:30` was read as 90 rad/s (YAML 1.1 sexagesimal), `017`
    as 15; now they are text, refused where a number is expected, saying why."""
    p = tmp_path / "a.yaml"
    p.write_text(_ONE_JOINT.format(v=text))
    with pytest.raises(ArmSpecError, match=r"joints\[0\]\.limits\.velocity") as e:
        load_arm(p)
    assert words in str(e.value)
    p.write_text(_ONE_JOINT.format(v="2.5e0") + "planar: yes\n")
    with pytest.raises(ArmSpecError, match="planar"):
        load_arm(p)


def test_oversized_files_and_mode_counts_are_refused_before_the_work(tmp_path, monkeypatch):
    """A 50 MB arm file took 199 s to load, 10^5 joints 77 s (1.1 GB); 8+8+8 modes on spatial_3r 35 s. The file size
    is checked before reading it, the joint count before any joint, the modes before any mode is solved (their
    budget keeps every accepted arm's load under 5 s: bench/bench_arm_load.py)."""
    from pathlib import Path
    from flexarm_sim.model import spec as spec_mod
    p = tmp_path / "big.yaml"
    p.write_text(_ONE_JOINT.format(v=2) + "#" * spec_mod.MAX_FILE_BYTES)
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("read before its size was checked"))
    with pytest.raises(ArmSpecError, match="at most 256 KiB"):
        load_arm(p)
    monkeypatch.undo()
    d = yaml.safe_load(_ONE_JOINT.format(v=2))
    with pytest.raises(ArmSpecError, match="joints: must contain"):
        arm_from_dict(dict(d, joints=d["joints"] * 100000))
    link = {"length": 1.0, "linear_density": 0.2, "EI_z": 1.0, "EI_y": 1.0, "GJ": 1.0, "polar_density": 1e-3}
    joint = {"name": "j0", "limits": {"velocity": 1, "effort": 1}, "twist": 1.0,
             "link": dict(link, modes={"in_plane": 8, "out_of_plane": 8, "torsion": 8})}
    with pytest.raises(ArmSpecError, match=r"joints\[0\]\.link\.modes: 24 modes in all"):
        arm_from_dict({"name": "a", "joints": [joint]})
    joints = [dict(joint, name=f"j{i}", link=dict(link, modes={"in_plane": 8, "out_of_plane": 8})) for i in range(5)]
    with pytest.raises(ArmSpecError, match=r"too many modes to load in time"):
        arm_from_dict({"name": "a", "joints": joints})
    arm_from_dict({"name": "a", "joints": joints[:4]})          # 4 x 16^4 = 262144: within the budget


# ---------------------------------------------------------------- rejections

def _set(path, value):
    """Mutator that sets d[...path...] = value (path: list of keys/indices)."""
    def f(d):
        cur = d
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
    return f


def _delete(path):
    def f(d):
        cur = d
        for k in path[:-1]:
            cur = cur[k]
        del cur[path[-1]]
    return f


def _both(*fs):
    def f(d):
        for g in fs:
            g(d)
    return f


J0L, J1L = ["joints", 0, "link"], ["joints", 1, "link"]

BAD = [
    ("nan", _set(J1L + ["EI_z"], float("nan")), "joints[1].link.EI_z"),
    ("inf", _set(["gravity"], [0.0, 0.0, float("inf")]), "gravity[2]"),
    ("negative EI", _set(J1L + ["EI_z"], -1.0), "joints[1].link.EI_z: must be > 0, got -1.0"),
    ("zero length flexible", _set(J0L + ["length"], 0.0), "joints[0].link.length"),
    ("negative length rigid", _both(_set(J0L + ["modes"], {}), _set(J0L + ["length"], -0.1)),
     "joints[0].link.length"),
    ("zero density", _set(J0L + ["linear_density"], 0.0), "joints[0].link.linear_density"),
    ("missing EI", _delete(J0L + ["EI_z"]), "joints[0].link.EI_z"),
    ("missing GJ for torsion", _both(_set(["planar"], False), _set(J0L + ["modes"], {"torsion": 1})),
     "joints[0].link.GJ"),
    ("non-PSD inertia", _set(["joints", 0, "hub", "inertia"], [[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1.0]]),
     "joints[0].hub.inertia"),
    ("asymmetric inertia", _set(["payload", "inertia"], [[1.0, 0.5, 0], [0, 1.0, 0], [0, 0, 1.0]]),
     "payload.inertia"),
    ("negative diag inertia", _set(["payload", "inertia"], [1.0, -1.0, 1.0]), "payload.inertia[1]"),
    ("duplicate names", _set(["joints", 1, "name"], "j1"), "joints[1].name"),
    ("bad name", _set(["joints", 1, "name"], "elbow-joint"), "joints[1].name"),
    ("bool as number", _set(J0L + ["linear_density"], True), "joints[0].link.linear_density"),
    ("string as number", _set(["joints", 0, "offset"], "0.5"), "joints[0].offset"),
    ("float mode count", _set(J0L + ["modes", "in_plane"], 2.0), "joints[0].link.modes.in_plane"),
    ("too many modes", _set(J0L + ["modes", "in_plane"], 9), "joints[0].link.modes.in_plane"),
    ("tube ID >= OD", _both(_delete(J0L + ["linear_density"]), _delete(J0L + ["EI_z"]),
                            _set(J0L + ["section"], {"shape": "tube", "outer_diameter": 0.1,
                                                     "inner_diameter": 0.1}),
                            _set(J0L + ["material"], "steel")),
     "joints[0].link.section.inner_diameter"),
    ("section and direct", _both(_set(J0L + ["section"], {"shape": "circle", "diameter": 0.02}),
                                 _set(J0L + ["material"], "steel")),
     "joints[0].link.linear_density"),
    ("unknown material", _both(_delete(J0L + ["linear_density"]), _delete(J0L + ["EI_z"]),
                               _set(J0L + ["section"], {"shape": "circle", "diameter": 0.02}),
                               _set(J0L + ["material"], "unobtainium")),
     "joints[0].link.material"),
    ("nominal wrong length", _set(["nominal_configuration"], [0.0]), "nominal_configuration"),
    ("nominal outside limits", _set(["nominal_configuration"], [0.0, 2.0]), "nominal_configuration[1]"),
    ("planar twist", _set(["joints", 1, "twist"], 0.5), "joints[1].twist"),
    ("planar out-of-plane", _both(_set(J0L + ["modes", "out_of_plane"], 1), _set(J0L + ["EI_y"], 1.0)),
     "joints[0].link.modes.out_of_plane"),
    ("unknown top key", _set(["gravty"], [0, 0, -9.81]), "gravty: unknown key"),
    ("unknown nested key", _set(J1L + ["EIz"], 1.0), "joints[1].link.EIz: unknown key"),
    ("unknown hub key", _set(["joints", 0, "hub", "Izz"], 1.0), "joints[0].hub.Izz"),
    ("missing name", _delete(["joints", 0, "name"]), "joints[0].name: required"),
    ("missing link", _delete(["joints", 0, "link"]), "joints[0].link: required"),
    ("missing joints", _delete(["joints"]), "joints: required"),
    ("empty joints", _set(["joints"], []), "joints"),
    ("zero effort", _set(["joints", 1, "limits", "effort"], 0.0), "joints[1].limits.effort"),
    ("inverted position limits", _set(["joints", 1, "limits", "position"], [1.0, -1.0]),
     "joints[1].limits.position"),
    ("negative friction", _set(["joints", 0, "friction"], {"viscous": -0.1}), "joints[0].friction.viscous"),
    ("zero gear ratio", _set(["joints", 0, "gear_ratio"], 0), "joints[0].gear_ratio"),
    ("damping >= 1", _set(J0L + ["damping_ratio"], 1.0), "joints[0].link.damping_ratio"),
    ("damping list length", _set(J0L + ["damping_ratio"], [0.1]), "joints[0].link.damping_ratio"),
    ("bad boundary", _set(J0L + ["boundary"], "pinned"), "joints[0].link.boundary"),
    ("bad solver", _set(J0L + ["mode_solver"], "magic"), "joints[0].link.mode_solver"),
    ("fem elements 0", _set(J0L + ["fem_elements"], 0), "joints[0].link.fem_elements"),
    ("planar not bool", _set(["planar"], "yes"), "planar"),
    ("gravity length", _set(["gravity"], [0.0, -9.81]), "gravity"),
    ("negative hub mass", _set(["joints", 0, "hub", "mass"], -1.0), "joints[0].hub.mass"),
]


@pytest.mark.parametrize("mutate,field", [(m, f) for _, m, f in BAD], ids=[b[0] for b in BAD])
def test_rejections(mutate, field):
    d = _base()
    arm_from_dict(d)  # the base is valid
    d = copy.deepcopy(d)
    mutate(d)
    with pytest.raises(ArmSpecError) as ei:
        arm_from_dict(d, source="bad.yaml")
    msg = str(ei.value)
    assert field in msg
    assert "bad.yaml" in msg


def test_errors_collected_and_file_named(tmp_path):
    d = _base()
    d["joints"][0]["link"]["EI_z"] = -1.0
    d["payload"]["mass"] = -2.0
    d["bogus"] = 1
    with pytest.raises(ArmSpecError) as ei:
        arm_from_dict(d, source="x.yaml")
    msg = str(ei.value)
    for f in ("joints[0].link.EI_z", "payload.mass", "bogus"):
        assert f in msg
    p = tmp_path / "bad.yaml"
    p.write_text("name: a\njoints:\n  - name: j\n    link: {length: -1}\n")
    with pytest.raises(ArmSpecError) as ei:
        load_arm(p)
    assert str(p) in str(ei.value) and "joints[0].link.length" in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_not_a_mapping():
    with pytest.raises(ArmSpecError, match="must be a mapping"):
        arm_from_dict([1, 2, 3])
