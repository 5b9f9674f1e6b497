"""Plant parameters: validation names the parameter; run-time changes; plant.yaml = defaults."""
import os

import pytest
import yaml

from flexarm_sim.plant.config import PARAMETERS, RUNTIME, ConfigError, PlantConfig, validate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def _flat(d, prefix=''):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, prefix + k + '.')
        else:
            yield prefix + k, v


def test_plant_yaml_lists_every_parameter_with_its_default():
    with open(os.path.join(ROOT, 'flexarm_bringup', 'config', 'plant.yaml')) as f:
        params = dict(_flat(yaml.safe_load(f)['plant']['ros__parameters']))
    assert set(params) == set(PARAMETERS)
    assert PlantConfig.from_mapping(params).values == PlantConfig().values


@pytest.mark.parametrize('name,value', [
    ('loop_rate', -5.0), ('loop_rate', 0), ('loop_rate', 'fast'), ('loop_rate', float('nan')),
    ('time_mode', 'turbo'), ('integrator', 'euler'), ('substeps', -1), ('substeps', 1.5),
    ('command_timeout', 0.0), ('effort_limits', [1.0, -2.0]), ('effort_limits', [1.0, float('nan')]),
    ('publish_rates.state', -1.0), ('publish_rates.diagnostics', 0.0), ('real_time_factor', -0.5),
    ('initial.position', ['a']), ('arm', ''), ('markers.centerline_points', 1), ('loop_rate', True),
])
def test_bad_values_raise_naming_the_parameter(name, value):
    with pytest.raises(ConfigError) as e:
        PlantConfig.from_mapping({name: value})
    assert e.value.name.startswith(name)
    assert name in str(e.value)


def test_ints_accepted_for_floats_and_unknown_rejected():
    c = PlantConfig.from_mapping({'loop_rate': 2000, 'effort_limits': [1, 2]})
    assert c['loop_rate'] == 2000.0 and isinstance(c['loop_rate'], float)
    assert c['effort_limits'] == [1.0, 2.0]
    with pytest.raises(ConfigError, match='loop_rat'):
        PlantConfig.from_mapping({'loop_rat': 5.0})
    assert validate('effort_limits', [float('inf')]) == [float('inf')]


def test_runtime_changes():
    c = PlantConfig()
    c2 = c.with_changes({'command_timeout': 0.2, 'publish_rates.markers': 10})
    assert c2['command_timeout'] == 0.2 and c['command_timeout'] == 0.5
    with pytest.raises(ConfigError, match='read-only'):
        c.with_changes({'loop_rate': 500.0})
    with pytest.raises(ConfigError, match='command_timeout'):
        c.with_changes({'command_timeout': -1.0})
    assert 'effort_limits' in RUNTIME and 'real_time_factor' in RUNTIME and 'arm' not in RUNTIME


def test_array_lengths_checked_against_the_arm():
    c = PlantConfig.from_mapping({'initial.position': [0.1, 0.2, 0.3]})
    with pytest.raises(ConfigError, match='initial.position'):
        c.check_against_arm(2, 4)
    PlantConfig.from_mapping({'initial.modal_position': [0.0] * 4}).check_against_arm(2, 4)
    with pytest.raises(ConfigError, match='effort_limits'):
        PlantConfig.from_mapping({'effort_limits': [1.0]}).check_against_arm(2, 4)


def test_servo_parameters_are_cross_checked():
    base = {'servo.enabled': True, 'servo.kp': [1.0, 2.0], 'servo.kv': [0.1, 0.2]}
    PlantConfig.from_mapping(base).check_against_arm(2, 4)
    with pytest.raises(ConfigError, match='servo.kv'):
        PlantConfig.from_mapping(dict(base, **{'servo.kv': [0.1]})).check_against_arm(2, 4)
    with pytest.raises(ConfigError, match='servo.kp'):
        PlantConfig.from_mapping(dict(base, **{'servo.kp': [1.0, -2.0]}))
    with pytest.raises(ConfigError, match='servo.enabled'):
        PlantConfig.from_mapping(dict(base, time_mode='lockstep')).check_against_arm(2, 4)
    PlantConfig.from_mapping({'servo.kp': [1.0]}).check_against_arm(2, 4)      # unused while disabled
