"""Gain-schedule cells kept on disk between runs (no ROS).

A scheduled law's cell design (laws.modal.ModalLQR: a robust delayed LQR, ~45 ms of CPU; controller.safe_mode.
SafeHoldLaw: an LQR searched over the degraded loop's envelope; the state estimator's estimation.filter.
ModalKalmanFilter: a linearization and its e^{A dt}, 1-5 ms) is a pure function of the arm, the law's
`design_recipe()` (class and constructor arguments), the cell and the code that designs it. In real time a move
visits tens of cells per law, designed while the arm moves: seconds of a core taken from the plant and the controller
on a 2-core machine (the start-up safe-mode entries of issue 28). Like numba's `cache=True`, a design made once is
kept: under <root>/designs/<digest>/<cell>.pkl, the digest a SHA-256 of the arm specification, the recipe, the
source of the design code (flexarm_control.laws, controller.safe_mode, estimation.filter, flexarm_sim.model) and
the numpy/scipy versions, so any change to one of them designs afresh (stale entries are never read; `make clean`
removes the tree).

Root: $FLEXARM_CACHE_DIR (env.sh: <workspace>/.cache/flexarm; "off" disables the cache), else
$XDG_CACHE_HOME/flexarm, else ~/.cache/flexarm. Files are written atomically (a temporary file renamed) and carry the
SHA-256 of their payload: a truncated or altered file is not unpickled, it is counted (`corrupt`) and designed
again. The cache is the user's own directory, trusted as numba's cache is (entries are pickles).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path

ENV = 'FLEXARM_CACHE_DIR'
MAGIC = b'flexarm-design-1\n'
_CODE_DIGEST = None


def cache_root():
    """The cache's root directory (module docstring), or None when disabled."""
    root = os.environ.get(ENV)
    if root is not None:
        return None if root.strip().lower() in ('', 'off', 'none', '0') else Path(root)
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return Path(base) / 'flexarm'


def code_digest() -> str:
    """SHA-256 of the design code's source files and the numerical libraries' versions (once per process)."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        import numpy
        import scipy

        import flexarm_sim.model as sim_model
        from .. import laws
        from ..estimation import filter as estimation_filter
        from . import safe_mode
        h = hashlib.sha256(f'numpy {numpy.__version__} scipy {scipy.__version__}\n'.encode())
        files = [Path(safe_mode.__file__), Path(estimation_filter.__file__)]
        for pkg in (laws, sim_model):
            files += sorted(Path(pkg.__file__).resolve().parent.rglob('*.py'))
        for f in files:
            h.update(f.name.encode() + b'\0' + f.read_bytes())
        _CODE_DIGEST = h.hexdigest()
    return _CODE_DIGEST


class DesignCache:
    """The designs of one law (its arm and recipe) on disk: get(key) -> design or None, put(key, design)."""

    def __init__(self, root, spec, recipe):
        cls, kwargs = recipe
        ident = pickle.dumps((spec, f'{cls.__module__}.{cls.__qualname__}', sorted(kwargs.items()), code_digest()),
                             protocol=4)
        self.dir = Path(root) / 'designs' / hashlib.sha256(ident).hexdigest()[:32]
        self.hits = self.misses = self.corrupt = self.write_failures = 0

    @classmethod
    def for_recipe(cls, spec, recipe):
        """The cache of this law, or None (disabled, or the recipe cannot be identified)."""
        root = cache_root()
        if root is None:
            return None
        try:
            return cls(root, spec, recipe)
        except (pickle.PicklingError, TypeError, AttributeError, OSError):
            return None

    def _path(self, key):
        return self.dir / ('_'.join(str(int(k)) for k in key) + '.pkl')

    def get(self, key):
        try:
            data = self._path(key).read_bytes()
        except OSError:
            self.misses += 1
            return None
        body = data[len(MAGIC) + 32:]
        if not data.startswith(MAGIC) or data[len(MAGIC):len(MAGIC) + 32] != hashlib.sha256(body).digest():
            self.corrupt += 1
            return None
        try:
            design = pickle.loads(body)
        except Exception:  # noqa: BLE001 - whatever a damaged pickle raises: design it again
            self.corrupt += 1
            return None
        self.hits += 1
        return design

    def put(self, key, design):
        """Store a design (best effort: a read-only or full disk only costs the next run its design)."""
        body = pickle.dumps(design, protocol=4)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix='.tmp')
            with os.fdopen(fd, 'wb') as f:
                f.write(MAGIC + hashlib.sha256(body).digest() + body)
            os.replace(tmp, self._path(key))
        except OSError:
            self.write_failures += 1
            try:
                os.unlink(tmp)
            except (OSError, UnboundLocalError):
                pass
