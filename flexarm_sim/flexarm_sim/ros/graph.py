"""The ROS graph as the ROS-free monitors need it (common/sources.py): who publishes on a topic."""
from __future__ import annotations

from ..common.sources import gid_text


def publishers(node, topic: str):
    """[(fully qualified node name, GID hex)] of the publishers on `topic` (resolved as the node resolves it)."""
    name = node.resolve_topic_name(topic)
    out = []
    for info in node.get_publishers_info_by_topic(name):
        ns = info.node_namespace.rstrip('/')
        out.append((f'{ns}/{info.node_name}', gid_text(info.endpoint_gid)))
    return out


def monitor(node, topics, expected: int = 1, what: str = 'commands'):
    """A SourceMonitor of these topics as this node resolves them (/armB/effort_controller/commands)."""
    from ..common.sources import SourceMonitor
    return SourceMonitor([node.resolve_topic_name(t) for t in topics], expected, what)


def watch(node, mon, log_warning) -> tuple:
    """Update a SourceMonitor from the graph (every watched topic); log each new conflict; its status()."""
    for topic in mon.topics:
        text = mon.update(topic, publishers(node, topic))
        if text:
            log_warning(text)
    return mon.status()
