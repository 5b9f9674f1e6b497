"""Plant parameters: the table validates and names the parameter; rules against the arm; plant.yaml is generated
from the table; run-time changes can only tighten the safety limits."""
import os

import pytest
import yaml

from flexarm_sim.common.params import DERIVED, ConfigError, flatten
from flexarm_sim.model import load_model
from flexarm_sim.plant import config
from flexarm_sim.plant.config import TABLE, check_against_arm, resolved
from flexarm_sim.arms import shipped_arms_dir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ARMS = shipped_arms_dir()


@pytest.fixture(scope='module')
def deluca():
    return load_model(os.path.join(ARMS, 'deluca_two_link.yaml'))


def test_shipped_plant_yaml_is_the_table_rendered():
    path = os.path.join(ROOT, 'flexarm_bringup', 'config', 'plant.yaml')
    with open(path) as f:
        text = f.read()
    assert text == config.render(), 'regenerate: python -m flexarm_sim.plant.config > flexarm_bringup/config/plant.yaml'
    params = flatten(yaml.safe_load(text)['plant']['ros__parameters'])
    assert set(params) == set(TABLE)
    # as rcl reads it: an empty list is "not set" (None) -> the table's default
    as_rcl = {k: (None if v == [] else v) for k, v in params.items()}
    assert TABLE.from_mapping(as_rcl) == TABLE.defaults()


@pytest.mark.parametrize('name,value', [
    ('loop_rate', -5.0), ('loop_rate', 0), ('loop_rate', 'fast'), ('loop_rate', float('nan')), ('loop_rate', 1e9),
    ('time_mode', 'turbo'), ('integrator', 'euler'), ('substeps', -1), ('substeps', 1.5),
    ('command_timeout', 0.0), ('effort_limits', [1.0, -2.0]), ('effort_limits', [1.0, float('nan')]),
    ('effort_limits', [float('inf'), 1.0]), ('publish_rates.state', -1.0), ('publish_rates.diagnostics', 0.0),
    ('publish_rates.diagnostics', 1e9), ('publish_rates.joint_states', 2.0 ** 62), ('real_time_factor', -0.5),
    ('lockstep.republish_period', 1e-12), ('initial.position', ['a']), ('arm', ''),
    ('markers.centerline_points', 1), ('loop_rate', True), ('divergence.max_abs_position', float('inf')),
    # issue 24: 5e-324 passed "> 0" and killed the plant (an infinite period); timeouts had no physical bounds
    ('publish_rates.state', 5e-324), ('publish_rates.joint_states', 5e-324), ('publish_rates.markers', 5e-324),
    ('publish_rates.clock', 5e-324), ('publish_rates.diagnostics', 5e-324), ('loop_rate', 5e-324),
    ('real_time_factor', 5e-324), ('command_timeout', 5e-324), ('command_timeout', 3600.0),
    ('sensors.strain.rate', 5e-324),
])
def test_bad_values_raise_naming_the_parameter(name, value):
    with pytest.raises(ConfigError) as e:
        TABLE.from_mapping({name: value})
    assert e.value.name.startswith(name)
    assert name in str(e.value)


def test_ints_accepted_for_floats_unknown_rejected_not_set_is_the_default():
    v = TABLE.from_mapping({'loop_rate': 2000, 'effort_limits': [1, 2], 'initial.position': None})
    assert v['loop_rate'] == 2000.0 and isinstance(v['loop_rate'], float)
    assert v['effort_limits'] == [1.0, 2.0]
    assert v['initial.position'] is DERIVED
    with pytest.raises(ConfigError, match='loop_rat'):
        TABLE.from_mapping({'loop_rat': 5.0})


def test_runtime_changes_validated_and_read_only_refused():
    v = TABLE.defaults()
    v2 = TABLE.with_changes(v, {'command_timeout': 0.3, 'publish_rates.markers': 10})
    assert v2['command_timeout'] == 0.3 and v['command_timeout'] == 0.2
    with pytest.raises(ConfigError, match='read-only'):
        TABLE.with_changes(v, {'loop_rate': 500.0})
    with pytest.raises(ConfigError, match='command_timeout'):
        TABLE.with_changes(v, {'command_timeout': -1.0})
    assert {'effort_limits', 'real_time_factor'} <= TABLE.runtime and 'arm' not in TABLE.runtime
    assert TABLE.with_changes(v, {'publish_rates.markers': 0})['publish_rates.markers'] == 0.0     # 0: off


def test_parameter_not_set_is_refused_on_every_run_time_parameter():
    """`ros2 param set` with a PARAMETER_NOT_SET value (None here) undeclared the parameter in rclpy and every later
    set failed until a restart (21 of 22 run-time parameters accepted it): refused, naming it, for every table."""
    from flexarm_control.controller.config import TABLES
    from flexarm_control.estimation.config import TABLE as ESTIMATOR
    from flexarm_bringup.flex_joint_states import TABLE as FLEX_JOINT_STATES
    tables = [TABLE, ESTIMATOR, FLEX_JOINT_STATES, *TABLES.values()]
    n = 0
    for table in tables:
        v = table.defaults()
        for name in sorted(table.runtime):
            with pytest.raises(ConfigError, match='PARAMETER_NOT_SET') as e:
                table.with_changes(v, {name: None})
            assert e.value.name == name
            n += 1
    assert n >= 22


def test_rules_against_the_arm_bound_the_watchdog_and_the_divergence_checks(deluca):
    """A command timeout shorter than two state periods fires between the commands that answer the states; a
    divergence bound below the arm's own limits calls a joint within them diverged."""
    v = resolved(TABLE.defaults(), deluca)
    for name, value, words in (('command_timeout', 0.003, 'two state periods'),
                               ('divergence.max_abs_position', 3.0, 'joint limits'),
                               ('divergence.max_abs_velocity', 9.0, 'velocity limits')):
        with pytest.raises(ConfigError, match=words) as e:
            check_against_arm(dict(v, **{name: value}), deluca)
        assert e.value.name == name
    check_against_arm(dict(v, command_timeout=0.004), deluca)


def test_rules_against_the_arm(deluca):
    base = TABLE.defaults()
    check_against_arm(base, deluca)
    r = resolved(base, deluca)
    assert r['initial.position'] == [0.0, 0.0] and r['initial.modal_position'] == [0.0] * 4
    assert r['effort_limits'] == [2.0, 2.0]
    for name, value in (('initial.position', [0.1, 0.2, 0.3]), ('effort_limits', [1.0]),
                        ('effort_limits', [2.5, 1.0]),                  # above the arm file's 2 N m: refused
                        ('publish_rates.state', 2000.0),                # above loop_rate
                        ('publish_rates.joint_states', 5000.0)):
        with pytest.raises(ConfigError, match=name.replace('[', r'\[')):
            check_against_arm(dict(base, **{name: value}), deluca)
    check_against_arm(dict(base, effort_limits=[1.0, 2.0]), deluca)        # tightening is fine
    lock = dict(base, time_mode='lockstep')
    check_against_arm(dict(lock, **{'publish_rates.state': 250.0}), deluca)
    with pytest.raises(ConfigError, match='publish_rates.state'):
        check_against_arm(dict(lock, **{'publish_rates.state': 300.0}), deluca)   # 1000/300: not whole steps


def test_servo_parameters_are_cross_checked(deluca):
    base = dict(TABLE.defaults(), **{'servo.enabled': True, 'servo.kp': [1.0, 2.0], 'servo.kv': [0.1, 0.2]})
    check_against_arm(base, deluca)
    with pytest.raises(ConfigError, match='servo.kv'):
        check_against_arm(dict(base, **{'servo.kv': [0.1]}), deluca)
    with pytest.raises(ConfigError, match='servo.kv'):
        check_against_arm(dict(base, **{'servo.kv': DERIVED}), deluca)      # required when enabled
    with pytest.raises(ConfigError, match='servo.kp'):
        TABLE.from_mapping({'servo.kp': [1.0, -2.0]})
    with pytest.raises(ConfigError, match='servo.enabled'):
        check_against_arm(dict(base, time_mode='lockstep'), deluca)
