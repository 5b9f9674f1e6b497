"""Plant-side joint servo (plant/servo.py) in the plant's integrator (engine.PlantCore)."""
import os

import numpy as np
import pytest

from flexarm_sim.model import joint_hf_inertia, load_model
from flexarm_sim.plant.engine import PlantCore
from flexarm_sim.plant.servo import JointServo
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


def _core(model, kp, kv, dt=1e-3):
    core = PlantCore(model, dt)
    core.servo = JointServo(model, kp, kv, dt, [js.effort_limit for js in model.spec.joints])
    return core


def test_servo_takes_a_horizontal_arm_to_the_commanded_angles():
    """No gravity: the servo's static error is zero, so the joints come to rest at the command."""
    m = load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))
    core = _core(m, [1.17, 0.254], [1.70, 0.368])
    assert core.servo.substeps == 2                      # elbow: J_hf / k_v = 0.63 ms < 1 ms
    core.servo.q_c[:] = [0.3, -0.2]
    for _ in range(30000):
        assert core.advance(np.zeros(2))
    assert np.allclose(core.z[m.q_index], [0.3, -0.2], atol=2e-3)
    assert np.max(np.abs(core.zd)) < 1e-2


def test_servo_static_error_balances_gravity():
    """Spatial arm with gravity: at rest the servo torque k_p (q_c - q) equals the gravity (and elastic)
    load on each joint, -R(z, 0, 0) of the model: the servo compliance the thesis means."""
    m = load_model(os.path.join(ARMS, 'spatial_3r.yaml'))
    kp = np.array([4000.0, 4000.0, 1500.0])
    core = _core(m, kp, [600.0, 400.0, 120.0])
    core.servo.q_c[:] = [0.2, 0.4, -0.3]
    core.z[m.q_index] = core.servo.q_c
    for _ in range(12000):
        assert core.advance(np.zeros(3))
    q = core.z[m.q_index]
    assert np.max(np.abs(core.zd)) < 1e-3
    load = -m.rhs(core.z, np.zeros(m.n_coords), np.zeros(3))[m.q_index]
    assert np.allclose(kp * (core.servo.q_c - q), load, rtol=1e-3, atol=1e-3), (kp * (core.servo.q_c - q), load)
    assert abs(q[1] - 0.4) > 1e-3                        # the shoulder does sag by a measurable angle


def test_servo_substeps_resolve_the_velocity_loop_and_bad_gains_are_refused():
    m = load_model(os.path.join(ARMS, 'spatial_3r.yaml'))
    sv = JointServo(m, [1e5, 1e5, 1.5e4], [3630.0, 3570.0, 522.0], 1e-3)     # the thesis gains
    assert sv.substeps == int(np.ceil(1e-3 / np.min(joint_hf_inertia(m) / sv.kv) - 1e-9)) >= 40
    with pytest.raises(ValueError, match='servo.kv'):
        JointServo(m, [1.0, 1.0, 1.0], [1.0, np.nan, 1.0], 1e-3)
    with pytest.raises(ValueError, match='servo.kp'):
        JointServo(m, [1.0, 1.0], [1.0, 1.0, 1.0], 1e-3)
