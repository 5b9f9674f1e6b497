"""`flexarm run`'s text summary says when the figures are (partly) the safe mode's hold law's, not the controller's."""
import pytest

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
    _print_summary(_summary(controller_safe_mode_yields=2.0))
    line = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith('safe mode')]
    assert line[0].endswith("651 states skipped, 2 yields to the drives' hold"), line
    _print_summary(_summary(controller_safe_mode_entries=0.0, controller_safe_mode_time_s=0.0))
    assert 'safe mode' not in capsys.readouterr().out


def test_a_real_time_run_is_judged_at_the_end_of_its_move():
    """In real time plant time is seconds since the epoch: the controller's `command_end_s`, read back from its
    /diagnostics string, must keep its sub-second digits (at 6 significant digits it read 2400 s late, the move
    counted as ending after the run, and an arm ending 0.5 rad short of its target passed as not lost)."""
    import numpy as np
    from flexarm_bringup.runner import LOST_JOINT_ERROR_RAD, summarize
    from flexarm_sim.arms import load_arm_model
    from flexarm_sim.ros.messages import diagnostics
    model = load_arm_model('deluca_two_link')[0]
    t_move, move_time, duration, angle = 1796187621.4549735, 2.5, 4.0, np.radians([60.0, 60.0])
    t = t_move + np.arange(-0.2, duration, 0.002)
    n = t.size
    q = np.zeros((n, 2))
    q[:, :] = np.clip((t - t_move) / move_time, 0.0, 1.0)[:, None] * (angle - 0.5)       # ends 0.5 rad short
    arrays = {'t': t, 'q': q, 'tau': np.zeros((n, 2)), 'rigid': np.zeros((n, 3)), 'tip': np.zeros((n, 3)),
              'modal': np.zeros((n, model.mode_index.size))}
    msg = diagnostics('flexarm_control/modal', 'x', 'ok', 'running', {'command_end_s': t_move + move_time}, 0)
    diag = {kv.key: kv.value for kv in msg.status[0].values}
    assert abs(float(diag['command_end_s']) - (t_move + move_time)) < 1e-6
    out, _ = summarize(arrays, np.zeros(2), angle, move_time, t_move, duration, {}, 'modal', diag, model=model)
    assert abs(out['command_end_s'] - move_time) < 1e-6
    assert 0.5 > LOST_JOINT_ERROR_RAD and 'ended 0.5 rad from its target' in out['lost'], out['lost']
    assert out['held_short'] == ''


def test_an_arm_the_safe_mode_holds_short_of_its_target_is_not_lost():
    """Issue 28 item 3 (degrade to the safe mode, never to a lost arm): under starvation (the plant at 885 Hz, states
    32 ms old) the hold law was on for a whole 30 deg move and, 1.5 s after it, still bringing the arm back 0.203 rad
    short - `flexarm run` called it lost (exit 3). An end short of the target with the safe mode on is held short
    (exit 5), saying by what; the same end on the normal law, or a joint that strayed beyond the peak bound on the
    hold law, is lost."""
    import numpy as np
    from flexarm_bringup.runner import LOST_PEAK_JOINT_ERROR_RAD, _verdict
    n = 100
    q_ref = np.zeros((n, 2))
    q = np.zeros((n, 2))
    q[-1] = [0.203, 0.01]
    hold = {'safe_mode': 'on', 'safe_mode_not_commanding': 'False', 'safe_mode_reason': 'state 11.1 ms old'}
    assert _verdict(q - q_ref, q, q_ref, 1.5, {'safe_mode': 'off'}) == ('joint 0 ended 0.203 rad from its target', '')
    assert _verdict(q - q_ref, q, q_ref, 1.5) == ('joint 0 ended 0.203 rad from its target', '')
    assert _verdict(q - q_ref, q, q_ref, 1.5, hold) == (
        '', "joint 0 ended 0.203 rad from its target, held by the safe mode's hold law: state 11.1 ms old")
    lost, short = _verdict(q - q_ref, q, q_ref, 1.5, dict(hold, safe_mode_not_commanding='True'))
    assert lost == '' and "held by the drives' hold (the safe mode yielded)" in short
    assert _verdict(q - q_ref, q, q_ref, 0.2, hold) == ('', '')          # stopped mid-move: the peak rule only
    q[50, 1] = LOST_PEAK_JOINT_ERROR_RAD + 0.1                            # a runaway is lost on any law
    lost, short = _verdict(q - q_ref, q, q_ref, 1.5, hold)
    assert lost == 'joint 1 strayed 1.1 rad from its reference' and short.startswith('joint 0 ended 0.203')


def test_safe_mode_entries_before_the_move_are_reported_apart(capsys):
    """Issue 28: a controller that entered its safe mode at start-up (the loop's first moments) and left it before the
    move: the move's figures are its own law's, so the summary counts the entries from the move's start (the
    controller's diagnostic at the end less the one at the start) and names the start-up's apart."""
    from flexarm_bringup.runner import safe_mode_figures
    start = {'safe_mode': 'off', 'safe_mode_entries': '1', 'safe_mode_time_s': '1.02',
             'safe_mode_reason': '1 state periods skipped (state 6.1 ms old: 8.1 ms, limit 8.0 ms)'}
    end = dict(start)                         # nothing more happened during the move
    f = safe_mode_figures(end, start)
    assert f['controller_safe_mode_entries'] == 0.0 and f['controller_safe_mode_time_s'] == 0.0
    assert f['controller_safe_mode_reason'] == '' and f['controller_safe_mode_entries_at_start'] == 1.0
    assert f['controller_safe_mode_reason_at_start'].startswith('1 state periods skipped')
    _print_summary(_summary(**f))
    out = [x.strip() for x in capsys.readouterr().out.splitlines() if 'safe mode' in x]
    assert out == ['safe mode at start-up 1 entries before the move (last: 1 state periods skipped (state 6.1 ms '
                   'old: 8.1 ms, limit 8.0 ms))'], out
    # one more entry during the move: counted for the move, with its reason; no start-up entry: nothing said of it
    g = safe_mode_figures(dict(end, safe_mode_entries='2', safe_mode_time_s='3.5', safe_mode_reason='state 9 ms old'),
                          start)
    assert g['controller_safe_mode_entries'] == 1.0 and g['controller_safe_mode_time_s'] == pytest.approx(2.48)
    assert g['controller_safe_mode_reason'] == 'state 9 ms old'
    h = safe_mode_figures(end, {})
    assert h['controller_safe_mode_entries'] == 1.0 and h['controller_safe_mode_entries_at_start'] == 0.0
    assert h['controller_safe_mode_reason_at_start'] == ''
    # the wait gave up: the move started on the hold law - that entry is the move's, with its reason
    on = dict(start, safe_mode='on', safe_mode_entries='2', safe_mode_reason='state 264 ms old')
    k = safe_mode_figures(dict(on, safe_mode_time_s='4.0'), on)
    assert (k['controller_safe_mode_entries'], k['controller_safe_mode_entries_at_start']) == (1.0, 1.0)
    assert k['controller_safe_mode_reason'] == 'state 264 ms old'
    assert k['controller_safe_mode_time_s'] == pytest.approx(2.98)


def test_a_real_time_move_waits_for_the_controllers_gain_cells(monkeypatch):
    """Issue 28 item 3: with an empty design cache the modal law's and the hold law's cells of the move were designed
    during it, beside it (the strain estimate beside one CPU hog: 3 of 3 runs entered the safe mode, one 315 mm tip
    RMS; after this, 2 of 2 clean at 14.1 mm). `flexarm run` sends the move's reference DESIGN_AHEAD_S ahead first and
    waits until the controller has accepted it and says no cell is pending; a refusal fails the run; a controller
    that never finishes designing delays the move by at most DESIGN_AHEAD_S / 2."""
    import threading
    import time as _time
    from flexarm_bringup import runner as rn

    class FakeRunner:
        def __init__(self, diags):
            self.lock = threading.Lock()
            self.diags, self.published, self.controller_diag = list(diags), [], {}
            self.design_wait_s = 0.0

        def references_accepted(self):
            return int(float(self.controller_diag.get('references_accepted', 0)))

        def reference_refused(self):
            return self.controller_diag.get('refused', '')

        def publish_reference(self, t_start, *traj):
            self.published.append(t_start)

    class Procs:
        def exited(self):
            return []

    class Progress:
        lines = []

        def line(self, msg):
            self.lines.append(msg)

    args = type('A', (), {'controller': 'modal'})()

    def drive(fake, limit=None):
        done = {}

        def feed():
            for d in fake.diags:                 # the controller's diagnostics as they come
                with fake.lock:
                    fake.controller_diag = d
                _time.sleep(0.05)
        t = threading.Thread(target=feed)
        t.start()
        done['err'] = rn._design_the_move_ahead(args, fake, Procs(), Progress(), 100.0, [0.0], [[0.0]], [[0.0]],
                                                [[0.0]])
        t.join()
        return done['err']

    fake = FakeRunner([{'references_accepted': '3', 'gain_cells_pending': '0'},      # before: not the preview's
                       {'references_accepted': '4', 'gain_cells_pending': '27'},
                       {'references_accepted': '4', 'gain_cells_pending': '5'},
                       {'references_accepted': '4', 'gain_cells_pending': '0'}])
    fake.controller_diag = fake.diags[0]
    assert drive(fake) is None and fake.published == [100.0 + rn.DESIGN_AHEAD_S]
    assert fake.controller_diag['gain_cells_pending'] == '0' and fake.design_wait_s >= 0.1
    refused = FakeRunner([{'references_accepted': '3', 'gain_cells_pending': '0', 'refused': 'beyond the limits'}])
    refused.controller_diag = {'references_accepted': '3', 'gain_cells_pending': '0'}
    assert drive(refused) == 1
    stuck = FakeRunner([{'references_accepted': '4', 'gain_cells_pending': '9'}])
    stuck.controller_diag = {'references_accepted': '3', 'gain_cells_pending': '0'}
    monkeypatch.setattr(rn, 'DESIGN_AHEAD_S', 0.4)
    t0 = _time.monotonic()
    assert drive(stuck) is None and _time.monotonic() - t0 < 1.5
    assert any('still being designed' in x for x in Progress.lines)
