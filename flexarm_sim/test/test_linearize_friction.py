"""model.linearize and Coulomb friction: the smoothed term's slope at qd = 0 (f_c / v_c) is left out of design
linearizations, kept for the integration's step size."""
import numpy as np
import yaml

from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import arm_from_dict, largest_stable_rk4_step, linearize, load_model
from flexarm_sim.model.arm_model import COULOMB_VELOCITY


def _deluca(coulomb):
    d = yaml.safe_load(open(resolve_arm('deluca_two_link')))
    for j, fc in zip(d['joints'], coulomb):
        j['friction'] = {'viscous': 0.03, 'coulomb': fc}
    return load_model(arm_from_dict(d))


def test_the_coulomb_slope_is_out_of_design_linearizations_and_in_the_step_size():
    rough, smooth = _deluca([0.030, 0.0099]), _deluca([0.0, 0.0])
    z = np.zeros(rough.n_coords)
    z[rough.q_index] = [0.3, -0.4]
    design, stiff = linearize(rough, z), linearize(rough, z, coulomb_slope=True)
    reference = linearize(smooth, z)                      # the same arm without Coulomb friction
    np.testing.assert_allclose(design.damping, reference.damping, rtol=0, atol=1e-7)
    np.testing.assert_allclose(design.stiffness, stiff.stiffness, rtol=0, atol=0)
    extra = stiff.damping - design.damping                # f_c / v_c on each joint's diagonal, nothing else
    expected = np.zeros_like(extra)
    for j, qj in enumerate(rough.q_index):
        expected[qj, qj] = [0.030, 0.0099][j] / COULOMB_VELOCITY
    np.testing.assert_allclose(extra, expected, rtol=1e-6, atol=1e-7)
    # the smoothed model is stiff near qd = 0: the integration step still sees it
    assert largest_stable_rk4_step(rough) < 0.5 * largest_stable_rk4_step(smooth)
