"""Record ROS 2 topics into a rosbag2-compatible MCAP file (no rosbag2 needed).

`Recorder(node, path, topics)` subscribes the given rclpy node to each (topic, type) with *raw*
(serialized CDR) subscriptions and writes every message unchanged, as `ros2 bag record -s mcap` does:

- MCAP profile ``ros2``; one schema per type, encoding ``ros2msg``, named ``pkg/msg/Type``, whose text is
  the type's .msg file followed by every nested definition (each preceded by a line of 80 ``=`` and
  ``MSG: pkg/msg/Type``) — rosbag2's "complete message definition" (rosbag2 docs/message_definition_encoding.md);
- one channel per topic, message encoding ``cdr``, channel metadata ``offered_qos_profiles`` (rosbag2's
  YAML form) of the publishers seen when the subscription was made;
- message ``log_time`` = reception time on the node's clock (simulated time when the node has
  ``use_sim_time``, as `ros2 bag record --use-sim-time`), ``publish_time`` = the DDS source timestamp
  (system clock of the publisher), ``sequence`` = per-channel count from 1.

The .msg text comes from the installed interface packages (ament index: share/<pkg>/msg/<Type>.msg),
so custom types (flexarm_msgs) work as soon as their package is on AMENT_PREFIX_PATH.

Usage::

    rec = Recorder(node, 'run.mcap', [('/flexarm/state', 'flexarm_msgs/msg/FlexState'),
                                      ('/joint_states', JointState)])
    ... spin the node ...
    rec.close()          # or use it as a context manager; rec.counts has messages per topic

Thread safety: callbacks may run on any executor thread; writes are serialized by a lock.
"""
from __future__ import annotations

import importlib
import os
import re
import threading
import time

from mcap.well_known import MessageEncoding, SchemaEncoding
from mcap.writer import CompressionType, Writer

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
class Recorder:
    """Record topics of `node` into the MCAP file `path` (see the module docstring).

    topics: iterable of (topic, type) or (topic, type, qos) with type an rclpy message class or a
    'pkg/msg/Type' string; qos None = chosen from the publishers present (reliable unless all are
    best-effort). `clock`: an rclpy Clock for log times (default: the node's clock).
    """

    def __init__(self, node, path, topics, *, depth=1000, clock=None, compression='zstd',
                 chunk_size=1024 * 1024, metadata=None, find_msg_file=_default_msg_file):
        self.node = node
        self.path = os.fspath(path)
        self.clock = clock or node.get_clock()
        self.counts = {}
        self._lock = threading.Lock()
        self._closed = False
        self._subs = []
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
        definitions = {name: message_definition(name, find_msg_file) for _, _, name, _ in entries}

        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        self._stream = open(self.path, 'wb')
        self._writer = Writer(self._stream, chunk_size=chunk_size, compression=comp)
        self._writer.start(profile='ros2', library='flexarm_bringup.recorder')
        schema_ids = {name: self._writer.register_schema(name=name, encoding=SchemaEncoding.ROS2,
                                                         data=text.encode())
                      for name, text in definitions.items()}
        if metadata:
            for name, data in metadata.items():
                self._writer.add_metadata(name, {str(k): str(v) for k, v in data.items()})
        self._channels = {}
        self._sequence = {}
        for topic, cls, name, qos in entries:
            auto_qos, offered = _subscription_qos(node, topic, depth)
            channel_id = self._writer.register_channel(
                topic=topic, message_encoding=MessageEncoding.CDR, schema_id=schema_ids[name],
                metadata={'offered_qos_profiles': _qos_yaml(offered)})
            self._channels[topic] = channel_id
            self._sequence[topic] = 0
            self.counts[topic] = 0
            sub = node.create_subscription(cls, topic, self._make_callback(topic), qos or auto_qos, raw=True)
            self._subs.append(sub)

    def _make_callback(self, topic):
        channel_id = self._channels[topic]

        def callback(data, info):
            log_time = self.clock.now().nanoseconds
            publish_time = int(info.get('source_timestamp') or 0) or log_time
            with self._lock:
                if self._closed:
                    return
                self._sequence[topic] += 1
                self._writer.add_message(channel_id=channel_id, log_time=log_time, publish_time=publish_time,
                                         sequence=self._sequence[topic], data=bytes(data))
                self.counts[topic] += 1
        return callback

    @property
    def topics(self):
        return list(self._channels)

    def add_metadata(self, name: str, data: dict):
        with self._lock:
            if not self._closed:
                self._writer.add_metadata(name, {str(k): str(v) for k, v in data.items()})

    def close(self):
        """Stop recording (subscriptions destroyed) and finish the file; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sub in self._subs:
            try:
                self.node.destroy_subscription(sub)
            except Exception:       # node already destroyed
                pass
        self._subs = []
        with self._lock:
            self._writer.finish()
            self._stream.close()

    stop = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
