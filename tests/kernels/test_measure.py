"""kernels.measure: the CPU peak is the allocator's, checked against tensors of known size."""
import time

import torch

from kernels.measure import interleaved_ms, measure_peak, median_ms, timer_name


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


def _sleeper(ms_per_call):
    """A closure whose n-th call sleeps ``ms_per_call[n]`` milliseconds (a known lower bound)."""
    calls = []

    def run():
        time.sleep(ms_per_call[len(calls)] / 1000.0)
        calls.append(1)
    return run, calls


def test_median_ms_is_the_middle_run_not_the_first_or_the_mean():
    # One warm-up, then five timed runs; three of the five sleep 150 ms: the median is >= 150 ms.
    run, calls = _sleeper([0, 150, 0, 150, 0, 150])
    assert median_ms(run, warmup=1, repeats=5) >= 150.0 and len(calls) == 6
    # Only two of five sleep: the median is one of the short runs (the mean would be 60 ms; the
    # margin leaves a loaded machine 100 ms of scheduling delay on the short runs).
    run, calls = _sleeper([0, 150, 0, 0, 150, 0])
    assert median_ms(run, warmup=1, repeats=5) < 100.0 and len(calls) == 6


def test_median_ms_stops_at_the_budget():
    run, calls = _sleeper([0] + [100] * 10)
    ms = median_ms(run, warmup=1, repeats=10, budget_s=0.15)  # 100 + 100 ms > 150 ms: two runs
    assert 1 <= len(calls) - 1 <= 2 and ms >= 100.0  # (one when a loaded machine stalls the first)


def test_interleaved_ms_times_each_closure_separately():
    slow, _ = _sleeper([150] * 3)
    fast, _ = _sleeper([0] * 3)
    ms_slow, ms_fast = interleaved_ms([slow, fast], "cpu", repeats=3, budget_s=10.0)
    assert ms_slow >= 150.0 and ms_fast < 100.0


def test_timer_is_named():
    assert timer_name("cpu") == "perf_counter (wall clock)"
    assert timer_name("cuda") == "CUDA events"
