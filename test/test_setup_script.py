"""`make setup` fails loudly, at the failing step, and never marks a half-built workspace as usable."""
import os
import subprocess


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


def _setup(cwd, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(['bash', os.path.join(cwd, 'scripts', 'setup.sh')], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=600)


def test_missing_python_is_reported():
    r = _setup(ROOT, PYTHON='/nonexistent/python3.11')
    assert r.returncode != 0
    assert 'Python 3.11 is required' in r.stderr


def test_missing_cmake_is_reported():
    r = _setup(ROOT, CMAKE='/nonexistent/cmake')
    assert r.returncode != 0
    assert 'cmake is required' in r.stderr


def test_unreachable_registry_stops_at_the_install_step(tmp_path):
    """A fresh clone whose package install cannot reach any registry stops at pip, names the command,
    and leaves no build marker behind (env.sh refuses such a workspace)."""
    clone = tmp_path / 'clone'
    subprocess.run(['git', 'clone', '-q', ROOT, str(clone)], check=True)
    r = _setup(str(clone), PIP_NO_INDEX='1', PIP_FIND_LINKS=str(tmp_path / 'no-wheels'),
               PIP_CONFIG_FILE=os.devnull)
    assert r.returncode != 0
    assert 'step failed' in r.stderr and 'pip install' in r.stderr
    assert not (clone / 'install' / '.flexarm_build_ok').exists()
    env = subprocess.run(['bash', '-c', '. ./env.sh'], cwd=clone, capture_output=True, text=True)
    assert env.returncode != 0 and 'make setup' in env.stderr
