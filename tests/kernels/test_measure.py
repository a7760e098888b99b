"""kernels.measure: the CPU peak is the allocator's, checked against tensors of known size."""
import torch

from kernels.measure import measure_peak, median_ms


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


def test_median_ms_returns_a_positive_time_within_the_budget():
    calls = []
    ms = median_ms(lambda: calls.append(1), warmup=2, repeats=5)
    assert ms >= 0 and len(calls) == 7
