"""Computations in a process of their own, at a lower scheduling priority (real time; no ROS).

Why a process. Planning a move is about a second of CPU (the Levenberg-Marquardt fit of planning/tip.py), a robust
gain-schedule cell ~45 ms (laws/modal.py), a hold cell more (controller/safe_mode.py). In a thread of the
controller's process they competed with the state thread for the interpreter and, on a loaded 2-core machine, for the
CPU: measured over DDS with the planner in a thread, the states were answered every 8-16 ms for the 2-3 s of planning,
and the holding law (designed for one 2 ms period) pumped the De Luca elbow mode from 0.4 to 16 rad/s in 75 ms - the
arm was lost before its move began; the designer thread, even at a third of the time, left the state thread 767-1776
states behind per move. In a process of its own the computation holds no lock the state thread needs; the thread
that waits for it blocks in a pipe read, without the interpreter lock. A computation for later (a plan: the move
starts after the pre-actuation lead) is niced by NICE and yields the CPU to the control loop; one the loop needs now
(a gain cell: the law uses the nearest designed cell meanwhile) is not - niced by 10 beside two CPU hogs its share
would be ~5 % of a core (scheduler weights 110 against 1024 a hog), and a move's 29 robust cells (~1.3 s of CPU)
would take ~25 s instead of ~6 s.

Protocol: two pipes to `python -m flexarm_control.controller.worker <fd in> <fd out> <module:server>` (a fresh
interpreter: none of the parent's threads, locks or DDS participants, and the parent's __main__ is not re-run as
multiprocessing's spawn would), framed by multiprocessing.connection. The parent sends the job (picklable: e.g. an
arm's spec, from which the worker builds the same ArmModel, its kernels from numba's cache); the worker calls
`server(job)`, which returns the request handler, and answers ('ready', None) - or ('failed', reason) and exits.
Then per request it answers `handler(request)` (('failed', repr) if the handler raised: the worker lives on). None,
or the parent's pipe closing (the parent died), ends it. It ignores SIGINT (the parent decides when it stops) and
exits without a traceback.
"""
from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

NICE = 10                    # a worker's default niceness increment: the control loop before the computation
START_TIMEOUT_S = 120.0      # s for a worker to import and build its model (a cold numba cache compiles)
STOP_GRACE_S = 0.1           # s a busy worker has to exit on its own when stopped (it is terminated after)


class WorkerProcessError(RuntimeError):
    """The worker process failed, exited or was stopped (not: its computation refused the request)."""


def _serve(conn_in, conn_out, server, nice=NICE):
    try:
        if nice:
            os.nice(nice)
    except OSError:
        pass
    try:
        job = conn_in.recv()
    except (EOFError, OSError):                         # the parent is gone
        return
    try:
        module, name = server.split(':')
        handle = getattr(importlib.import_module(module), name)(job)
    except Exception as e:  # noqa: BLE001 - reported to the parent, whose calls fail with it (OSError included)
        try:
            conn_out.send(('failed', f'the process could not start: {e!r}'))
        except OSError:
            pass
        return
    conn_out.send(('ready', None))
    while True:
        try:
            request = conn_in.recv()
        except (EOFError, OSError):                     # the parent is gone
            return
        if request is None:
            return
        try:
            reply = handle(request)
        except Exception as e:  # noqa: BLE001 - a computation's bug fails this request, the worker lives on
            reply = ('failed', repr(e))
        try:
            conn_out.send(reply)
        except OSError:
            return


class WorkerProcess:
    """One worker process serving `server` ('module:function', see the module docstring) with `job`. `call` blocks the
    calling thread (not the interpreter); calls from several threads are served one at a time. A failed process is
    stopped and the next call starts a new one; after `close` no call starts one."""

    error = WorkerProcessError           # raised when the process fails (subclasses name their computation)

    def __init__(self, server, job, what='worker', nice=NICE):
        self._server = server
        self.nice = int(nice)
        self._job = job
        self.what = what
        self._proc = None
        self._conn = None
        self._send_conn = None
        self._lock = threading.Lock()        # the process and its pipes
        self._call_lock = threading.RLock()  # one request in flight (a subclass may hold it around call)
        self._ready = False
        self._busy = False                   # a call is waiting for its answer
        self._closed = False
        self.starts = 0

    def start(self):
        """Start the process (it imports and builds its model in the background)."""
        with self._lock:
            if self._closed:
                raise self.error(f'the {self.what} process was closed')
            if self._proc is not None and self._proc.poll() is None:
                return
            from_parent, to_child = os.pipe()
            from_child, to_parent = os.pipe()
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            try:
                self._proc = subprocess.Popen([sys.executable, '-m', __name__, str(from_parent), str(to_parent),
                                               self._server, str(self.nice)],
                                              pass_fds=(from_parent, to_parent), env=env,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
            finally:
                os.close(from_parent)
                os.close(to_parent)
            self._send_conn = Connection(to_child, readable=False)
            self._conn = Connection(from_child, writable=False)
            self._ready = False
            self.starts += 1
            self._send_conn.send(self._job)
            self.on_start()

    def on_start(self):
        """Called (under the process lock) when a new process has been started."""

    def wait_ready(self, timeout):
        """Start the process and wait up to `timeout` s until it has imported and built its model: True once ready
        (False: not yet, or it failed - then stopped; a later call starts or waits again). A real-time owner waits
        before its loop runs: a worker's start-up is ~2.5 s of a core (interpreter, numpy/scipy/numba, the model and
        its kernels from the cache), which overlapping the first seconds of a move on the 2-core machine made the
        loop's states late (issue 28)."""
        with self._call_lock:
            self.start()
            with self._lock:
                conn = self._conn
            if self._ready:
                return True
            try:
                if not conn.poll(timeout):
                    return False
                kind, value = conn.recv()
            except (EOFError, OSError):
                self.stop()
                return False
            if kind != 'ready':
                self.stop()
                return False
            self._ready = True
            return True

    @property
    def pid(self):
        proc = self._proc
        return None if proc is None else proc.pid

    def _receive(self, conn, timeout):
        try:
            if not conn.poll(timeout):
                raise self.error(f'no answer from the {self.what} process within {timeout:g} s')
            return conn.recv()
        except (EOFError, OSError) as e:                 # exited, or stopped meanwhile (the pipe closed)
            raise self.error(f'the {self.what} process exited ({e!r})') from e

    def call(self, request, timeout=600.0):
        """The reply (kind, value) to `request`; `self.error` if the process failed, exited or was stopped meanwhile
        (it is stopped: the next call starts a new one)."""
        with self._call_lock:
            self.start()
            with self._lock:
                send, conn = self._send_conn, self._conn
                self._busy = True
            try:
                if send is None:
                    raise self.error(f'the {self.what} process was stopped')
                if not self._ready:
                    kind, value = self._receive(conn, START_TIMEOUT_S)
                    if kind != 'ready':
                        raise self.error(value)
                    self._ready = True
                send.send(request)
                return self._receive(conn, timeout)
            except WorkerProcessError as e:
                self.stop()
                raise self.error(str(e)) from e
            except OSError as e:                         # the request's pipe broken: the process died unseen
                self.stop()
                raise self.error(f'the {self.what} process exited ({e!r})') from e
            finally:
                self._busy = False

    def stop(self, timeout=5.0):
        """End the process: an idle worker exits on the None it is sent (waited for up to `timeout`); a busy one -
        starting or computing, seconds of niced CPU on a loaded machine: a controller's exit on SIGINT waited for a
        plan, 2.5 s once, and for its designer threads, 6.3 s in all once - is terminated after STOP_GRACE_S: its
        answer is not wanted any more. A call waiting for it fails with `self.error`."""
        with self._lock:
            proc, self._proc = self._proc, None
            conns = (self._send_conn, self._conn)
            self._conn = self._send_conn = None
            busy = self._busy or not self._ready
        if proc is None:
            return
        try:
            conns[0].send(None)
        except OSError:
            pass
        try:
            proc.wait(STOP_GRACE_S if busy else timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()                      # SIGTERM's default action: no Python code runs, no traceback
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(1.0)
        for c in conns:
            if c is not None:
                c.close()

    def close(self):
        """Stop the process for good: later calls fail at once instead of starting a new one."""
        with self._lock:
            self._closed = True
        self.stop()


if __name__ == '__main__':
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent decides when the worker stops
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False), sys.argv[3],
           int(sys.argv[4]))
