"""Record ROS 2 topics into a rosbag2-compatible MCAP file (no rosbag2 needed).

`Recorder(node, path, topics)` subscribes the given rclpy node to each (topic, type) with *raw*
(serialized CDR) subscriptions and writes every message unchanged, as `ros2 bag record -s mcap` does:

- MCAP profile ``ros2``; one schema per type, encoding ``ros2msg``, named ``pkg/msg/Type``, whose text is
  the type's .msg file followed by every nested definition (each preceded by a line of 80 ``=`` and
  ``MSG: pkg/msg/Type``) — rosbag2's "complete message definition" (rosbag2 docs/message_definition_encoding.md);
- one channel per topic, created with the topic's first message (a topic nobody publishes gets no channel), message
  encoding ``cdr``, channel metadata ``offered_qos_profiles``: the QoS of the topic's publishers in rosbag2's YAML
  form (rosbag2_storage/qos.cpp, version 9: policy names, durations as sec/nsec);
- message ``log_time`` = reception time on the node's clock (simulated time when the node has
  ``use_sim_time``, as `ros2 bag record --use-sim-time`), ``publish_time`` = the DDS source timestamp
  (system clock of the publisher), ``sequence`` = per-channel count from 1.

One sample, one message: a message of a stamped type (a std_msgs/Header or builtin_interfaces/Time anywhere in it)
byte-identical to the previous one on its topic is the same sample sent again — a paused or waiting lock-step plant
re-sends its state, the estimator and the controller answer re-sends alike — and is counted (`resends`), not
written. So a lock-step run recorded from its first step gives the same file content every time.

Nothing lost unseen: DDS numbers every sample a publisher writes; a gap in those numbers between two messages the
recorder took is a sample that never reached it (a reader that fell behind a publisher's history), counted per topic
(`lost`, `problems()`). The counts, re-sends and losses go into the file's `flexarm_recording` metadata at close.

The messages are taken by a thread of the recorder's own, waiting on all its subscriptions at once (rcl wait set,
messages taken serialized): no executor is involved (the subscriptions are in a callback group no executor runs,
flexarm_sim/ros/hotpath.Detached), so a recording keeps up with a lock-step plant, and `close()` never destroys an
entity an executor thread may be waiting on (that raced: "InvalidHandle: cannot use Destroyable because destruction
was requested" in the spin thread at exit).

The .msg text comes from the installed interface packages (ament index: share/<pkg>/msg/<Type>.msg),
so custom types (flexarm_msgs) work as soon as their package is on AMENT_PREFIX_PATH.

Usage::

    rec = Recorder(node, 'run.mcap', [('/flexarm/state', 'flexarm_msgs/msg/FlexState'),
                                      ('/joint_states', JointState)])
    ...
    rec.close()          # the file is complete; rec.counts, rec.report(), rec.problems()
    rec.release()        # once no thread spins the node (or destroy the node)
"""
from __future__ import annotations

import importlib
import os
import re
import threading
import time

from mcap.well_known import MessageEncoding, SchemaEncoding
from mcap.writer import CompressionType, Writer

from flexarm_sim.compat.rclpy_private import RawWaitSet, take_serialized

PRIMITIVE_TYPES = frozenset((
    'bool', 'byte', 'char', 'float32', 'float64', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32',
    'int64', 'uint64', 'string', 'wstring',
))
DELIMITER = '=' * 80
_ARRAY_SUFFIX = re.compile(r'\[[^\]]*\]$')
_BOUNDED_STRING = re.compile(r'^(w?string)<=\d+$')


class RecorderError(RuntimeError):
    pass


# ------------------------------------------------------------------------------ message definitions
def normalize_type_name(name: str) -> str:
    """'pkg/Type' or 'pkg/msg/Type' -> 'pkg/msg/Type'."""
    parts = name.strip().split('/')
    if len(parts) == 2:
        return f'{parts[0]}/msg/{parts[1]}'
    if len(parts) == 3 and parts[1] == 'msg':
        return name.strip()
    raise RecorderError(f'not a message type name: {name!r}')


def type_name_of(msg_type) -> str:
    """'pkg/msg/Type' of an rclpy message class or of a type name string."""
    if isinstance(msg_type, str):
        return normalize_type_name(msg_type)
    module = msg_type.__module__.split('.')
    if len(module) < 2 or module[1] != 'msg':
        raise RecorderError(f'not a ROS 2 message class: {msg_type!r}')
    return f'{module[0]}/msg/{msg_type.__name__}'


def message_class(msg_type):
    """rclpy message class from a class or a 'pkg/msg/Type' name."""
    if not isinstance(msg_type, str):
        return msg_type
    pkg, _, name = normalize_type_name(msg_type).split('/')
    try:
        return getattr(importlib.import_module(f'{pkg}.msg'), name)
    except (ImportError, AttributeError) as e:
        raise RecorderError(f'message type {msg_type!r} is not importable: {e}') from None


def _default_msg_file(type_name: str) -> str:
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    pkg, sub, name = type_name.split('/')
    try:
        share = get_package_share_directory(pkg)
    except PackageNotFoundError:
        raise RecorderError(f'package {pkg!r} of {type_name} not found in the ament index '
                            '(is AMENT_PREFIX_PATH set?)') from None
    path = os.path.join(share, sub, name + '.msg')
    if not os.path.isfile(path):
        raise RecorderError(f'no message definition file {path}')
    return path


def field_types(msg_text: str, package: str) -> list:
    """Non-primitive field types ('pkg/msg/Type') of a .msg text, in order of first use."""
    out = []
    for line in msg_text.splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        if len(tokens) < 2:
            continue
        ftype = _ARRAY_SUFFIX.sub('', tokens[0])       # 'T[]', 'T[3]', 'T[<=3]' -> 'T'
        if _BOUNDED_STRING.match(ftype) or ftype in PRIMITIVE_TYPES:
            continue
        if '=' in tokens[1] or (len(tokens) > 2 and tokens[2].startswith('=')):
            continue                                    # constant (always primitive, defensive)
        if '/' not in ftype:
            ftype = f'{package}/{ftype}'                # same-package reference
        full = normalize_type_name(ftype)
        if full not in out:
            out.append(full)
    return out


def message_definition(msg_type, find_msg_file=_default_msg_file) -> str:
    """rosbag2's ``ros2msg`` complete definition of a type: its .msg text, then each nested type's
    text once, each preceded by the 80 '=' delimiter line and 'MSG: pkg/msg/Type'."""
    root = type_name_of(msg_type)
    texts = {}
    order = []
    stack = [root]
    while stack:                                        # depth-first, first-use order
        name = stack.pop(0)
        if name in texts:
            continue
        with open(find_msg_file(name), encoding='utf-8') as f:
            text = f.read()
        texts[name] = text
        order.append(name)
        deps = [d for d in field_types(text, name.split('/')[0]) if d not in texts]
        stack = deps + stack
    parts = [texts[root].rstrip('\n')]
    for name in order[1:]:
        parts.append(f'{DELIMITER}\nMSG: {name}\n{texts[name].rstrip(chr(10))}')
    return '\n'.join(parts) + '\n'


# ------------------------------------------------------------------------------ QoS metadata
def _qos_yaml(profiles) -> str:
    """rosbag2's offered_qos_profiles YAML of a list of rclpy QoSProfile."""
    if not profiles:
        return ''
    lines = []
    for q in profiles:
        lines += [
            f'- history: {q.history.name.lower()}',
            f'  depth: {int(q.depth)}',
            f'  reliability: {q.reliability.name.lower()}',
            f'  durability: {q.durability.name.lower()}',
            '  deadline:', f'    sec: {q.deadline.nanoseconds // 10**9}',
            f'    nsec: {q.deadline.nanoseconds % 10**9}',
            '  lifespan:', f'    sec: {q.lifespan.nanoseconds // 10**9}',
            f'    nsec: {q.lifespan.nanoseconds % 10**9}',
            f'  liveliness: {q.liveliness.name.lower()}',
            '  liveliness_lease_duration:',
            f'    sec: {q.liveliness_lease_duration.nanoseconds // 10**9}',
            f'    nsec: {q.liveliness_lease_duration.nanoseconds % 10**9}',
            f'  avoid_ros_namespace_conventions: {str(bool(q.avoid_ros_namespace_conventions)).lower()}',
        ]
    return '\n'.join(lines) + '\n'


def _subscription_qos(node, topic, depth):
    """Reliable keep-last(depth) unless every publisher already seen is best-effort (a reliable
    reader would not match those); durability transient-local if all publishers offer it."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    pubs = [i.qos_profile for i in node.get_publishers_info_by_topic(topic)]
    reliability = ReliabilityPolicy.RELIABLE
    durability = DurabilityPolicy.VOLATILE
    if pubs and all(p.reliability == ReliabilityPolicy.BEST_EFFORT for p in pubs):
        reliability = ReliabilityPolicy.BEST_EFFORT
    if pubs and all(p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in pubs):
        durability = DurabilityPolicy.TRANSIENT_LOCAL
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=reliability,
                      durability=durability), pubs


# ------------------------------------------------------------------------------ recorder
STAMP_TYPES = frozenset(('std_msgs/msg/Header', 'builtin_interfaces/msg/Time'))


def is_stamped(definition: str, type_name: str) -> bool:
    """Does a message of this type carry a stamp anywhere (a std_msgs/Header or a builtin_interfaces/Time field,
    nested included)? Such a message byte-identical to its predecessor on a topic is the same sample sent again."""
    types = {type_name}
    current = type_name.split('/')[0]
    for line in definition.splitlines():
        if line.startswith('MSG: '):
            current = line[5:].strip().split('/')[0]
            continue
        types.update(field_types(line, current))
    return bool(types & STAMP_TYPES)


class _Topic:
    """What the recorder keeps per topic."""

    __slots__ = ('name', 'cls', 'type_name', 'sub', 'stamped', 'channel', 'last', 'count', 'resends', 'lost',
                 'seq', 'sequence')

    def __init__(self, name, cls, type_name, sub, stamped):
        self.name, self.cls, self.type_name, self.sub, self.stamped = name, cls, type_name, sub, stamped
        self.channel = None          # MCAP channel id, registered with the first message
        self.last = None             # the last message written (stamped types: a re-send is dropped)
        self.count = self.resends = self.lost = self.sequence = 0
        self.seq = {}                # publisher gid -> last publication sequence number seen


class Recorder:
    """Record topics of `node` into the MCAP file `path` (see the module docstring).

    topics: iterable of (topic, type) or (topic, type, qos) with type an rclpy message class or a
    'pkg/msg/Type' string; qos None = chosen from the publishers present (reliable unless all are
    best-effort), keep-last `depth` (deep: a reader's history costs memory only while it lags). `clock`: an rclpy
    Clock for log times (default: the node's clock).
    """

    def __init__(self, node, path, topics, *, depth=100000, clock=None, compression='zstd',
                 chunk_size=1024 * 1024, metadata=None, find_msg_file=_default_msg_file):
        from rclpy.guard_condition import GuardCondition
        from flexarm_sim.ros.hotpath import Detached
        self.node = node
        self.path = os.fspath(path)
        self.clock = clock or node.get_clock()
        self._lock = threading.Lock()
        self._closed = False
        comp = {'zstd': CompressionType.ZSTD, 'lz4': CompressionType.LZ4,
                'none': CompressionType.NONE, None: CompressionType.NONE}[compression]
        entries = []
        for entry in topics:
            topic, msg_type = entry[0], entry[1]
            qos = entry[2] if len(entry) > 2 else None
            if not topic.startswith('/'):
                raise RecorderError(f'topic names must be absolute: {topic!r}')
            cls = message_class(msg_type)
            entries.append((topic, cls, type_name_of(cls), qos))
        if len({e[0] for e in entries}) != len(entries):
            raise RecorderError('a topic is listed twice')
        # message definitions first: a missing .msg fails before the file is created
        self._definitions = {name: message_definition(name, find_msg_file) for _, _, name, _ in entries}

        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        self._stream = open(self.path, 'wb')
        self._writer = Writer(self._stream, chunk_size=chunk_size, compression=comp)
        self._writer.start(profile='ros2', library='flexarm_bringup.recorder')
        self._schemas = {}
        if metadata:
            for name, data in metadata.items():
                self._writer.add_metadata(name, {str(k): str(v) for k, v in data.items()})
        self._topics = []
        group = Detached()                 # no executor takes these: the recorder's thread does (module docstring)
        for topic, cls, name, qos in entries:
            sub = node.create_subscription(cls, topic, lambda _m: None, qos or _subscription_qos(node, topic, depth)[0],
                                           raw=True, callback_group=group)
            self._topics.append(_Topic(topic, cls, name, sub, is_stamped(self._definitions[name], name)))
        self._guard = GuardCondition(callback=None, callback_group=None, context=node.context)
        self._running = True
        self._thread = threading.Thread(target=self._run, name='recorder', daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the recording thread
    def _run(self):
        waiter = RawWaitSet(self.node.context, [t.sub for t in self._topics], [self._guard])
        by_sub = {id(t.sub): t for t in self._topics}
        while self._running:
            ready = waiter.wait(200_000_000)
            if not self._running:
                return
            for sub in ready:
                self._drain(by_sub[id(sub)])

    def _drain(self, t):
        """Take every message waiting on t's subscription and write it."""
        while self._running:
            got = take_serialized(t.sub)
            if got is None:
                return
            self._write(t, got[0], got[1])

    def _write(self, t, data, info):
        log_time = self.clock.now().nanoseconds
        publish_time = int(info.get('source_timestamp') or 0) or log_time
        gid = (info.get('publisher_gid') or {}).get('data')
        seq = info.get('publication_sequence_number')
        with self._lock:
            if self._closed:
                return
            if gid is not None and seq:
                last = t.seq.get(gid)
                if last is not None and seq > last + 1:
                    t.lost += seq - last - 1       # samples its publisher wrote that never reached the recorder
                t.seq[gid] = seq if last is None else max(last, seq)
            data = bytes(data)
            if t.stamped and data == t.last:
                t.resends += 1                     # the same sample again (a paused or waiting plant re-sends)
                return
            if t.channel is None:
                t.channel = self._register(t)
            t.sequence += 1
            self._writer.add_message(channel_id=t.channel, log_time=log_time, publish_time=publish_time,
                                     sequence=t.sequence, data=data)
            t.last = data if t.stamped else None
            t.count += 1

    def _register(self, t) -> int:
        """The MCAP channel of a topic at its first message, with the QoS its publishers offer (known by then)."""
        if t.type_name not in self._schemas:
            self._schemas[t.type_name] = self._writer.register_schema(
                name=t.type_name, encoding=SchemaEncoding.ROS2, data=self._definitions[t.type_name].encode())
        try:
            offered = [i.qos_profile for i in self.node.get_publishers_info_by_topic(t.name)]
        except Exception:  # noqa: BLE001 - the graph is not available (shutting down): no profiles
            offered = []
        return self._writer.register_channel(topic=t.name, message_encoding=MessageEncoding.CDR,
                                             schema_id=self._schemas[t.type_name],
                                             metadata={'offered_qos_profiles': _qos_yaml(offered)})

    # ------------------------------------------------------------------ what was recorded
    @property
    def counts(self) -> dict:
        """{topic: messages written} of the topics that had any (a topic nobody published has no channel)."""
        with self._lock:
            return {t.name: t.count for t in self._topics if t.count}

    @property
    def topics(self):
        """The topics that have a channel (a message was recorded)."""
        return [t.name for t in self._topics if t.channel is not None]

    @property
    def recorded(self):
        """Every topic the recorder subscribes."""
        return [t.name for t in self._topics]

    def report(self) -> dict:
        """{topic: {'messages', 'resends', 'lost'}} of every topic that had messages."""
        with self._lock:
            return {t.name: {'messages': t.count, 'resends': t.resends, 'lost': t.lost}
                    for t in self._topics if t.count or t.lost}

    def problems(self) -> list:
        """Why the recording is incomplete (messages lost between a publisher and the recorder), or []."""
        return [f'{name}: {r["lost"]} message(s) lost (their publisher wrote them; the recorder never got them)'
                for name, r in self.report().items() if r['lost']]

    def matched(self) -> bool:
        """Is every subscription matched with every publisher the graph knows on its topic?"""
        for t in self._topics:
            n = len(self.node.get_publishers_info_by_topic(t.name))
            if t.sub.get_publisher_count() < n:
                return False
        return True

    def wait_for(self, counts: dict, timeout: float) -> bool:
        """Wait until at least counts[topic] messages are recorded on each topic; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            have = self.counts
            if all(have.get(k, 0) >= v for k, v in counts.items()):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def add_metadata(self, name: str, data: dict):
        with self._lock:
            if not self._closed:
                self._writer.add_metadata(name, {str(k): str(v) for k, v in data.items()})

    def close(self):
        """Stop recording and finish the file; idempotent. The subscriptions stay (no executor ever takes them):
        `release()` or the node's destruction removes them once nothing spins the node."""
        with self._lock:
            if self._closed:
                return
        self._running = False
        self._guard.trigger()
        self._thread.join(timeout=5.0)
        report = self.report()
        with self._lock:
            self._closed = True
            self._writer.add_metadata('flexarm_recording', {
                f'{name}.{k}': str(v) for name, r in report.items() for k, v in r.items()})
            self._writer.finish()
            self._stream.close()

    stop = close

    def release(self):
        """Destroy the subscriptions (after close(), when no thread spins the node)."""
        self.close()
        for t in self._topics:
            try:
                self.node.destroy_subscription(t.sub)
            except Exception:  # noqa: BLE001 - node already destroyed
                pass
        self._guard.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
