"""Calibration through the user's path (issue 26): `flexarm excite` runs the experiment on the simulated plant (real
nodes over DDS, lock-step) whose arm has parameters the fit does not know (--plant-arm), a strain gauge near each
link's root and a tip accelerometer (--sensors strain_accel), recording an MCAP; `flexarm identify` reads that file
and calibrates the arm file, with the gauges and the accelerometer and without them. Bad recordings and arguments get
clear errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from flexarm_sim.arms import shipped_arms_dir

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ARMS = shipped_arms_dir()


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
             '--sensors', 'strain_accel', '--record', str(rec), '--quiet', '--json')
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
    accel = ['accel.x', 'accel.y', 'accel.z']
    assert list(rep['nrmse'][rec]) == ['shoulder', 'elbow'] + gauges + accel     # the gauges and the accelerometer
    assert all(rep['nrmse'][rec][k] < 0.05 for k in ('shoulder', 'elbow', gauges[0]))
    assert rep['nrmse'][rec]['accel.x'] < 0.5 and rep['nrmse'][rec]['accel.y'] < 0.5, rep['nrmse'][rec]
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


def _bridge_recording(path, rec, applied_at, stamps_s, design, extra_writes=()):
    """An MCAP as `flexarm excite --hardware` records it, written from an in-process run with a real-time loop's
    timing: the bridge's readings (/joint_states, /flexarm/state), the controller's stamped commands and the
    bridge's writes (/flexarm/applied_effort: when, what, which readings), and a write of its own before the first
    (zeros while it waits for commands)."""
    from mcap.well_known import MessageEncoding, SchemaEncoding
    from mcap.writer import Writer
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from flexarm_bringup.recorder import message_definition
    from flexarm_msgs.msg import AppliedEffort, FlexState, JointEffortCommand
    from flexarm_sim.ros.messages import stamp

    t0 = 1_800_000_000_000_000_000
    ns = [t0 + int(round(s * 1e9)) for s in stamps_s]
    out = []
    names = list(rec.joint_names)
    for k, t in enumerate(ns):
        js = JointState(name=names, position=list(rec.position[k]), velocity=list(rec.velocity[k]))
        js.header.stamp = stamp(t)
        st = FlexState(joint_names=names, position=list(rec.law_position[k]), velocity=list(rec.law_velocity[k]))
        st.header.stamp = stamp(t)
        cmd = JointEffortCommand(step=k + 1, effort=list(rec.torque[k]))
        cmd.header.stamp = stamp(t)
        out += [('/joint_states', js, t), ('/flexarm/state', st, t), ('/flexarm/effort_command', cmd, t + 1000)]
        if not np.isnan(applied_at[k]):
            w = t0 + int(round(applied_at[k] * 1e9))
            for again in (0, 4_000_000):             # the next cycle writes the latest command again
                a = AppliedEffort(effort=list(rec.torque[k]))
                a.header.stamp, a.command_stamp = stamp(w + again), stamp(t)
                out.append(('/flexarm/applied_effort', a, w + again))
    a = AppliedEffort(effort=[0.0] * len(names))
    a.header.stamp = stamp(t0 - 2_000_000)
    out.append(('/flexarm/applied_effort', a, t0 - 2_000_000))
    for t_w, effort in extra_writes:
        a = AppliedEffort(effort=list(effort))
        a.header.stamp = stamp(t0 + int(t_w * 1e9))
        out.append(('/flexarm/applied_effort', a, t0 + int(t_w * 1e9)))
    out.sort(key=lambda x: x[2])
    with open(path, 'wb') as f:
        w = Writer(f)
        w.start(profile='ros2', library='test')
        channels = {}
        for topic, msg, t in out:
            if topic not in channels:
                name = f'{type(msg).__module__.split(".")[0]}/msg/{type(msg).__name__}'
                sid = w.register_schema(name=name, encoding=SchemaEncoding.ROS2,
                                        data=message_definition(type(msg)).encode())
                channels[topic] = w.register_channel(topic=topic, message_encoding=MessageEncoding.CDR,
                                                     schema_id=sid)
            w.add_message(channels[topic], log_time=t, publish_time=t, data=serialize_message(msg))
        w.add_metadata('flexarm_run', {'arm': 'deluca_two_link', 'plant': 'hardware_bridge', 'time_mode': 'realtime',
                                       'rate_hz': '0.0', 'control_rate_hz': '250.0'})
        w.add_metadata('flexarm_experiment', {'design': json.dumps(design)})
        w.finish()


def test_a_bridge_recording_is_read_with_its_timing(tmp_path):
    """The reader of a hardware recording: each command from when the bridge wrote it (its first write; the cycle's
    rewrites ignored), the readings when they were taken; the true arm's replay explains it (the quantization
    alone), the arm file's does not. A write of the bridge's own amid the law's is refused, naming it."""
    from flexarm_bringup.identify_cmd import RecordingError, read_record
    from flexarm_control.identification import design_excitation, predict, run_offline
    from flexarm_sim.arms import resolve_arm
    from flexarm_sim.model import load_model
    from flexarm_sim.model.spec import arm_from_dict
    from flexarm_sim.sensors import DEFAULTS

    nominal = load_model(resolve_arm('deluca_two_link'))
    with open(os.path.join(ARMS, 'deluca_two_link.yaml')) as f:
        d = yaml.safe_load(f)
    d['joints'][0]['link']['EI_z'] *= 0.85
    d['payload']['mass'] *= 1.2
    true = load_model(arm_from_dict(d))
    dt = 4e-3
    exc, kp, kv, _ = design_excitation(nominal, duration=4.0, dt=dt)
    K = int(round(exc.duration / dt)) + 1
    rng = np.random.default_rng(7)
    lat = dt * rng.uniform(0.2, 0.9, K)
    lat[rng.random(K) < 0.1] += dt
    rec = run_offline(true, exc, kp, kv, dt, law_model=nominal, law_reads='readings',
                      velocity_resolution=DEFAULTS['encoders.velocity_resolution'], latency=lat)
    design = {'arm': 'deluca_two_link', 'kp': list(kp), 'kv': list(kv), 'control_rate_hz': 250.0}
    path = tmp_path / 'bridge.mcap'
    _bridge_recording(path, rec, rec.applied_at, np.arange(K) * dt, design)
    got = read_record(str(path), nominal.spec)
    assert got.sample_times is not None and np.allclose(got.sample_times, np.arange(K) * dt, atol=1e-9)
    diff = np.flatnonzero(~np.isclose(got.applied_at, rec.applied_at, atol=2e-9, equal_nan=True))
    assert not diff.size, (diff[:5], got.applied_at[diff[:5]], rec.applied_at[diff[:5]])
    assert np.array_equal(got.torque, rec.torque) and np.array_equal(got.position, rec.position)
    assert got.dt == pytest.approx(dt)
    _, err_true = predict(true.spec, got)
    _, err_nominal = predict(nominal.spec, got)
    assert np.all(err_true < 0.05) and np.any(err_nominal > 3 * err_true), (err_true, err_nominal)   # 2.6, 1.8 % vs 8.7, 29 %
    # the bridge cut the law's torque (its soft limits) in the middle of the experiment: refused, saying why
    bad = tmp_path / 'cut.mcap'
    _bridge_recording(bad, rec, rec.applied_at, np.arange(K) * dt, design, extra_writes=[(2.0011, [0.0, 0.0])])
    with pytest.raises(RecordingError, match='the bridge wrote a torque of its own'):
        read_record(str(bad), nominal.spec)
    # a hardware recording without the bridge's writes
    none = tmp_path / 'none.mcap'
    _bridge_recording(none, rec, np.full(K, np.nan), np.arange(K) * dt, design)
    with pytest.raises(RecordingError, match='no write of a stamped command'):
        read_record(str(none), nominal.spec)

