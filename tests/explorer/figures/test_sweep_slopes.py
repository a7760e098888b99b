"""The sweep's slopes: a curve that bends from linear to quadratic at its end says so, in the reading and
the legend; a straight power law reads as one slope."""
from __future__ import annotations

import math

import pytest

from explorer.figures.latency import end_slope, fitted_slope, slope_text, sweep_figure
from explorer.figures.readings import sweep_reading


def _records(fn, lens=(128, 256, 512, 1024, 2048, 4096)) -> list:
    return [{"seq_len": L, "ms": fn(L), "peak_bytes": 1000.0 * L, "status": "ok", "backend": "torch-cpu",
             "mode": "forward", "device": "cpu", "threads": 1, "memory_method": "measured", "others": 0,
             "timer": "perf_counter", "dtype": "float32", "reason": ""} for L in lens]


def bends(L):  # linear cost with a quadratic term that dominates only past L = 2048
    return L + L * L / 2048.0


def test_end_slope_is_the_last_doubling():
    recs = _records(bends)
    expected = ((4096 + 4096**2 / 2048) / (2048 + 2048**2 / 2048))  # ratio over a doubling
    assert end_slope(recs, "ms") == pytest.approx(math.log(expected) / math.log(2))
    assert fitted_slope(recs, "ms") < 1.5 < end_slope(recs, "ms")


def test_a_bending_curve_is_said_to_bend():
    recs = _records(bends)
    text = slope_text(recs, "ms")
    assert "overall" in text and "at the longest lengths" in text
    reading = sweep_reading(recs, None, "full")
    assert "at the longest lengths" in reading
    names = [t.name for t in sweep_figure(recs, None, "full").data]
    assert any(n.startswith("full (slope") and "at the end" in n for n in names)


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_a_power_law_reads_as_one_slope(power):
    recs = _records(lambda L: 0.01 * L**power)
    assert slope_text(recs, "ms") == f"{power:.2f}"
    assert end_slope(recs, "ms") == pytest.approx(power)


def test_two_points_have_no_end_slope():
    assert end_slope(_records(bends, (128, 256)), "ms") is None
