"""Shared fixtures for system tests: real rclpy processes over Fast DDS on loopback."""
import itertools
import os
import subprocess
import sys

import pytest

_domain_counter = itertools.count()


def fresh_domain_id():
    """A ROS_DOMAIN_ID unlikely to collide with a parallel test run (1..100, never 0)."""
    return 1 + (os.getpid() * 7 + next(_domain_counter) * 13) % 100


@pytest.fixture
def ros_env():
    """Environment for child processes: own domain id, DDS restricted to loopback."""
    env = dict(os.environ)
    env['ROS_DOMAIN_ID'] = str(fresh_domain_id())
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    env['PYTHONUNBUFFERED'] = '1'
    return env


@pytest.fixture
def spawn(ros_env):
    """Start python scripts as separate processes; all are killed at teardown."""
    procs = []

    def _spawn(args, **kw):
        p = subprocess.Popen([sys.executable, *args], env=kw.pop('env', ros_env),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
