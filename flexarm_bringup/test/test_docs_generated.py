"""The shipped parameter files and the README's tables are generated from the code that owns them
(flexarm_bringup.docs): a stale one fails here with the command that regenerates it."""
from flexarm_bringup import docs


def test_generated_documentation_is_current():
    assert docs.stale() == [], 'regenerate with: python -m flexarm_bringup.docs --write'


def test_hardware_bridge_example_lists_every_parameter_and_loads():
    """The hand-written example file: every parameter of the bridge's tables (per joint too), nothing else, valid."""
    import os

    import yaml

    from flexarm_control.bridge import config
    from flexarm_sim.common.params import flatten
    path = os.path.join(docs.CONFIG, 'hardware_bridge.yaml')
    values = flatten(yaml.safe_load(open(path))['hardware_bridge']['ros__parameters'])
    table = config.table_for(values['joint_names'])
    assert set(values) == set(table), set(values) ^ set(table)
    assert config.load_yaml(path).names == values['joint_names']
