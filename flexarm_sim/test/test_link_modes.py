"""Link modes inside the arm: boundary conditions from the outboard arm, normalisation and modal
constants against the published De Luca & Siciliano values, quadrature accuracy of the integrals."""
import os

import numpy as np
import pytest

from flexarm_sim.model import load_model
from flexarm_sim.model import link_modes as lmod
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


def test_clamped_mass_boundary_conditions_from_the_outboard_arm(deluca):
    # De Luca & Siciliano: M_L1 = mh2 + m2 + mp, J_L1 = Jh2 + Jo2 + Jp + mp l2^2; M_L2 = mp, J_L2 = Jp
    l1, l2 = deluca.link_modes
    assert l1.tip_mass == pytest.approx(1.0 + 0.1 + 0.1)
    assert l1.tip_inertia[2] == pytest.approx(0.1 + 0.1 * 0.5 ** 2 / 3 + 0.0005 + 0.1 * 0.5 ** 2)
    assert l2.tip_mass == pytest.approx(0.1)
    assert l2.tip_inertia[2] == pytest.approx(0.0005)
    assert np.allclose(np.concatenate([l1.freqs_hz, l2.freqs_hz]), [0.48, 1.80, 2.18, 15.91], rtol=5e-3)


def test_modal_constants_equal_the_published_amm_constants(deluca):
    """Tip displacements/slopes and the integrals v_ij = int rho phi, w_ij = int rho x phi of the
    De Luca & Siciliano arm (modes normalised to the link mass), as published (anchors.md E.1), to the
    three decimals given; the sign of a mode shape is a convention (ours: positive tip displacement)."""
    published = {  # link: (phi_e, phi'_e, v, w) per mode
        0: ([0.186, 0.215], [0.657, -0.560], [0.007, 0.013], [0.002, 0.004]),
        1: ([0.883, -0.069], [2.641, -10.853], [0.033, 0.054], [0.012, 0.016]),
    }
    for j, (phi_e, dphi_e, v, w) in published.items():
        lm, it = deluca.link_modes[j], deluca.integrals[j]
        tip = lm.displacement([0.5])[:, 1, 0]
        slope = lm.rotation([0.5])[:, 2, 0]
        sign = np.sign(tip) * np.sign(phi_e)
        assert np.allclose(sign * tip, phi_e, atol=5e-4)
        assert np.allclose(sign * slope, dphi_e, atol=5e-4)
        assert np.allclose(np.abs(it.Phibar[1]), np.abs(v), atol=5e-4)     # v_ij (printed to 3 decimals)
        assert np.allclose(np.abs(it.H0[2]), np.abs(w), atol=5e-4)         # w_ij = int rho x phi dx


def test_modal_mass_including_the_tip_body_is_the_link_mass(deluca):
    for lm, it, js in zip(deluca.link_modes, deluca.integrals, deluca.spec.joints):
        tip = lm.displacement([js.link.length])[:, 1, 0]
        slope = lm.rotation([js.link.length])[:, 2, 0]
        gen_mass = it.Mdd + lm.tip_mass * np.outer(tip, tip) + lm.tip_inertia[2] * np.outer(slope, slope)
        assert np.allclose(gen_mass, js.link.mass * np.eye(lm.n_modes), atol=1e-12)
        assert np.allclose(it.stiffness, np.diag(lm.omega ** 2 * js.link.mass), rtol=1e-9)


def test_modal_integrals_are_converged(deluca):
    """The composite Gauss rule of link_modes gives the same integrals as a 4x refined rule."""
    js, lm = deluca.spec.joints[1], deluca.link_modes[1]
    coarse = lmod.link_integrals(js.link, lm)
    saved = lmod.N_SEGMENTS
    try:
        lmod.N_SEGMENTS = 4 * saved
        fine = lmod.link_integrals(js.link, lm)
    finally:
        lmod.N_SEGMENTS = saved
    for name in ('Phibar', 'H0', 'I1', 'I2', 'Mdd', 'stiffness'):
        a, b = getattr(coarse, name), getattr(fine, name)
        assert np.allclose(a, b, rtol=1e-12, atol=1e-13 * np.abs(b).max()), name
