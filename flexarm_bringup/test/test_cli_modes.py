"""`flexarm modes` prints link and whole-arm frequencies (as a user runs it, in a subprocess)."""
import json
import os
import subprocess
import sys

ARMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'config', 'arms')


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
