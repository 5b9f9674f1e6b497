"""Shared fixtures for system tests: real rclpy processes over Fast DDS on loopback."""
import itertools
import os
import subprocess
import sys

import pytest

_domain_counter = itertools.count()


def fresh_domain_id():
    """A ROS_DOMAIN_ID unlikely to collide with a parallel test run (FLEXARM_TEST_DOMAIN_BASE .. + 99, default 1,
    never 0). A suite cycles through all 100 within minutes: a test run beside a suite on the same machine takes
    another hundred (FLEXARM_TEST_DOMAIN_BASE=101: 101-200), or the suite's references and states reach its nodes."""
    base = int(os.environ.get('FLEXARM_TEST_DOMAIN_BASE', '1'))
    if not 1 <= base <= 133:                       # Fast DDS: domain ids up to 232 on the default ports
        raise ValueError(f'FLEXARM_TEST_DOMAIN_BASE must be 1..133, got {base}')
    return base + (os.getpid() * 7 + next(_domain_counter) * 13) % 100


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
