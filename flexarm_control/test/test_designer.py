"""The gain designer thread (controller/designer.py): designs the cells asked for at its duty cycle, stops at once."""
import collections
import time

from flexarm_control.controller.designer import DUTY, GainDesigner


class SlowLaw:
    """A stand-in scheduled law: each cell takes `cost` s to design."""

    def __init__(self, cost):
        self.cost = cost
        self.wanted = collections.deque()
        self.generation = 0
        self.installed = {}

    def design_cell(self, key):
        time.sleep(self.cost)
        return f'design {key}'

    def install(self, key, design, generation):
        self.installed[key] = design


def test_cells_are_designed_at_the_duty_cycle_and_stop_ends_the_rest_at_once():
    law = SlowLaw(0.5)                            # rests 1 s after each design (DUTY 1/3)
    d = GainDesigner(law)
    d.start()
    try:
        t0 = time.monotonic()
        d.request([(0,), (1,)])
        while d.designed < 2 and time.monotonic() - t0 < 10.0:
            time.sleep(0.005)
        took = time.monotonic() - t0
        assert law.installed == {(0,): 'design (0,)', (1,): 'design (1,)'}
        # the second design waited for the first's rest: (1/DUTY - 1) x its 0.5 s
        assert took >= 0.5 + 0.5 * (1 / DUTY - 1) + 0.5 - 0.02, took
    finally:
        t_stop = time.monotonic()
        d.stop()                                   # in the second design's rest (1 s)
        stopped_in = time.monotonic() - t_stop
    rest = 0.5 * (1 / DUTY - 1)
    assert not d._thread.is_alive() and stopped_in < 0.5 * rest, stopped_in    # not slept out (0.30 s of 0.3 before)
