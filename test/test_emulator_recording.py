"""`dxl_emulator --arm ... --record FILE.npz`: the emulated arm's motion, recorded at every plant advance, is what the
arm model did under the servos' currents (checked against an integration of the model written here, with finer
steps), and the file is written at a SIGINT exit; --record without --arm, or into a folder that cannot be written,
is refused at start with a message naming --record."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_harness import ROOT, Watched  # noqa: E402

from flexarm_control.bridge import control_table as ct  # noqa: E402
from flexarm_control.bridge.config import load_yaml  # noqa: E402
from flexarm_control.emulation.servo_emulator import ServoEmulator  # noqa: E402
from flexarm_control.emulation.plants import ArmRecording, ModelPlant  # noqa: E402
from flexarm_sim.model import ArmState, load_model, step  # noqa: E402
from flexarm_sim.arms import resolve_arm  # noqa: E402

ARM = resolve_arm('deluca_two_link')
BRIDGE = os.path.join(ROOT, 'flexarm_bringup', 'config', 'hardware_bridge.yaml')
EMULATOR = [sys.executable, '-m', 'flexarm_control.emulation.servo_emulator']


def test_the_recording_is_the_arm_under_the_servo_currents(tmp_path):
    model = load_model(ARM)
    joints = list(load_yaml(BRIDGE).joints)
    plant = ModelPlant(model, joints)
    emu = ServoEmulator([j.servo_id for j in joints], plant=plant, start=False)
    try:
        rec = ArmRecording(plant)
        emu.on_plant_step = rec
        emu.step_plant()                      # a first row, at rest: the emulator's clock from here
        raw = (60, -40)                       # Goal Current, units of the model (XM430: 2.69 mA)
        for s, g in zip((emu.servos[j.servo_id] for j in joints), raw):
            s.set(ct.OPERATING_MODE, ct.MODE_CURRENT)
            s.set(ct.GOAL_CURRENT, g)
            s.set(ct.TORQUE_ENABLE, 1)
        t0 = rec.arrays()['t'][-1]
        times = t0 + np.cumsum(np.full(200, 0.0037))      # 0.74 s in requests 3.7 ms apart (not the plant's 1 ms)
        for t in times:
            emu.step_plant(t)
        path = str(tmp_path / 'arm.npz')
        rows = rec.save(path)
        data = np.load(path)
    finally:
        emu.close()
    assert rows == data['t'].size >= times.size
    assert np.all(np.diff(data['t']) >= 0.0) and data['t'][-1] == pytest.approx(times[-1])
    # the torque: direction x current x torque constant x gear, the servo's quantized current
    amps = np.array([ct.current_raw_to_amp(g, emu.model) for g in raw])
    tau = np.array([j.direction * j.torque_constant * j.gear_ratio for j in joints]) * amps
    np.testing.assert_allclose(data['tau'][-1], tau, rtol=1e-12)
    # the motion: the model integrated here from rest under that torque over the same time, 0.1 ms steps
    ref = ArmState.zeros(model)
    h = 1e-4
    n = int(round((times[-1] - t0) / h))
    for _ in range(n):
        step(model, ref, tau, h, 1)
    step(model, ref, tau, (times[-1] - t0) - n * h, 1)
    # (the emulator's RK4 at its 1 ms step is 1.2e-7 off this converged integration: the bound is its step's error)
    np.testing.assert_allclose(data['z'][-1], ref.z, atol=1e-6)
    assert np.max(np.abs(ref.z[model.q_index])) > 0.05          # the arm did move (a test that can fail)
    # what the file says about itself: the layout, the arm, the clock's offset to the wall clock (same process here)
    assert list(data['q_index']) == list(model.q_index) and list(data['mode_index']) == list(model.mode_index)
    assert str(data['arm']) == 'deluca_two_link'
    assert abs(float(data['wall_minus_monotonic']) - (time.time() - time.monotonic())) < 0.1
    assert not os.path.exists(path + '.part')


def test_the_recording_buffer_grows_and_keeps_every_row():
    model = load_model(ARM)
    plant = ModelPlant(model, list(load_yaml(BRIDGE).joints))
    rec = ArmRecording(plant, rows=3)
    for k in range(10):
        plant.state.z[0] = 0.1 * k
        rec(float(k))
    out = rec.arrays()
    assert out['t'].tolist() == [float(k) for k in range(10)]
    np.testing.assert_allclose(out['z'][:, 0], 0.1 * np.arange(10))


@pytest.mark.parametrize('case', ['no_arm', 'unwritable', 'folder'])
def test_a_recording_it_cannot_make_is_refused_at_start(case, tmp_path):
    if case == 'no_arm':
        args = ['--ids', '1', '--record', str(tmp_path / 'x.npz')]
    else:
        target = tmp_path if case == 'folder' else tmp_path / 'missing' / 'x.npz'
        args = ['--arm', ARM, '--params', BRIDGE, '--record', str(target)]
    r = subprocess.run(EMULATOR + args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert '--record' in r.stderr and 'Traceback' not in r.stderr
    assert {'no_arm': 'needs --arm', 'unwritable': 'cannot write', 'folder': 'is a folder'}[case] in r.stderr


@pytest.mark.parametrize('case', ['unknown_arm', 'other_joints', 'no_params_file', 'bad_yaml', 'not_a_mapping'])
def test_a_bad_arm_or_parameter_file_is_refused_naming_the_option(case, tmp_path):
    (tmp_path / 'bad.yaml').write_text('hardware_bridge: {ros__parameters: [\n')
    (tmp_path / 'list.yaml').write_text('- 1\n- 2\n')
    args = {'unknown_arm': ['--arm', 'no_such_arm', '--params', BRIDGE],
            'other_joints': ['--arm', 'slewing_beam', '--params', BRIDGE],        # 1 joint, the file drives 2
            'no_params_file': ['--arm', 'deluca_two_link', '--params', str(tmp_path / 'missing.yaml')],
            'bad_yaml': ['--arm', 'deluca_two_link', '--params', str(tmp_path / 'bad.yaml')],
            'not_a_mapping': ['--arm', 'deluca_two_link', '--params', str(tmp_path / 'list.yaml')]}[case]
    r = subprocess.run(EMULATOR + args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and 'Traceback' not in r.stderr, r.stderr
    assert {'unknown_arm': "--arm no_such_arm: invalid parameter '--arm': arm description 'no_such_arm' not found",
            'other_joints': '--arm slewing_beam: 2 servo joints for a 1-joint arm',
            'no_params_file': '--params ' + str(tmp_path / 'missing.yaml'),
            'bad_yaml': '--params ' + str(tmp_path / 'bad.yaml'),
            'not_a_mapping': '--params ' + str(tmp_path / 'list.yaml')}[case] in r.stderr, r.stderr


@pytest.mark.ros
def test_the_recording_is_written_at_a_sigint_exit(tmp_path, ros_env):
    import dynamixel_sdk as dxl
    path = tmp_path / 'arm.npz'
    link = str(tmp_path / 'ttyEMU')
    proc = Watched(['-m', 'flexarm_control.emulation.servo_emulator', '--arm', 'deluca_two_link', '--params', BRIDGE,
                    '--link', link, '--record', str(path)], env=ros_env)
    try:
        proc.wait_line(lambda s: s.startswith('serving ids'), 120.0)
        port = dxl.PortHandler(link)
        assert port.openPort()
        try:                                  # requests advance the plant: rows (a loaded machine may answer late)
            answered = sum(dxl.PacketHandler(2.0).ping(port, 1)[1] == dxl.COMM_SUCCESS for _ in range(20))
        finally:
            port.closePort()
        rc, _ = proc.signal_and_wait(signal.SIGINT)
    finally:
        proc.kill()
    err = proc.stderr_text()
    assert rc == 0 and 'Traceback' not in err, err
    assert f'to {path}' in err and answered >= 1
    data = np.load(path)
    assert data['t'].size >= answered and data['z'].shape == (data['t'].size, load_model(ARM).n_coords)
