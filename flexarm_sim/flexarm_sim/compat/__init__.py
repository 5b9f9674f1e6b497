"""Every non-public API of rclpy and numba that flexarm relies on, in one place (the Dynamixel bridge uses no SDK:
protocol.py and pyserial).

Each is a deliberate trade (named where it is used), and each module here has a ``check()`` that exercises the
assumption for real and raises :class:`CompatError` naming the library, its version and what no longer holds, so
that the next release of a dependency fails a test (flexarm_sim/test/test_compat.py) with that message instead of
breaking a node silently. Nothing outside this package touches these internals (the test greps for them).

* :mod:`.rclpy_private` - the node's parameter overrides (the command line's and the parameter files' values
  before they are declared), rcl wait sets on chosen subscriptions and raw takes (the executor-free hot path and
  the recorder);
* :mod:`.numba_private` - LLVM settings for the kernels' compilations, a compiled kernel's entry address and an
  indirect call through it (one compiled copy of the dynamics, called from every integrator);

The modules import their library only when used: importing this package costs nothing.
"""
from __future__ import annotations


class CompatError(RuntimeError):
    """A private API flexarm relies on is gone or changed."""

    def __init__(self, library: str, what: str, detail: str):
        version = _version(library)
        super().__init__(f'flexarm relies on {what} of {library} {version}, which no longer holds: {detail} '
                         f'(flexarm_sim/compat: adapt it to this release)')
        self.library, self.what = library, what


def _version(library: str) -> str:
    try:
        from importlib.metadata import version
        return version(library)
    except Exception:  # noqa: BLE001 - a version is only for the message
        return '(version unknown)'
