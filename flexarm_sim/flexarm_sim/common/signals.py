"""Clean process exit on SIGINT / SIGTERM from the first line of ``main()`` on (no ROS, stdlib only): the one
mechanism of every flexarm program (ros/node_main.py for the nodes, the `flexarm` command, the servo emulator).

Python's defaults make a Ctrl-C during start-up a ``KeyboardInterrupt`` traceback and a SIGTERM an
exit by signal (-15). :class:`StopSignals` replaces both handlers before anything heavy is imported:

* during start-up (until :meth:`StopSignals.started`) a signal raises :class:`Stop` in the main
  thread, which ``main()`` catches to clean up what exists and return 0;
* afterwards it only records the signal (:attr:`StopSignals.stopped`); the main loop polls it, or waits in
  :meth:`StopSignals.wait`, and stops in order.

The handler takes no lock. It runs in the main thread, between two bytecodes of whatever the main thread was doing;
it used to set a threading.Event, whose set() takes the Condition lock that Event.wait() holds at some of its own
bytecode boundaries: a main loop waiting on that event (the servo emulator's) could deadlock on a signal landing
there. (Twice a SIGTERM did not end the serving emulator within 20 s; not reproduced since, so that this was the
cause is likely, not shown.)

A second signal never raises, so clean-up code is not interrupted. ``install(raise_stop=False)``
only records the signal (for module-level imports, where an exception would be a traceback);
:meth:`StopSignals.raise_stop` then switches raising on (and raises at once if a signal came).
"""
from __future__ import annotations

import contextlib
import signal
import time

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_active = None          # the StopSignals installed last (`held`)


class Stop(BaseException):
    """A stop signal arrived during start-up (BaseException: not caught by ``except Exception``); `signum`."""

    def __init__(self, signum=None):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's convention for a program ended by the signal: 128 + its number (130, 143)."""
        return 128 + int(self.signum or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name


class StopSignals:
    def __init__(self):
        self._signalled = False         # set by the handler only (a plain store: no lock, see the module docstring)
        self.signum = None
        self._raise = True
        self._started = False
        self._previous = {}

    def install(self, raise_stop: bool = True) -> 'StopSignals':
        """Install the handlers (main thread only)."""
        global _active
        self._raise = raise_stop
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        _active = self
        return self

    @contextlib.contextmanager
    def deferred(self):
        """A block no Stop cuts in half; a signal that came meanwhile raises Stop right after it (if start-up
        was raising)."""
        raising, self._raise = self._raise, False
        try:
            yield
        finally:
            if raising and not self._started:
                self.raise_stop()

    def raise_stop(self) -> None:
        """From now until :meth:`started`, a signal raises :class:`Stop`; raises now if one came."""
        if self._signalled:
            self._raise = False
            raise Stop(self.signum)
        self._raise = True

    def _handle(self, signum, _frame):
        if self.signum is None:
            self.signum = signum
        self._signalled = True
        if self._raise:
            self._raise = False
            raise Stop(signum)

    def started(self) -> None:
        """Start-up is over: from now on a signal only sets :attr:`event`."""
        self._raise = False
        self._started = True

    @property
    def stopped(self) -> bool:
        """A stop signal came (any thread may read it)."""
        return self._signalled

    def wait(self, timeout: float, poll: float = 0.05) -> bool:
        """Sleep until a stop signal came (True) or `timeout` s passed (False), in slices of `poll` s (a signal's
        handler runs during a slice, which then resumes: seen at most `poll` s later). Takes no lock."""
        deadline = time.monotonic() + timeout
        while not self._signalled:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(poll, left))
        return True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def held():
    """`deferred()` of the installed StopSignals (none installed: nothing to defer). For third-party constructors
    with a __del__: a Stop raised inside rclpy's Executor.__init__ left it half-built, and its __del__ printed a
    traceback at exit (a SIGTERM 0.8 s into a modal node's start: once in today's eleven fresh-clone suites)."""
    return _active.deferred() if _active is not None else contextlib.nullcontext()
