"""URDF generator: valid URDF (urdf_parser_py), tree and counts, limits and masses from the arm file,
and forward kinematics of the URDF chain with the virtual-joint angles of FlexJointMap (the mapping the
flex_joint_states node uses) against the model's deformed frames (ArmModel.frames)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from flexarm_bringup.urdf_gen import FlexJointMap, generate_urdf, load, matrix_to_rpy, rpy_to_matrix
from flexarm_sim.arms import shipped_arms_dir

urdf = pytest.importorskip('urdf_parser_py.urdf')

ARMS = shipped_arms_dir()


def parse(text):
    return urdf.URDF.from_xml_string(text)


def _axis_rot(axis, a):
    u = np.asarray(axis, float) / np.linalg.norm(axis)
    S = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
    return np.eye(3) + np.sin(a) * S + (1 - np.cos(a)) * S @ S


def fk(robot, positions, target):
    """(R, p) of link `target` in the root frame: plain URDF joint semantics (origin, then axis rotation)."""
    R, p = np.eye(3), np.zeros(3)
    for name in robot.get_chain(robot.get_root(), target, links=False):
        j = robot.joint_map[name]
        p = p + R @ np.array(j.origin.xyz)
        R = R @ rpy_to_matrix(j.origin.rpy)
        if j.type in ('revolute', 'continuous'):
            R = R @ _axis_rot(j.axis, positions[name])
        else:
            assert j.type == 'fixed'
    return R, p


def deformed_z(model, tip_fraction, seed=0):
    """Random joint angles and modal coordinates scaled so each link's tip deflects ~tip_fraction * length."""
    rng = np.random.default_rng(seed)
    z = np.zeros(model.n_coords)
    z[model.q_index] = rng.uniform(-1.0, 1.0, model.n_joints)
    for j, lm in enumerate(model.link_modes):
        if lm.n_modes:
            l = model.spec.joints[j].link.length
            d = rng.uniform(-1.0, 1.0, lm.n_modes)
            tip = np.abs(np.einsum('k,kiq->iq', d, lm.displacement(np.array([l])))).max()
            qi = model.q_index[j]
            z[qi + 1:qi + 1 + lm.n_modes] = d * tip_fraction * l / tip
    return z


def tip_errors(model, z, K):
    robot = parse(generate_urdf(model, K))
    fmap = FlexJointMap(model, K)
    pos = dict(zip(fmap.joint_names, fmap.positions_from_z(z)))
    _, _, RE, pE = model.frames(z)
    out = []
    for j, js in enumerate(model.spec.joints):
        R, p = fk(robot, pos, f'{js.name}_tip')
        out.append((np.linalg.norm(p - pE[j]), np.abs(R - RE[j]).max()))
    return np.array(out)


def second_order_floor(model, z):
    """Sum over links of l * max|theta|^2: size of the deflection-squared terms (foreshortening, rotation
    composition) that the linear assumed-modes kinematics leaves out and no K removes."""
    total = 0.0
    for j, lm in enumerate(model.link_modes):
        if lm.n_modes:
            l = model.spec.joints[j].link.length
            qi = model.q_index[j]
            th = np.einsum('k,kiq->iq', z[qi + 1:qi + 1 + lm.n_modes], lm.rotation(np.linspace(0, l, 201)))
            total += l * np.abs(th).max() ** 2
    return total


# ------------------------------------------------------------------------------ structure
@pytest.mark.parametrize('arm,K', [('deluca_two_link', 8), ('spatial_3r', 4), ('slewing_beam', 3),
                                   ('rigid_puma3', 5), ('deluca_two_link', 0)])
def test_valid_urdf_tree_and_counts(arm, K):
    model = load(arm)
    text = generate_urdf(model, K)
    robot = parse(text)
    spec = model.spec
    fmap = FlexJointMap(model, K)
    n_axes = [len(a) for a in fmap.link_axes]
    # counts: real + K virtual per axis + one fixed tip joint per link
    assert len(robot.joints) == spec.n_joints + K * sum(n_axes) + spec.n_joints
    pieces = sum((K + 1) if n else 1 for n in n_axes)
    if K == 0:
        assert sum(n_axes) == 0 and fmap.joint_names == list(spec.joint_names)
    frames = sum(K * (n - 1) for n in n_axes if n)
    assert len(robot.links) == 1 + pieces + frames + spec.n_joints
    # a tree with root base_link; a single chain reaches the last tip through every movable joint
    assert robot.get_root() == 'base_link'
    children = [j.child for j in robot.joints]
    assert len(children) == len(set(children)) == len(robot.links) - 1
    chain = robot.get_chain('base_link', f'{spec.joints[-1].name}_tip', links=False)
    movable = [j for j in chain if robot.joint_map[j].type != 'fixed']
    assert movable == [n for n in _interleave(spec, fmap)]
    assert sorted(movable) == sorted(fmap.joint_names)
    # real joints: revolute about z with the arm file's limits (continuous where it gives no position limits);
    # virtual joints continuous
    for js in spec.joints:
        j = robot.joint_map[js.name]
        assert list(j.axis) == [0, 0, 1]
        if np.all(np.isfinite(js.position_limits)):
            assert j.type == 'revolute'
            assert (j.limit.lower, j.limit.upper) == pytest.approx(js.position_limits)
        else:
            assert j.type == 'continuous'
        assert j.limit.effort == pytest.approx(js.effort_limit)
        assert j.limit.velocity == pytest.approx(js.velocity_limit)
    for name in fmap.virtual_names:
        j = robot.joint_map[name]
        assert j.type == 'continuous'
        assert list(j.axis) == {'z': [0, 0, 1], 'y': [0, 1, 0], 'x': [1, 0, 0]}[name[-1]]
    # lumped masses add up to the arm's
    m_urdf = sum(link.inertial.mass for link in robot.links if link.inertial is not None)
    m_spec = sum(js.link.linear_density * js.link.length + js.hub.mass + js.link.extra.mass
                 for js in spec.joints) + spec.payload.mass
    assert m_urdf == pytest.approx(m_spec, rel=1e-9)


# ------------------------------------------------------------------------------ what urdfdom accepts
# urdfdom (robot_state_publisher, kdl_parser, Pinocchio) reads every number with a C++ istringstream in the classic
# locale and refuses what does not parse completely (`-inf`, `nan`, `1,5`), and refuses a revolute or prismatic
# joint without <limit effort velocity>. urdf_parser_py takes anything float() takes, so these rules are checked
# here, on the attributes urdfdom reads as numbers.
_NUMBER = re.compile(r'^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$')
_NUMERIC = {'origin': ('xyz', 'rpy'), 'axis': ('xyz',), 'limit': ('lower', 'upper', 'effort', 'velocity'),
            'mass': ('value',), 'inertia': ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz'), 'box': ('size',),
            'cylinder': ('radius', 'length'), 'sphere': ('radius',), 'color': ('rgba',),
            'dynamics': ('damping', 'friction')}


def urdfdom_problems(text):
    """What urdfdom would refuse in a URDF text (empty: it loads)."""
    import xml.etree.ElementTree as ET
    out = []
    root = ET.fromstring(text)
    for el in root.iter():
        for attr in _NUMERIC.get(el.tag, ()):
            if attr in el.attrib:
                bad = [t for t in el.attrib[attr].split() if not _NUMBER.match(t)]
                if bad:
                    out.append(f'<{el.tag} {attr}="{el.attrib[attr]}">')
    for j in root.iter('joint'):
        if j.get('type') in ('revolute', 'prismatic'):
            lim = j.find('limit')
            if lim is None or 'effort' not in lim.attrib or 'velocity' not in lim.attrib:
                out.append(f'joint {j.get("name")}: {j.get("type")} without <limit effort velocity>')
    return out


@pytest.mark.parametrize('arm', sorted(f[:-5] for f in os.listdir(ARMS) if f.endswith('.yaml')))
def test_every_shipped_arm_loads_in_urdfdom(arm):
    """Every shipped arm (joints without position limits included: spatial_3r's hip, slewing_beam's hub were
    `revolute lower="-inf"`, refused by robot_state_publisher) gives a URDF urdfdom loads."""
    text = generate_urdf(load(arm), 4)
    assert urdfdom_problems(text) == []
    parse(text)
    assert urdfdom_problems(text.replace('upper="3.14159"', 'upper="inf"', 1)) or 'upper="3.14159"' not in text


def _interleave(spec, fmap):
    """Expected movable joints along the chain: each real joint followed by its link's virtual joints."""
    virt = {js.name: [n for n in fmap.virtual_names if n.startswith(js.name + '_flex')] for js in spec.joints}
    for js in spec.joints:
        yield js.name
        yield from virt[js.name]


def test_rpy_round_trip():
    rng = np.random.default_rng(1)
    for _ in range(50):
        rpy = rng.uniform(-3, 3, 3) * np.array([1, 0.5, 1])
        R = rpy_to_matrix(rpy)
        assert np.allclose(rpy_to_matrix(matrix_to_rpy(R)), R, atol=1e-12)
    R = rpy_to_matrix((0.3, np.pi / 2, -0.2))                # gimbal lock
    assert np.allclose(rpy_to_matrix(matrix_to_rpy(R)), R, atol=1e-9)


# ------------------------------------------------------------------------------ kinematics
def test_rigid_configuration_matches_model_exactly():
    for arm in ('deluca_two_link', 'spatial_3r', 'rigid_puma3'):
        model = load(arm)
        z = np.zeros(model.n_coords)
        z[model.q_index] = np.linspace(-0.8, 0.9, model.n_joints)
        err = tip_errors(model, z, 4)
        assert err.max() < 1e-12, arm


def test_planar_fk_converges_to_model_tip():
    """De Luca arm, tips deflected by 0.5 % of the link length: the tip rotations are exact for every K
    (one bending axis: the tip piece carries the section rotation at the tip), the position error falls
    ~ h^2 (midpoint rule) down to the second-order floor the linear model kinematics leaves out."""
    model = load('deluca_two_link')
    z = deformed_z(model, 0.005)
    floor = second_order_floor(model, z)
    errs = {K: tip_errors(model, z, K) for K in (1, 2, 4, 8, 16, 64)}
    for K, e in errs.items():
        assert e[:, 1].max() < 1e-12, K                       # rotations exact
    pos = {K: e[:, 0].max() for K, e in errs.items()}
    assert pos[1] / pos[2] > 3.5 and pos[2] / pos[4] > 3.5     # h^2 while discretisation dominates
    assert all(pos[a] >= pos[b] for a, b in ((1, 2), (2, 4), (4, 8), (8, 16), (16, 64)))
    assert pos[64] < floor
    # in absolute terms: against the links' own tip deflections (0.5 % of each length)
    elastic = sum(0.005 * js.link.length for js in model.spec.joints)
    assert pos[8] < 0.1 * elastic
    assert pos[64] < 0.05 * elastic


def test_spatial_fk_converges_to_model_tip():
    """Naganathan 3R (in-plane and out-of-plane modes): position and rotation within the discretisation
    error + second-order floor (rotation composition order, foreshortening)."""
    model = load('spatial_3r')
    z = deformed_z(model, 0.01, seed=3)
    floor = second_order_floor(model, z)
    e = {K: tip_errors(model, z, K) for K in (1, 2, 4, 16)}
    pos = {K: v[:, 0].max() for K, v in e.items()}
    assert pos[1] > 4 * pos[4]
    assert pos[16] < 2 * floor
    assert e[16][:, 1].max() < 2 * floor / 1.0                 # rotation, per metre of link ~ O(theta^2)


def test_positions_api():
    model = load('deluca_two_link')
    fmap = FlexJointMap(model, 3)
    assert fmap.joint_names[:2] == ['shoulder', 'elbow']
    assert fmap.virtual_names == [f'{j}_flex{s}_z' for j in ('shoulder', 'elbow') for s in (1, 2, 3)]
    d = [np.array([1e-2, 0.0]), np.array([0.0, 0.0])]
    a = fmap.positions([0.1, 0.2], d)
    assert a[:2] == pytest.approx([0.1, 0.2])
    # the virtual angles of a link add up to its tip section rotation
    lm = model.link_modes[0]
    assert a[2:5].sum() == pytest.approx(1e-2 * lm.rotation(np.array([0.5]))[0, 2, 0])
    assert np.all(a[5:] == 0)
    assert fmap.positions([0.1, 0.2], [1e-2, 0, 0, 0]) == pytest.approx(a)   # flat modal vector
    with pytest.raises(ValueError):
        fmap.positions([0.1], d)
    with pytest.raises(ValueError):
        fmap.positions([0.1, 0.2], [1.0])


def test_cli_writes_urdf(tmp_path):
    out = tmp_path / 'arm.urdf'
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'urdf',
                        os.path.join(ARMS, 'deluca_two_link.yaml'), '-K', '5', '-o', str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    robot = parse(out.read_text())
    assert 'shoulder_flex5_z' in robot.joint_map and 'shoulder_flex6_z' not in robot.joint_map
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.urdf_gen', 'deluca_two_link', '-K', '2'],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith('<?xml'), r.stderr
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'urdf', str(tmp_path / 'missing.yaml')],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'not found' in r.stderr
