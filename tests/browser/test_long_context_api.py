"""``/long_context`` from ``gradio_client`` on the served app, and the Long context tab in Chromium.

The endpoint's answer is checked against properties that hold whatever the weights: every query block's
cells sum to one (causal: every row has a key), a 64-key window puts all its mass within 64 keys, the
trained length is the bundle's manifest's; a bad length is refused naming the field and the lengths
offered. The browser test opens the tab, which draws its default scene, and reads the grid's title."""

import json

import numpy as np
import pytest
from gradio_client import Client

GRID_TITLE = (
    "() => { const e = document.querySelector('#lc-grid .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)


ZOOM_TITLE = (
    "() => { const e = document.querySelector('#lc-zoom .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)
# the page position of cell (query a, key b) of the panel drawing trace k, from Plotly's own axis geometry
CELL = """([k, a, b]) => {
  const gd = document.querySelector('#lc-grid .js-plotly-plot');
  const t = gd._fullData[k], fl = gd._fullLayout, m = gd.layout.meta;
  const xa = fl[t.xaxis.replace('x', 'xaxis')], ya = fl[t.yaxis.replace('y', 'yaxis')];
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p((b + 0.5) * m.block_k - m.block_k / 2),
          r.top + ya._offset + ya.l2p((a + 0.5) * m.block_q - m.block_q / 2)];
}"""


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_a_bad_length_is_refused_by_name(client):
    with pytest.raises(Exception, match=r"length.*1024, 2048, 4096, 8192, 16384"):
        client.predict("", "3000", "heldout", "", "window", "bundled", 64, api_name="/long_context")
    with pytest.raises(Exception, match="cells"):
        client.predict("", "2048", "heldout", "", "window", "bundled", 999, api_name="/long_context")


def test_a_2k_run_answers_with_maps_bins_and_weights(client):
    out = client.predict("", "2048", "repeat", "", "window", "bundled", 32, api_name="/long_context")
    assert out["length"] == 2048 and out["trained_length"] == 128 and out["unit"] == "byte"
    assert out["weights"]["used"] == "bundled" and out["repeat"][1] - out["repeat"][0] == 1024
    assert [s["name"] for s in out["sides"]] == ["as trained", "64-key sliding window"]
    for side in out["sides"]:
        maps = np.array(side["maps"], dtype=float)  # [layer][head][query cell][key cell]
        assert maps.shape == (4, 4, 32, 32) and side["block_q"] == 64
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-4)
        assert len(side["loss_bins"]) == 64 and side["mean_loss"] > 0
    local = np.array(out["sides"][1]["stats_bins"]["local"], dtype=float)
    np.testing.assert_allclose(local, 1.0, atol=1e-4)
    assert json.loads(json.dumps(out))  # plain JSON: no NaN


def test_the_tab_draws_its_default_scene(open_page):
    page = open_page()
    page.tab("Long context")
    page.page.wait_for_function(f"({GRID_TITLE})().includes('Pooled attention')", timeout=240_000)
    title = page.page.evaluate(GRID_TITLE)
    assert "2048 bytes, trained at 128 bytes (16x past it)" in title
    page.page.wait_for_function("() => document.querySelector('#lc-loss .js-plotly-plot')", timeout=60_000)
    assert page.page.evaluate("() => document.querySelector('#lc-loss .js-plotly-plot').data.length") == 2
    page.shot("long_context", full_page=True)
    page.settle()
    page.page.locator("#lc-grid").scroll_into_view_if_needed()
    x, y = page.page.evaluate(CELL, [1 * 4 + 2, 30, 3])  # layer 1 head 2, query cell 30, key cell 3
    page.page.mouse.click(x, y)
    page.page.wait_for_function(f"({ZOOM_TITLE})().includes('layer 1 head 2')", timeout=120_000)
    assert "queries 1920-1983, keys 192-255" in page.page.evaluate(ZOOM_TITLE)
    page.check_clean()
