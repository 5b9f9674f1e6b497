"""The packages' import graph, read from the sources (every ``import`` statement, the lazy ones inside functions
included, so a cycle that only bites when a function runs is seen too):

* no cycle: no module imports, directly or through others, a module that imports it back;
* the production bridge (``flexarm_control.bridge``) never reaches the simulated hardware
  (``flexarm_control.emulation``: the servo emulator and its plants);
* the layers ARCHITECTURE.md calls ROS-free reach no rclpy, no launch and no ROS message package.

The graph builder is checked on a small package written here (a cycle through a lazy import, a relative import, a
name imported from a package that is a submodule), so a scanner that saw nothing would fail.
"""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {'flexarm_sim': 'flexarm_sim/flexarm_sim', 'flexarm_control': 'flexarm_control/flexarm_control',
            'flexarm_bringup': 'flexarm_bringup/flexarm_bringup'}
ROS = ('rclpy', 'launch', 'launch_ros', 'rosidl_runtime_py', 'sensor_msgs', 'std_msgs', 'std_srvs', 'geometry_msgs',
       'visualization_msgs', 'diagnostic_msgs', 'builtin_interfaces', 'rcl_interfaces', 'flexarm_msgs')
# ARCHITECTURE.md: these import no rclpy (prefix match; the listed exceptions are the layers' ROS adapters)
ROS_FREE = ('flexarm_sim.model', 'flexarm_sim.common', 'flexarm_sim.plant', 'flexarm_control.laws',
            'flexarm_control.controller', 'flexarm_control.estimation', 'flexarm_control.bridge',
            'flexarm_control.emulation')
ROS_ADAPTERS = ('flexarm_sim.plant.node', 'flexarm_control.bridge.ros_node')


def modules(packages):
    """{dotted module name: source path} of every .py file under each package's directory."""
    out = {}
    for name, rel in packages.items():
        top = os.path.join(ROOT, rel) if not os.path.isabs(rel) else rel
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d != '__pycache__']
            for f in filenames:
                if not f.endswith('.py'):
                    continue
                parts = [name] + os.path.relpath(os.path.join(dirpath, f), top)[:-3].split(os.sep)
                if parts[-1] == '__init__':
                    parts.pop()
                out['.'.join(parts)] = os.path.join(dirpath, f)
    return out


def import_graph(mods):
    """{module: (set of project modules it imports, set of outside top-level names it imports)}."""
    graph = {}
    for mod, path in mods.items():
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        is_pkg = path.endswith('__init__.py')
        inside, outside = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split('.') if is_pkg else mod.split('.')[:-1]
                    base = base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])
                    base = '.'.join(base)
                else:
                    base = node.module
                targets = [base + '.' + a.name if base + '.' + a.name in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                known = t
                while known and known not in mods:
                    known = known.rpartition('.')[0]
                if known:
                    if known != mod:
                        inside.add(known)
                else:
                    outside.add(t.split('.')[0])
        graph[mod] = (inside, outside)
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v][0]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reach(graph, start):
    """Every project module *start* imports, directly or through others, and the outside names they import."""
    seen, todo, outside = set(), [start], set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        inside, out = graph[m]
        outside |= out
        todo.extend(inside)
    return seen - {start}, outside


@pytest.fixture(scope='module')
def graph():
    return import_graph(modules(PACKAGES))


def test_the_scanner_sees_cycles_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / 'toy'
    (pkg / 'sub').mkdir(parents=True)
    files = {
        '__init__.py': '',
        'a.py': 'from .sub import b\n',
        'sub/__init__.py': '',
        'sub/b.py': 'import numpy\ndef f():\n    from ..c import g\n    return g\n',
        'c.py': 'from toy import a\nimport rclpy.node\n',
        'd.py': 'from toy.sub import b\n',
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    g = import_graph(modules({'toy': str(pkg)}))
    assert g['toy.a'][0] == {'toy.sub.b'}
    assert g['toy.sub.b'] == ({'toy.c'}, {'numpy'})
    assert g['toy.d'][0] == {'toy.sub.b'}
    assert cycles(g) == [['toy.a', 'toy.c', 'toy.sub.b']]
    assert reach(g, 'toy.d')[1] == {'numpy', 'rclpy'}


def test_no_import_cycle(graph):
    assert len(graph) > 100
    assert cycles(graph) == []


def test_the_production_bridge_never_reaches_the_emulator(graph):
    bridge = [m for m in graph if m.startswith('flexarm_control.bridge')]
    assert 'flexarm_control.bridge.servo_bus' in bridge and 'flexarm_control.emulation.servo_emulator' in graph
    for m in bridge:
        reached, _ = reach(graph, m)
        assert not [r for r in reached if r.startswith('flexarm_control.emulation')], m


def test_the_ros_free_layers_reach_no_ros(graph):
    checked = 0
    for m in sorted(graph):
        if not m.startswith(ROS_FREE) or m.startswith(ROS_ADAPTERS):
            continue
        reached, outside = reach(graph, m)
        ros = sorted(outside & set(ROS))
        assert not ros, '%s reaches %s through %s' % (m, ros, sorted(
            r for r in reached if set(graph[r][1]) & set(ros)))
        checked += 1
    assert checked > 60


def test_importing_the_numerics_loads_no_compiler():
    """The model's numerics (spec, model, layout, modes, linearisation, integrators) and the bridge import without
    numba; it loads at the first kernel call (a fresh interpreter: nothing imported before), and with the
    whole-run API (``simulate``: numba functions of its own)."""
    code = textwrap.dedent('''
        import sys
        import flexarm_sim.model as M
        import flexarm_sim.model.layout, flexarm_sim.model.integrators, flexarm_sim.model.linearize
        import flexarm_sim.model.link_modes, flexarm_sim.model.spec, flexarm_sim.arms
        import flexarm_control.bridge.core, flexarm_control.bridge.config
        from flexarm_sim.model import linearize, step, whole_arm_modes  # noqa: F401
        print('import', 'numba' in sys.modules)
        model = M.load_model(flexarm_sim.arms.resolve_arm('deluca_two_link'))
        flexarm_sim.model.layout.ArmLayout.of(model)
        print('load', 'numba' in sys.modules)
        model.mass_matrix(model.zero_state()[0])
        print('use', 'numba' in sys.modules)
    ''')
    whole_run = 'import sys\nfrom flexarm_sim.model import simulate\nprint(\'numba\' in sys.modules)'
    assert subprocess.run([sys.executable, '-c', whole_run], capture_output=True, text=True,
                          timeout=300).stdout.strip() == 'True'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split('\n')[:3] == ['import False', 'load False', 'use True'], out.stdout
