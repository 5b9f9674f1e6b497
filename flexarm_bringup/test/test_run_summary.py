"""`flexarm run`'s text summary says when the figures are (partly) the safe mode's hold law's, not the controller's."""
from flexarm_bringup.runner import _print_summary


def _summary(**over):
    s = {'arm': 'deluca_two_link', 'controller': 'tip_tracking', 'shaping': 'none', 'move_deg': 60.0,
         'move_time_s': 2.5, 'duration_s': 8.0, 'time_mode': 'realtime', 'achieved_rate_hz': 1000.0, 'rate_hz': 1000.0,
         'overruns': 0.0, 'skipped_periods': 0.0, 'tip_rms_error_m': 0.0787, 'tip_max_error_m': 0.194,
         'end_of_move_tip_error_m': 0.136, 'residual_vibration_m': 0.137, 'command_end_s': 2.5,
         'settling_time_1mm_s': 7.8, 'max_deflection_over_length': [0.155, 0.019], 'model_valid': False,
         'validity_limit': 0.15, 'joint_rms_error_rad': [0.066, 0.034], 'peak_torque_nm': [0.81, 0.35],
         'controller_states_skipped': 651.0, 'controller_safe_mode_entries': 3.0, 'controller_safe_mode_time_s': 12.9,
         'controller_safe_mode_reason': '3 state periods skipped'}
    s.update(over)
    return s


def test_the_summary_names_the_time_on_the_hold_law(capsys):
    _print_summary(_summary())
    line = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith('safe mode')]
    assert line == ['  safe mode             3 entries, 12.9 s on the hold law, not tip_tracking\'s (last: 3 state '
                    'periods skipped); 651 states skipped'], line
    _print_summary(_summary(controller_safe_mode_entries=0.0, controller_safe_mode_time_s=0.0))
    assert 'safe mode' not in capsys.readouterr().out
