"""Who publishes what a node obeys (no ROS here): a second publisher of commands — a rogue process beside the
controller — must not go unnoticed (issue 28 item 5).

The node hands `update(topic, endpoints)` the publishers the ROS graph shows on each watched topic (node name and
endpoint GID, ros/graph.py); more than `expected` publishers on a topic is a conflict: the change is returned as a
warning to log (naming every publisher and its GID), `conflicts` counts each time a topic goes from at most
`expected` publishers to more, and `status()` gives the /diagnostics level, message and values while it lasts.
Detection is by discovery, so it sees a publisher whether or not it has sent anything yet; it does not authenticate
anyone (that is DDS-Security's job: flexarm_bringup/security.py).
"""
from __future__ import annotations


def gid_text(gid) -> str:
    """An endpoint GID (bytes or a list of byte values) as hex."""
    return bytes(int(b) & 0xFF for b in gid).hex()


class SourceMonitor:
    def __init__(self, topics, expected: int = 1, what: str = 'commands'):
        self.topics = tuple(dict.fromkeys(topics))
        self.expected = int(expected)
        self.what = what
        self.current = {t: () for t in self.topics}     # topic -> ((node, gid hex), ...) sorted
        self.conflicts = 0

    def update(self, topic: str, endpoints) -> str:
        """Record the publishers now on `topic`; a warning text when they changed and are more than expected."""
        eps = tuple(sorted({(str(n), str(g)) for n, g in endpoints}))
        prev = self.current.get(topic, ())
        self.current[topic] = eps
        if len(eps) <= self.expected or eps == prev:
            return ''
        if len(prev) <= self.expected:
            self.conflicts += 1
        return self.describe(topic, eps)

    def describe(self, topic, eps) -> str:
        return (f'{len(eps)} publishers of {self.what} on {topic}: ' + ', '.join(f'{n} (gid {g})' for n, g in eps)
                + f' — expected {self.expected}: another process is publishing here')

    def status(self):
        """(level 'ok' | 'warn', message ('' when ok), diagnostics values)."""
        over = [(t, eps) for t, eps in self.current.items() if len(eps) > self.expected]
        values = {f'publishers {t}': len(eps) for t, eps in self.current.items()}
        values[f'{self.what.replace(" ", "_")}_source_conflicts'] = self.conflicts
        if not over:
            return 'ok', '', values
        return 'warn', '; '.join(self.describe(t, eps) for t, eps in over), values
