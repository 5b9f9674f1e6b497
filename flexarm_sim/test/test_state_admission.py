"""Issue 28 items 5 and 6 without DDS: which states a node acts upon (arm_id rule, plausible values), who publishes
commands (SourceMonitor), the one place of topic names, and the refusal to run without DDS-Security when asked."""
import os

import numpy as np
import pytest
import yaml
from rclpy.serialization import deserialize_message, serialize_message

from flexarm_msgs.msg import FlexState
from flexarm_sim.arms import arm_id, shipped_arms_dir
from flexarm_sim.common.sources import SourceMonitor, gid_text
from flexarm_sim.model import load_model
from flexarm_sim.model.layout import JOINT_MARGIN, ArmLayout, joints_only_layout
from flexarm_sim.plant.outputs import ArmOutputs
from flexarm_sim.ros import dds_security, names
from flexarm_sim.ros.flexstate import FlexStateDecoder, FlexStateEncoder, decode_state

ARMS = shipped_arms_dir()


def _arm(path):
    model = load_model(path)
    return model, ArmLayout.of(model, arm_id(path, model.spec.name))


@pytest.fixture(scope='module')
def deluca():
    return _arm(os.path.join(ARMS, 'deluca_two_link.yaml'))


@pytest.fixture(scope='module')
def perturbed(tmp_path_factory):
    """The De Luca arm with a 20 % heavier payload: another arm_id, the same layout (issue 23's --plant-arm)."""
    with open(os.path.join(ARMS, 'deluca_two_link.yaml')) as f:
        spec = yaml.safe_load(f)
    spec['payload']['mass'] = 1.2 * float(spec['payload']['mass'])
    path = tmp_path_factory.mktemp('arms') / 'deluca_heavier.yaml'
    path.write_text(yaml.safe_dump(spec))
    return _arm(str(path))


def _state(model, layout, z=None, zd=None):
    enc = FlexStateEncoder(layout, 'base_link', ArmOutputs(model))
    z = np.zeros(layout.n_coords) if z is None else z
    zd = np.zeros(layout.n_coords) if zd is None else zd
    return enc.fill(z, zd, np.zeros(layout.n_joints), 3, 7_000)


def test_empty_arm_id_is_refused(deluca):
    model, layout = deluca
    msg = deserialize_message(_state(model, layout), FlexState)
    msg.arm_id = ''
    with pytest.raises(ValueError, match='without arm_id'):
        decode_state(msg, layout)
    with pytest.raises(ValueError, match='without arm_id'):
        FlexStateDecoder(layout).decode(serialize_message(msg))


def test_another_arm_with_the_same_layout_is_accepted_and_named_once(deluca, perturbed):
    model, layout = deluca
    pmodel, playout = perturbed
    assert playout.arm_id != layout.arm_id and playout.joint_names == layout.joint_names
    notes = []
    dec = FlexStateDecoder(layout, note=notes.append)
    z = np.zeros(layout.n_coords)
    z[layout.q_index] = [0.3, -0.2]
    for _ in range(3):                                     # slow path, then the learnt fast path
        st = dec.decode(_state(pmodel, playout, z))
        assert np.array_equal(st.z, z)
    assert len(notes) == 1 and playout.arm_id in notes[0] and layout.arm_id in notes[0]
    assert dec.other_arms == {playout.arm_id: notes[0]} and dec.fast == 2
    # the joints-only states of the hardware bridge: their own id (never empty), accepted by joint names
    bridge = joints_only_layout(layout.joint_names)
    assert bridge.arm_id == 'joints:shoulder,elbow'
    seen = []
    st = FlexStateDecoder(layout, note=seen.append).decode(FlexStateEncoder(bridge, '').fill(
        np.array([0.1, 0.2]), np.zeros(2), np.zeros(2), 0, 0))
    assert not st.has_modes and list(st.z[layout.q_index]) == [0.1, 0.2] and 'joints only' in seen[0]


def test_another_arm_with_another_layout_is_refused(deluca):
    model, layout = deluca
    other_model, other = _arm(os.path.join(ARMS, 'spatial_3r.yaml'))
    with pytest.raises(ValueError, match='spatial_3r.*joints'):
        FlexStateDecoder(layout).decode(_state(other_model, other))
    msg = deserialize_message(_state(model, layout), FlexState)
    msg.arm_id = 'lookalike:0000'
    msg.links[0].modal_position = list(msg.links[0].modal_position) + [0.0]     # a mode more on one link
    msg.links[0].modal_velocity = list(msg.links[0].modal_velocity) + [0.0]
    with pytest.raises(ValueError, match='modes per link'):
        decode_state(msg, layout)


@pytest.mark.parametrize('case', ['q=1e300', 'q beyond the stop', 'rate', 'mode', 'mode rate'])
def test_implausible_states_are_refused_by_both_paths(deluca, case):
    model, layout = deluca
    z, zd = layout.zeros()
    qi, mi = layout.q_index, layout.mode_index
    lo, hi = model.spec.joints[0].position_limits
    if case == 'q=1e300':
        z[qi[0]] = 1e300
    elif case == 'q beyond the stop':
        z[qi[0]] = hi + 1.01 * JOINT_MARGIN
    elif case == 'rate':
        zd[qi[1]] = 11 * model.spec.joints[1].velocity_limit
    elif case == 'mode':
        z[mi[0]] = 2 * layout.z_hi[mi[0]]
    else:
        zd[mi[2]] = -2 * layout.zd_max[mi[2]]
    data = _state(model, layout, z, zd)
    dec = FlexStateDecoder(layout)
    dec.decode(_state(model, layout))                       # learn the fast path first
    with pytest.raises(ValueError, match='implausible'):
        dec.decode(data)
    assert dec.fast == 1
    with pytest.raises(ValueError, match='implausible'):
        decode_state(deserialize_message(data, FlexState), layout)


def test_plausible_bounds_are_physical(deluca):
    """The bounds allow every state the model represents: joints at their limits plus the hard stop's stated
    penetration, and a modal amplitude that moves the tip by less than its link's length."""
    model, layout = deluca
    for j, js in enumerate(model.spec.joints):
        i = layout.q_index[j]
        assert layout.z_lo[i] == js.position_limits[0] - JOINT_MARGIN
        assert layout.z_hi[i] == js.position_limits[1] + JOINT_MARGIN
    d = model.data
    for lk in layout.flexible_links:
        for k in range(lk.n_modes):
            m = lk.modes.start + k
            tip = np.linalg.norm(d.phi_tip[lk.index, :, k]) * layout.z_hi[m]
            assert tip == pytest.approx(d.length[lk.index])     # the whole link length, 6.7x the model's validity
    z, zd = layout.zeros()
    z[layout.mode_index] = 0.5 * layout.z_hi[layout.mode_index]
    assert layout.implausible(z, zd) == ''


def test_source_monitor_names_every_publisher_and_counts_conflicts():
    mon = SourceMonitor(['/armB/effort_controller/commands'])
    topic = mon.topics[0]
    assert mon.update(topic, [('/armB/modal', 'aa')]) == '' and mon.status()[0] == 'ok'
    text = mon.update(topic, [('/armB/modal', 'aa'), ('/rogue', 'bb')])
    assert '2 publishers' in text and '/armB/modal (gid aa)' in text and '/rogue (gid bb)' in text
    assert mon.update(topic, [('/rogue', 'bb'), ('/armB/modal', 'aa')]) == ''   # the same set: logged once
    level, msg, values = mon.status()
    assert level == 'warn' and '/rogue' in msg and values['commands_source_conflicts'] == 1
    assert values[f'publishers {topic}'] == 2
    mon.update(topic, [('/armB/modal', 'aa')])
    assert mon.status()[0] == 'ok'
    mon.update(topic, [('/armB/modal', 'aa'), ('/rogue2', 'cc')])
    assert mon.status()[2]['commands_source_conflicts'] == 2
    assert gid_text([1, 15, 255]) == '010fff'


def test_names_are_relative_and_resolve_in_a_namespace():
    topics = [getattr(names, k) for k in dir(names) if k.isupper() and isinstance(getattr(names, k), str)]
    assert topics and all(not t.startswith('/') for t in topics)
    assert names.resolve(names.STATE) == '/flexarm/state'                      # a single arm: as before
    assert names.resolve(names.EFFORT_COMMANDS, 'armB') == '/armB/effort_controller/commands'
    assert names.resolve(names.RESET, '/lab/armB/') == '/lab/armB/flexarm/reset'
    assert names.namespace('') == names.namespace('/') == '/'
    assert names.remappings('/') == [] and names.remappings('armB') == [('/clock', '/armB/clock')]
    for bad in ('9arm', 'arm-b', 'arm b', 'a//b'):
        with pytest.raises(ValueError, match='namespace'):
            names.namespace(bad)


def _library(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(b'\0' * 100 + content + b'\0' * 100)
    return str(p)


def test_security_requested_without_support_is_refused(tmp_path):
    plain = _library(tmp_path, 'libfastdds.so.3.2', b"Received PID_IDENTITY_TOKEN but security is disabled")
    secure = _library(tmp_path, 'libfastdds.so.3.1', b'builtin.PKI-DH\0builtin.Access-Permissions')
    on = {'ROS_SECURITY_ENABLE': 'true', 'ROS_SECURITY_STRATEGY': 'Enforce'}
    assert dds_security.support([plain]) [0] is False and dds_security.support([secure])[0] is True
    assert dds_security.refusal({}, [plain]) == ''                                       # not requested
    assert dds_security.refusal({'ROS_SECURITY_ENABLE': 'false'}, [plain]) == ''
    why = dds_security.refusal(on, [plain])
    assert 'Refusing to run unprotected' in why and plain in why and 'Enforce' in why
    assert 'Permissive' in dds_security.refusal({'ROS_SECURITY_ENABLE': 'true'}, [plain])   # whatever the strategy
    assert dds_security.refusal(on, [secure]) == ''
    assert dds_security.support(['/usr/lib/libother.so'])[0] is None


def test_the_wheels_fast_dds_has_no_security_plugins():
    """DESIGN.md §1, verified: the Fast DDS this process runs (the PyPI wheels') lacks DDS-Security."""
    import rclpy  # noqa: F401 - maps the DDS library
    ok, what = dds_security.support()
    assert ok is False and 'libfastdds' in what
