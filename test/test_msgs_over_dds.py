"""System test: two separate processes exchange flexarm_msgs/FlexState over real DDS."""
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.ros


def test_flexstate_crosses_process_boundary(spawn):
    n = 20
    listener = spawn([os.path.join(HERE, 'nodes', 'flexstate_listener.py'), str(n)])
    talker = spawn([os.path.join(HERE, 'nodes', 'flexstate_talker.py'), str(n)])
    out, err = listener.communicate(timeout=90)
    t_out, t_err = talker.communicate(timeout=60)
    assert listener.returncode == 0, err
    assert talker.returncode == 0, t_err
    assert 'matched' in t_out
    lines = out.strip().splitlines()
    assert len(lines) == n
    for i, line in enumerate(lines):
        f = line.split()
        assert int(f[0]) == i                           # in order, none lost (reliable, depth 10)
        assert f[1] == 'shoulder,elbow'
        assert float(f[2]) == pytest.approx(0.1 * i)
        assert float(f[3]) == pytest.approx(-0.2 * i)
        assert f[4] == 'shoulder_link'
        assert float(f[5]) == pytest.approx(1e-3 * i)
        assert float(f[6]) == pytest.approx(-2e-3 * i)
        assert float(f[7]) == pytest.approx(0.01 * i)
        assert float(f[8]) == pytest.approx(float(i))
