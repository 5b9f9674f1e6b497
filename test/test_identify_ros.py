"""Calibration through the user's path (issue 26): `flexarm excite` runs the experiment on the simulated plant (real
nodes over DDS, lock-step) whose arm has parameters the fit does not know (--plant-arm) and a strain gauge near each
link's root (--sensors strain), recording an MCAP; `flexarm identify` reads that file and calibrates the arm file,
with the gauges and without them. Bad recordings and arguments get clear errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ARMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'flexarm_bringup', 'config', 'arms')


def _cli(env, *args, timeout=300):
    return subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope='module')
def hidden_arm(tmp_path_factory):
    """The De Luca arm with E I -12 % (link 1) and -8 % (link 2), payload +15 %, damping 0.02: the truth."""
    with open(os.path.join(ARMS, 'deluca_two_link.yaml')) as f:
        d = yaml.safe_load(f)
    d['joints'][0]['link']['EI_z'] *= 0.88
    d['joints'][1]['link']['EI_z'] *= 0.92
    for j in d['joints']:
        j['link']['damping_ratio'] = 0.02
    d['payload']['mass'] *= 1.15
    path = tmp_path_factory.mktemp('arms') / 'deluca_hidden.yaml'
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(path), d


@pytest.fixture(scope='module')
def recording(hidden_arm, tmp_path_factory):
    from conftest import fresh_domain_id
    env = dict(os.environ, ROS_DOMAIN_ID=str(fresh_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               PYTHONUNBUFFERED='1')
    rec = tmp_path_factory.mktemp('rec') / 'exc.mcap'
    r = _cli(env, 'excite', '--arm', 'deluca_two_link', '--plant-arm', hidden_arm[0], '--duration', '20',
             '--sensors', 'strain', '--record', str(rec), '--quiet', '--json')
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    design, run = json.loads(lines[0])['design'], json.loads(lines[-1])['run']
    assert run['complete'] and not run['lost'] and not run['validity_left'] and run['messages'] > 0
    assert all(p <= 0.6 * 2.0 for p in run['peak_torque_nm'])        # the design's bound on the hidden arm too
    return str(rec), design, env


def test_excite_then_identify_recovers_the_hidden_arm(recording, hidden_arm, tmp_path):
    rec, design, env = recording
    assert design['law'] == 'pd_servo' and len(design['excitation']['frequencies']) == 24
    out = tmp_path / 'calibrated.yaml'
    r = _cli(env, 'identify', rec, '--arm', 'deluca_two_link', '--fit', '*.EI_z,payload.mass,*.damping_ratio',
             '-o', str(out), '--json')
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    truth = hidden_arm[1]
    p = rep['parameters']
    assert abs(p['shoulder.EI_z']['estimate'] / truth['joints'][0]['link']['EI_z'] - 1) < 0.02
    assert abs(p['elbow.EI_z']['estimate'] / truth['joints'][1]['link']['EI_z'] - 1) < 0.02
    assert abs(p['payload.mass']['estimate'] / truth['payload']['mass'] - 1) < 0.03
    for j in ('shoulder', 'elbow'):
        assert abs(p[f'{j}.damping_ratio']['estimate'] - 0.02) < max(0.2 * 0.02, 0.002)
    assert all(v['identifiable'] and v['std_error'] > 0 for v in p.values())
    assert rep['converged'] and not rep['misfit']
    gauges = ['shoulder@0.025:in_plane:c=0.001', 'elbow@0.025:in_plane:c=0.001']
    assert list(rep['nrmse'][rec]) == ['shoulder', 'elbow'] + gauges        # the gauges were fitted too
    assert all(rep['nrmse'][rec][k] < 0.05 for k in ('shoulder', 'elbow', gauges[0]))
    # the same recording, the joints alone: the elbow link's stiffness and damping are known far less well
    r = _cli(env, 'identify', rec, '--arm', 'deluca_two_link', '--fit', '*.EI_z,payload.mass,*.damping_ratio',
             '--joints-only', '--json')
    assert r.returncode == 0, r.stdout + r.stderr
    joints = json.loads(r.stdout.strip().splitlines()[-1])
    assert list(joints['nrmse'][rec]) == ['shoulder', 'elbow']
    for name in ('elbow.EI_z', 'elbow.damping_ratio'):
        assert joints['parameters'][name]['std_error'] > 3 * p[name]['std_error'], (name, joints['parameters'][name],
                                                                                   p[name])
    # the calibrated file is an arm file every node loads; it says where it came from
    from flexarm_sim.model import load_model
    from flexarm_sim.model.spec import load_arm
    spec = load_arm(str(out))
    assert spec.name == 'deluca_two_link' and '# Calibrated by `flexarm identify`' in out.read_text()
    model = load_model(spec)
    assert model.n_coords == 6
    # its frequencies are the hidden arm's
    from flexarm_sim.model import whole_arm_modes
    f_cal = whole_arm_modes(model, [0.0, 0.0]).elastic_frequencies_hz[:3]
    f_true = whole_arm_modes(load_model(hidden_arm[0]), [0.0, 0.0]).elastic_frequencies_hz[:3]
    assert np.all(np.abs(f_cal / f_true - 1) < 0.005), (f_cal, f_true)
    assert np.allclose(rep['frequencies_hz']['calibrated'], f_cal)


def _identify_here(capsys, *args):
    """`flexarm identify` in this process (the CLI's parser and function; no interpreter start per case)."""
    from flexarm_bringup.cli import build_parser
    parsed = build_parser().parse_args(['identify', *args])
    code = parsed.func(parsed)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_identify_refuses_what_it_cannot_use(recording, tmp_path, capsys):
    rec, _, env = recording
    not_mcap = tmp_path / 'text.mcap'
    not_mcap.write_text('not a recording')
    cases = [
        ([rec, '--arm', 'spatial_3r', '--fit', 'payload.mass'], "recorded with arm 'deluca_two_link'"),
        ([str(tmp_path / 'none.mcap'), '--arm', 'deluca_two_link', '--fit', 'payload.mass'], 'No such file'),
        ([rec, '--arm', 'deluca_two_link', '--fit', 'wrist.EI_z'], "no joint 'wrist'"),
        ([rec, '--arm', 'deluca_two_link', '--fit', 'payload.mass', '-o', rec], 'that is a recording'),
        ([str(not_mcap), '--arm', 'deluca_two_link', '--fit', 'payload.mass'], 'not a readable MCAP recording'),
        ([rec, '--arm', 'deluca_two_link', '--fit', 'payload.mass', '--kp', '1,x'], '--kp: expected numbers'),
    ]
    for args, message in cases:
        code, out, err = _identify_here(capsys, *args)
        assert code == 2 and message in err, (args, out, err)
    arm = os.path.join(ARMS, 'deluca_two_link.yaml')
    before = open(arm).read()
    # the user's command, as a process: a fit stopped early says so, exits 6 and writes nothing
    r = _cli(env, 'identify', rec, '--arm', 'deluca_two_link', '--fit', 'payload.mass', '--max-iter', '1')
    assert r.returncode == 6 and 'did not converge' in r.stdout + r.stderr and 'Traceback' not in r.stderr
    assert open(arm).read() == before                      # nothing is written without -o


def test_excite_refuses_an_unsafe_experiment(recording, tmp_path):
    _, _, env = recording
    r = _cli(env, 'excite', '--arm', 'deluca_two_link', '--amplitude', '40', '--record', str(tmp_path / 'x.mcap'))
    assert r.returncode == 2 and 'the experiment is refused' in r.stderr and 'Traceback' not in r.stderr
    assert not (tmp_path / 'x.mcap').exists()
