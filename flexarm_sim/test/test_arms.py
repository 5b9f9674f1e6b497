"""The one arm resolver (flexarm_sim.arms) finds the shipped arms where a ROS user's workspace has them: in
flexarm_description's installed share, through the ament index, a dependency flexarm_sim's package.xml declares;
and in the source tree when there is no index (plain Python)."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from flexarm_sim import arms
from flexarm_sim.common.params import ConfigError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SOURCE_ARMS = os.path.join(ROOT, 'flexarm_description', 'arms')


def test_the_dependency_is_declared():
    deps = {e.text for e in ET.parse(os.path.join(ROOT, 'flexarm_sim', 'package.xml')).getroot()
            if e.tag in ('depend', 'exec_depend')}
    assert 'flexarm_description' in deps
    assert not os.path.exists(os.path.join(ROOT, 'flexarm_bringup', 'config', 'arms'))


def test_shipped_arms_resolve_through_the_ament_index():
    from ament_index_python.packages import get_package_share_directory
    share = os.path.join(get_package_share_directory('flexarm_description'), 'arms')
    assert arms.arm_dirs()[0] == share
    assert arms.shipped_arms() == sorted(f[:-5] for f in os.listdir(SOURCE_ARMS) if f.endswith('.yaml'))
    for name in arms.shipped_arms():
        path = arms.resolve_arm(name)
        assert os.path.dirname(path) == share
        with open(path, 'rb') as a, open(os.path.join(SOURCE_ARMS, name + '.yaml'), 'rb') as b:
            assert a.read() == b.read()


def test_without_an_ament_index_the_source_tree_serves():
    """A plain Python user (no workspace sourced): the source tree's arms, by name."""
    env = {k: v for k, v in os.environ.items() if k not in ('AMENT_PREFIX_PATH', 'COLCON_PREFIX_PATH')}
    env['PYTHONPATH'] = os.path.join(ROOT, 'flexarm_sim') + os.pathsep + env.get('PYTHONPATH', '')
    code = 'from flexarm_sim import arms; print(arms.__file__); print(arms.resolve_arm("spatial_3r"))'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    module, path = out.stdout.split()
    assert module == os.path.join(ROOT, 'flexarm_sim', 'flexarm_sim', 'arms.py')
    assert path == os.path.join(SOURCE_ARMS, 'spatial_3r.yaml')


def test_an_unknown_arm_names_the_parameter_and_the_shipped_ones():
    with pytest.raises(ConfigError, match=r"arm_file.*'no_such_arm' not found.*shipped arms: deluca_two_link"):
        arms.resolve_arm('no_such_arm', param='arm_file')
