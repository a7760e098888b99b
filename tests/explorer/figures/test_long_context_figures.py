"""Long-context figures: merged cells equal pooling at the larger block, the log levels' order, titles,
axis labels and units, the trained length marked, and the grid's payload at 16 heads x 256 cells."""

import numpy as np
import torch

from explorer.analysis.long_context.text import Passage
from explorer.analysis.long_context.view import LongContext, Side
from explorer.figures.long_context import (
    coarsen,
    log_levels,
    loss_figure,
    pooled_grid,
    signed_levels,
    stats_figure,
    zoom_figure,
)
from kernels.pooled_dense import pool_probs


def test_merged_cells_equal_pooling_at_the_larger_block():
    g = torch.Generator().manual_seed(0)
    lq = 300  # a short last block: the merge weighs blocks by their rows
    scores = torch.randn(1, 2, lq, lq, generator=g, dtype=torch.float64)
    probs = torch.softmax(scores.masked_fill(torch.ones(lq, lq).triu(1).bool(), float("-inf")), -1)
    small = pool_probs(probs, 32).mass[0].numpy()
    big = pool_probs(probs, 64).mass[0].numpy()
    np.testing.assert_allclose(coarsen(small, 2, lq, 32), big, atol=1e-6)


def test_log_levels_keep_order_and_blank_only_zero_mass():
    m = np.array([0.0, 1e-9, 1e-5, 1e-3, 0.1, 1.0])
    lv, lo, hi = log_levels(m)
    assert lv[0] == 0 and (lv[1:] >= 1).all() and (np.diff(lv[1:].astype(int)) >= 0).all() and lv[-1] == 255
    assert lo == -5 and hi == 0


def fake(L=16384, cells=256, heads=4, layers=4):
    rng = np.random.default_rng(0)
    m = np.tril(rng.random((layers, heads, cells, cells))).astype(np.float32)
    m /= m.sum(-1, keepdims=True)
    stats = {k: rng.random((layers, heads, L)).astype(np.float32) for k in ("entropy", "distance", "sink", "local")}
    sides = [
        Side(
            n,
            None,
            None,
            m,
            stats,
            rng.random(L - 1).astype(np.float32),
            L // cells,
            L // cells,
            "torch-cpu block-sparse",
            "kernels",
            [],
            list(range(layers)),
        )
        for n in ("as trained", "window")
    ]
    return LongContext(L, Passage((1,) * L, "repeat", (), (256, 3328, 300)), "byte", 128, "bundle", sides, [], 0, 1.0)


def test_figures_say_what_they_show():
    r = fake()
    grid = pooled_grid(r, 1)
    assert "Pooled attention, window: 16384 bytes, trained at 128 bytes (128x past it)" in grid.layout.title.text
    assert grid.layout.xaxis13.title.text == "head 0" and grid.layout.yaxis.title.text == "layer 0"
    assert "rows: query position, columns: key position (bytes)" in grid.layout.title.text
    assert grid.layout.coloraxis.colorbar.title.text.startswith("mass per")
    loss = loss_figure(r)
    assert loss.layout.xaxis.title.text == "position (bytes)" and loss.layout.yaxis.title.text == "loss (nats per byte)"
    assert [d.name for d in loss.data] == ["as trained", "window"]
    assert loss.layout.shapes[0].x0 == 128 and "trained length 128" in loss.layout.annotations[0].text
    assert sum(s.type == "rect" for s in loss.layout.shapes) == 2  # the paragraph and its repeat
    stats = stats_figure(r, 2)
    assert "layer 2" in stats.layout.title.text and stats.layout.yaxis.title.text == "entropy (nats)"
    assert stats.layout.yaxis2.title.text == "mean attention distance (tokens)" and len(stats.data) == 4 * 2 * 4


class Cell:
    side, layer, head, rows, keys, exact, pooled = "as trained", 1, 2, (16320, 16384), (0, 64), 0.5, 0.5
    probs = np.random.default_rng(1).random((64, 64))


def test_a_16k_redraw_of_16_heads_stays_under_500_kB():
    r = fake()
    grid = pooled_grid(r)
    assert grid.layout.meta["factor"] == 2 and grid.data[0].z.shape == (128, 128)
    assert grid.data[0].z.dtype == np.uint8
    sent = [len(f.to_json()) for f in (grid, loss_figure(r), stats_figure(r, 0), zoom_figure(Cell(), ["a"] * 16384))]
    assert sum(sent) < 500_000, sent


def test_zoom_figure_labels_its_region():
    class Z:
        side, layer, head, rows, keys, exact, pooled = "as trained", 1, 2, (64, 66), (0, 3), 0.5, 0.5
        probs = np.array([[0.5, 0.0, 0.25], [0.1, 0.2, 0.0]])

    fig = zoom_figure(Z(), labels=list("abcdefgh") * 10)
    assert "layer 1 head 2" in fig.layout.title.text and "queries 64-65, keys 0-2" in fig.layout.title.text
    assert (
        fig.data[0].y[0] == "64 a"
        and np.isnan(fig.data[0].z[0][1])
        and fig.data[0].z[0][0] == np.float32(np.log10(0.5))
    )
    assert fig.layout.xaxis.title.text.startswith("key")


def test_signed_levels_keep_sign_order_and_blank_only_exact_zero():
    m = np.array([-1.0, -1e-3, -1e-9, 0.0, 1e-9, 1e-3, 0.5])
    lv, lo, hi = signed_levels(m)
    assert lv[3] == 0 and (np.delete(lv, 3) >= 1).all()
    assert lv[0] == 1 and lv[2] == 128 == lv[4] and lv[1] < 128 < lv[5] < lv[6] <= 255
    assert (np.diff(np.delete(lv, 3).astype(int)) >= 0).all()  # monotone in the signed value
    assert lo == -5 and hi == 0


def test_implicit_maps_draw_signed_and_say_entropy_is_undefined():
    r = fake(L=4096, cells=64, heads=2, layers=2)
    for side in r.sides:
        side.mass[0, 0] -= side.mass[0, 0].max()  # a recurrent layer's weights go negative
        side.stats["entropy"][:] = np.nan  # no distribution: pooled_implicit's NaN
    grid = pooled_grid(r)
    assert grid.layout.meta["signed"] and "signed" in grid.layout.title.text
    assert grid.layout.coloraxis.colorscale[-1][1] == "#b2182b"  # red at the positive end
    assert any(t.startswith("-1e") for t in grid.layout.coloraxis.colorbar.ticktext)
    stats = stats_figure(r, 0)
    assert any("entropy undefined" in a.text for a in stats.layout.annotations)
    assert not pooled_grid(fake(L=4096, cells=64, heads=2, layers=2)).layout.meta["signed"]


def test_zoom_of_signed_weights_is_diverging_around_zero():
    class Z:
        side, layer, head, rows, keys, exact, pooled = "as trained", 0, 1, (8, 10), (0, 3), 0.1, 0.1
        probs = np.array([[0.5, -0.25, 0.0], [0.1, 0.2, -0.3]])

    fig = zoom_figure(Z())
    assert "Implicit attention" in fig.layout.title.text and "not probabilities" in fig.layout.title.text
    assert fig.data[0].zmid == 0 and fig.data[0].zmin == -0.5 and fig.data[0].zmax == 0.5
    assert fig.data[0].z[0][1] == np.float32(-0.25)  # drawn, not blank
