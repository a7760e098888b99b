"""The surgery figures against what they are drawn from: the difference view leads with the head that
moved (total variation computed by hand) and its levels decode to after - before; the table's bars are the
table's numbers and a row that could not run is marked."""
import math

import numpy as np

from explorer.figures.surgery import difference_grid, moved_fraction, table_figure, table_markdown, unmoved


def _maps(seed, shape=(2, 3, 12)):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(shape[-1]), size=shape).astype(np.float32)  # (layers, heads, L, L)


def test_the_difference_view_leads_with_the_head_that_moved():
    before = _maps(0)
    after = before.copy()
    after[1, 2] = _maps(1)[0, 0]                                            # only layer 1 head 2 changes
    moved = moved_fraction(after, before)
    by_hand = 0.5 * np.abs(after[1, 2] - before[1, 2]).sum(-1).mean()
    assert math.isclose(moved[1, 2], by_hand, rel_tol=1e-6) and moved.sum() == moved[1, 2]
    fig = difference_grid(after, before, list("abcdefghijkl"), "attention='strided'", "default")
    assert fig.layout.meta["shown"][0] == [1, 2]
    first = next(t for t in fig.data if t.name == "layer 1 head 2")
    step = fig.layout.meta["dp_step"]
    z, d = np.asarray(first.z, dtype=np.float32) * step, after[1, 2] - before[1, 2]
    inside = np.abs(d) < 127 * step                                        # beyond the scale's top: clipped
    assert inside.mean() > 0.9 and np.abs(z - d)[inside].max() <= step
    assert np.all(np.sign(z[~inside]) == np.sign(d[~inside]))


def test_the_table_figure_and_markdown_say_the_tables_numbers():
    table = {"model": "default", "kind": "bundle", "label": "bundle 'default'", "trained_length": 128, "window": 64,
             "lengths": [128, 512], "scored_tokens": 4096, "scoring": "the first 4096 bytes", "unit": "nats/byte",
             "rows": [{"label": "full (as trained)", "loss": {"128": 1.4, "512": 3.2}},
                      {"label": "routing", "loss": {"128": 3.6, "512": None}}]}
    fig = table_figure(table)
    bars = [t for t in fig.data if t.type == "bar"]
    assert list(bars[0].y) == [1.4, 3.6] and math.isnan(bars[1].y[1])
    marked = [t for t in fig.data if t.type == "scatter"]
    assert marked and list(marked[0].x) == ["routing"]                     # could not run at L = 512: marked
    assert fig.layout.shapes[0].y0 == 1.4                                    # as trained, the dashed line
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
    fig = difference_grid(before, before.copy(), list("abcdefghijkl"), "window=64", "default",
                          why_unmoved="Every head reads 0%: the same pairs.")
    assert "Every head reads 0%: the same pairs." in fig.layout.title.text
    assert "Every head reads 0%" not in difference_grid(_maps(3), before, list("abcdefghijkl"), "w", "d").layout.title.text
