"""A serial link with faults, for the bridge's fail-safe tests: a pty-to-pty relay between the servos' port and
the port the bridge opens.

    servos (emulator pty) <--upstream fd-- FaultProxy --master fd--> new pty, its slave behind `link` <-- bridge

Both directions are relayed byte-exact by one thread (select); on demand the link is

* ``cut()``: the cable between adapter and servos is broken - the bridge's port stays open, every byte in
  either direction is lost (``restore()`` mends it);
* ``unplug()``: the adapter is pulled - the bridge's pty is closed (its reads fail: a lost port) and its path
  points nowhere; ``replug()`` makes a new pty under the same path (like a udev by-id link);
* ``drop(p, direction)``: each chunk read from one side is lost with probability p (seeded);
* ``delay(s)``: every chunk is held s seconds before it is passed on (order kept).

Every fault change is stamped (``events``: (monotonic time, what)); ``last_to_servos`` is the time the last chunk
began to pass to the servos' side (``deliveries``: every chunk passed to them, stamped before its write). CLOCK_MONOTONIC is system-wide, so the stamps compare with other processes' times.
"""
import errno
import fcntl
import os
import random
import select
import threading
import time
import tty
from collections import deque


def _nonblocking(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


class FaultProxy:
    def __init__(self, upstream, link, seed=0):
        self.link = link
        self.up = os.open(upstream, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        tty.setraw(self.up)
        self.master = self.slave = None
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.mode = 'pass'                  # 'pass' | 'cut' | 'unplugged'
        # a fault's stamp and a chunk's passage are ordered: a chunk passed before the cut is stamped before it (a
        # chunk checked before the cut and written 20 us after its stamp once failed 'nothing passed after the fault')
        self._relay = threading.Lock()
        self.drop_p = {'to_servos': 0.0, 'to_bridge': 0.0}
        self.hold = 0.0
        self._queue = deque()               # (due time, fd key, bytes) while delayed
        self.events = []
        self.counts = {'to_servos': 0, 'to_bridge': 0, 'lost': 0, 'dropped': 0}
        self.last_to_servos = None
        self.deliveries = []                # (time, bytes) of every chunk written to the servos' side
        self._wake_r, self._wake_w = os.pipe()
        self._run = True
        self._open_downstream()
        self._thread = threading.Thread(target=self._loop, name='fault-proxy', daemon=True)
        self._thread.start()

    # --- the bridge's side ---------------------------------------------------------------------------
    def _open_downstream(self):
        master, slave = os.openpty()
        tty.setraw(slave)
        _nonblocking(master)
        tmp = self.link + '.tmp'
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.ttyname(slave), tmp)
        os.replace(tmp, self.link)
        with self._lock:
            self.master, self.slave = master, slave

    def _close_downstream(self):
        with self._lock:
            fds, self.master, self.slave = (self.master, self.slave), None, None
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # --- faults ------------------------------------------------------------------------------------------
    def _event(self, what):
        t = time.monotonic()
        self.events.append((t, what))
        self._wake()
        return t

    def cut(self):
        with self._relay:
            self.mode = 'cut'
            return self._event('cut')

    def restore(self):
        self.mode = 'pass'
        return self._event('restore')

    def unplug(self):
        with self._relay:
            self.mode = 'unplugged'
            t = self._event('unplug')
        self._close_downstream()
        return t

    def replug(self):
        self._open_downstream()
        self.mode = 'pass'
        return self._event('replug')

    def drop(self, p, direction='to_servos'):
        self.drop_p[direction] = float(p)
        return self._event(f'drop {p} {direction}')

    def delay(self, seconds):
        self.hold = float(seconds)
        return self._event(f'delay {seconds}')

    def close(self):
        self._run = False
        self._wake()
        self._thread.join(2.0)
        self._close_downstream()
        for fd in (self.up, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wake(self):
        try:
            os.write(self._wake_w, b'x')
        except OSError:
            pass

    # --- relay ---------------------------------------------------------------------------------------------
    def _write(self, key, data):
        fd = self.up if key == 'to_servos' else self.master
        if fd is None:
            self.counts['lost'] += len(data)
            return
        view = memoryview(data)
        t_pass = time.monotonic()      # before the write: the servos cannot have the bytes earlier (stamped after
        deadline = t_pass + 0.05       # it, a descheduled relay stamped 2 ms after the emulator had received them)
        while view:
            try:
                view = view[os.write(fd, view):]
            except OSError as e:
                if e.errno == errno.EAGAIN and time.monotonic() < deadline:
                    time.sleep(0.0002)
                    continue
                self.counts['lost'] += len(view)
                return
        self.counts[key] += len(data)
        if key == 'to_servos':
            self.last_to_servos = t_pass
            self.deliveries.append((t_pass, len(data)))

    def _pass(self, key, data):
        with self._relay:
            if self.mode != 'pass':
                self.counts['lost'] += len(data)
                return
            if self.drop_p[key] and self._rng.random() < self.drop_p[key]:
                self.counts['dropped'] += len(data)
                return
            if self.hold > 0 or self._queue:
                self._queue.append((time.monotonic() + self.hold, key, data))
            else:
                self._write(key, data)

    def _loop(self):
        while self._run:
            with self._lock:
                master = self.master
            fds = [self.up, self._wake_r] + ([master] if master is not None else [])
            timeout = 0.05
            if self._queue:
                timeout = max(0.0, min(timeout, self._queue[0][0] - time.monotonic()))
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except (OSError, ValueError):         # the bridge's pty closed meanwhile (unplug)
                continue
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            for fd, key in ((master, 'to_servos'), (self.up, 'to_bridge')):
                if fd is None or fd not in ready:
                    continue
                try:
                    data = os.read(fd, 4096)
                except OSError:                   # EIO: nobody has the bridge's end open (yet)
                    time.sleep(0.001)
                    continue
                if data:
                    self._pass(key, data)
            now = time.monotonic()
            while self._queue and self._queue[0][0] <= now:
                _, key, data = self._queue.popleft()
                if self.mode == 'pass':
                    self._write(key, data)
                else:
                    self.counts['lost'] += len(data)
