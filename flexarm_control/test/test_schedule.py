"""laws/schedule.py and flexarm_sim.model.cyclic_joints: an arm turning about gravity's axis has a cyclic joint 0, and
the gain schedules design its cells along the other joints only. Checked against designs and linearizations made
directly at the angles (no schedule), and on an arm whose gravity lies in its plane (no cyclic joint)."""
import numpy as np
import pytest

from flexarm_control.controller.safe_mode import Envelope, SafeHoldLaw, design_hold
from flexarm_control.estimation.filter import FilterNoise, ModalKalmanFilter
from flexarm_control.laws.modal import ModalLQR
from flexarm_sim.arms import resolve_arm, shipped_arms
from flexarm_sim.model import cyclic_joints, linearize, load_model
from flexarm_sim.model.equilibrium import static_equilibrium
from flexarm_sim.model.sensing import SensorSet
from flexarm_sim.model.spec import arm_from_dict, arm_to_dict

ENVELOPE = Envelope(0.002, 0.05, 0.03)
MOVE = np.radians(30.0)            # the standard move: 30 deg of both joints


def _linearization_at(model, q):
    z, tau = static_equilibrium(model, q)
    A, B = linearize(model, z, tau).state_space()
    return z, tau, A, B


def _in_plane_gravity(model):
    """The De Luca arm mounted 1.2 deg off level: 2 % of gravity (0.2 m/s^2) in the plane of its motion (a larger
    share sags its links beyond a static equilibrium)."""
    d = arm_to_dict(model.spec)
    d['gravity'] = [0.0, -0.2, -9.81]
    return load_model(arm_from_dict(d))


@pytest.fixture(scope='module')
def deluca():
    return load_model(resolve_arm('deluca_two_link'))


@pytest.mark.parametrize('arm', shipped_arms())
def test_joint_0_of_an_arm_turning_about_gravity_is_cyclic(arm):
    """Every shipped arm turns about its gravity axis: its static equilibrium (but for joint 0's angle) and its
    linearization there are the same at three angles of joint 0, to the finite differences' precision."""
    model = load_model(resolve_arm(arm))
    assert cyclic_joints(model.spec).tolist() == [True] + [False] * (model.n_joints - 1)
    q = np.asarray(model.spec.nominal_configuration, dtype=float) + 0.3
    z0, tau0, A0, B0 = _linearization_at(model, q)
    for shift in (0.9, -1.7):
        qs = q.copy()
        qs[0] += shift
        z, tau, A, B = _linearization_at(model, qs)
        z[model.q_index[0]] -= shift
        assert np.abs(z - z0).max() <= 1e-12 * (1.0 + np.abs(z0).max())
        assert np.abs(tau - tau0).max() <= 1e-9 * (1.0 + np.abs(tau0).max())
        assert np.abs(A - A0).max() <= 1e-9 * np.abs(A0).max()
        assert np.abs(B - B0).max() <= 1e-9 * np.abs(B0).max()


def test_an_arm_with_gravity_in_its_plane_has_no_cyclic_joint(deluca):
    """The check can fail: with a share of gravity in the plane of its motion the De Luca arm's equilibrium torque
    and linearization change with joint 0's angle, and nothing is cyclic."""
    vertical = _in_plane_gravity(deluca)
    assert not cyclic_joints(vertical.spec).any()
    q = np.array([0.3, 0.3])
    _, tau0, A0, _ = _linearization_at(vertical, q)
    _, tau1, A1, _ = _linearization_at(vertical, q + [0.9, 0.0])
    assert np.abs(tau1 - tau0).max() > 0.05 and np.abs(A1 - A0).max() > 1e-3 * np.abs(A0).max()


def test_the_modal_schedule_gives_what_a_design_at_the_angle_gives(deluca):
    """The modal LQR's scheduled design at (q0, q1) with q0 off its reference angle equals its design made directly
    at (q0, q1): gains to the LQR's precision, the static equilibrium placed at q0, the equilibrium torque."""
    law = ModalLQR(deluca, dt=0.002, input_delay=0.004)
    for q in (np.array([0.73, 0.3]), np.array([-1.2, 0.5])):
        scheduled = law._gain_for(q)
        design, (A, B) = law._design_at(q)
        direct = design + (law.reference_prediction(design[0], A, B) if law.prediction_periods else
                           (np.zeros((2, 0)),) * 2)
        for name, a, b in zip(('K', 'K_i', 'z_eq', 'tau_eq', 'K_u', 'K_0', 'K_f'), scheduled, direct):
            assert np.abs(a - b).max() <= 1e-7 * (1.0 + np.abs(b).max()), name
        assert scheduled[2][deluca.q_index[0]] == q[0]


def test_the_hold_schedule_gives_what_a_design_at_the_angle_gives(deluca):
    """The safe mode's hold law at q with joint 0 off its reference angle: the gain of its cell equals the hold
    design made at q, and its static equilibrium (in `gain` and in `slow_joints`) is placed at q's joint 0."""
    law = SafeHoldLaw(deluca, ENVELOPE)
    q = np.array([0.9, 0.4])                          # joint 1 on the grid of 0.2 rad: one cell
    K, z_eq = law.gain(q)
    direct = design_hold(deluca, q, ENVELOPE, law.nominal.authority)
    assert np.abs(K - direct.K).max() <= 1e-7 * np.abs(direct.K).max()
    assert np.abs(z_eq - direct.z_eq).max() <= 1e-12
    z = direct.z_eq.copy()
    qs, _ = law.slow_joints(z, np.zeros_like(z))
    assert np.abs(qs - q).max() <= 1e-9                # the arm at rest at q is where it is, not at joint 0's 0


def test_the_estimator_cell_is_the_design_at_the_angle(deluca):
    """The state estimator's cell at q with joint 0 off its reference angle: the same Phi, Q_d and accelerometer
    Jacobian as its design at q."""
    kf = ModalKalmanFilter(deluca, SensorSet(accelerometer=True), 0.002, FilterNoise(encoder=1e-3))
    q = np.array([1.1, 0.4])
    cell, direct = kf.cell(q), kf.design(q)
    for name in ('Phi', 'Q', 'H_accel'):
        a, b = getattr(cell, name), getattr(direct, name)
        assert np.abs(a - b).max() <= 1e-7 * np.abs(b).max(), name


def test_a_move_needs_the_cells_along_the_other_joints_only(deluca):
    """The standard move (30 deg of both joints) asks the modal law for the cells along joint 1 only: 7 at 0.1 rad
    (0 .. 0.52 rad), each keyed 0 on joint 0; the hold law 3 at 0.2 rad (its nominal cell designed at construction);
    the estimator's neighbourhoods likewise. The same arm with gravity in its plane asks for the cells of both
    joints: 19 and 9."""
    qs = [np.array(deluca.spec.nominal_configuration, dtype=float) + MOVE * s for s in np.linspace(0.0, 1.0, 200)]
    keys = ModalLQR(deluca, dt=0.002, input_delay=0.004).cells_for(qs)
    assert keys == [(0, k) for k in range(7)]
    assert SafeHoldLaw(deluca, ENVELOPE).cells_for(qs) == [(0, 1), (0, 2), (0, 3)]
    kf = ModalKalmanFilter(deluca, SensorSet(), 0.002, FilterNoise(encoder=1e-3))
    assert {k[0] for k in kf.cells_for(qs)} == {0}
    tilted = _in_plane_gravity(deluca)
    vertical = ModalLQR(tilted, dt=0.002, input_delay=0.004).cells_for(qs)
    assert len(vertical) == 19 and {k[0] for k in vertical} == set(range(7))
    assert len(SafeHoldLaw(tilted, ENVELOPE).cells_for(qs)) == 9
