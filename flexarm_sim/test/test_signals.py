"""common/signals.py: a start-up signal raises Stop, except inside a deferred block, after which it does."""
import os
import signal
import time

import pytest

from flexarm_sim.common.signals import Stop, StopSignals, held


def _signal_self(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)            # Python runs the handler in the main thread at the next bytecode boundaries


def test_a_signal_in_a_held_block_raises_stop_right_after_it():
    sig = StopSignals().install()
    reached = False
    try:
        with pytest.raises(Stop) as e:
            with held():
                _signal_self(signal.SIGTERM)
                reached = True          # the block was not cut in half
        assert reached and e.value.signum == signal.SIGTERM and sig.stopped
    finally:
        sig.restore()


def test_a_held_block_without_a_signal_leaves_start_up_interruptible():
    sig = StopSignals().install()
    try:
        with held():
            pass
        with pytest.raises(Stop):
            _signal_self(signal.SIGINT)
    finally:
        sig.restore()


def test_start_up_ending_inside_a_held_block_stays_ended():
    sig = StopSignals().install()
    try:
        with held():
            sig.started()
        _signal_self(signal.SIGINT)     # running: a signal only sets the flag
        assert sig.stopped
    finally:
        sig.restore()


def _import_cut_by(sig_to_send):
    """A factory whose start-up is an import that a signal cuts in half: a C extension's module initialization turns
    the Stop raised inside it into "ImportError: initialization failed" (seen: SIGINT during the modal node's
    start-up)."""
    def factory():
        try:
            if sig_to_send is not None:
                _signal_self(sig_to_send)
            raise ImportError('initialization failed')
        except Stop:
            raise ImportError('initialization failed')
    return factory


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_an_import_failing_because_of_a_stop_signal_exits_0(sig):
    from flexarm_sim.ros.node_main import run_node
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert run_node(_import_cut_by(sig), 'cut') == 0
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def test_an_import_failing_without_a_signal_keeps_its_traceback():
    from flexarm_sim.ros.node_main import run_node
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(ImportError, match='initialization failed'):
            run_node(_import_cut_by(None), 'broken')
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def test_a_running_program_waiting_for_a_stop_signal_wakes_at_once():
    """StopSignals.wait: the main loop's wait (the servo emulator's) ends on a signal within a poll slice, and after
    its timeout without one. The handler takes no lock (it used to set a threading.Event, whose lock Event.wait
    holds in the main thread between wake-ups: a signal landing there never returned)."""
    import threading
    sig = StopSignals().install()
    try:
        sig.started()
        t0 = time.monotonic()
        assert sig.wait(0.1) is False and time.monotonic() - t0 >= 0.1
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        t0 = time.monotonic()
        assert sig.wait(10.0) is True and sig.stopped and sig.signum == signal.SIGTERM
        assert time.monotonic() - t0 < 2.0
    finally:
        sig.restore()
