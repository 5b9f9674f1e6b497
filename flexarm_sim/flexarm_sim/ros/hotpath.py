"""Hot topics served without an executor: a subscription waited on with its own wait set, messages taken raw.

rclpy's SingleThreadedExecutor rebuilds its wait set and walks every entity of the node for each callback (a
hundred microseconds or more per message in Python); for the 1 kHz data path (states to the controllers, stamped
commands to a lock-step plant) that, plus a thread hand-off, was most of the round trip. `HotSubscription` puts
the subscription on the node itself (so `ros2 node info /plant` and rqt_graph show it on the node the launch file
names) in a callback group no executor ever waits on (`Detached`: rclpy's executors skip an entity whose group
says it cannot execute), and `take(timeout)` blocks in rcl's wait on just this subscription (and a guard condition
that `wake()` triggers), then takes the next message serialized. `HotLoop` runs a handler for every message in a
thread, optionally at a SCHED_FIFO priority (a controller's state thread: a CPU hog at normal priority cannot
delay its answer; it blocks in rcl's wait between messages, so it never hogs a core), and then the process's DDS
receive threads one priority below it (`ReceiveThreads`: a FIFO thread waiting for what a starved normal-priority
thread delivers waits as long as that thread is starved).
"""
from __future__ import annotations

import threading

from rclpy.callback_groups import CallbackGroup
from rclpy.guard_condition import GuardCondition
from ..common.scheduler import ReceiveThreads, fifo_report, set_thread_fifo
from ..compat.rclpy_private import RawWaitSet, take_serialized


class Detached(CallbackGroup):
    """A callback group no executor waits on or runs: its subscriptions are taken by a thread of their own."""

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


class HotSubscription:
    def __init__(self, node, msg_type, topic: str, qos):
        self.context = node.context
        self.node = node
        self.sub = node.create_subscription(msg_type, topic, lambda _m: None, qos, raw=True,
                                            callback_group=Detached())
        self.topic = self.sub.topic_name
        self.guard = GuardCondition(callback=None, callback_group=None, context=self.context)
        self._waiter = RawWaitSet(self.context, [self.sub], [self.guard])
        self.taken = 0

    def take_now(self):
        """A message already received (bytes), or None: no waiting."""
        got = take_serialized(self.sub)
        if got is None:
            return None
        self.taken += 1
        return got[0]

    def queued(self, limit=None):
        """The messages already received (bytes), taken one by one without waiting; at most `limit` (None: all)."""
        n = 0
        while limit is None or n < limit:
            data = self.take_now()
            if data is None:
                return
            n += 1
            yield data

    def take(self, timeout_s: float):
        """The next message (bytes), waiting up to timeout_s; None on timeout or wake()."""
        got = self._waiter.take_next(self.sub, int(timeout_s * 1e9))
        if got is None:
            return None
        self.taken += 1
        return got[0]

    def matched_publishers(self) -> int:
        return self.sub.get_publisher_count() if hasattr(self.sub, 'get_publisher_count') else 0

    def wake(self):
        """Make a pending take() return None now."""
        self.guard.trigger()

    def destroy(self):
        """After the thread taking from it has stopped (HotLoop.stop); the node's executor never touches it."""
        self.node.destroy_subscription(self.sub)
        self.guard.destroy()


class HotLoop:
    """A thread taking a HotSubscription's messages and calling handler(bytes) for each, until stop()."""

    def __init__(self, hot: HotSubscription, handler, name: str, on_error=None, priority: int = 0):
        self.hot, self.handler, self.on_error = hot, handler, on_error
        self.priority = priority               # SCHED_FIFO priority asked for (0: normal scheduling)
        self.priority_refused = None           # why the thread could not have it (None: granted or not asked)
        self.receive = ReceiveThreads(0)       # the DDS receive threads, raised once the thread has its priority
        self._started = threading.Event()
        self._running = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def granted_priority(self) -> int:
        """The SCHED_FIFO priority the thread runs at (0: normal scheduling, or not known yet: not started)."""
        return 0 if self.priority_refused or not self._started.is_set() else self.priority

    def start(self, timeout: float = 5.0) -> bool:
        """Start the thread; returns once it has its scheduling (priority_refused is then known): True, or False when
        it had not within `timeout` s (a starved process; granted_priority is 0 until it has)."""
        self._running = True
        self._thread.start()
        return self._started.wait(timeout)

    def start_reported(self, log, what: str, until_then: str) -> bool:
        """start(), and log(level, message) how it went: the thread not running 5 s after its start (`until_then`:
        what waits for it), or its SCHED_FIFO request's report (`realtime_priority`, fifo_report)."""
        if not self.start():
            log('warn', f'{what}: not running 5 s after its start (a starved process): {until_then}')
            return False
        report = fifo_report(what, 'realtime_priority', self.priority, self.priority_refused)
        if report is not None:
            log(*report)
        return True

    def stop(self):
        self._running = False
        self.hot.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self):
        self.priority_refused = set_thread_fifo(self.priority)
        self.receive = ReceiveThreads.beside(self.priority, self.priority_refused)
        self._started.set()
        take = self.hot.take
        while self._running:
            data = take(0.2)
            if data is None or not self._running:
                continue
            try:
                self.handler(data)
            except Exception as e:  # noqa: BLE001 - one bad message never ends the loop
                if self.on_error is not None:
                    self.on_error(e)
