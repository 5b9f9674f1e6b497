"""The lint gate: ruff with the repository's ruff.toml (pyflakes' findings and syntax errors) over every Python file,
so an unused import, a name used but never defined (two benches called resolve_arm without importing it) or a
shadowed import fails `make test` naming the file and line."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    r = subprocess.run([sys.executable, '-m', 'ruff', 'check', '--no-cache', '--output-format', 'concise', ROOT],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_gate_fails_on_a_finding(tmp_path):
    """The same command on a file with an unused import and an undefined name reports both (the gate can fail)."""
    bad = tmp_path / 'bad.py'
    bad.write_text('import os\n\n\ndef f():\n    return undefined_name\n')
    r = subprocess.run([sys.executable, '-m', 'ruff', 'check', '--no-cache', '--output-format', 'concise',
                        '--config', os.path.join(ROOT, 'ruff.toml'), str(bad)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and 'F401' in r.stdout and 'F821' in r.stdout, r.stdout + r.stderr
