"""The sweep's slopes: a curve that bends from linear to quadratic at its end says so, in the reading and
the legend; a straight power law reads as one slope."""

from __future__ import annotations

import math

import pytest

from explorer.figures.latency import end_slope, fitted_slope, slope_text, sweep_figure
from explorer.figures.readings import sweep_reading


def _records(fn, lens=(128, 256, 512, 1024, 2048, 4096)) -> list:
    return [
        {
            "seq_len": L,
            "ms": fn(L),
            "peak_bytes": 1000.0 * L,
            "status": "ok",
            "backend": "torch-cpu",
            "mode": "forward",
            "device": "cpu",
            "threads": 1,
            "memory_method": "measured",
            "others": 0,
            "timer": "perf_counter",
            "dtype": "float32",
            "reason": "",
        }
        for L in lens
    ]


def bends(L):  # linear cost with a quadratic term that dominates only past L = 2048
    return L + L * L / 2048.0


def test_end_slope_is_the_last_doubling():
    recs = _records(bends)
    expected = (4096 + 4096**2 / 2048) / (2048 + 2048**2 / 2048)  # ratio over a doubling
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


# ---------------------------------------------------------------------------- guides, attention alone, reading
LENS = (256, 512, 1024, 2048, 4096, 8192, 16384)


def _sweep(ms, attn, peak, backend, lens=LENS):
    return [
        {
            **_records(ms, (L,))[0],
            "attn_ms": attn(L),
            "peak_bytes": peak(L),
            "backend": backend,
            "n_heads": 4,
            "batch": 1,
        }
        for L in lens
    ]


def test_slope_guides_start_on_the_curve_and_span_its_last_three_doublings():
    recs = _sweep(lambda L: 0.05 * L, lambda L: 0.01 * L, lambda L: 1000.0 * L, "torch-cpu block-sparse")
    fig = sweep_figure(recs, None, "sliding_window")
    for axis in ("x", "x2"):
        guides = {t.name: t for t in fig.data if t.name in ("O(L)", "O(L²)") and t.xaxis == axis}
        assert set(guides) == {"O(L)", "O(L²)"}
        for name, power in (("O(L)", 1), ("O(L²)", 2)):
            g = guides[name]
            assert list(g.x) == [2048, 4096, 8192, 16384] and "dash" in g.line.dash
            key, scale = ("ms", 1.0) if axis == "x" else ("peak_bytes", 1 / 2**20)
            assert g.y[0] == pytest.approx(recs[3][key] * scale)  # starts on the curve at L_max / 8
            assert math.log(g.y[-1] / g.y[0]) / math.log(g.x[-1] / g.x[0]) == pytest.approx(power)


def test_the_attention_alone_is_a_second_dotted_trace_of_each_curve():
    cur = _sweep(lambda L: 0.05 * L, lambda L: 0.01 * L, lambda L: 1000.0 * L, "torch-cpu block-sparse")
    base = _sweep(lambda L: 0.05 * L + L * L / 4e5, lambda L: L * L / 4e5, lambda L: 900.0 * L, "sdpa (cpu)")
    fig = sweep_figure(cur, base, "sliding_window")
    alone = {t.name: t for t in fig.data if t.name and "attention alone" in t.name}
    assert set(alone) == {
        "sliding_window: attention alone (slope 1.00)",
        "full (baseline): attention alone (slope 2.00)",
    }
    full_alone = alone["full (baseline): attention alone (slope 2.00)"]
    assert full_alone.line.dash == "dot" and list(full_alone.y) == [L * L / 4e5 for L in LENS]
    assert all(t.xaxis == "x" for t in alone.values())  # time panel only


def test_the_reading_names_each_kernel_and_says_no_l_by_l_matrix_is_held():
    cur = _sweep(lambda L: 0.05 * L, lambda L: 0.01 * L, lambda L: 1000.0 * L, "torch-cpu block-sparse")
    base = _sweep(lambda L: 0.05 * L + L * L / 4e5, lambda L: L * L / 4e5, lambda L: 900.0 * L, "sdpa (cpu)")
    text = sweep_reading(cur, base, "sliding_window")
    assert "`torch-cpu block-sparse` (sliding_window)" in text and "`sdpa (cpu)` (full)" in text
    assert text.count("never") >= 2  # each kernel: never the L x L scores
    square_gib = 4 * 16384**2 * 4 / 2**30  # 4 heads, float32, by hand
    assert f"L × L score matrix for the 4 heads alone would be {square_gib:.1f} GiB" in text
    assert "none is held" in text and "look alike" in text  # 1000 vs 900 bytes per token: within 25%
    fast = (0.05 * 16384 + 16384**2 / 4e5) / (0.05 * 16384)
    assert f"{fast:.2f}× faster than full's (the attention alone: {16384 / 4e5 / 0.01:.2f}×)" in text


def test_a_memory_that_holds_l_by_l_is_not_called_alike():
    held = _sweep(lambda L: 0.001 * L * L, lambda L: None, lambda L: 4.0 * 4 * L * L, "sdpa (cpu)")
    text = sweep_reading(held, None, "full")
    assert "none is held" not in text and "L × L score matrix" in text
