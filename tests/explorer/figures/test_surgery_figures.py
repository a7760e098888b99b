"""The surgery figures against what they are drawn from: the difference view leads with the head that
moved (total variation computed by hand) and its levels decode to after - before; its "moved, per head"
cells print their numbers only where Plotly's rule for cell text gives them at least 11 px in the smallest
side-by-side figure, and the reading says the same numbers; the table's bars are the table's numbers and
a row that could not run is marked."""

import math

import numpy as np

from explorer.figures.surgery import (
    MIN_TEXT,
    cell_font,
    difference_grid,
    moved_fraction,
    moved_sentence,
    table_figure,
    table_markdown,
    unmoved,
)


def _maps(seed, shape=(2, 3, 12)):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(shape[-1]), size=shape).astype(np.float32)  # (layers, heads, L, L)


def test_the_difference_view_leads_with_the_head_that_moved():
    before = _maps(0)
    after = before.copy()
    after[1, 2] = _maps(1)[0, 0]  # only layer 1 head 2 changes
    moved = moved_fraction(after, before)
    by_hand = 0.5 * np.abs(after[1, 2] - before[1, 2]).sum(-1).mean()
    assert math.isclose(moved[1, 2], by_hand, rel_tol=1e-6) and moved.sum() == moved[1, 2]
    fig = difference_grid(after, before, list("abcdefghijkl"), "attention='strided'", "default")
    assert fig.layout.meta["shown"][0] == [1, 2]
    first = next(t for t in fig.data if t.name == "layer 1 head 2")
    step = fig.layout.meta["dp_step"]
    z, d = np.asarray(first.z, dtype=np.float32) * step, after[1, 2] - before[1, 2]
    inside = np.abs(d) < 127 * step  # beyond the scale's top: clipped
    assert inside.mean() > 0.9 and np.abs(z - d)[inside].max() <= step
    assert np.all(np.sign(z[~inside]) == np.sign(d[~inside]))
    grid = fig.data[0]  # the grid: % of its attention moved
    assert np.allclose(np.asarray(grid.z, dtype=float), np.round(moved * 100, 1)) and grid.zmax == 100


def test_the_moved_grid_prints_numbers_only_where_they_are_readable():
    # by hand, a 600 px figure (plot area 390 x 150 px, the grid 22% of its width): 4 heads leave cells of
    # 21.45 px: two digits at 13 px take 2 x 0.65 x 13 = 16.9 px + 4 px apart (at 14 px: 22.2, too wide);
    # 5 heads, 17.16 px: 11 px digits take 18.3 px, too wide; 4 layers, 37.5 px tall: 15 px lines fit
    assert cell_font((4, 4), 2) == 13 and cell_font((4, 4), 1) == 15 and cell_font((4, 5), 2) == 0
    assert cell_font((8, 2), 2) == 14 and cell_font((9, 2), 2) == 12  # 18.75 / 1.3 -> 14; 16.7 / 1.3 -> 12
    assert cell_font((4, 4), 2, plot=(1000, 300)) == 15  # a wider figure: the figure's font

    def grid(layers, heads, top=0.3):
        rng = np.random.default_rng(layers * 100 + heads)
        before = rng.dirichlet(np.ones(10), size=(layers, heads, 10)).astype(np.float32)
        before[0, 0] = np.eye(10)[0]  # layer 0 head 0 reads key 0 only
        after = before.copy()
        after[0, 0] = top * np.eye(10)[1] + (1 - top) * np.eye(10)[0]  # and moves `top` of it to key 1
        fig = difference_grid(after, before, list("abcdefghij"), "w", "d")
        assert math.isclose(fig.data[0].z[0][0], 100 * top, abs_tol=0.05)
        return fig.data[0]

    # the default bundle's 4 x 4: two-digit numbers at a fixed 13 px (>= MIN_TEXT); 8 heads or 12 layers:
    # none (the value stays on hover); a head that moved all of its attention ("100") needs a wider cell
    g = grid(4, 4)
    assert g.texttemplate == "%{z:.0f}" and g.textfont.size == 13 >= MIN_TEXT
    for layers, heads in [(4, 8), (12, 4)]:
        g = grid(layers, heads)
        assert g.texttemplate is None and "%{z:.0f}%" in g.hovertemplate, (layers, heads)
    assert grid(4, 4, top=1.0).texttemplate is None


def test_the_reading_says_every_heads_number():
    moved = np.array([[0.0, 0.125, 0.014], [0.12, 1.0, 0.996]])
    said = moved_sentence(moved)  # 12.5 % prints 13, as Plotly's format of the cell (JavaScript's toFixed) does
    assert "L0: 0, 13, 1; L1: 12, 100, 100" in said and "h0 to h2" in said


def test_the_table_figure_and_markdown_say_the_tables_numbers():
    table = {
        "model": "default",
        "kind": "bundle",
        "label": "bundle 'default'",
        "trained_length": 128,
        "window": 64,
        "lengths": [128, 512],
        "scored_tokens": 4096,
        "scoring": "the first 4096 bytes",
        "unit": "nats/byte",
        "rows": [
            {"label": "full (as trained)", "loss": {"128": 1.4, "512": 3.2}},
            {"label": "routing", "loss": {"128": 3.6, "512": None}},
        ],
    }
    fig = table_figure(table)
    bars = [t for t in fig.data if t.type == "bar"]
    assert list(bars[0].y) == [1.4, 3.6] and math.isnan(bars[1].y[1])
    marked = [t for t in fig.data if t.type == "scatter"]
    assert marked and list(marked[0].x) == ["routing"]  # could not run at L = 512: marked
    assert fig.layout.shapes[0].y0 == 1.4  # as trained, the dashed line
    md = table_markdown(table)
    assert "| routing | 3.600 | n/a |" in md and "nats/byte" in md
    # every length says it is in tokens and where it stands against the trained length
    assert [b.name for b in bars] == ["L = 128 tokens (trained length)", "L = 512 tokens (4x past the trained length)"]
    assert "L = 512 tokens (4x past the trained length)" in md.splitlines()[0]
    assert "keep 64 keys" in fig.layout.title.text
    # a bundle's table (64 keys) and a checkpoint's (a quarter of its trained length) differ: each says its own
    assert "windows of 64 keys" in fig.layout.title.text.split("<br>")[0]
    assert "windows of 64 keys" in md.splitlines()[0]
    other = table_figure(dict(table, window=32)).layout.title.text.split("<br>")[0]
    assert "windows of 32 keys" in other and "32 keys" in table_markdown(dict(table, window=32)).splitlines()[0]


def test_a_difference_view_where_no_head_moved_says_why_in_its_title():
    before = _maps(2)
    assert unmoved(before, before.copy()) and not unmoved(_maps(3), before)
    fig = difference_grid(
        before,
        before.copy(),
        list("abcdefghijkl"),
        "window=64",
        "default",
        why_unmoved="Every head reads 0%: the same pairs.",
    )
    assert "Every head reads 0%: the same pairs." in fig.layout.title.text
    assert (
        "Every head reads 0%" not in difference_grid(_maps(3), before, list("abcdefghijkl"), "w", "d").layout.title.text
    )
