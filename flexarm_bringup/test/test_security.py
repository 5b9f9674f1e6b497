"""Issue 28 item 5, the SROS2 route: the keystore `flexarm security create` makes for a bring-up — documents
well-formed to the DDS-Security 1.1 schemas' structure, signed by the keystore's CA and verifiable with openssl
(independently of the code that signed them), tampering detected, permissions granting exactly what the bring-up
needs (only the controller publishes commands; only the operator calls reset, pause, enable and set_parameters) —
and the launch files' `keystore` route. Whether the DDS here can use it: it cannot (test_state_admission; the
nodes then refuse to start: test/test_security_ros.py)."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from flexarm_bringup import security
from flexarm_bringup.bringup import command, hardware_nodes, sim_nodes
from flexarm_sim.ros import names

pytestmark = pytest.mark.skipif(shutil.which('openssl') is None, reason='needs the openssl command')

# the element structure of omg_shared_ca_governance.xsd / omg_shared_ca_permissions.xsd (DDS-Security 1.1,
# Annex), as far as these documents use it: children in schema order, (name, min, max occurrences)
GOVERNANCE = {
    'dds': [('domain_access_rules', 1, 1)],
    'domain_access_rules': [('domain_rule', 1, None)],
    'domain_rule': [('domains', 1, 1), ('allow_unauthenticated_participants', 1, 1),
                    ('enable_join_access_control', 1, 1), ('discovery_protection_kind', 1, 1),
                    ('liveliness_protection_kind', 1, 1), ('rtps_protection_kind', 1, 1),
                    ('topic_access_rules', 1, 1)],
    'domains': [('id', 0, None), ('id_range', 0, None)],
    'id_range': [('min', 1, 1), ('max', 0, 1)],
    'topic_access_rules': [('topic_rule', 1, None)],
    'topic_rule': [('topic_expression', 1, 1), ('enable_discovery_protection', 1, 1),
                   ('enable_liveliness_protection', 1, 1), ('enable_read_access_control', 1, 1),
                   ('enable_write_access_control', 1, 1), ('metadata_protection_kind', 1, 1),
                   ('data_protection_kind', 1, 1)],
}
PERMISSIONS = {
    'dds': [('permissions', 1, 1)],
    'permissions': [('grant', 1, None)],
    'grant': [('subject_name', 1, 1), ('validity', 1, 1), ('allow_rule', 0, None), ('deny_rule', 0, None),
              ('default', 1, 1)],
    'validity': [('not_before', 1, 1), ('not_after', 1, 1)],
    'allow_rule': [('domains', 1, 1), ('publish', 0, None), ('subscribe', 0, None), ('relay', 0, None)],
    'domains': GOVERNANCE['domains'],
    'id_range': GOVERNANCE['id_range'],
    'publish': [('topics', 1, 1)],
    'subscribe': [('topics', 1, 1)],
    'topics': [('topic', 1, None)],
}
BOOLEAN = {'true', 'false', '1', '0'}
PROTECTION = {'NONE', 'SIGN', 'ENCRYPT', 'SIGN_WITH_ORIGIN_AUTHENTICATION', 'ENCRYPT_WITH_ORIGIN_AUTHENTICATION'}


def check_structure(elem, schema, path=''):
    """Children of every schema element in schema order with their occurrence bounds; leaves have text."""
    where = f'{path}/{elem.tag}'
    if elem.tag not in schema:
        assert len(elem) == 0 and (elem.text or '').strip(), f'{where}: a leaf needs text'
        return
    rules = schema[elem.tag]
    allowed = [r[0] for r in rules]
    tags = [c.tag for c in elem]
    assert all(t in allowed for t in tags), f'{where}: unexpected {set(tags) - set(allowed)}'
    assert tags == sorted(tags, key=allowed.index), f'{where}: children out of schema order {tags}'
    for name, lo, hi in rules:
        n = tags.count(name)
        assert n >= lo and (hi is None or n <= hi), f'{where}: {n} x {name}'
    for c in elem:
        check_structure(c, schema, where)


def openssl(*args, ok=True):
    r = subprocess.run(['openssl', *args], capture_output=True, text=True)
    assert (r.returncode == 0) == ok, r.stderr
    return r


@pytest.fixture(scope='module')
def keystore(tmp_path_factory):
    ks = tmp_path_factory.mktemp('sros2') / 'keystore'
    made = security.create(ks, 'sim', '/')
    assert made == ['/flexarm/plant', '/flexarm/controller', '/flexarm/estimator', '/flexarm/viewer',
                    '/flexarm/operator']
    return str(ks)


def test_layout_is_what_rcl_reads(keystore):
    for f in ('public/ca.cert.pem', 'public/identity_ca.cert.pem', 'public/permissions_ca.cert.pem',
              'private/ca.key.pem', 'enclaves/governance.xml', 'enclaves/governance.p7s'):
        assert os.path.isfile(os.path.join(keystore, f)), f
    assert oct(os.stat(os.path.join(keystore, 'private', 'ca.key.pem')).st_mode & 0o777) == '0o600'
    for e in ('plant', 'controller', 'estimator', 'viewer', 'operator'):
        d = os.path.join(keystore, 'enclaves', 'flexarm', e)
        for f in security.ENCLAVE_FILES + ('permissions.xml',):
            assert os.path.isfile(os.path.join(d, f)), (e, f)
        assert oct(os.stat(os.path.join(d, 'key.pem')).st_mode & 0o777) == '0o600'


def test_documents_are_well_formed_to_the_schemas(keystore):
    gov = ET.parse(os.path.join(keystore, 'enclaves', 'governance.xml')).getroot()
    check_structure(gov, GOVERNANCE)
    rule = gov.find('./domain_access_rules/domain_rule')
    assert rule.findtext('allow_unauthenticated_participants') == 'false'
    assert rule.findtext('enable_join_access_control') == 'true'
    for tag in ('discovery_protection_kind', 'liveliness_protection_kind', 'rtps_protection_kind'):
        assert rule.findtext(tag) in PROTECTION
    tr = rule.find('./topic_access_rules/topic_rule')
    assert tr.findtext('enable_read_access_control') == tr.findtext('enable_write_access_control') == 'true'
    assert all(e.text in BOOLEAN for e in tr if e.tag.startswith('enable_'))
    for e in ('plant', 'controller', 'operator'):
        perm = ET.parse(os.path.join(keystore, 'enclaves', 'flexarm', e, 'permissions.xml')).getroot()
        check_structure(perm, PERMISSIONS)
        grant = perm.find('./permissions/grant')
        assert grant.findtext('subject_name') == f'CN=/flexarm/{e}' and grant.findtext('default') == 'DENY'
        assert grant.findtext('validity/not_before') < grant.findtext('validity/not_after')


def test_signed_by_the_ca_and_verifiable_with_openssl(keystore):
    ca = os.path.join(keystore, 'public', 'ca.cert.pem')
    subject = openssl('x509', '-in', ca, '-noout', '-subject').stdout
    assert 'flexarm keystore CA' in subject
    assert 'prime256v1' in openssl('x509', '-in', ca, '-noout', '-text').stdout
    gov = openssl('smime', '-verify', '-in', os.path.join(keystore, 'enclaves', 'governance.p7s'),
                  '-CAfile', ca, '-text')
    assert gov.stdout.strip() == open(os.path.join(keystore, 'enclaves', 'governance.xml')).read().strip()
    assert 'Verification successful' in gov.stderr
    for e in ('plant', 'controller', 'estimator', 'viewer', 'operator'):
        d = os.path.join(keystore, 'enclaves', 'flexarm', e)
        assert openssl('verify', '-CAfile', ca, os.path.join(d, 'cert.pem')).stdout.strip().endswith('OK')
        assert f'CN = /flexarm/{e}' in openssl('x509', '-in', os.path.join(d, 'cert.pem'), '-noout',
                                               '-subject').stdout
        out = openssl('smime', '-verify', '-in', os.path.join(d, 'permissions.p7s'), '-CAfile', ca, '-text')
        assert out.stdout.strip() == open(os.path.join(d, 'permissions.xml')).read().strip()
    assert any(line.startswith('governance.p7s') for line in security.verify(keystore, 'sim', '/'))


def test_tampering_and_a_foreign_ca_are_detected(keystore, tmp_path):
    copy = tmp_path / 'ks'
    shutil.copytree(keystore, copy, symlinks=True)
    d = copy / 'enclaves' / 'flexarm' / 'plant'
    p7s = (d / 'permissions.p7s').read_text()
    # the plant grants itself the right to publish commands, in the signed copy: the signature no longer holds
    forged = p7s.replace('<topic>rt/flexarm/state</topic>', '<topic>rt/effort_controller/commands</topic>', 1)
    assert forged != p7s
    (d / 'permissions.p7s').write_text(forged)
    openssl('smime', '-verify', '-in', str(d / 'permissions.p7s'), '-CAfile', str(copy / 'public' / 'ca.cert.pem'),
            '-text', ok=False)
    with pytest.raises(security.KeystoreError):
        security.verify(copy, 'sim', '/')
    # another keystore's CA does not verify this one's documents
    other = tmp_path / 'other'
    security.init_keystore(other)
    openssl('smime', '-verify', '-in', os.path.join(keystore, 'enclaves', 'flexarm', 'plant', 'permissions.p7s'),
            '-CAfile', str(other / 'public' / 'ca.cert.pem'), '-text', ok=False)


def _grants(keystore, role, ns='/'):
    d = os.path.join(keystore, 'enclaves', security.enclave(role, ns).strip('/'))
    return security.read_grants(open(os.path.join(d, 'permissions.xml')).read())


def test_permissions_grant_exactly_what_the_bringup_needs(keystore):
    roles = ('plant', 'controller', 'estimator', 'viewer', 'operator')
    g = {r: _grants(keystore, r) for r in roles}
    commands = {'rt/effort_controller/commands', 'rt/position_controller/commands', 'rt/flexarm/effort_command'}
    # only the controller may publish commands; the plant obeys them
    for r in roles:
        assert (set(g[r]['publish']) & commands == commands) == (r == 'controller'), r
        assert not set(g[r]['publish']) & commands or r == 'controller', r
    assert commands <= set(g['plant']['subscribe'])
    # only the operator may call reset, pause and any node's set_parameters (publish the request)
    guarded = {'rq/flexarm/resetRequest', 'rq/flexarm/pauseRequest'} | {
        f'rq/{n}/set_parametersRequest' for n in ('plant', 'pd_servo', 'modal', 'computed_torque', 'state_estimator')}
    for r in roles:
        calls = {t for t in g[r]['publish'] if t.startswith('rq/')}
        assert (guarded <= calls) == (r == 'operator') and (not calls & guarded or r == 'operator'), r
    # the plant serves reset/pause and its parameters, answers them, and is the only publisher of its state
    assert {'rq/flexarm/resetRequest', 'rq/flexarm/pauseRequest', 'rq/plant/set_parametersRequest'} <= set(
        g['plant']['subscribe'])
    assert [r for r in roles if 'rt/flexarm/state' in g[r]['publish']] == ['plant']
    # what the roles' nodes really use (a few checks against the code's own names): the controller reads the
    # state and the reference, the estimator publishes the estimate
    assert {'rt/flexarm/state', 'rt/flexarm/reference'} <= set(g['controller']['subscribe'])
    assert 'rt/flexarm/state_estimate' in g['estimator']['publish']
    # every grant is exactly the role's table (no more): the signed documents say what permissions() says
    for r in roles:
        want = security.permissions(r, '/', 'sim')
        assert sorted(g[r]['publish']) == sorted(want['publish']) and sorted(g[r]['subscribe']) == sorted(
            want['subscribe'])


def test_hardware_and_namespaced_keystores(tmp_path):
    ks = tmp_path / 'hw'
    made = security.create(ks, 'hardware', '/armB')
    assert made[0] == '/flexarm/armB/bridge' and '/flexarm/armB/operator' in made
    bridge, op, ctl = (_grants(str(ks), r, '/armB') for r in ('bridge', 'operator', 'controller'))
    enable = 'rq/armB/hardware_bridge/enableRequest'
    assert enable in bridge['subscribe'] and enable in op['publish'] and enable not in ctl['publish']
    assert 'rt/armB/effort_controller/commands' in ctl['publish']
    assert not any(t.startswith('rt/flexarm') or t.startswith('rt/effort') for t in ctl['publish'])
    assert security.verify(ks, 'hardware', '/armB')


def test_launch_route_sets_the_environment_and_the_enclaves(keystore, tmp_path):
    specs = sim_nodes('deluca_two_link', 'modal', 'lockstep', estimator='encoders', keystore=keystore)
    assert [s.enclave for s in specs] == ['/flexarm/plant', '/flexarm/estimator', '/flexarm/controller']
    argv = command(specs[2], str(tmp_path))
    assert argv[argv.index('--enclave') + 1] == '/flexarm/controller'
    with pytest.raises(security.KeystoreError, match='bridge'):      # a sim keystore has no bridge enclave
        hardware_nodes('deluca_two_link', keystore=keystore)
    sys.path.insert(0, os.path.dirname(__file__))
    from test_launch_static import LAUNCH_DIR, evaluate, stubbed_launch
    with stubbed_launch():
        nodes = evaluate(os.path.join(LAUNCH_DIR, 'sim.launch.py'), {'controller': 'modal', 'keystore': keystore})
    for n in nodes:
        assert n['environment'] == {'ROS_SECURITY_KEYSTORE': os.path.abspath(keystore),
                                    'ROS_SECURITY_ENABLE': 'true', 'ROS_SECURITY_STRATEGY': 'Enforce'}
        assert n['ros_arguments'][0] == '--enclave'
    with stubbed_launch():
        plain = evaluate(os.path.join(LAUNCH_DIR, 'sim.launch.py'), {'controller': 'modal'})
    assert all(n['environment'] == {} and n['ros_arguments'] == [] for n in plain)   # defaults unchanged


def test_cli(tmp_path):
    env = dict(os.environ)
    ks = str(tmp_path / 'cli')
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'security', 'create', ks, '--bringup', 'sim',
                        '--namespace', 'armA'], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'namespace:=armA' in r.stdout and '/flexarm/armA/controller' in r.stdout
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'security', 'verify', ks, '--namespace',
                        'armA'], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.count('signed') == 5, r.stdout + r.stderr
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'security', 'verify', ks],
                       capture_output=True, text=True, env=env, timeout=120)           # not the root namespace's
    assert r.returncode == 2 and 'lacks' in r.stderr
    r = subprocess.run([sys.executable, '-m', 'flexarm_bringup.cli', 'security', 'status'], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 1 and 'NOT available' in r.stdout and 'PKI-DH' in r.stdout
    assert names.resolve(names.STATE, 'armA') == '/armA/flexarm/state'
