"""Static checks of flexarm_bringup's launch files, parameter files and rviz configuration.

`launch` and `launch_ros` are not installable on CI machines (DESIGN.md §1), so nothing here starts a
launch service. The checks are:

1. every launch file parses (ast) and every literal package/executable it names is a console script of a
   workspace package (setup.py entry points) or one of the external ROS executables it may use;
2. the launch files are *executed* against a minimal stand-in of the launch/launch_ros API (STUB, below,
   injected into sys.modules for the duration of one test only). The stub is not launch: it implements
   just enough of the classes our files use (arguments with defaults/choices, LaunchConfiguration,
   path joins, conditions, OpaqueFunction, includes, Node) to evaluate them for given launch arguments
   and record the resulting nodes. It exists only to check the wiring of *our* files statically — which
   nodes start for which arguments, with which parameter files and overrides — and says nothing about
   launch's own behaviour;
3. every config/rviz/arm file the nodes receive exists in its package (flexarm_bringup's config/, flexarm_description's
   arms/ and rviz/) and is installed by it (setup.py's data_files, CMakeLists.txt's install), parameter files have a `<node name>: ros__parameters:` section for the node that loads
   them, and launch overrides only set parameters that the file documents;
4. the launch arguments are the ones in the README's "ROS 2 launch" table;
5. the rviz configuration is valid YAML with the plant's fixed frame, the marker topic and a RobotModel.
"""
import ast
import contextlib
import os
import re
import runpy
import sys
import types

import pytest
import yaml

PKG = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
ROOT = os.path.dirname(PKG)
DESCRIPTION = os.path.join(ROOT, 'flexarm_description')     # the arm files and the rviz configuration
LAUNCH_DIR = os.path.join(PKG, 'launch')
LAUNCH_FILES = sorted(f for f in os.listdir(LAUNCH_DIR) if f.endswith('.launch.py'))
EXPECTED_LAUNCH_FILES = ['hardware.launch.py', 'sim.launch.py', 'view.launch.py']
# executables of ROS packages outside this workspace that the launch files may start (package.xml
# must declare them as exec_depend)
EXTERNAL = {('rviz2', 'rviz2'), ('robot_state_publisher', 'robot_state_publisher')}
CONTROLLERS = ('pd_servo', 'modal', 'computed_torque', 'tip_tracking')


# ------------------------------------------------------------------------------ workspace facts
def _run_setup(path):
    """Keyword arguments a setup.py passes to setuptools.setup (run in its directory)."""
    import setuptools
    captured = {}
    old_setup, old_cwd = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        os.chdir(os.path.dirname(path))
        runpy.run_path(path, run_name='__main__')
    finally:
        setuptools.setup = old_setup
        os.chdir(old_cwd)
    return captured


def workspace_entry_points():
    """{(package, executable)} of every console script in the workspace's setup.py files."""
    out = set()
    for d in sorted(os.listdir(ROOT)):
        path = os.path.join(ROOT, d, 'setup.py')
        if not os.path.isfile(path) or not os.path.isfile(os.path.join(ROOT, d, 'package.xml')):
            continue
        kw = _run_setup(path)
        for spec in kw.get('entry_points', {}).get('console_scripts', []):
            out.add((kw['name'], spec.split('=')[0].strip()))
    return out


def installed_files():
    """{source path relative to the package: install directory} from flexarm_bringup/setup.py data_files."""
    kw = _run_setup(os.path.join(PKG, 'setup.py'))
    out = {}
    for dest, files in kw['data_files']:
        for f in files:
            out[os.path.normpath(f)] = dest
    return out


def description_installed_files():
    """{source path relative to flexarm_description: install directory} from its CMakeLists.txt's
    install(DIRECTORY ... DESTINATION share/${PROJECT_NAME})."""
    text = open(os.path.join(DESCRIPTION, 'CMakeLists.txt'), encoding='utf-8').read()
    out = {}
    for dirs, dest in re.findall(r'install\(DIRECTORY\s+([^)]*?)\s+DESTINATION\s+(\S+)\)', text):
        dest = dest.replace('${PROJECT_NAME}', 'flexarm_description')
        for d in dirs.split():
            for dirpath, _, filenames in os.walk(os.path.join(DESCRIPTION, d)):
                for f in filenames:
                    rel = os.path.relpath(os.path.join(dirpath, f), DESCRIPTION)
                    out[rel] = os.path.join(dest, os.path.dirname(rel))
    return out


def readme_launch_arguments():
    """{launch file: set of argument names} from the README table under the 'ROS 2 launch' heading."""
    text = open(os.path.join(ROOT, 'README.md'), encoding='utf-8').read()
    m = re.search(r'^## ROS 2 launch\s*$(.*?)(?=^## |\Z)', text, re.M | re.S)
    assert m, "README.md has no '## ROS 2 launch' section"
    table = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) < 3 or not line.lstrip().startswith('|') or set(cells[0]) <= set('-: '):
            continue
        f, arg = cells[0].strip('`'), cells[1].strip('`')
        if f.endswith('.launch.py'):
            table.setdefault(f, set()).add(arg)
    return table


# ------------------------------------------------------------------------------ the launch stub
class _Ctx:
    """Launch arguments (strings) and where FindPackageShare points (the source package)."""

    def __init__(self, configs):
        self.configs = dict(configs)
        self.shares = {'flexarm_bringup': PKG, 'flexarm_description': DESCRIPTION}


def _perform(value, ctx):
    if isinstance(value, (list, tuple)):
        return ''.join(_perform(v, ctx) for v in value)
    if hasattr(value, 'perform'):
        return value.perform(ctx)
    return str(value)


def _param_value(v, ctx):
    """A Node parameter dictionary's value as launch_ros normalizes it: a substitution, or a list holding one, is
    one string; a list of plain values stays a list (string arrays, float arrays)."""
    if isinstance(v, (list, tuple)):
        return _perform(v, ctx) if any(hasattr(x, 'perform') for x in v) else list(v)
    return _perform(v, ctx) if hasattr(v, 'perform') else v


def _truthy(s):
    s = s.strip()
    if s in ('true', 'True', '1', 'on'):
        return True
    if s in ('false', 'False', '0', 'off'):
        return False
    raise ValueError(f'not a boolean: {s!r}')


def make_stub():
    """Modules launch, launch.actions, ..., launch_ros.* with the classes our launch files use."""
    class Substitution:
        pass

    class LaunchConfiguration(Substitution):
        def __init__(self, name, default=None):
            self.name = name

        def perform(self, ctx):
            if self.name not in ctx.configs:
                raise KeyError(f'launch configuration {self.name!r} not declared')
            return ctx.configs[self.name]

    class TextSubstitution(Substitution):
        def __init__(self, text=''):
            self.text = text

        def perform(self, ctx):
            return self.text

    class PathJoinSubstitution(Substitution):
        def __init__(self, parts):
            self.parts = parts

        def perform(self, ctx):
            return os.path.join(*[_perform(p, ctx) for p in self.parts])

    class PythonExpression(Substitution):
        def __init__(self, parts):
            self.parts = parts

        def perform(self, ctx):
            return str(eval(_perform(self.parts, ctx), {}, {}))      # what launch does (with math)

    class AndSubstitution(Substitution):
        def __init__(self, left, right):
            self.left, self.right = left, right

        def perform(self, ctx):
            return 'true' if _truthy(_perform(self.left, ctx)) and _truthy(_perform(self.right, ctx)) else 'false'

    class FindExecutable(Substitution):
        def __init__(self, name):
            self.name = name

        def perform(self, ctx):
            return self.name

    class Command(Substitution):
        def __init__(self, parts):
            self.parts = parts

        def perform(self, ctx):
            return _perform(self.parts, ctx)      # the command line (not run)

    class FindPackageShare(Substitution):
        def __init__(self, package):
            self.package = package

        def perform(self, ctx):
            if self.package not in ctx.shares:
                raise KeyError(f'FindPackageShare({self.package!r}): not a package of this check')
            return ctx.shares[self.package]

    class ParameterValue:
        def __init__(self, value, value_type=None):
            self.value, self.value_type = value, value_type

        def perform(self, ctx):
            return _perform(self.value, ctx)

    class IfCondition:
        def __init__(self, predicate):
            self.predicate = predicate

        def evaluate(self, ctx):
            return _truthy(_perform(self.predicate, ctx))

    class UnlessCondition(IfCondition):
        def evaluate(self, ctx):
            return not super().evaluate(ctx)

    class Action:
        def __init__(self, condition=None):
            self.condition = condition

    class DeclareLaunchArgument(Action):
        def __init__(self, name, default_value=None, description='', choices=None, **kw):
            super().__init__(**kw)
            self.name, self.default_value, self.description, self.choices = name, default_value, description, choices

    class OpaqueFunction(Action):
        def __init__(self, function, args=None, kwargs=None, **kw):
            super().__init__(**kw)
            self.function, self.args, self.kwargs = function, args or [], kwargs or {}

    class LogInfo(Action):
        def __init__(self, msg, **kw):
            super().__init__(**kw)
            self.msg = msg

    class PythonLaunchDescriptionSource:
        def __init__(self, path):
            self.path = path

    class IncludeLaunchDescription(Action):
        def __init__(self, source, launch_arguments=None, **kw):
            super().__init__(**kw)
            self.source, self.launch_arguments = source, list(launch_arguments or [])

    class Node(Action):
        def __init__(self, package=None, executable=None, name=None, namespace=None, parameters=None,
                     remappings=None, arguments=None, output=None, ros_arguments=None, **kw):
            super().__init__(condition=kw.pop('condition', None))
            assert not kw, f'Node: unsupported keywords in the stub: {sorted(kw)}'
            self.package, self.executable, self.name, self.namespace = package, executable, name, namespace
            self.parameters, self.remappings, self.arguments = parameters or [], remappings or [], arguments or []
            self.ros_arguments = ros_arguments or []

    class SetEnvironmentVariable(Action):
        def __init__(self, name, value, **kw):
            super().__init__(**kw)
            self.name, self.value = name, value

    class LaunchDescription:
        def __init__(self, entities=()):
            self.entities = list(entities)

    mods = {}

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__file__ = '<flexarm launch stub>'
        mods[name] = m
        return m

    module('launch', LaunchDescription=LaunchDescription, Substitution=Substitution)
    module('launch.actions', DeclareLaunchArgument=DeclareLaunchArgument, OpaqueFunction=OpaqueFunction,
           IncludeLaunchDescription=IncludeLaunchDescription, LogInfo=LogInfo,
           SetEnvironmentVariable=SetEnvironmentVariable)
    module('launch.conditions', IfCondition=IfCondition, UnlessCondition=UnlessCondition)
    module('launch.launch_description_sources', PythonLaunchDescriptionSource=PythonLaunchDescriptionSource)
    module('launch.substitutions', LaunchConfiguration=LaunchConfiguration, TextSubstitution=TextSubstitution,
           PathJoinSubstitution=PathJoinSubstitution, PythonExpression=PythonExpression,
           AndSubstitution=AndSubstitution, FindExecutable=FindExecutable, Command=Command)
    module('launch_ros')
    module('launch_ros.actions', Node=Node)
    module('launch_ros.substitutions', FindPackageShare=FindPackageShare)
    module('launch_ros.parameter_descriptions', ParameterValue=ParameterValue)
    for name, m in mods.items():                       # attribute access launch.actions etc.
        if '.' in name:
            parent, child = name.rsplit('.', 1)
            setattr(mods[parent], child, m)
    return mods


@contextlib.contextmanager
def stubbed_launch(installed=('rviz2', 'robot_state_publisher')):
    """The launch stub in sys.modules; flexarm_bringup.bringup sees the source package as its share directory
    (as FindPackageShare does in the stub) and `installed` as the external packages present."""
    from flexarm_bringup import bringup
    mods = make_stub()
    saved = {k: sys.modules.get(k) for k in mods}
    saved_fns = (bringup.share_dir, bringup.package_installed)
    sys.modules.update(mods)
    bringup.share_dir = lambda pkg: {'flexarm_bringup': PKG, 'flexarm_description': DESCRIPTION}.get(pkg) \
        or saved_fns[0](pkg)
    bringup.package_installed = lambda pkg: pkg in installed
    try:
        yield mods
    finally:
        bringup.share_dir, bringup.package_installed = saved_fns
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def load_description(path):
    ns = runpy.run_path(path, run_name='launch_file')
    return ns['generate_launch_description']()


def declared_arguments(ld):
    return {e.name: e for e in ld.entities if type(e).__name__ == 'DeclareLaunchArgument'}


def evaluate(path, args=None, depth=0, logged=None):
    """Nodes (dicts) started by the launch file at `path` for launch arguments `args` (strings); the messages of its
    LogInfo actions are appended to `logged`."""
    assert depth < 5, 'include loop'
    ld = load_description(path)
    decl = declared_arguments(ld)
    unknown = set(args or {}) - set(decl)
    assert not unknown, f'{os.path.basename(path)}: unknown launch arguments {unknown}'
    ctx = _Ctx({})
    for name, d in decl.items():
        if args and name in args:
            ctx.configs[name] = str(args[name])
        else:
            assert d.default_value is not None, f'{name}: no default'
            ctx.configs[name] = _perform(d.default_value, ctx)
        if d.choices is not None:
            assert ctx.configs[name] in d.choices, f'{name}={ctx.configs[name]!r} not in {d.choices}'
    nodes = []
    env = {}

    def walk(entities):
        for e in entities:
            kind = type(e).__name__
            if getattr(e, 'condition', None) is not None and not e.condition.evaluate(ctx):
                continue
            if kind == 'OpaqueFunction':
                walk(e.function(ctx, *e.args, **e.kwargs) or [])
            elif kind == 'IncludeLaunchDescription':
                inc = _perform(e.source.path, ctx)
                inc_args = {_perform(k, ctx): _perform(v, ctx) for k, v in e.launch_arguments}
                nodes.extend(evaluate(inc, inc_args, depth + 1, logged))
            elif kind == 'Node':
                params = []
                for p in e.parameters:
                    if isinstance(p, dict):
                        params.append({k: _param_value(v, ctx) for k, v in p.items()})
                    else:
                        params.append(_perform(p, ctx))
                nodes.append({'package': _perform(e.package, ctx), 'executable': _perform(e.executable, ctx),
                              'name': _perform(e.name, ctx) if e.name is not None else None,
                              'parameters': params,
                              'remappings': [(_perform(a, ctx), _perform(b, ctx)) for a, b in e.remappings],
                              'arguments': [_perform(a, ctx) for a in e.arguments],
                              'namespace': _perform(e.namespace, ctx) if e.namespace is not None else None,
                              'ros_arguments': [_perform(a, ctx) for a in e.ros_arguments],
                              'environment': dict(env),
                              'launch_file': os.path.basename(path)})
            elif kind == 'SetEnvironmentVariable':
                env[_perform(e.name, ctx)] = _perform(e.value, ctx)
            elif kind == 'DeclareLaunchArgument':
                pass
            elif kind == 'LogInfo':
                if logged is not None:
                    logged.append(_perform(e.msg, ctx))
            else:
                raise AssertionError(f'unexpected entity {kind}')

    walk(ld.entities)
    return nodes


# ------------------------------------------------------------------------------ tests
def test_launch_files_present():
    assert LAUNCH_FILES == EXPECTED_LAUNCH_FILES


@pytest.mark.parametrize('name', EXPECTED_LAUNCH_FILES)
def test_parses_and_literal_executables_exist(name):
    """Literal Node(package=..., executable=...) calls name workspace or declared external executables."""
    tree = ast.parse(open(os.path.join(LAUNCH_DIR, name), encoding='utf-8').read(), filename=name)
    known = workspace_entry_points() | EXTERNAL
    assert any(isinstance(n, ast.FunctionDef) and n.name == 'generate_launch_description' for n in tree.body)
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', getattr(node.func, 'attr', '')) == 'Node':
            kw = {k.arg: k.value for k in node.keywords}
            assert 'package' in kw and 'executable' in kw, f'{name}: Node without package/executable'
            pkg = kw['package'].value if isinstance(kw['package'], ast.Constant) else None
            exe = kw['executable'].value if isinstance(kw['executable'], ast.Constant) else None
            if pkg is not None and exe is not None:
                pairs.append((pkg, exe))
            # else: the node comes from flexarm_bringup.bringup (sim_nodes): test_wiring evaluates it
    missing = [p for p in pairs if p not in known]
    assert not missing, f'{name}: executables not in any setup.py entry points: {missing}'


def _all_runs():
    runs = []
    for c in CONTROLLERS + ('none',):
        runs.append(('sim.launch.py', {'controller': c}))
        runs.append(('hardware.launch.py', {'controller': c}))
    runs += [('sim.launch.py', {'rviz': 'true', 'time_mode': 'simtime', 'rate': '500', 'shaping': 'zv',
                                'arm': 'spatial_3r', 'control_rate': '250'}),
             ('sim.launch.py', {'time_mode': 'lockstep', 'segments': '3'}),
             ('sim.launch.py', {'controller': 'modal', 'robot_state_publisher': 'false'}),
             ('sim.launch.py', {'controller': 'modal', 'time_mode': 'simtime', 'estimator': 'strain_accel'}),
             ('sim.launch.py', {'controller': 'none', 'estimator': 'encoders', 'control_rate': '250'}),
             ('hardware.launch.py', {'controller': 'modal', 'estimator': 'encoders'}),
             ('hardware.launch.py', {'rviz': 'true', 'shaping': 'zvd'}),
             ('hardware.launch.py', {'port': '/dev/ttyACM0', 'baud_rate': '4000000'}),
             ('view.launch.py', {}), ('view.launch.py', {'urdf': 'true', 'segments': '4'}),
             ('view.launch.py', {'urdf': 'true', 'flex_joint_states': 'false'})]
    return runs


def _check_estimator(name, args, by_name, ctrl):
    """estimator:= (issue 17): the state_estimator and the controller fed its estimate, at one rate; in simulation the
    plant models the estimator's sensors (/joint_states at that rate: the estimator's tick); on hardware the rate is
    the bridge's loop_rate."""
    est = args.get('estimator', 'none')
    assert ('state_estimator' in by_name) == (est != 'none')
    if est == 'none':
        for c in ctrl:
            assert 'state_topic' not in _overrides(by_name[c])
        return
    eo = _overrides(by_name['state_estimator'])
    for c in ctrl:
        assert _overrides(by_name[c])['state_topic'] == 'flexarm/state_estimate'     # relative: the node's namespace
        if name == 'hardware.launch.py':
            assert _overrides(by_name[c])['rate'] == eo['rate']
    if name == 'sim.launch.py':
        po = _overrides(by_name['plant'])
        assert po['sensors.encoders.enabled'] is True
        assert po.get('sensors.strain.gauges', []) == eo.get('sensors.strain.gauges', [])
        assert po['sensors.accelerometer.enabled'] == eo['sensors.accelerometer.enabled'] == (est == 'strain_accel')
        assert po['publish_rates.joint_states'] == eo['rate'] == float(args.get('control_rate', 500.0))
        assert eo['lockstep'] == (args.get('time_mode') == 'lockstep')
        assert eo['input'] == ('command' if eo['lockstep'] else 'measured_effort')
        if est != 'encoders':
            gauges = eo['sensors.strain.gauges']
            assert len(gauges) == 2 and all(isinstance(g, str) for g in gauges)
    else:
        bridge = yaml.safe_load(open(os.path.join(PKG, 'config', 'hardware_bridge.yaml'), encoding='utf-8'))
        assert eo['rate'] == bridge['hardware_bridge']['ros__parameters']['loop_rate']
        # servos clip the command at their current limit and apply it up to a period late: predict with the torque
        # they measure (modal + encoders on the emulated servos: 1044 filter resets and a lost arm with the command)
        assert eo['input'] == 'measured_effort'


@pytest.mark.parametrize('name,args', _all_runs())
def test_wiring(name, args):
    known = workspace_entry_points() | EXTERNAL
    files = installed_files()
    with stubbed_launch():
        nodes = evaluate(os.path.join(LAUNCH_DIR, name), args)
    assert nodes
    names = [n['name'] for n in nodes]
    assert len(names) == len(set(names)), f'duplicate node names {names}'
    for n in nodes:
        assert (n['package'], n['executable']) in known, n
        for p in n['parameters']:
            if isinstance(p, str):
                _check_installed(p, files)
                _check_param_file(p, n)
        for a in n['arguments']:
            if a.startswith(PKG + os.sep):
                _check_installed(a, files)
            if a.startswith(DESCRIPTION + os.sep):
                _check_installed(a, description_installed_files(), DESCRIPTION)
    by_name = {n['name']: n for n in nodes}
    controller = args.get('controller', 'pd_servo')
    if name in ('sim.launch.py', 'hardware.launch.py'):
        head = 'plant' if name == 'sim.launch.py' else 'hardware_bridge'
        assert head in by_name
        ctrl = [c for c in CONTROLLERS if c in by_name]
        assert ctrl == ([] if controller == 'none' else [controller])
        arm = args.get('arm', 'deluca_two_link')
        if '/' not in arm:                                       # names resolved to the shipped file
            arm = os.path.join(ROOT, 'flexarm_description', 'arms', arm + '.yaml')
        assert os.path.isfile(arm)
        for n in nodes:
            if n['name'] not in ('rviz2', 'robot_state_publisher', 'hardware_bridge'):
                # one arm for every model user: the resolved file
                assert os.path.realpath(_overrides(n).get('arm')) == os.path.realpath(arm), n['name']
        if name == 'sim.launch.py':
            ov = _overrides(by_name['plant'])
            assert ov['time_mode'] == args.get('time_mode', 'realtime')
            assert ov['wait_for_command'] == (controller != 'none')
            assert ('loop_rate' in ov) == ('rate' in args)
            if 'rate' in args:
                assert ov['loop_rate'] == float(args['rate'])
            # one control rate: the plant's state rate and the controller's rate
            assert ov.get('publish_rates.state') == (float(args['control_rate']) if 'control_rate' in args else None)
            for c in ctrl:
                assert _overrides(by_name[c])['use_sim_time'] == (args.get('time_mode', 'realtime') != 'realtime')
                assert _overrides(by_name[c])['lockstep'] == (args.get('time_mode') == 'lockstep')
                assert _overrides(by_name[c]).get('rate') == ov.get('publish_rates.state')
        for c in ctrl:
            assert _overrides(by_name[c]).get('shaping') == args.get('shaping')
        assert ('rviz2' in by_name) == (args.get('rviz') == 'true')
        _check_estimator(name, args, by_name, ctrl)
    if name == 'sim.launch.py':
        _check_urdf_route(args, by_name)
    if name == 'hardware.launch.py' and args.get('rviz') == 'true':
        rsp = by_name['robot_state_publisher']
        assert ' -K 0' in _overrides(rsp)['robot_description']
        assert ('joint_states', 'joint_states') in rsp['remappings']
        assert 'flex_joint_states' not in by_name
    if name == 'view.launch.py':
        assert by_name['rviz2']['arguments'][0] == '-d'
        urdf = args.get('urdf') == 'true'
        assert ('robot_state_publisher' in by_name) == urdf
        assert ('flex_joint_states' in by_name) == (urdf and args.get('flex_joint_states', 'true') == 'true')
        if urdf:
            rsp = by_name['robot_state_publisher']
            cmd = _overrides(rsp)['robot_description']
            assert cmd.startswith('python3 -m flexarm_bringup.urdf_gen ') and cmd.endswith(
                f" -K {args.get('segments', '8')}")
            topic = dict(rsp['remappings'])['joint_states']
            assert topic == 'flexarm/urdf_joint_states'           # not the controllers' joint_states (relative: the namespace)
            if 'flex_joint_states' in by_name:
                fjs = by_name['flex_joint_states']
                assert dict(fjs['remappings'])['joint_states'] == topic
                assert str(_overrides(fjs)['segments']) == args.get('segments', '8')


def _check_urdf_route(args, by_name):
    """sim.launch.py: robot_description + robot_state_publisher + flex_joint_states (TF of every link), on the
    URDF's own joint states; the URDF is the arm's, with `segments` cells per flexible link, and loads in urdfdom."""
    from flexarm_sim.ros.names import URDF_JOINT_STATES, resolve
    on = args.get('robot_state_publisher', 'true') == 'true'
    assert ('robot_state_publisher' in by_name) == on and ('flex_joint_states' in by_name) == on
    if not on:
        return
    rsp, fjs = by_name['robot_state_publisher'], by_name['flex_joint_states']
    topic = resolve(URDF_JOINT_STATES, args.get('namespace', '/') or '/')
    assert dict(rsp['remappings'])['joint_states'] == topic == dict(fjs['remappings'])['joint_states']
    text = _overrides(rsp)['robot_description']
    sys.path.insert(0, os.path.dirname(__file__))
    from test_urdf_gen import urdfdom_problems
    assert text.startswith('<?xml') and urdfdom_problems(text) == []
    k = int(args.get('segments', '8'))
    assert _overrides(fjs)['segments'] == k
    from flexarm_bringup.urdf_gen import generate_urdf, load
    assert text == generate_urdf(load(_overrides(fjs)['arm']), k)
    sim_time = args.get('time_mode', 'realtime') != 'realtime'
    assert _overrides(rsp)['use_sim_time'] == sim_time == _overrides(fjs)['use_sim_time']


def test_sim_launch_without_robot_state_publisher_says_so_and_starts_the_rest():
    """Where robot_state_publisher is not installed (as on these machines), sim.launch.py skips the URDF route with
    a message naming what is missing, and starts the plant and the controller."""
    from flexarm_bringup.bringup import ROBOT_STATE_PUBLISHER_MISSING
    logged = []
    with stubbed_launch(installed=()):
        nodes = evaluate(os.path.join(LAUNCH_DIR, 'sim.launch.py'), {'controller': 'modal'}, logged=logged)
    assert [n['name'] for n in nodes] == ['plant', 'modal']
    assert logged == [ROBOT_STATE_PUBLISHER_MISSING] and 'robot_state_publisher is not installed' in logged[0]


def test_hardware_bridge_port_baud_and_params_file(tmp_path):
    """hardware.launch.py passes params_file (default: the shipped file) and, when given, port and
    baud_rate (an int) as overrides after it; empty = the file's value; a non-integer baud is refused."""
    shipped = os.path.join(PKG, 'config', 'hardware_bridge.yaml')

    def bridge_parameters(args):
        with stubbed_launch():
            nodes = evaluate(os.path.join(LAUNCH_DIR, 'hardware.launch.py'), dict(args, controller='none'))
        return next(n for n in nodes if n['name'] == 'hardware_bridge')['parameters']

    assert bridge_parameters({}) == [shipped]
    assert bridge_parameters({'port': '', 'baud_rate': ''}) == [shipped]
    assert bridge_parameters({'port': '/dev/ttyACM0'}) == [shipped, {'port': '/dev/ttyACM0'}]
    assert bridge_parameters({'port': '/dev/serial/by-id/x', 'baud_rate': '4000000'}) == \
        [shipped, {'port': '/dev/serial/by-id/x', 'baud_rate': 4000000}]
    mine = tmp_path / 'my_bridge.yaml'
    mine.write_text(open(shipped, encoding='utf-8').read())
    assert bridge_parameters({'params_file': str(mine), 'baud_rate': '57600'}) == [str(mine), {'baud_rate': 57600}]
    with pytest.raises(ValueError, match='baud_rate'):
        bridge_parameters({'baud_rate': 'fast'})


def _overrides(node):
    out = {}
    for p in node['parameters']:
        if isinstance(p, dict):
            out.update(p)
    return out


def _check_installed(path, files, package=PKG):
    rel = os.path.relpath(path, package)
    assert not rel.startswith('..'), f'{path} is outside the package'
    assert os.path.isfile(path), f'{rel} is referenced but does not exist'
    assert rel in files, f'{rel} is not installed by the package (setup.py data_files / CMakeLists.txt install)'
    assert files[rel] == os.path.join('share', os.path.basename(package), os.path.dirname(rel)), files[rel]


def _check_param_file(path, node):
    data = yaml.safe_load(open(path, encoding='utf-8'))
    section = data.get(node['name']) or data.get('/**')
    assert section and 'ros__parameters' in section, \
        f"{os.path.basename(path)} has no '{node['name']}: ros__parameters:' section"
    params = _flatten(section['ros__parameters'])
    for key in _overrides(node):
        if key != 'use_sim_time':
            assert key in params, f"{node['name']}: override {key!r} is not a parameter of {os.path.basename(path)}"


def _flatten(d, prefix=''):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + k + '.'))
        else:
            out[prefix + k] = v
    return out


def test_launch_arguments_match_readme():
    table = readme_launch_arguments()
    with stubbed_launch():
        declared = {f: set(declared_arguments(load_description(os.path.join(LAUNCH_DIR, f))))
                    for f in LAUNCH_FILES}
    assert table == declared


def test_controllers_yaml_is_the_tables_rendered():
    """config/controllers.yaml lists every parameter of every controller node (flexarm_control.controller.config),
    one section per node name."""
    from flexarm_control.controller import config
    text = open(os.path.join(PKG, 'config', 'controllers.yaml'), encoding='utf-8').read()
    assert text == config.render(), \
        'regenerate: python -m flexarm_control.controller.config > flexarm_bringup/config/controllers.yaml'
    data = yaml.safe_load(text)
    assert set(data) == set(CONTROLLERS) == set(config.TABLES)


def test_rviz_refused_before_anything_starts_when_rviz2_is_missing():
    with stubbed_launch(installed=()):
        with pytest.raises(RuntimeError, match="rviz2.*nothing was started"):
            evaluate(os.path.join(LAUNCH_DIR, 'sim.launch.py'), {'rviz': 'true'})


def test_rviz_config():
    path = os.path.join(DESCRIPTION, 'rviz', 'flexarm.rviz')
    installed = description_installed_files()
    assert installed[os.path.join('rviz', 'flexarm.rviz')] == os.path.join('share', 'flexarm_description', 'rviz')
    assert installed[os.path.join('arms', 'deluca_two_link.yaml')] == os.path.join('share', 'flexarm_description', 'arms')
    cfg = yaml.safe_load(open(path, encoding='utf-8'))
    vm = cfg['Visualization Manager']
    plant = yaml.safe_load(open(os.path.join(PKG, 'config', 'plant.yaml'), encoding='utf-8'))
    frame = plant['plant']['ros__parameters']['frame_ids']['base']
    assert vm['Global Options']['Fixed Frame'] == frame == 'base_link'
    displays = {d['Class']: d for d in vm['Displays']}
    assert displays['rviz_default_plugins/MarkerArray']['Topic']['Value'] == '/flexarm/markers'
    assert displays['rviz_default_plugins/RobotModel']['Description Topic']['Value'] == '/robot_description'
    assert 'rviz_default_plugins/Grid' in displays
    for d in vm['Displays']:
        assert d['Class'].startswith('rviz_default_plugins/') and 'Name' in d


def test_package_xml_declares_external_executables():
    text = open(os.path.join(PKG, 'package.xml'), encoding='utf-8').read()
    for pkg, _ in EXTERNAL:
        assert f'<exec_depend>{pkg}</exec_depend>' in text


def test_the_control_rate_has_one_default():
    """The plant's /flexarm/state rate, every controller's and the estimator's `rate`, sim.launch.py's control_rate
    and `flexarm run/excite --control-rate` default to one figure (issue 25: 500 was written in 6 places)."""
    import argparse

    from flexarm_bringup import excite_cmd, runner
    from flexarm_bringup.bringup import DEFAULT_CONTROL_RATE
    from flexarm_control.controller.config import TABLES
    from flexarm_control.estimation.config import TABLE as ESTIMATOR
    from flexarm_sim.plant.config import CONTROL_RATE, TABLE as PLANT
    assert DEFAULT_CONTROL_RATE == CONTROL_RATE == PLANT['publish_rates.state'].default
    assert ESTIMATOR['rate'].default == CONTROL_RATE
    assert all(t['rate'].default == CONTROL_RATE for t in TABLES.values())
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest='cmd')
    excite_cmd.add_parser(sub)
    runner.add_parser(sub)
    assert parser.parse_args(['excite', '--record', 'x.mcap']).control_rate == CONTROL_RATE
    assert parser.parse_args(['run']).control_rate == CONTROL_RATE
