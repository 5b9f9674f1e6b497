"""`flexarm modes` prints link and whole-arm frequencies: as a user runs it (a subprocess) and in-process (the
convergence flags, unstable directions and equilibrium report against known figures)."""
import json
import os
import subprocess
import sys

import pytest
from flexarm_sim.arms import shipped_arms_dir

ARMS = shipped_arms_dir()


def _flexarm(*args):
    return subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', *args], capture_output=True, text=True,
                          timeout=300)


def test_modes_json_for_the_deluca_arm(tmp_path):
    png = tmp_path / 'modes.png'
    r = _flexarm('modes', os.path.join(ARMS, 'deluca_two_link.yaml'), '--json', '--plot', str(png))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    freqs = [m['frequency_hz'] for link in rep['links'] for m in link['modes']]
    assert [round(f, 2) for f in freqs] == [0.48, 1.80, 2.18, 15.91]
    assert rep['rigid_body_modes'] == 2
    assert len(rep['whole_arm_free_joints_hz']) == 4
    assert png.stat().st_size > 1000


def test_modes_text_and_bad_file():
    r = _flexarm('modes', os.path.join(ARMS, 'spatial_3r.yaml'))
    assert r.returncode == 0, r.stderr
    assert 'whole arm, joints free' in r.stdout and 'out_of_plane' in r.stdout
    r = _flexarm('modes', '/nonexistent/arm.yaml')
    assert r.returncode == 2 and 'No such file' in r.stderr


def test_modes_with_sensors_reports_what_they_observe():
    """--sensors: the horizontal De Luca arm's tip accelerometer alone cannot see the rigid-body modes (rotations about
    gravity); with the encoders every mode is observed. A bad sensor item is named (exit 2)."""
    arm = os.path.join(ARMS, 'deluca_two_link.yaml')
    r = _flexarm('modes', arm, '--json', '--sensors', 'accel')
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)['observability']
    assert (o['rank'], o['states']) == (8, 12)
    assert [m['observable'] for m in o['modes']] == [False, False, True, True, True, True]
    r = _flexarm('modes', arm, '--sensors', 'encoders,strain:shoulder@0.025,strain:elbow@0.025')
    assert r.returncode == 0, r.stderr
    assert 'rank 12 of 12 states' in r.stdout and 'NOT observable' not in r.stdout
    r = _flexarm('modes', arm, '--sensors', 'encoders,strain:wrist@0.1')
    assert r.returncode == 2 and "no link 'wrist'" in r.stderr

# ------------------------------------------------------------------------------------------ in-process
def _modes_in_process(capsys, *args):
    from flexarm_bringup import cli
    parsed = cli.build_parser().parse_args(['modes', *args])
    rc = parsed.func(parsed)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _line(text, needle):
    lines = [ln for ln in text.splitlines() if needle in ln]
    assert len(lines) == 1, (needle, text)
    return lines[0]


def test_deluca_fourth_whole_arm_frequency_is_flagged_unconverged(capsys):
    """2 modes per link: the 4th free-joint frequency 29.29 Hz drops to 22.1 Hz with 3 (+32 %, the whole-arm FE
    of test_whole_arm_fe gives 22.13 Hz); the first three change by < 0.02 %."""
    path = os.path.join(ARMS, 'deluca_two_link.yaml')
    rc, out, _ = _modes_in_process(capsys, path)
    assert rc == 0
    assert 'pose: an equilibrium' in out and 'UNSTABLE' not in out
    assert '+2 rigid-body directions' in out
    fourth = _line(out, '29.2922 Hz')
    assert 'UNCONVERGED' in fourth and '+32.2' in fourth
    for f in ('1.4199 Hz', '2.6474 Hz', '16.1187 Hz', '0.4381 Hz'):
        assert 'UNCONVERGED' not in _line(out, f)
    assert 'flagged UNCONVERGED: 1 value' in out and 'in_plane 2' in out and 'in_plane 3' in out

    rc, out, _ = _modes_in_process(capsys, path, '--json')
    rep = json.loads(out)
    free = rep['whole_arm_free_joints']
    assert [e['converged'] for e in free['elastic']] == [True, True, True, False]
    assert free['elastic'][3]['relative_change'] == pytest.approx(0.322, abs=0.003)
    assert free['elastic'][3]['refined'] == pytest.approx(22.13, abs=0.05)
    assert rep['whole_arm_free_joints_hz'] == [e['frequency_hz'] for e in free['elastic']]
    assert rep['equilibrium'] is True and rep['unstable_rates_per_s'] == []
    assert rep['convergence']['checked'] and rep['convergence']['unconverged'] == 1
    # a looser threshold accepts it
    rc, out, _ = _modes_in_process(capsys, path, '--json', '--tolerance', '40')
    assert json.loads(out)['convergence']['unconverged'] == 0


def test_rigid_puma3_prints_the_unstable_direction_and_the_holding_torque(capsys):
    path = os.path.join(ARMS, 'rigid_puma3.yaml')
    rc, out, _ = _modes_in_process(capsys, path)
    assert rc == 0
    pose = _line(out, 'pose:')
    assert 'NOT an equilibrium' in pose and '70.36' in pose
    assert 'diverges' in _line(out, 'UNSTABLE direction') and '0.6409 1/s' in out
    assert '0.0000 Hz' not in out and '+1 rigid-body direction' in out
    assert 'convergence not checked: no flexible link' in out
    rc, out, _ = _modes_in_process(capsys, path, '--json')
    rep = json.loads(out)
    assert rep['equilibrium'] is False and rep['holding_torque_Nm'][1] == pytest.approx(70.36, abs=0.01)
    assert len(rep['unstable_rates_per_s']) == 1 and rep['rigid_body_modes'] == 1
    assert rep['whole_arm_free_joints_hz'] == [pytest.approx(0.2441, abs=1e-4)]


def test_sagging_spatial_arm_says_so(capsys):
    rc, out, _ = _modes_in_process(capsys, os.path.join(ARMS, 'spatial_3r.yaml'))
    assert rc == 0
    pose = _line(out, 'pose:')
    assert 'NOT an equilibrium' in pose and 'links sag' in pose and 'elbow_link' in pose


def test_bad_tolerance_is_refused_naming_the_option(capsys):
    from flexarm_bringup import cli
    for bad in ('0', '-1', 'nan', 'abc', '100'):
        with pytest.raises(SystemExit) as e:
            cli.build_parser().parse_args(['modes', os.path.join(ARMS, 'deluca_two_link.yaml'), '--tolerance', bad])
        assert e.value.code == 2
        assert '--tolerance' in capsys.readouterr().err
