"""kernels.tools.measure: the CPU peak is the allocator's, checked against tensors of known size; the
median, budget and round-robin logic of the timers runs on a fake clock, so every duration is known
exactly and the checks hold on a loaded machine."""

import pytest
import torch

from kernels.tools import measure
from kernels.tools.measure import interleaved_ms, measure_peak, median_ms, timed_s, timer_name


def test_peak_counts_live_allocations_not_freed_ones():
    n = 1 << 20  # 4 MiB of float32 each

    def two_live():
        a = torch.ones(n)
        b = torch.ones(n)
        return float(a[0] + b[0])

    def one_at_a_time():
        for _ in range(3):
            a = torch.ones(n)
            del a
        return 0.0

    _, peak_two = measure_peak(two_live)
    _, peak_one = measure_peak(one_at_a_time)
    assert 2 * 4 * n <= peak_two < 3 * 4 * n
    assert 4 * n <= peak_one < 2 * 4 * n


def test_pre_existing_tensors_are_not_counted():
    big = torch.ones(1 << 22)
    result, peak = measure_peak(lambda: big.sum())
    assert result == float(1 << 22)
    assert peak < 1 << 20


class FakeClock:
    """Stands in for the ``time`` module of ``kernels.tools.measure``: ``perf_counter`` reads a counter that
    only the work below advances, and ``log`` records which work ran, in order."""

    def __init__(self):
        self.now = 0.0
        self.log = []

    def perf_counter(self):
        return self.now

    def work(self, name, ms_per_call, slow_calls=(), slow_ms=0.0):
        """A closure whose n-th call takes ``ms_per_call[n]`` ms of clock time (the last value
        repeats); a call that is the k-th of all work on this clock, k in ``slow_calls``, takes
        ``slow_ms`` more (a slow spell of the machine, whichever closure runs then)."""
        calls = []

        def run():
            ms = ms_per_call[min(len(calls), len(ms_per_call) - 1)]
            if len(self.log) in slow_calls:
                ms += slow_ms
            self.now += ms / 1000.0
            calls.append(ms)
            self.log.append(name)

        return run, calls


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(measure, "time", fake)
    return fake


def test_timed_s_is_the_clock_difference_around_one_call(clock):
    run, calls = clock.work("a", [37.0])
    clock.now = 100.0  # an arbitrary start: only the difference counts
    assert timed_s(run, "cpu") == pytest.approx(0.037, abs=1e-9) and len(calls) == 1


def test_median_ms_is_the_middle_run_not_the_first_or_the_mean(clock):
    """Warm-up runs are not timed; of the timed runs the median is returned (here the mean would be
    228 ms and the first run 10 ms)."""
    run, calls = clock.work("a", [5000.0, 10.0, 1000.0, 30.0, 20.0, 80.0])  # warm-up, then five
    assert median_ms(run, warmup=1, repeats=5) == pytest.approx(30.0) and len(calls) == 6
    run, calls = clock.work("b", [0.0, 0.0, 150.0, 0.0, 150.0, 150.0, 0.0])  # two warm-ups, three of five slow
    assert median_ms(run, warmup=2, repeats=5) == pytest.approx(150.0) and len(calls) == 7


def test_median_ms_stops_at_the_budget(clock):
    run, calls = clock.work("a", [0.0, 100.0, 100.0, 40.0])
    # 100 ms spent is within 150 ms, 200 ms is over: two timed runs of the ten allowed, median of 100 and 100
    assert median_ms(run, warmup=1, repeats=10, budget_s=0.15) == pytest.approx(100.0)
    assert len(calls) == 1 + 2
    run, calls = clock.work("b", [0.0, 900.0, 1.0])
    assert median_ms(run, warmup=1, repeats=10, budget_s=0.15) == pytest.approx(900.0)  # always one run
    assert len(calls) == 1 + 1


def test_interleaved_ms_runs_round_robin_so_a_slow_spell_hits_every_closure_alike(clock):
    """Repeat r of every closure runs before repeat r + 1 of any. A slow spell over two consecutive
    runs (the 2nd and 3rd of six) then adds to one run of each, and each median stays its own time;
    timed one closure after the other, both slow runs would be the first closure's and its median
    would be the spell."""
    a, _ = clock.work("a", [10.0], slow_calls={1, 2}, slow_ms=1000.0)
    b, _ = clock.work("b", [20.0], slow_calls={1, 2}, slow_ms=1000.0)
    ms_a, ms_b = interleaved_ms([a, b], "cpu", repeats=3, budget_s=10.0)
    assert clock.log == ["a", "b"] * 3
    assert ms_a == pytest.approx(10.0) and ms_b == pytest.approx(20.0)


def test_interleaved_ms_budget_is_per_closure(clock):
    """A closure stops repeating once its own total exceeds the budget; the others keep going."""
    slow, slow_calls = clock.work("slow", [100.0])
    fast, fast_calls = clock.work("fast", [1.0])
    ms_slow, ms_fast = interleaved_ms([slow, fast], "cpu", repeats=5, budget_s=0.15)
    assert len(slow_calls) == 2 and len(fast_calls) == 5  # 100 ms, then 200 ms > 150 ms: stop
    assert clock.log == ["slow", "fast", "slow", "fast", "fast", "fast", "fast"]
    assert ms_slow == pytest.approx(100.0) and ms_fast == pytest.approx(1.0)


class FakeCudaEvent:
    """``torch.cuda.Event`` on the fake clock: ``elapsed_time`` is the ms between two records."""

    clock = None

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self, stream=None):
        self.at = self.clock.now

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000.0


@pytest.mark.parametrize(
    "device,clock_word",
    [
        ("cpu", "perf_counter"),
        (torch.device("cpu"), "perf_counter"),
        ("cuda", "CUDA events"),
        ("cuda:1", "CUDA events"),
        (torch.device("cuda", 0), "CUDA events"),
    ],
)
def test_timer_name_names_the_clock_that_times_the_run(device, clock_word, clock, monkeypatch):
    """The name a table prints for a device is the clock ``timed_s`` actually reads there: on CPU the
    wall clock (``perf_counter``, read before and after the run), on CUDA the events recorded around
    the run (the GPU's time; the host's wall clock is not read at all). CUDA is faked: events that
    read the fake clock, a synchronisation with nothing to wait for."""
    assert clock_word in timer_name(device)
    host_reads = []
    monkeypatch.setattr(clock, "perf_counter", lambda: host_reads.append(clock.now) or clock.now)
    monkeypatch.setattr(FakeCudaEvent, "clock", clock)
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    run, _ = clock.work("a", [25.0])
    assert timed_s(run, device) == pytest.approx(0.025, abs=1e-9)
    assert len(host_reads) == (2 if clock_word == "perf_counter" else 0)
