"""SROS2 (DDS-Security) keystore of a flexarm bring-up: `flexarm security create|verify|status`.

    flexarm security create <keystore> --bringup sim|hardware [--namespace /armB] [--days 3650]
    flexarm security verify <keystore> [--bringup ...] [--namespace ...]
    flexarm security status
    ros2 launch flexarm_bringup sim.launch.py keystore:=<keystore>       (hardware.launch.py likewise)

The keystore has the layout sros2 and rcl read (ROS_SECURITY_KEYSTORE):

    public/ca.cert.pem, identity_ca.cert.pem, permissions_ca.cert.pem    one self-signed CA (EC P-256, SHA-256)
    private/ca.key.pem (mode 0600)
    enclaves/governance.xml, governance.p7s                              domain rules, signed by the CA
    enclaves/flexarm[/<namespace>]/<role>/                               one enclave per role of the bring-up:
        cert.pem, key.pem          the enclave's identity (subject CN=<enclave>), signed by the CA
        identity_ca.cert.pem, permissions_ca.cert.pem, governance.p7s
        permissions.xml, permissions.p7s   what it may publish and subscribe, signed by the CA (S/MIME, as sros2)

Roles and what they are granted (`permissions(role, ns, bringup)`; DDS names: topics rt/<name>, service requests
rq/<name>Request, replies rr/<name>Reply, all resolved in the bring-up's namespace):

    plant       publishes its outputs; subscribes the commands; serves reset, pause and its parameters
    controller  the ONLY publisher of commands (effort, position, lock-step); subscribes states, the reference
    estimator   publishes the estimate; subscribes readings and commands
    bridge      publishes joint states; subscribes the commands; serves ~/enable, ~/disable, ~/reboot
    viewer      flex_joint_states: subscribes the state, publishes the URDF joint states
    operator    `flexarm run`, `ros2 service/param/topic` of the operator: the ONLY caller of reset, pause, ~/enable,
                ~/disable, ~/reboot and every node's set_parameters; publishes the reference; reads everything

Every node serves its own parameter services (reads too), so `ros2 param get` works for the operator only.
Certificates and signatures are made with the `openssl` command (OpenSSL >= 1.1: `genpkey`, `req`, `x509`, `smime`).
Whether the DDS can use the keystore is another question: flexarm_sim/ros/dds_security.py (the PyPI wheels' Fast DDS
cannot; the nodes then refuse to start).
"""
from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

from flexarm_sim.ros import names

ROLES = ('plant', 'controller', 'estimator', 'bridge', 'viewer', 'operator')
ROLE_OF = {'plant': 'plant', 'pd_servo': 'controller', 'modal': 'controller', 'computed_torque': 'controller',
           'state_estimator': 'estimator', 'hardware_bridge': 'bridge', 'flex_joint_states': 'viewer',
           'flexarm_runner': 'operator'}
BRINGUP_ROLES = {'sim': ('plant', 'controller', 'estimator', 'viewer', 'operator'),
                 'hardware': ('bridge', 'controller', 'estimator', 'viewer', 'operator')}
NODE_NAMES = {'plant': ('plant',), 'controller': ('pd_servo', 'modal', 'computed_torque'),
              'estimator': ('state_estimator',), 'bridge': ('hardware_bridge',), 'viewer': ('flex_joint_states',),
              'operator': ('flexarm_runner',)}
PARAMETER_SERVICES = ('describe_parameters', 'get_parameter_types', 'get_parameters', 'get_type_description',
                      'list_parameters', 'set_parameters', 'set_parameters_atomically')
ENCLAVE_FILES = ('cert.pem', 'key.pem', 'identity_ca.cert.pem', 'permissions_ca.cert.pem', 'governance.p7s',
                 'permissions.p7s')
DOMAINS = (0, 232)             # ROS_DOMAIN_ID range
XSI = 'http://www.w3.org/2001/XMLSchema-instance'
SCHEMA = 'http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_{}.xsd'
CA_SUBJECT = 'flexarm keystore CA'


class KeystoreError(ValueError):
    pass


# ------------------------------------------------------------------------------------------ enclaves and grants
def enclave_for(executable: str, ns: str = '/') -> str:
    """The enclave of a node executable in a bring-up's namespace: /flexarm[/<ns>]/<role>."""
    role = ROLE_OF.get(executable)
    if role is None:
        raise KeystoreError(f'no enclave for {executable!r} (roles: {", ".join(ROLE_OF)})')
    return enclave(role, ns)


def enclave(role: str, ns: str = '/') -> str:
    ns = names.namespace(ns)
    return '/flexarm' + ('' if ns == '/' else ns) + '/' + role


def _topic(name, ns):
    return 'rt' + names.resolve(name, ns)


def _request(name, ns):
    return 'rq' + names.resolve(name, ns) + 'Request'


def _reply(name, ns):
    return 'rr' + names.resolve(name, ns) + 'Reply'


def _serve(service, ns):
    """(subscribe, publish) of a service server."""
    return [_request(service, ns)], [_reply(service, ns)]


def _call(service, ns):
    """(subscribe, publish) of a service client."""
    return [_reply(service, ns)], [_request(service, ns)]


def permissions(role: str, ns: str = '/', bringup: str = 'sim') -> dict:
    """{'publish': [...], 'subscribe': [...]} DDS topic names a role's enclave is granted (module docstring)."""
    if role not in ROLES:
        raise KeystoreError(f'unknown role {role!r} (one of {", ".join(ROLES)})')
    ns = names.namespace(ns)
    t = lambda *xs: [_topic(x, ns) for x in xs]      # noqa: E731
    pub = ['ros_discovery_info', 'rt/rosout', 'rt/parameter_events']
    sub = ['ros_discovery_info', 'rt/parameter_events', _topic(names.CLOCK, ns)]
    for node in NODE_NAMES[role]:                     # its own parameter (and type description) services
        for s in PARAMETER_SERVICES:
            a, b = _serve(f'{node}/{s}', ns)
            sub += a
            pub += b
    commands = t(*names.COMMAND_TOPICS)
    if role == 'plant':
        pub += t(names.JOINT_STATES, names.STATE, names.MARKERS, names.STRAIN, names.TIP_IMU, names.DIAGNOSTICS,
                 names.CLOCK)
        sub += commands
        for s in (names.RESET, names.PAUSE):
            a, b = _serve(s, ns)
            sub, pub = sub + a, pub + b
    elif role == 'controller':
        pub += commands + t(names.DIAGNOSTICS)
        sub += t(names.STATE, names.STATE_ESTIMATE, names.REFERENCE)
    elif role == 'estimator':
        pub += t(names.STATE_ESTIMATE, names.DIAGNOSTICS)
        sub += t(names.JOINT_STATES, names.STATE, names.STRAIN, names.TIP_IMU) + commands
    elif role == 'bridge':
        pub += t(names.JOINT_STATES, names.STATE, names.APPLIED_EFFORT, names.DIAGNOSTICS)
        sub += commands
        for s in names.BRIDGE_SERVICES:
            a, b = _serve(f'hardware_bridge/{s}', ns)
            sub, pub = sub + a, pub + b
    elif role == 'viewer':
        pub += t(names.URDF_JOINT_STATES)
        sub += t(names.STATE, names.JOINT_STATES, names.MARKERS, names.DIAGNOSTICS)
    else:                                             # operator: reads everything, commands nothing
        pub += t(names.REFERENCE)
        sub += t(names.JOINT_STATES, names.STATE, names.STATE_ESTIMATE, names.MARKERS, names.STRAIN, names.TIP_IMU,
                 names.DIAGNOSTICS, names.URDF_JOINT_STATES, names.REFERENCE, names.APPLIED_EFFORT) + commands
        calls = [names.RESET, names.PAUSE] if bringup == 'sim' else [f'hardware_bridge/{s}'
                                                                     for s in names.BRIDGE_SERVICES]
        for r in BRINGUP_ROLES[bringup]:
            if r != 'operator':
                calls += [f'{node}/{s}' for node in NODE_NAMES[r] for s in PARAMETER_SERVICES]
        for s in calls:
            a, b = _call(s, ns)
            sub, pub = sub + a, pub + b
    return {'publish': _unique(pub), 'subscribe': _unique(sub)}


def _unique(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


# ------------------------------------------------------------------------------------------ documents
def governance_xml() -> str:
    """Domain rules (DDS-Security 1.1 §9.4.1): authenticated participants only, join access control, discovery
    and liveliness encrypted, RTPS signed, every topic read/write access-controlled, metadata and data encrypted."""
    root = ET.Element('dds', {'xmlns:xsi': XSI, 'xsi:noNamespaceSchemaLocation': SCHEMA.format('governance')})
    rule = ET.SubElement(ET.SubElement(root, 'domain_access_rules'), 'domain_rule')
    _domains(rule)
    for tag, text in (('allow_unauthenticated_participants', 'false'), ('enable_join_access_control', 'true'),
                      ('discovery_protection_kind', 'ENCRYPT'), ('liveliness_protection_kind', 'ENCRYPT'),
                      ('rtps_protection_kind', 'SIGN')):
        ET.SubElement(rule, tag).text = text
    topic_rule = ET.SubElement(ET.SubElement(rule, 'topic_access_rules'), 'topic_rule')
    for tag, text in (('topic_expression', '*'), ('enable_discovery_protection', 'true'),
                      ('enable_liveliness_protection', 'true'), ('enable_read_access_control', 'true'),
                      ('enable_write_access_control', 'true'), ('metadata_protection_kind', 'ENCRYPT'),
                      ('data_protection_kind', 'ENCRYPT')):
        ET.SubElement(topic_rule, tag).text = text
    return _text(root)


def permissions_xml(enclave_name: str, grants: dict, not_before: datetime.datetime,
                    not_after: datetime.datetime) -> str:
    """The permissions document of one enclave (DDS-Security 1.1 §9.4.1.3): one grant for its subject, one allow
    rule (publish, subscribe), default DENY."""
    root = ET.Element('dds', {'xmlns:xsi': XSI, 'xsi:noNamespaceSchemaLocation': SCHEMA.format('permissions')})
    grant = ET.SubElement(ET.SubElement(root, 'permissions'), 'grant', {'name': enclave_name})
    ET.SubElement(grant, 'subject_name').text = f'CN={enclave_name}'
    validity = ET.SubElement(grant, 'validity')
    ET.SubElement(validity, 'not_before').text = not_before.strftime('%Y-%m-%dT%H:%M:%S')
    ET.SubElement(validity, 'not_after').text = not_after.strftime('%Y-%m-%dT%H:%M:%S')
    allow = ET.SubElement(grant, 'allow_rule')
    _domains(allow)
    for kind in ('publish', 'subscribe'):
        topics = ET.SubElement(ET.SubElement(allow, kind), 'topics')
        for name in grants[kind]:
            ET.SubElement(topics, 'topic').text = name
    ET.SubElement(grant, 'default').text = 'DENY'
    return _text(root)


def _domains(parent):
    rng = ET.SubElement(ET.SubElement(parent, 'domains'), 'id_range')
    ET.SubElement(rng, 'min').text = str(DOMAINS[0])
    ET.SubElement(rng, 'max').text = str(DOMAINS[1])


def _text(root) -> str:
    ET.indent(root, '  ')
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding='unicode') + '\n'


# ------------------------------------------------------------------------------------------ openssl
def _openssl(*args, stdin=None):
    exe = shutil.which('openssl')
    if exe is None:
        raise KeystoreError('the openssl command is needed to make certificates and signatures (install openssl)')
    r = subprocess.run([exe, *args], input=stdin, capture_output=True)
    if r.returncode != 0:
        raise KeystoreError(f'openssl {args[0]} failed: {r.stderr.decode(errors="replace").strip()[-500:]}')
    return r.stdout


def _subject_config(tmp, cn: str, ca: bool) -> str:
    """An openssl req configuration with subject CN=cn (a CN with slashes cannot go through -subj unescaped)."""
    path = os.path.join(tmp, 'req.cnf')
    # the CA signs certificates and (S/MIME) the governance and permissions documents: digitalSignature too
    ext = ('basicConstraints = critical, CA:TRUE\nkeyUsage = critical, digitalSignature, keyCertSign, cRLSign\n'
           'subjectKeyIdentifier = hash\n' if ca else
           'basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature, keyAgreement\n')
    with open(path, 'w') as f:
        f.write(f'[req]\nprompt = no\ndistinguished_name = dn\n[dn]\nCN = {cn}\n[ext]\n{ext}')
    return path


def _new_key(path):
    _openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', path)
    os.chmod(path, 0o600)


def sign(ca_cert: str, ca_key: str, document: str, out: str):
    """S/MIME clear-signed (detached) signature of a document by the CA, SHA-256 — the .p7s DDS-Security reads."""
    _openssl('smime', '-sign', '-text', '-md', 'sha256', '-in', document, '-signer', ca_cert, '-inkey', ca_key,
             '-out', out)


def verify_signed(ca_cert: str, signed: str) -> bytes:
    """The document a .p7s carries if its signature verifies against the CA (KeystoreError otherwise)."""
    return _openssl('smime', '-verify', '-text', '-in', signed, '-CAfile', ca_cert)


def certificate_subject(cert: str) -> str:
    return _openssl('x509', '-in', cert, '-noout', '-subject', '-nameopt', 'RFC2253').decode().strip()


def verify_certificate(ca_cert: str, cert: str):
    out = _openssl('verify', '-CAfile', ca_cert, cert).decode().strip()
    if not out.endswith('OK'):
        raise KeystoreError(f'{cert}: {out}')


# ------------------------------------------------------------------------------------------ keystore
def _paths(keystore):
    ks = os.path.abspath(os.fspath(keystore))
    return ks, os.path.join(ks, 'public', 'ca.cert.pem'), os.path.join(ks, 'private', 'ca.key.pem')


def init_keystore(keystore, days: int = 3650) -> str:
    """The CA and the signed governance of a keystore (kept when they exist). Returns the keystore path."""
    ks, ca_cert, ca_key = _paths(keystore)
    for d in ('public', 'private', 'enclaves'):
        os.makedirs(os.path.join(ks, d), exist_ok=True)
    os.chmod(os.path.join(ks, 'private'), 0o700)
    if not (os.path.isfile(ca_cert) and os.path.isfile(ca_key)):
        with tempfile.TemporaryDirectory() as tmp:
            _new_key(ca_key)
            _openssl('req', '-new', '-x509', '-key', ca_key, '-sha256', '-days', str(days), '-config',
                     _subject_config(tmp, CA_SUBJECT, True), '-extensions', 'ext', '-out', ca_cert)
    for alias in ('identity_ca', 'permissions_ca'):
        _link(os.path.join(ks, 'public', f'{alias}.cert.pem'), 'ca.cert.pem')
        _link(os.path.join(ks, 'private', f'{alias}.key.pem'), 'ca.key.pem')
    gov = os.path.join(ks, 'enclaves', 'governance.xml')
    with open(gov, 'w') as f:
        f.write(governance_xml())
    sign(ca_cert, ca_key, gov, os.path.join(ks, 'enclaves', 'governance.p7s'))
    return ks


def _link(path, target):
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def create_enclave(keystore, enclave_name: str, grants: dict, days: int = 3650) -> str:
    """An enclave directory: key, certificate (CN=enclave), the CA and governance, signed permissions."""
    ks, ca_cert, ca_key = _paths(keystore)
    d = os.path.join(ks, 'enclaves', enclave_name.strip('/'))
    os.makedirs(d, exist_ok=True)
    key, cert = os.path.join(d, 'key.pem'), os.path.join(d, 'cert.pem')
    with tempfile.TemporaryDirectory() as tmp:
        _new_key(key)
        csr = os.path.join(tmp, 'req.csr')
        cnf = _subject_config(tmp, enclave_name, False)
        _openssl('req', '-new', '-key', key, '-config', cnf, '-out', csr)
        _openssl('x509', '-req', '-in', csr, '-CA', ca_cert, '-CAkey', ca_key,
                 '-set_serial', str(int.from_bytes(os.urandom(8), 'big') >> 1), '-days', str(days), '-sha256',
                 '-extfile', cnf, '-extensions', 'ext', '-out', cert)
    for name, target in (('identity_ca.cert.pem', ca_cert), ('permissions_ca.cert.pem', ca_cert),
                         ('governance.p7s', os.path.join(ks, 'enclaves', 'governance.p7s'))):
        _link(os.path.join(d, name), os.path.relpath(target, d))
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0, tzinfo=None)
    xml = os.path.join(d, 'permissions.xml')
    with open(xml, 'w') as f:
        f.write(permissions_xml(enclave_name, grants, now - datetime.timedelta(days=1),
                                now + datetime.timedelta(days=days)))
    sign(ca_cert, ca_key, xml, os.path.join(d, 'permissions.p7s'))
    return d


def create(keystore, bringup: str = 'sim', ns: str = '/', days: int = 3650) -> list:
    """The keystore of a bring-up: CA, governance and one enclave per role. Returns the enclaves."""
    if bringup not in BRINGUP_ROLES:
        raise KeystoreError(f'bringup must be one of {", ".join(BRINGUP_ROLES)}, got {bringup!r}')
    ns = names.namespace(ns)
    init_keystore(keystore, days)
    out = []
    for role in BRINGUP_ROLES[bringup]:
        e = enclave(role, ns)
        create_enclave(keystore, e, permissions(role, ns, bringup), days)
        out.append(e)
    return out


def check_keystore(keystore, enclaves):
    """KeystoreError naming what is missing unless every enclave of a bring-up is in the keystore."""
    ks = os.path.abspath(os.fspath(keystore))
    if not os.path.isdir(os.path.join(ks, 'enclaves')):
        raise KeystoreError(f'{ks} is not a keystore (no enclaves/): create it with `flexarm security create {ks} '
                            '--bringup sim|hardware`')
    for e in enclaves:
        d = os.path.join(ks, 'enclaves', e.strip('/'))
        missing = [f for f in ENCLAVE_FILES if not os.path.isfile(os.path.join(d, f))]
        if missing:
            raise KeystoreError(f'keystore {ks}: enclave {e} lacks {", ".join(missing)} (`flexarm security create '
                                f'{ks} --bringup ... --namespace ...` makes it)')


def verify(keystore, bringup: str = 'sim', ns: str = '/') -> list:
    """Check a bring-up's keystore: certificates issued by the CA with subject CN=<enclave>, governance and
    permissions signed by the CA and equal to what the signature carries, permissions granting exactly
    permissions(role). Returns lines describing what was checked; KeystoreError on the first failure."""
    ks, ca_cert, _ = _paths(keystore)
    ns = names.namespace(ns)
    lines = []
    gov = os.path.join(ks, 'enclaves', 'governance.p7s')
    _same(verify_signed(ca_cert, gov), os.path.join(ks, 'enclaves', 'governance.xml'))
    lines.append(f'governance.p7s: signature verified against {ca_cert}')
    for role in BRINGUP_ROLES[bringup]:
        e = enclave(role, ns)
        check_keystore(ks, [e])
        d = os.path.join(ks, 'enclaves', e.strip('/'))
        verify_certificate(ca_cert, os.path.join(d, 'cert.pem'))
        subject = certificate_subject(os.path.join(d, 'cert.pem'))
        if subject != f'subject=CN={e}':
            raise KeystoreError(f'{d}/cert.pem: {subject}, expected CN={e}')
        signed = verify_signed(ca_cert, os.path.join(d, 'permissions.p7s'))
        _same(signed, os.path.join(d, 'permissions.xml'))
        granted = read_grants(signed.decode())
        if granted['subject'] != f'CN={e}':
            raise KeystoreError(f'{e}: permissions for {granted["subject"]}')
        want = permissions(role, ns, bringup)
        for kind in ('publish', 'subscribe'):
            if sorted(granted[kind]) != sorted(want[kind]):
                raise KeystoreError(f'{e}: {kind} grants differ from the {role} role\'s: '
                                    f'extra {sorted(set(granted[kind]) - set(want[kind]))}, '
                                    f'missing {sorted(set(want[kind]) - set(granted[kind]))}')
        lines.append(f'{e}: certificate CN={e} issued by the CA; permissions signed, {len(granted["publish"])} '
                     f'publish / {len(granted["subscribe"])} subscribe grants, default {granted["default"]}')
    return lines


def _same(signed: bytes, path: str):
    with open(path, 'rb') as f:
        doc = f.read()
    if signed.replace(b'\r\n', b'\n').strip() != doc.replace(b'\r\n', b'\n').strip():
        raise KeystoreError(f'{path} differs from what its signature carries')


def read_grants(xml_text: str) -> dict:
    """{'subject', 'publish', 'subscribe', 'default'} of a one-grant permissions document."""
    root = ET.fromstring(xml_text)
    grants = root.findall('./permissions/grant')
    if len(grants) != 1:
        raise KeystoreError(f'{len(grants)} grants, expected 1')
    g = grants[0]
    rules = g.findall('allow_rule')
    return {'subject': g.findtext('subject_name'), 'default': g.findtext('default'),
            'publish': [t.text for r in rules for t in r.findall('./publish/topics/topic')],
            'subscribe': [t.text for r in rules for t in r.findall('./subscribe/topics/topic')]}


def environment(keystore) -> dict:
    """The variables that turn security on for a bring-up (Enforce: no enclave, no start)."""
    return {'ROS_SECURITY_KEYSTORE': os.path.abspath(os.fspath(keystore)), 'ROS_SECURITY_ENABLE': 'true',
            'ROS_SECURITY_STRATEGY': 'Enforce'}


# ------------------------------------------------------------------------------------------ CLI
def add_parser(sub):
    p = sub.add_parser('security', help='SROS2 keystore of a bring-up (DDS-Security)',
                       description=__doc__.split('\n\n')[0])
    ssub = p.add_subparsers(dest='action', required=True)
    for action in ('create', 'verify'):
        q = ssub.add_parser(action, help='make the keystore of a bring-up' if action == 'create' else
                            'check its certificates, signatures and grants')
        q.add_argument('keystore', help='keystore directory (ROS_SECURITY_KEYSTORE)')
        q.add_argument('--bringup', choices=tuple(BRINGUP_ROLES), default='sim')
        q.add_argument('--namespace', default='/', help='the bring-up\'s namespace (launch argument namespace:=)')
        if action == 'create':
            q.add_argument('--days', type=int, default=3650, help='validity of certificates and permissions')
    ssub.add_parser('status', help='does this ROS 2 installation\'s DDS support DDS-Security?')
    p.set_defaults(func=main)


def main(args) -> int:
    import sys
    try:
        if args.action == 'create':
            made = create(args.keystore, args.bringup, args.namespace, args.days)
            print(f'keystore {os.path.abspath(args.keystore)}: CA, governance and enclaves {", ".join(made)}')
            print(f'use: ros2 launch flexarm_bringup {args.bringup}.launch.py keystore:={os.path.abspath(args.keystore)}'
                  + ('' if names.namespace(args.namespace) == '/' else f' namespace:={args.namespace}'))
            return 0
        if args.action == 'verify':
            for line in verify(args.keystore, args.bringup, args.namespace):
                print(line)
            return 0
        import rclpy  # noqa: F401 - maps the DDS library into this process
        from flexarm_sim.ros.dds_security import support
        ok, what = support()
        print({True: 'DDS-Security available', False: 'DDS-Security NOT available',
               None: 'DDS-Security support unknown'}[ok] + f': {what}')
        return 0 if ok else 1
    except (KeystoreError, ValueError) as e:
        print(f'flexarm security: {e}', file=sys.stderr)
        return 2
