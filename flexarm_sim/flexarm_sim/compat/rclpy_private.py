"""rclpy internals: the parameter overrides of a node, rcl wait sets on chosen entities, raw takes.

* ``node._parameter_overrides`` (rclpy.node.Node): the values the command line and the parameter files give a node,
  before they are declared. NodeParams reads it to refuse an unknown parameter at start (a typo in a YAML would
  otherwise be ignored) and to let a DERIVED default be computed after the file's value is known.
* ``rclpy.impl.implementation_singleton.rclpy_implementation.WaitSet`` and the handles' ``take_message(cls, raw)``:
  an rcl wait on just the hot subscriptions (and a guard condition) and the message taken serialized, with no
  executor (ros/hotpath.py, flexarm_bringup/recorder.py): rclpy's executors rebuild their wait set per callback.
"""
from __future__ import annotations

from . import CompatError


def parameter_overrides(node) -> dict:
    """The node's live dict {name: rclpy Parameter} of overrides not declared yet (NodeParams pops what it
    declares itself)."""
    overrides = getattr(node, '_parameter_overrides', None)
    if not isinstance(overrides, dict):
        raise CompatError('rclpy', 'Node._parameter_overrides (a dict of the overrides not declared yet)',
                          f'the node has {type(overrides).__name__}')
    return overrides


def _implementation():
    try:
        from rclpy.impl.implementation_singleton import rclpy_implementation
        return rclpy_implementation
    except ImportError as exc:
        raise CompatError('rclpy', 'rclpy.impl.implementation_singleton.rclpy_implementation', str(exc)) from exc


class RawWaitSet:
    """An rcl wait set on fixed subscriptions and guard conditions; ``wait(timeout_ns)`` returns the subscriptions
    with a message (each handle held in use while waited on)."""

    def __init__(self, context, subscriptions, guards=()):
        impl = _implementation()
        try:
            self._ws = impl.WaitSet(len(subscriptions), len(guards), 0, 0, 0, 0, context.handle)
        except (AttributeError, TypeError) as exc:
            raise CompatError('rclpy', 'rclpy_implementation.WaitSet(subs, guards, timers, clients, services, '
                                       'events, context)', str(exc)) from exc
        self._subs = [s.handle for s in subscriptions]
        self._guards = [g.handle for g in guards]
        self._by_pointer = {s.handle.pointer: s for s in subscriptions}

    def wait(self, timeout_ns: int) -> list:
        ws = self._ws
        ws.clear_entities()
        held = []
        try:
            for h in self._subs:
                h.__enter__()
                held.append(h)
                ws.add_subscription(h)
            for g in self._guards:
                g.__enter__()
                held.append(g)
                ws.add_guard_condition(g)
            ws.wait(int(timeout_ns))
            ready = ws.get_ready_entities('subscription')
        finally:
            for h in reversed(held):
                h.__exit__(None, None, None)
        by = self._by_pointer
        return [by[p] for p in ready if p in by]


    def take_next(self, subscription, timeout_ns: int):
        """(bytes, info) of the next message of `subscription` (one of this set's), waiting up to timeout_ns for it;
        None on timeout or a guard condition. One use of its handle for the take, the wait and the second take
        (the 1 kHz hot path: ros/hotpath.py)."""
        h = subscription.handle
        with h:
            got = h.take_message(subscription.msg_type, True)      # one already waiting: no wait at all
            if got is not None:
                return got
            ws = self._ws
            ws.clear_entities()
            ws.add_subscription(h)
            held = []
            try:
                for g in self._guards:
                    g.__enter__()
                    held.append(g)
                    ws.add_guard_condition(g)
                ws.wait(int(timeout_ns))
            finally:
                for g in reversed(held):
                    g.__exit__(None, None, None)
            if h.pointer not in ws.get_ready_entities('subscription'):
                return None
            return h.take_message(subscription.msg_type, True)


def take_serialized(subscription):
    """(bytes, message info dict) of the next message of a raw subscription, or None: no waiting."""
    h = subscription.handle
    with h:
        return h.take_message(subscription.msg_type, True)


def check() -> None:
    """Exercise every assumption above in a context of its own; CompatError naming the first that fails."""
    import time

    import rclpy
    from rclpy.guard_condition import GuardCondition
    from rclpy.qos import QoSProfile
    from std_msgs.msg import String

    context = rclpy.Context()
    rclpy.init(args=['--ros-args', '-p', 'flexarm_compat_probe:=7'], context=context)
    try:
        node = rclpy.create_node('flexarm_compat_probe', context=context, start_parameter_services=False)
        try:
            overrides = parameter_overrides(node)
            if 'flexarm_compat_probe' not in overrides or overrides['flexarm_compat_probe'].value != 7:
                raise CompatError('rclpy', 'Node._parameter_overrides', f'the command line override is not in it '
                                                                      f'({sorted(overrides)})')
            sub = node.create_subscription(String, 'flexarm_compat_probe', lambda _m: None, QoSProfile(depth=5),
                                           raw=True)
            pub = node.create_publisher(String, 'flexarm_compat_probe', QoSProfile(depth=5))
            guard = GuardCondition(callback=None, callback_group=None, context=context)
            waiter = RawWaitSet(context, [sub], [guard])
            guard.trigger()
            t0 = time.monotonic()
            woken = waiter.wait(5_000_000_000)
            if woken != [] or time.monotonic() - t0 > 2.5:
                raise CompatError('rclpy', 'WaitSet.wait / add_guard_condition', 'a triggered guard condition did not '
                                  f'end the wait alone (ready {woken}, {time.monotonic() - t0:.2f} s of a 5 s wait)')
            pub.publish(String(data='x'))
            ready = []
            for _ in range(50):                        # intra-process delivery takes a moment
                ready = waiter.wait(100_000_000)
                if ready:
                    break
            if ready != [sub]:
                raise CompatError('rclpy', 'WaitSet.wait / get_ready_entities', 'a published message did not wake '
                                                                              'its subscription')
            got = take_serialized(sub)
            if got is None or not isinstance(got[0], bytes) or not isinstance(got[1], dict):
                raise CompatError('rclpy', "the subscription handle's take_message(cls, raw=True)",
                                  f'it returned {type(got).__name__}')
            pub.publish(String(data='y'))
            got = waiter.take_next(sub, 5_000_000_000)
            if got is None or not isinstance(got[0], bytes):
                raise CompatError('rclpy', 'take_message / WaitSet (take_next)', 'a published message was not taken')
            guard.trigger()
            t0 = time.monotonic()
            if waiter.take_next(sub, 5_000_000_000) is not None or time.monotonic() - t0 > 2.5:
                raise CompatError('rclpy', 'WaitSet (take_next)', 'a guard condition did not end the wait with nothing')
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
