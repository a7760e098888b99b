"""The encoder-decoder end to end: the gradio_client API and the page in Debian's Chromium.

API: ``/analyze`` takes an encoder-decoder config and a separator and returns the three kinds of
maps. Browser: choose the encoder-decoder preset, see the cross-attention maps render with source
(columns) and target (rows) token labels, change the separator and see the split move.
"""

import json

import pytest
from gradio_client import Client

ENCDEC = {
    "architecture": "encoder_decoder",
    "n_layers": 2,
    "n_encoder_layers": 1,
    "n_decoder_layers": 2,
    "d_model": 32,
    "n_heads": 2,
}
PRESET = "Original Transformer (Vaswani 2017, encoder-decoder)"


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_analyze_returns_encoder_decoder_and_cross_maps(client):
    s = client.predict(json.dumps(ENCDEC), "abc=>wxyz", api_name="/analyze")
    assert s["n_tokens"] == 4 and s["n_layers"] == 2 and s["row_sums_ok"]  # decoder self-attention
    assert s["encoder_maps"]["n_tokens"] == 3 and s["encoder_maps"]["n_layers"] == 1
    cross = s["cross_maps"]
    assert cross["n_tokens"] == 4 and cross["n_keys"] == 3 and cross["row_sums_ok"] and cross["mask_kind"] == "full"
    moved = client.predict(json.dumps(ENCDEC), "ab|c=>wxyz", "|", api_name="/analyze")
    assert moved["cross_maps"]["n_keys"] == 2 and moved["n_tokens"] == len("c=>wxyz")


def test_analyze_without_the_separator_names_it(client):
    with pytest.raises(Exception) as err:
        client.predict(json.dumps(ENCDEC), "no split", api_name="/analyze")
    assert "separator" in str(err.value)


def test_gradients_per_stack(client):
    g = client.predict(json.dumps(ENCDEC), api_name="/gradients")
    assert g["stack"] == ["encoder", "decoder", "decoder"] and g["cross_out"][0] is None
    assert all(v > 0 for v in g["cross_out"][1:])


AXIS_LABELS_JS = """(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot');
  return e && e.data && e.data.length ? {x: Array.from(e.data[0].x), y: Array.from(e.data[0].y), n: e.data.length}
                                      : null; }"""


def _labels(page, sel):
    return page.page.evaluate(AXIS_LABELS_JS, sel)


def test_preset_shows_cross_attention_labels_zooms_and_the_separator_moves_the_split(page):
    """The preset's grids; on the same page, its extra grids' labels and zoom (``_extra_grids``); then the
    separator moves the split."""
    assert not page.page.locator("#separator").is_visible()  # decoder-only default: no separator box
    page.choose("preset", PRESET)
    page.wait_plot("#cross-grid")
    assert page.page.locator("#separator").is_visible() and page.value("separator") == "=>"
    assert (
        page.page.locator("#ctl-n_encoder_layers").is_visible() and page.value("ctl-architecture") == "encoder_decoder"
    )
    text = page.value("text")
    src, tgt = text.split("=>")
    cross = _labels(page, "#cross-grid")
    assert cross["n"] == 4 * 4  # decoder layers x heads of the preset
    assert [x.split(" ", 1)[1] for x in cross["x"]] == [("␣" if c == " " else c) for c in src]  # source columns
    assert [y.split(" ", 1)[1] for y in cross["y"]] == [("␣" if c == " " else c) for c in tgt]  # target rows
    page.page.locator("#cross-grid").scroll_into_view_if_needed()
    page.shot("encoder_decoder_cross")
    _extra_grids(page)
    # move the split: a text with both separators, then the separator box changed to "|"
    box = page.page.locator("#text textarea")
    box.fill("ab|cd=>xyz")
    box.press("Tab")
    page.page.wait_for_function(
        "(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot');"
        " return e && e.data && e.data[0].x.length === 5; }",
        arg="#cross-grid",
        timeout=120_000,
    )
    sep = page.page.locator("#separator input, #separator textarea").first
    sep.fill("|")
    sep.press("Tab")
    page.page.wait_for_function(
        "(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot');"
        " return e && e.data && e.data[0].x.length === 2; }",
        arg="#cross-grid",
        timeout=120_000,
    )
    moved = _labels(page, "#cross-grid")
    assert moved["x"] == ["0 a", "1 b"] and len(moved["y"]) == len("cd=>xyz")
    enc = _labels(page, "#encoder-grid")
    assert enc["x"] == ["0 a", "1 b"] and enc["y"] == ["0 a", "1 b"]
    page.check_clean()


def test_benchmark_varies_source_or_target(client):
    recs = client.predict(json.dumps(ENCDEC), "8,16", "forward", "source", api_name="/benchmark")
    assert [(r["src_len"], r["tgt_len"]) for r in recs] == [(8, 64), (16, 64)]


def test_first_click_on_encoder_decoder_draws_without_a_warning(page):
    """Picking encoder_decoder in the architecture dropdown on the landing page: the example text
    becomes a source => target pair, the cross-attention grid draws, and no warning shows."""
    page.choose("ctl-architecture", "encoder_decoder")
    page.wait_plot("#cross-grid")
    page.settle()
    assert "=>" in page.value("text") and page.page.locator("#separator").is_visible()
    assert page.page.locator(".toast-body.warning").count() == 0, "a warning toast on the first click"
    src, tgt = page.value("text").split("=>")
    cross = _labels(page, "#cross-grid")
    assert len(cross["x"]) == len(src) and len(cross["y"]) == len(tgt)
    page.check_clean()


# The rendered tick labels of an extra grid's outer panels: {x: [...], y: [...]} (what is on screen)
TICKS_JS = """(sel) => { const g = document.querySelector(sel + ' .js-plotly-plot');
  const texts = (cls) => [...g.querySelectorAll(cls + ' text')].filter(t => t.getBoundingClientRect().width > 0)
    .map(t => t.textContent);
  return {x: texts('.xaxislayer-above'), y: texts('.yaxislayer-above')}; }"""
# The page position of the centre of the panel of trace ``i`` in a grid, and that trace's meta.
PANEL_JS = """([sel, i]) => { const g = document.querySelector(sel + ' .js-plotly-plot'), t = g.data[i];
  const l = g._fullLayout, xa = l[(t.xaxis || 'x').replace('x', 'xaxis')], ya = l[(t.yaxis || 'y').replace('y', 'yaxis')];
  const r = g.getBoundingClientRect();
  return {x: r.left + xa._offset + xa._length / 2, y: r.top + ya._offset + ya._length / 2, meta: t.meta}; }"""  # noqa: E501 (JavaScript kept verbatim)
ZOOM_TITLE_JS = """() => { const t = document.querySelector('#stack-zoom .gtitle');
  return t && t.getBoundingClientRect().width > 0 ? t.textContent : null; }"""


def _extra_grids(page):
    """The cross-attention grid labels its outer panels with the source (columns) and target (rows)
    tokens; a click on a panel shows that head large under the grids, its title naming the map, the
    layer and the head, with every token on its axes; a click on another panel changes it."""
    page.settle()
    p = page.page
    src, tgt = page.value("text").split("=>")
    cross = _labels(page, "#cross-grid")
    ticks = p.evaluate(TICKS_JS, "#cross-grid")
    assert ticks["x"] and set(ticks["x"]) <= set(cross["x"]), ticks  # source tokens under the bottom row
    assert ticks["y"] and set(ticks["y"]) <= set(cross["y"]), ticks  # target tokens beside the first column
    assert not p.locator("#stack-zoom").is_visible()  # nothing picked yet
    seen = []
    for i in (cross["n"] - 1, 0):  # the last panel (deepest layer, last head), then the first
        p.locator("#cross-grid").scroll_into_view_if_needed()
        panel = p.evaluate(PANEL_JS, ["#cross-grid", i])
        p.mouse.click(panel["x"], panel["y"])
        layer, head = panel["meta"]
        want = f"Layer {layer}, head {head}: Cross-attention"
        p.wait_for_function(
            f"() => {{ const t = ({ZOOM_TITLE_JS})(); return t && t.startsWith({want!r}); }}", timeout=30_000
        )
        seen.append(p.evaluate(ZOOM_TITLE_JS))
        zoom = _labels(page, "#stack-zoom")
        assert zoom["x"] == cross["x"] and zoom["y"] == cross["y"]  # every source and target token
        assert len(zoom["x"]) == len(src) and len(zoom["y"]) == len(tgt)
    assert seen[0] != seen[1]
    page.check_clean()
