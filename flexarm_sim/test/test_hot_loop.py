"""ros/hotpath.HotLoop without a node: the state thread's start and the priority it reports (no DDS)."""
import queue
import threading

from flexarm_sim.ros import hotpath


class _Hot:
    """A HotSubscription's interface: take(timeout) -> bytes or None, wake()."""

    def __init__(self):
        self.q = queue.Queue()

    def take(self, timeout):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def wake(self):
        self.q.put(None)


def test_a_thread_that_has_not_started_reports_no_priority(monkeypatch):
    """HotLoop.start returns False when the thread has not got its scheduling within the timeout (a starved process),
    and granted_priority is 0 until it has - it claimed the priority asked for before; then the thread runs and
    reports what it was granted, and hands every message to the handler."""
    release = threading.Event()

    def slow_fifo(priority):
        release.wait(10.0)
        return None                          # granted
    monkeypatch.setattr(hotpath, 'set_thread_fifo', slow_fifo)
    hot, got, handled = _Hot(), [], threading.Event()
    loop = hotpath.HotLoop(hot, lambda b: (got.append(b), handled.set()), 'test-states', priority=40)
    try:
        assert loop.start(timeout=0.05) is False
        assert loop.granted_priority == 0
        release.set()
        assert loop._started.wait(5.0)
        assert loop.granted_priority == 40
        hot.q.put(b'state')
        assert handled.wait(5.0) and got == [b'state']
    finally:
        loop.stop()


def test_a_refused_priority_is_reported_as_normal_scheduling(monkeypatch):
    monkeypatch.setattr(hotpath, 'set_thread_fifo', lambda p: 'Operation not permitted')
    loop = hotpath.HotLoop(_Hot(), lambda b: None, 'test-states', priority=40)
    try:
        assert loop.start() is True
        assert loop.granted_priority == 0 and loop.priority_refused == 'Operation not permitted'
    finally:
        loop.stop()
