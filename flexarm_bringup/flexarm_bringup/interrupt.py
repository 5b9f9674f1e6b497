"""SIGINT / SIGTERM for the `flexarm` command (common/signals.py's one mechanism): raised as `Interrupted` (= Stop)
in the main thread, so a command unwinds (stopping what it started) and exits 128 + the signal number (130, 143)
without a traceback. Installed first thing, before the heavy imports."""
from flexarm_sim.common.signals import Stop as Interrupted  # noqa: F401  (the name the commands catch)
from flexarm_sim.common.signals import StopSignals

_signals = StopSignals()


def install():
    _signals.install()


def stopping() -> bool:
    """True once a signal arrived (clean-up in progress: a second one does not interrupt it)."""
    return _signals.stopped
