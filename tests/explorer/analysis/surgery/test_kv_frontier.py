"""The KV-cache frontier (explorer/analysis/surgery/frontier.py, explorer/figures/kv_frontier.py): families,
cache sizes by hand, the Pareto set against a brute-force check, and the figure's labels."""

import itertools
import random

import pytest

from explorer.analysis.surgery import frontier
from explorer.figures.kv_frontier import STYLE, frontier_figure, frontier_reading, pareto
from models import ModelConfig

BASE = ModelConfig(n_layers=4, d_model=128, n_heads=4, max_len=1024).validate()


@pytest.mark.parametrize(
    "changes, label, family",
    [
        ({}, "full (as trained)", "as trained"),
        (dict(n_kv_heads=2), "K/V heads 4 -> 2", "fewer K/V heads"),
        (dict(attention="sliding_window", window=64), "sliding_window (64)", "window"),
        (dict(attention="sliding_window", window=64, n_sinks=4), "sliding_window (64) + 4 sinks", "window + sinks"),
        (dict(layer_schedule="sliding_window,full", window=64), "alternate", "per-layer schedule"),
        (dict(attention="linear"), "linear", None),
        (dict(rope_scale=4.0), "RoPE / 4", None),
    ],
)
def test_each_row_has_its_family(changes, label, family):
    assert frontier.family(BASE, BASE.replace(**changes).validate(), label) == family


def test_cache_per_token_by_hand():
    per_key = 2 * 4 * 32 * 2 * 4  # K and V, 4 heads of 32, fp16, 4 layers
    assert frontier.cache_per_token(BASE, (128, 512)) == {"128": per_key, "512": per_key}
    window = BASE.replace(attention="sliding_window", window=64, n_sinks=4).validate()
    assert frontier.cache_per_token(window, (512,)) == {"512": per_key * 68 / 512}
    half = BASE.replace(layer_schedule="sliding_window,full", window=64).validate()
    assert frontier.cache_per_token(half, (512,)) == {"512": per_key / 2 * (64 + 512) / 512}


def test_pareto_is_the_set_no_point_beats_on_both_axes():
    rng = random.Random(0)
    pts = [{"bytes": rng.choice([1, 2, 4, 8, 16]), "loss": round(rng.uniform(1, 3), 2)} for _ in range(40)]
    best = pareto(pts)

    def beaten(p):
        return any(
            q["bytes"] <= p["bytes"] and q["loss"] <= p["loss"] and (q["bytes"], q["loss"]) != (p["bytes"], p["loss"])
            for q in pts
        )

    assert {(p["bytes"], p["loss"]) for p in best} == {(p["bytes"], p["loss"]) for p in pts if not beaten(p)}
    assert all(a["bytes"] < b["bytes"] and a["loss"] > b["loss"] for a, b in itertools.pairwise(best))


def _table():
    return {
        "label": "bundled model 'x'",
        "trained_length": 128,
        "lengths": [128, 512],
        "unit": "nats/byte",
        "scored_tokens": 4095,
        "rows": [
            {
                "label": "full (as trained)",
                "family": "as trained",
                "loss": {"128": 1.4, "512": 3.2},
                "cache_bytes_per_token": {"128": 2048, "512": 2048},
            },
            {"label": "linear", "loss": {"128": 4.0, "512": 4.1}},
            {
                "label": "sliding_window (64)",
                "family": "window",
                "loss": {"128": 1.42, "512": 1.5},
                "cache_bytes_per_token": {"128": 1024, "512": 256},
            },
            {
                "label": "chunked (64)",
                "family": "window",
                "loss": {"128": 1.6, "512": None},
                "cache_bytes_per_token": {"128": 1024, "512": 256},
            },
        ],
        "latent": [
            {
                "label": "K/V latent rank 64",
                "rank": 64,
                "loss": {"128": 1.41, "512": 3.3},
                "cache_bytes_per_token": {"128": 512, "512": 512},
            },
        ],
    }


def test_points_take_the_rows_with_a_family_and_the_latent_rows():
    pts = frontier.points(_table())
    assert {(p["label"], p["length"]) for p in pts} == {
        ("full (as trained)", 128),
        ("full (as trained)", 512),
        ("sliding_window (64)", 128),
        ("sliding_window (64)", 512),
        ("chunked (64)", 128),
        ("K/V latent rank 64", 128),
        ("K/V latent rank 64", 512),
    }
    assert {p["family"] for p in pts} <= set(STYLE) and set(frontier.FAMILIES) == set(STYLE)


def test_the_figure_has_a_panel_per_length_log_axes_and_the_reading_names_the_cheapest_close_point():
    table = _table()
    pts = frontier.points(table)
    fig = frontier_figure(table, pts)
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis2.type == "log"
    assert "bytes" in fig.layout.xaxis.title.text and "loss" in fig.layout.yaxis.title.text
    assert "KV-cache frontier" in fig.layout.title.text
    assert {t.name for t in fig.data if t.showlegend} >= {"as trained", "window", "latent (joint K/V SVD)"}
    text = frontier_reading(table, pts)
    assert "K/V latent rank 64" in text and "4.0x less" in text
    assert "No KV-cache frontier" in frontier_figure({"rows": []}, []).layout.annotations[0].text
