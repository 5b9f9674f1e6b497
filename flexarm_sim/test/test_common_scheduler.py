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


def _named_threads(names):
    """Threads of this process whose kernel names (comm) are `names`, parked until the returned event is set;
    returns (tids by name, release event, threads)."""
    import ctypes
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    tids, ready, release = {}, threading.Barrier(len(names) + 1), threading.Event()

    def park(name):
        libc.prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)         # PR_SET_NAME: what /proc/<tid>/comm reads
        tids[name] = threading.get_native_id()
        ready.wait()
        release.wait(10.0)

    threads = [threading.Thread(target=park, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    ready.wait()
    return tids, release, threads


def test_receive_threads_are_the_dds_reception_threads_only():
    """ReceiveThreads raises Fast DDS's reception threads (dds.udp/shm/tcp.<port>), none else (not the shared-memory
    watchdog, not a thread that merely starts with dds), each once, and one that takes its name after a call at the
    next; where SCHED_FIFO is not permitted it says why."""
    import os

    from flexarm_sim.common.scheduler import ReceiveThreads
    names = ['dds.udp.7411', 'dds.shm.26665', 'dds.tcp.5100', 'dds.shm.wdog', 'dds.ev.0', 'dds.udp.x', 'worker']
    tids, release, threads = _named_threads(names)
    try:
        rt = ReceiveThreads(3)
        n = rt.raise_new()
        policy = {name: os.sched_getscheduler(tid) for name, tid in tids.items()}
        if rt.refused is None:
            assert n == 3 and rt.raised == 3
            assert {k for k, p in policy.items() if p == os.SCHED_FIFO} == {'dds.udp.7411', 'dds.shm.26665',
                                                                            'dds.tcp.5100'}
            assert os.sched_getparam(tids['dds.udp.7411']).sched_priority == 3
        else:                                  # no CAP_SYS_NICE nor rtprio limit: refused, counted as not raised
            assert n == 0 and rt.raised == 0 and all(p != os.SCHED_FIFO for p in policy.values())
        assert rt.raise_new() == 0 and rt.update() == rt.raised        # each thread once
        # a thread that takes its reception name only after a call (Fast DDS's threads name themselves once running)
        with open(f'/proc/self/task/{tids["worker"]}/comm', 'w') as f:
            f.write('dds.udp.7500')
        assert rt.raise_new() == (1 if rt.refused is None else 0)
        assert ReceiveThreads(0).raise_new() == 0                      # priority 0: nothing done
        assert ReceiveThreads.beside(40, 'Operation not permitted').priority == 0       # beside a refused thread
        assert ReceiveThreads.beside(0, None).priority == 0
    finally:
        release.set()
        for t in threads:
            t.join()
