"""ZV / ZVD input shapers: amplitudes, times, and zero residual vibration of a second-order mode."""
import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from flexarm_control.laws import PointToPoint, ShapedReference, make_shaper, zv, zvd


@pytest.mark.parametrize('zeta', [0.0, 0.05, 0.2])
def test_zv_zvd_impulses(zeta):
    f = 1.5
    K = math.exp(-zeta * math.pi / math.sqrt(1 - zeta ** 2))
    Td = 1.0 / (f * math.sqrt(1 - zeta ** 2))
    s = zv(f, zeta)
    assert np.allclose(s.amplitudes, [1 / (1 + K), K / (1 + K)])
    assert np.allclose(s.times, [0, Td / 2])
    s = zvd(f, zeta)
    assert np.allclose(s.amplitudes, np.array([1, 2 * K, K * K]) / (1 + K) ** 2)
    assert np.allclose(s.times, [0, Td / 2, Td])
    for sh in (zv(f, zeta), zvd(f, zeta)):
        assert sh.amplitudes.sum() == pytest.approx(1.0)
        assert sh.residual_vibration(2 * math.pi * f, zeta) == pytest.approx(0.0, abs=1e-12)
    # ZVD is robust: flat (zero derivative) at the design frequency, ZV is not
    w = 2 * math.pi * f
    d_zv = zv(f, zeta).residual_vibration(1.05 * w, zeta)
    d_zvd = zvd(f, zeta).residual_vibration(1.05 * w, zeta)
    assert d_zvd < 0.2 * d_zv


def _residual(shaper, f, zeta):
    """Residual vibration of x'' + 2 zeta w x' + w^2 x = w^2 u after a shaped fast step u."""
    w = 2 * math.pi * f
    ref = PointToPoint([0.0], [1.0], 0.05, profile='quintic')
    r = ShapedReference(ref, shaper) if shaper is not None else ref
    t_end = 0.05 + (shaper.duration if shaper is not None else 0.0)

    def rhs(t, x):
        u = r.sample(t)[0][0]
        return [x[1], w * w * (u - x[0]) - 2 * zeta * w * x[1]]
    sol = solve_ivp(rhs, (0, t_end + 4.0), [0, 0], max_step=1e-3, rtol=1e-9, atol=1e-12, dense_output=True)
    tt = np.linspace(t_end, t_end + 4.0, 2000)
    return np.max(np.abs(sol.sol(tt)[0] - 1.0))


@pytest.mark.parametrize('kind', ['zv', 'zvd'])
def test_shaped_step_leaves_no_vibration(kind):
    f, zeta = 2.0, 0.02
    plain = _residual(None, f, zeta)
    shaped = _residual(make_shaper(kind, [f], [zeta]), f, zeta)
    assert plain > 0.1
    assert shaped < 0.01 * plain


def test_multi_mode_shaper_is_convolution():
    s = make_shaper('zv', [1.0, 3.0])
    assert len(s.amplitudes) == 4 and s.amplitudes.sum() == pytest.approx(1.0)
    assert s.residual_vibration(2 * math.pi * 1.0) < 1e-12 and s.residual_vibration(2 * math.pi * 3.0) < 1e-12
    assert make_shaper('none', [1.0]) is None
    with pytest.raises(ValueError):
        make_shaper('zv', [0.0])


def test_every_shaping_choice_is_a_shaper_and_every_shaper_a_choice():
    """The choice list (controller/kinds.py: nodes, launch files, `flexarm run`) is the shapers laws/shaping.py
    builds, and 'none' (issue 25: one definition of each choice list)."""
    from flexarm_bringup.bringup import SHAPERS as LAUNCH_SHAPINGS
    from flexarm_control.controller.config import COMMON
    from flexarm_control.controller.kinds import SHAPINGS
    from flexarm_control.laws.shaping import SHAPERS
    assert SHAPINGS[0] == 'none' and set(SHAPINGS[1:]) == set(SHAPERS) and len(SHAPINGS) == len(SHAPERS) + 1
    assert LAUNCH_SHAPINGS is SHAPINGS
    assert make_shaper('none', [1.0]) is None
    for kind in SHAPERS:
        assert make_shaper(kind, [1.0]).amplitudes.sum() == pytest.approx(1.0)
    assert tuple(COMMON['shaping'].check.choices) == SHAPINGS      # the node parameter's check
