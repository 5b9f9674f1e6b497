"""The README's ROS-workspace route, as a ROS user takes it: the package built by colcon in a fresh workspace (no
symlinks: a plain install), then a new shell that sources the workspace's install/setup.bash — and `flexarm` is on
PATH there (it was not: the console script sits in lib/flexarm_bringup/, where `ros2 run` looks, and only env.sh
added that to PATH). The workspace here overlays this clone's install (flexarm_msgs, flexarm_sim, flexarm_control:
building the messages again would take minutes) and holds a fresh copy of flexarm_bringup."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


def _bash(script, env):
    return subprocess.run(['bash', '-c', script], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_flexarm_is_on_path_after_sourcing_a_fresh_workspace(tmp_path):
    ws = tmp_path / 'ws'
    shutil.copytree(os.path.join(ROOT, 'flexarm_bringup'), ws / 'src' / 'flexarm_bringup',
                    ignore=shutil.ignore_patterns('__pycache__', '*.egg-info', 'test'))
    env = dict(os.environ)
    r = _bash(f'cd {ws} && colcon build --event-handlers console_cohesion- status- '
              '--cmake-args -DBUILD_TESTING=OFF', env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # a new shell: only the Python environment and the underlay, nothing of env.sh's PATH, then the workspace
    clean = {k: v for k, v in os.environ.items() if k in ('HOME', 'LANG', 'TERM', 'USER', 'TMPDIR')}
    clean['PATH'] = '/usr/local/bin:/usr/bin:/bin'
    venv = os.path.join(ROOT, '.venv')
    r = _bash(f'. {venv}/bin/activate && export ROS_DOMAIN_ID=99 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST && '
              f'. {ROOT}/install/setup.bash && export AMENT_PREFIX_PATH="$AMENT_PREFIX_PATH:$VIRTUAL_ENV" && '
              f'. {ws}/install/setup.bash && command -v flexarm && flexarm --help && '
              'flexarm urdf deluca_two_link -K 0 | head -c 200', clean)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == str(ws / 'install' / 'flexarm_bringup' / 'bin' / 'flexarm')
    assert 'run' in r.stdout and '<robot' in r.stdout
    # `ros2 run flexarm_bringup flexarm` finds the same command where ROS installs console scripts
    assert os.access(ws / 'install' / 'flexarm_bringup' / 'lib' / 'flexarm_bringup' / 'flexarm', os.X_OK)
