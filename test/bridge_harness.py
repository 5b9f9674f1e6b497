"""Helpers for the bridge system tests: the servo emulator as a process of its own, a ROS-free bridge loop,
child processes whose output is watched line by line."""
import os
import signal
import subprocess
import sys
import threading
import time

from flexarm_sim.common.scheduler import freeze_start_up_objects

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


class Watched:
    """A child process whose stdout and stderr lines are collected by threads (never blocks the test)."""

    def __init__(self, args, env=None, stdin=False, python=True):
        """*args* after the Python interpreter (python=False: the whole argv, e.g. an installed executable)."""
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, *args] if python else list(args), env=env, text=True, bufsize=1,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out, self.err = [], []
        self._eof = 0
        self._cond = threading.Condition()
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._collect, args=(stream, lines), daemon=True).start()

    def _collect(self, stream, lines):
        for line in stream:
            with self._cond:
                lines.append(line.rstrip('\n'))
                self._cond.notify_all()
        with self._cond:
            self._eof += 1
            self._cond.notify_all()

    def wait_line(self, pred, timeout, which='err', start=0):
        """Index of the first line (from *start*) of stdout/stderr matching *pred*; AssertionError on timeout."""
        lines = self.out if which == 'out' else self.err
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for k in range(start, len(lines)):
                    if pred(lines[k]):
                        return k
                left = deadline - time.monotonic()
                if left <= 0 or self._eof == 2:
                    raise AssertionError(f'no such line within {timeout:g} s (exit code {self.proc.poll()}); '
                                         f'stderr:\n' + '\n'.join(self.err[-30:]))
                self._cond.wait(min(left, 0.1))

    def signal_and_wait(self, sig, timeout=20.0):
        """Send *sig*; (exit code, seconds to exit). Kills the process if it outlives *timeout*."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        return rc, time.monotonic() - t0

    def stderr_text(self, timeout=10.0):
        """All of stderr once the process ended and the reader threads reached end of file."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._eof < 2 and time.monotonic() < deadline:
                self._cond.wait(0.05)
            return '\n'.join(self.err)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class EmulatorProcess(Watched):
    """``python -m flexarm_control.emulation.servo_emulator`` in its own process; fault injection over stdin."""

    def __init__(self, link, ids=(1, 2), env=None, extra=()):
        super().__init__(['-m', 'flexarm_control.emulation.servo_emulator', '--ids', *map(str, ids), '--link', link, *extra],
                         env=env, stdin=True)
        self.link = link
        k = self.wait_line(lambda s: s.startswith('/'), 60.0, which='out')
        self.port = self.out[k]

    def command(self, line, timeout=10.0):
        n0 = len(self.out)
        self.proc.stdin.write(line + '\n')
        self.proc.stdin.flush()
        self.wait_line(lambda s: s.startswith(('ok ', 'error ')), timeout, which='out', start=n0)
        assert self.out[-1] == 'ok ' + ' '.join(line.split()), self.out[-1]

    def arm_state(self, timeout=10.0):
        """The emulated arm's coordinates z (an emulator started with --arm): its `state` command."""
        n0 = len(self.out)
        self.proc.stdin.write('state\n')
        self.proc.stdin.flush()
        k = self.wait_line(lambda s: s.startswith(('ok state', 'error ')), timeout, which='out', start=n0)
        assert self.out[k].startswith('ok state '), self.out[k]
        return [float(x) for x in self.out[k].split()[2:]]

    def stop_process(self, sig=signal.SIGTERM):
        rc, _ = self.signal_and_wait(sig)
        return rc


class BridgeLoop:
    """BridgeCore.cycle() on a thread at *rate* Hz (what the node's loop thread does, without ROS); records
    every state change as (monotonic time, state) and the last reading. *command*: efforts, *position*: set-points
    (current_position joints) or a function of time.monotonic() giving them, submitted before every cycle (a
    controller that keeps the command watchdog fed; either may be replaced while the loop runs)."""

    def __init__(self, core, rate=250.0, command=None, position=None):
        self.core = core
        self.command = command
        self.position = position
        self.reading = None
        self.period = 1.0 / rate
        self.states = [(time.monotonic(), core.state)]
        self.readings = 0
        self._run = True
        # the loop thread shares this (pytest) process's interpreter: a full garbage collection over the objects of
        # the tests before took 70-157 ms here (measured), a bridge that sends nothing that long trips the servos'
        # 0.1 s Bus Watchdog (the 20 ms-delay case of test_bridge_failsafe failed so); the bridge node freezes its
        # start-up objects the same way (ros/node_main.py)
        freeze_start_up_objects()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        core = self.core
        try:
            while self._run:
                t0 = time.monotonic()
                if self.command is not None:
                    core.submit_effort(self.command)
                position = self.position
                if position is not None:
                    core.submit_position(list(position(t0) if callable(position) else position))
                reading = core.cycle()
                if reading is not None:
                    self.readings += 1
                    self.reading = reading
                if core.state != self.states[-1][1]:
                    self.states.append((time.monotonic(), core.state))
                time.sleep(max(0.0, self.period - (time.monotonic() - t0)))
        finally:
            core.shutdown()

    def wait_state(self, state, timeout, after=None):
        """Time the core entered *state* (after time *after*, if given); AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, s in list(self.states):
                if s == state and (after is None or t >= after):
                    return t
            time.sleep(0.005)
        raise AssertionError(f'state {state!r} not reached within {timeout:g} s; now {self.core.state}: '
                             f'{self.core.last_fault or self.core.last_attempt_error}')

    def stop(self):
        self._run = False
        self._thread.join(10.0)
