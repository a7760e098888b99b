"""The gated-sink reproduction's measures on attention rows built by hand (reproductions/gated_sink.py)."""

import pytest
import torch

from explorer.training.reproductions import gated_sink


def test_first_token_mass_skips_query_zero_and_averages_heads_and_queries():
    L = 4
    a = torch.zeros(1, 2, L, L)
    a[0, :, 0, 0] = 1.0  # query 0 sees only key 0: left out
    for t in range(1, L):
        a[0, 0, t, 0], a[0, 0, t, t] = 0.5, 0.5  # head 0: half of every row on the first token
        a[0, 1, t, t] = 1.0  # head 1: none
    first, top, sink = gated_sink.sink_masses([a])
    assert first == [pytest.approx(0.25)] and top == [pytest.approx(0.5)] and sink == [pytest.approx(0.0)]


def test_the_learned_sink_share_is_what_a_row_misses():
    a = torch.zeros(1, 1, 3, 3)
    a[0, 0, 1, :2] = torch.tensor([0.2, 0.6])  # 0.2 left to the sink
    a[0, 0, 2, :3] = torch.tensor([0.1, 0.1, 0.4])  # 0.4 left to the sink
    first, _, sink = gated_sink.sink_masses([a])
    assert first == [pytest.approx(0.15)] and sink == [pytest.approx(0.3)]


def test_the_reading_says_whether_the_claim_holds_from_the_numbers():
    def rows(model, masses, losses):
        out = [{"model": model, "measure": "first-token mass", "at": i, "value": m} for i, m in enumerate(masses)]
        return out + [{"model": model, "measure": "loss", "at": L, "value": v} for L, v in losses.items()]

    settings = {"eval_lens": [128, 1024], "eval_seqs": 4, "eval_tokens": 64}
    holds = {"settings": settings, "rows": rows("default", [0.4, 0.6], {128: 1.3, 1024: 5.0})}
    holds["rows"] += rows("gated_attention", [0.05, 0.05], {128: 1.3, 1024: 3.0})
    assert "claim holds" in gated_sink.reading(holds) and "extrapolates better" in gated_sink.reading(holds)
    fails = {"settings": settings, "rows": rows("default", [0.1], {128: 1.3, 1024: 3.0})}
    fails["rows"] += rows("gated_attention", [0.2], {128: 1.3, 1024: 4.0})
    text = gated_sink.reading(fails)
    assert "does not hold here" in text and "does not extrapolate better" in text
    # a baseline below an even row's first-token share (mean of 1 / (t + 1), t = 1..127: 0.035) has no sink to remove
    none = {"settings": settings, "rows": rows("default", [0.01], {128: 1.3, 1024: 3.0})}
    none["rows"] += rows("gated_attention", [0.02], {128: 1.3, 1024: 2.0})
    assert "no sink for the gate to remove" in gated_sink.reading(none) and "(0.035)" in gated_sink.reading(none)
