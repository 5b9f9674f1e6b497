"""The figures of a move (figures.move_figures) on signals whose answers are known."""
import numpy as np
import pytest

from flexarm_control.figures import move_figures


def _signals(offset=0.0, ring=0.0, t_cmd_end=3.0):
    t = np.arange(0.0, 6.5001, 0.002)
    desired = np.zeros((t.size, 3))
    desired[:, 0] = np.clip(t - 0.5, 0.0, 2.5) / 2.5            # 1 m along x in 2.5 s from t = 0.5
    tip = desired.copy()
    after = t >= t_cmd_end
    tip[after, 1] += ring * np.exp(-(t[after] - t_cmd_end)) * np.sin(2 * np.pi * 2.0 * (t[after] - t_cmd_end) + 1.0)
    tip[:, 0] += offset * (t >= 0.5)
    return t, tip, desired


def test_a_perfect_move_has_zero_error_and_settles_with_the_path():
    t, tip, d = _signals()
    f = move_figures(t, tip, d, 0.5, 3.0, 3.0, 6.0)
    assert f['tip_rms_error_m'] == 0.0 and f['tip_max_error_m'] == 0.0 and f['end_of_move_tip_error_m'] == 0.0
    assert f['residual_vibration_m'] == pytest.approx(0.0, abs=1e-15)
    # within 1 mm of the target once the path is: 2.5 s * (1 - 1e-3)
    assert f['settling_time_1mm_s'] == pytest.approx(2.5 * (1 - 1e-3), abs=0.003)


def test_ringing_is_the_oscillation_after_the_command_not_the_arrival_error():
    t, tip, d = _signals(offset=2e-3, ring=1e-3, t_cmd_end=3.2)
    f = move_figures(t, tip, d, 0.5, 3.0, 3.2, 6.0)
    assert f['end_of_move_tip_error_m'] == pytest.approx(2e-3, rel=1e-9)
    assert f['tip_max_error_m'] == pytest.approx(np.hypot(2e-3, 1e-3 * np.max(np.abs(np.sin(np.linspace(1, 13.6, 5000))
                                                                                * np.exp(-np.linspace(0, 1, 5000))))), rel=0.05)
    # ringing amplitude: the first peak of 1e-3 e^{-s} sin(4 pi s + 1), about the rest (the offset is excluded)
    s = np.linspace(0, 3.3, 100001)
    assert f['residual_vibration_m'] == pytest.approx(np.max(np.abs(1e-3 * np.exp(-s) * np.sin(4 * np.pi * s + 1))),
                                                      rel=1e-3)
    assert f['settling_time_1mm_s'] is None           # 2 mm off the target to the end


def test_validity_and_deflection_per_link():
    t, tip, d = _signals()
    rel = np.zeros((t.size, 2))
    rel[:, 0] = 0.1
    rel[t > 2.0, 1] = 0.16
    f = move_figures(t, tip, d, 0.5, 3.0, 3.0, 6.0, rel, 0.15)
    assert f['max_deflection_over_length'] == [0.1, 0.16] and f['model_valid'] is False
    f = move_figures(t, tip, d, 0.5, 3.0, 3.0, 6.0, rel * 0.5, 0.15)
    assert f['model_valid'] is True
