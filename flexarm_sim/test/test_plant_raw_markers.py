"""MarkerEncoder (ros/raw_markers.py): its bytes deserialize to exactly the message the plant would otherwise
build (markers_from_geometry), for any geometry, stamp and trail fill, and are as long as rclpy's own
serialization of it (byte equality does not hold: CDR alignment padding is left uninitialised by the serializer)."""
import os

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from visualization_msgs.msg import MarkerArray

from flexarm_sim.model import load_model
from flexarm_sim.plant.outputs import ArmOutputs
from flexarm_sim.ros.raw_markers import MarkerEncoder, markers_from_geometry
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


@pytest.mark.parametrize('arm, trail_length', [('deluca_two_link', 300), ('spatial_3r', 50), ('deluca_two_link', 0)])
def test_encoded_markers_equal_serialized_message(arm, trail_length):
    model = load_model(os.path.join(ARMS, arm + '.yaml'))
    out = ArmOutputs(model, 12)
    rng = np.random.default_rng(1)
    z = 0.01 * rng.standard_normal(model.n_coords)
    z[model.q_index] = rng.uniform(-2, 2, model.n_joints)
    joints, lines, tip = out.geometry(z)
    enc = MarkerEncoder.build(model.n_joints, [len(x) for x in lines], trail_length, 'world')
    assert enc is not None
    history = rng.standard_normal((trail_length + 7, 3))
    for n_trail, t_ns in ((0, 0), (1, 5), (trail_length // 2, 1_234_567_890_123), (trail_length + 7, 2 ** 40)):
        got = enc.encode(joints, lines, tip, history[:n_trail], t_ns)
        if trail_length < 2:
            trail = []
        elif n_trail == 0:
            trail = [tip] * trail_length
        else:
            recent = list(history[:n_trail][-trail_length:])
            trail = [recent[0]] * (trail_length - len(recent)) + recent
        want = markers_from_geometry(joints, lines, tip, trail, t_ns, 'world')
        back = deserialize_message(got, MarkerArray)
        ref = serialize_message(want)
        assert back == deserialize_message(ref, MarkerArray)      # (float32 colours compare after a round trip)
        assert len(got) == len(ref)
        assert back.markers[0].header.stamp.sec == t_ns // 10 ** 9
        assert np.allclose([[p.x, p.y, p.z] for p in back.markers[0].points], lines[0])
