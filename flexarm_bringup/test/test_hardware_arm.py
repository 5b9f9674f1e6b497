"""hardware.launch.py (bringup.hardware_nodes): the controller's arm and the bridge's `arm` must be the same arm
description - the bridge confirms ~/enable with its arm_id and tags its /flexarm/state with it - else the bring-up
is refused before anything starts, naming the bridge's `arm`."""
import os

import pytest
import yaml

from flexarm_bringup import bringup
from flexarm_sim.arms import resolve_arm

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'config')
SHIPPED = os.path.join(CONFIG, 'hardware_bridge.yaml')
DELUCA = resolve_arm('deluca_two_link')


def bridge_file(tmp_path, arm):
    doc = yaml.safe_load(open(SHIPPED))
    doc['hardware_bridge']['ros__parameters']['arm'] = arm
    path = tmp_path / 'my_bridge.yaml'
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_same_arm_by_name_path_or_copy(tmp_path):
    assert [n.name for n in bringup.hardware_nodes('deluca_two_link')] == ['hardware_bridge', 'pd_servo']
    copy = tmp_path / 'lab_arm.yaml'                    # the same description under another file name
    copy.write_text(open(DELUCA).read())
    for bridge_arm in (DELUCA, str(copy)):
        nodes = bringup.hardware_nodes('deluca_two_link', params_file=bridge_file(tmp_path, bridge_arm))
        assert nodes[0].name == 'hardware_bridge'


def test_another_arm_with_the_same_joints_is_refused(tmp_path):
    other = yaml.safe_load(open(DELUCA))
    other['joints'][1]['link']['EI_z'] = 2.0           # same joint names, another arm
    path = tmp_path / 'stiffer.yaml'
    path.write_text(yaml.safe_dump(other))
    with pytest.raises(ValueError, match='`arm`'):
        bringup.hardware_nodes('deluca_two_link', params_file=bridge_file(tmp_path, str(path)))
    assert bringup.hardware_nodes(str(path), params_file=bridge_file(tmp_path, str(path)))
