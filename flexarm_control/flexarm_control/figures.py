"""The figures of a move, judged at the tip (no ROS): what `flexarm run`, `make bench` and the tests report.

For a run sampled at times t with the deformed tip p(t), the desired tip path p_d(t) (planning.desired_tip_path:
the tip of the arm in static equilibrium at the joint reference; held at the target p_f after the move), the move
starting at t_move and its reference ending at t_ref_end (nominal) and t_cmd_end (when the command ends: input
shaping or a plan's post-actuation included):

    tip_rms_error_m, tip_max_error_m   RMS and max of |p - p_d| over [t_move, t_move + duration]
    end_of_move_tip_error_m            |p(t_ref_end) - p_f|
    residual_vibration_m               ringing after the command ended: max |p - p_rest| over t >= t_cmd_end, p_rest
                                       the mean tip over the last REST_WINDOW_S of the run (arrival error excluded)
    settling_time_1mm_s                from t_move until |p - p_f| stays within 1 mm (None: never within the run)
    max_deflection_over_length         per link, max |tip deflection| / length over the window
    model_valid                        every link within the model's validity limit
"""
from __future__ import annotations

import numpy as np

REST_WINDOW_S = 0.5
SETTLE_BAND_M = 1e-3
STAMP_TOL_S = 0.5e-9          # stamps are whole nanoseconds: windows are decided half a nanosecond inside their ends


def move_figures(t, tip, tip_desired, t_move, t_ref_end, t_cmd_end, duration, relative_deflection=None,
                 validity_limit=None) -> dict:
    """The figures above; arrays t (K,), tip and tip_desired (K, 3), relative_deflection (K, links)."""
    t = np.asarray(t, dtype=float)
    tip = np.asarray(tip, dtype=float)
    tip_desired = np.asarray(tip_desired, dtype=float)
    win = (t >= t_move - STAMP_TOL_S) & (t <= t_move + duration + STAMP_TOL_S)
    out = {'tip_rms_error_m': None, 'tip_max_error_m': None, 'end_of_move_tip_error_m': None,
           'residual_vibration_m': None, 'settling_time_1mm_s': None, 'max_deflection_over_length': None,
           'model_valid': None}
    if not np.any(win):
        return out
    tw, pw, dw = t[win], tip[win], tip_desired[win]
    e = np.linalg.norm(pw - dw, axis=1)
    out['tip_rms_error_m'] = float(np.sqrt(np.mean(e ** 2)))
    out['tip_max_error_m'] = float(e.max())
    target = dw[-1]
    if tw[0] <= t_ref_end + STAMP_TOL_S <= tw[-1] + 2 * STAMP_TOL_S:
        k = int(np.argmin(np.abs(tw - t_ref_end)))
        out['end_of_move_tip_error_m'] = float(np.linalg.norm(pw[k] - target))
    after = tw >= t_cmd_end - STAMP_TOL_S
    rest_win = tw >= tw[-1] - REST_WINDOW_S - STAMP_TOL_S
    if np.any(after) and tw[-1] - t_cmd_end >= REST_WINDOW_S:
        rest = pw[rest_win].mean(axis=0)
        out['residual_vibration_m'] = float(np.linalg.norm(pw[after] - rest, axis=1).max())
    far = np.nonzero(np.linalg.norm(pw - target, axis=1) > SETTLE_BAND_M)[0]
    if far.size == 0:
        out['settling_time_1mm_s'] = 0.0
    elif far[-1] < tw.size - 1:
        out['settling_time_1mm_s'] = float(tw[far[-1] + 1] - t_move)
    if relative_deflection is not None:
        rd = np.asarray(relative_deflection, dtype=float)[win]
        worst = rd.max(axis=0)
        out['max_deflection_over_length'] = [float(x) for x in worst]
        if validity_limit is not None:
            out['model_valid'] = bool(np.all(worst <= validity_limit))
    return out
