"""Planning in a process of its own, at a lower scheduling priority (real time; no ROS).

Why a process. Planning a move is about a second of CPU (the Levenberg-Marquardt fit of planning/tip.py). In a thread
of the controller's process it competed with the state thread for the interpreter and, on a loaded 2-core machine,
for the CPU: measured over DDS with the planner in a thread, the states were answered every 8-16 ms for the 2-3 s of
planning, and the holding law (designed for one 2 ms period) pumped the De Luca elbow mode from 0.4 to 16 rad/s in
75 ms - the arm was lost before its move began. In a process of its own, niced by NICE, the planner holds no lock the
state thread needs and yields the CPU to it.

Protocol: two pipes to a worker started as `python -m flexarm_control.controller.plan_worker` (a fresh interpreter:
none of the parent's threads, locks or DDS participants, and the parent's __main__ is not re-run as multiprocessing's
spawn would), framed by multiprocessing.connection. The parent sends the job (`TipTracking.plan_job`: the arm's spec,
dt and options - the worker builds the same ArmModel, its kernels from numba's cache), then per move (reference,
t_now, z0, zd0), and receives ('plan', Plan), ('refused', reason) for a move that cannot be planned
(planning.PlanError) or ('failed', repr) for anything else. The worker plans with the law's own `plan_with`, ignores
SIGINT (the parent stops it by sending None, and terminates it if it is busy; when the parent dies its pipe closes)
and exits without a traceback.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

NICE = 10                    # the worker's niceness increment: the control loop before the planner
START_TIMEOUT_S = 120.0      # s for a worker to import and build its model (a cold numba cache compiles)
STOP_GRACE_S = 0.1           # s a busy worker has to exit on its own when stopped (it is terminated after)


class PlanningProcessError(RuntimeError):
    """The planning process failed or exited (not: the move cannot be planned)."""


def _serve(conn_in, conn_out):
    try:
        os.nice(NICE)
    except OSError:
        pass
    try:
        job = conn_in.recv()
        from flexarm_sim.model import load_model

        from ..laws.tip_tracking import plan_with
        from ..planning import PlanError
        spec, dt, options = job
        model = load_model(spec)
    except (EOFError, OSError):
        return
    except Exception as e:  # noqa: BLE001 - reported to the parent, which refuses moves with it
        conn_out.send(('failed', f'the planning process could not start: {e!r}'))
        return
    conn_out.send(('ready', None))
    while True:
        try:
            request = conn_in.recv()
        except (EOFError, OSError):                     # the parent is gone
            return
        if request is None:
            return
        reference, t_now, z0, zd0 = request
        try:
            reply = ('plan', plan_with(model, dt, options, reference, t_now, z0, zd0))
        except PlanError as e:
            reply = ('refused', str(e))
        except Exception as e:  # noqa: BLE001 - a planner bug refuses the move, the worker lives on
            reply = ('failed', repr(e))
        try:
            conn_out.send(reply)
        except OSError:
            return


class PlanWorker:
    """The planning process of one law (`law.plan_job()`); `plan` blocks the calling thread (not the interpreter)."""

    def __init__(self, job):
        self._job = job
        self._proc = None
        self._conn = None
        self._send_conn = None
        self._lock = threading.Lock()
        self._ready = False
        self._busy = False                  # a plan() call is waiting for its answer
        self.starts = 0

    def start(self):
        """Start the process (it imports and builds its model in the background)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            from_parent, to_child = os.pipe()
            from_child, to_parent = os.pipe()
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            try:
                self._proc = subprocess.Popen([sys.executable, '-m', __name__, str(from_parent), str(to_parent)],
                                              pass_fds=(from_parent, to_parent), env=env, stdin=subprocess.DEVNULL,
                                              start_new_session=True)
            finally:
                os.close(from_parent)
                os.close(to_parent)
            self._send_conn = Connection(to_child, readable=False)
            self._conn = Connection(from_child, writable=False)
            self._ready = False
            self.starts += 1
            self._send_conn.send(self._job)

    @staticmethod
    def _receive(conn, timeout):
        try:
            if not conn.poll(timeout):
                raise PlanningProcessError(f'no answer from the planning process within {timeout:g} s')
            return conn.recv()
        except (EOFError, OSError) as e:                 # exited, or stopped meanwhile (the pipe closed)
            raise PlanningProcessError(f'the planning process exited ({e!r})') from e

    def plan(self, reference, t_now, z0, zd0, timeout=600.0):
        """The Plan; planning.PlanError if the move cannot be planned, PlanningProcessError if the process failed
        or was stopped meanwhile (the next call starts a new one)."""
        from ..planning import PlanError
        self.start()
        with self._lock:
            send, conn = self._send_conn, self._conn
            self._busy = True
        try:
            if send is None:
                raise PlanningProcessError('the planning process was stopped')
            if not self._ready:
                kind, value = self._receive(conn, START_TIMEOUT_S)
                if kind != 'ready':
                    raise PlanningProcessError(value)
                self._ready = True
            send.send((reference, t_now, z0, zd0))
            kind, value = self._receive(conn, timeout)
        except (PlanningProcessError, BrokenPipeError, OSError) as e:
            self.stop()
            raise PlanningProcessError(str(e)) from e
        finally:
            self._busy = False
        if kind == 'plan':
            return value
        if kind == 'refused':
            raise PlanError(value)
        raise PlanningProcessError(value)

    def stop(self, timeout=5.0):
        """End the process: an idle worker exits on the None it is sent (waited for up to `timeout`); one busy -
        starting or planning, seconds of niced CPU on a loaded machine: the controller's exit on SIGINT waited for
        it, 2.5 s once - is terminated at once: its plan is not wanted any more."""
        with self._lock:
            proc, self._proc = self._proc, None
            conns = (getattr(self, '_send_conn', None), self._conn)
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


if __name__ == '__main__':
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent decides when the planner stops
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
