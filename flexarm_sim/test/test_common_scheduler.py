"""Absolute-deadline scheduler with a fake clock: no drift, catch-up, skip-and-count."""
import pytest

from flexarm_sim.common.scheduler import FixedRateScheduler, TimingStats


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self.oversleep = 0.0

    def __call__(self):
        return self.t

    def sleep(self, dt):
        self.t += dt + self.oversleep


def test_deadlines_are_absolute_no_drift():
    c = FakeClock()
    c.oversleep = 0.0002                      # every sleep wakes 200 us late
    s = FixedRateScheduler(0.001, clock=c, sleep=c.sleep)
    s.start()
    starts = [s.wait() for _ in range(1000)]
    # the k-th tick starts at (k+1) ms + 0.2 ms: the error does not accumulate
    assert starts[-1] == pytest.approx(1.0 + 0.0002, abs=1e-9)
    assert s.stats.overruns == 0 and s.stats.skipped == 0
    summ = s.stats.summary(0.001)
    assert summ['rate_hz'] == pytest.approx(1000.0)
    assert summ['lateness_p50_s'] == pytest.approx(0.0002)


def test_catch_up_then_skip():
    c = FakeClock()
    s = FixedRateScheduler(0.001, max_catchup=3, clock=c, sleep=c.sleep)
    s.start()
    s.wait()                                  # t = 1 ms
    c.t += 0.0025                             # work took 2.5 ms: next deadline 2 ms missed by 1.5 periods
    t = s.wait()
    assert t == pytest.approx(0.0035) and s.stats.overruns == 1
    # caught up: the next deadline is 3 ms, already past -> runs at once
    assert s.wait() == pytest.approx(0.0035)
    assert s.wait() == pytest.approx(0.004)   # back on the original grid
    c.t += 0.010                              # 10 ms stall: more than max_catchup behind
    s.wait()
    assert s.stats.skipped > 0
    assert s.lag_s == pytest.approx(s.stats.skipped * 0.001)
    late_ticks = 0
    while s.next_deadline < c.t:
        s.wait()
        late_ticks += 1
    assert late_ticks <= 3                    # at most max_catchup back-to-back steps


def test_as_fast_as_possible_and_compute_stats():
    c = FakeClock()
    s = FixedRateScheduler(0.0, clock=c, sleep=c.sleep)
    for _ in range(5):
        s.wait()
        s.stats.record_compute(1e-5)
    assert s.stats.ticks == 5
    st = TimingStats(window=4)
    for k in range(10):
        st.record_tick(k * 0.001, 0.0)
        st.record_compute(k * 1e-6)
    summ = st.summary(0.001)
    assert summ['compute_max_s'] == pytest.approx(9e-6) and summ['period_err_max_s'] == pytest.approx(0, abs=1e-12)
