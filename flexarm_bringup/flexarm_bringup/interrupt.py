"""SIGINT / SIGTERM for the `flexarm` command: raised as `Interrupted` in the main thread, so a command unwinds
(stopping what it started) and exits 128 + the signal number (130, 143) without a traceback. Installed first thing,
before the heavy imports."""
import signal


class Interrupted(BaseException):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = int(signum)
        self.code = 128 + self.signum

    @property
    def name(self):
        return signal.Signals(self.signum).name


_received = []


def _handler(signum, frame):
    if _received:
        return                  # already unwinding: a second signal does not interrupt the clean-up
    _received.append(signum)
    raise Interrupted(signum)


def install():
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _handler)


def stopping() -> bool:
    """True once a signal arrived (clean-up in progress)."""
    return bool(_received)
