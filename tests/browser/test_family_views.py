"""Real browser: the Variant views tab shows the family views (lite's taps and convolution share, then
the sandwich sublayer order) with the data the model reports, and nothing else's."""

TRACE_TEXT_JS = """(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot');
  return e && e.data ? e.data[0].text : null; }"""


def _reading_has(page, text):
    page.page.wait_for_function(
        "(t) => (document.querySelector('#views-reading') || {}).innerText?.includes(t)", arg=text, timeout=150_000
    )


def test_lite_then_sandwich_views_in_the_tab(page):
    page.choose("ctl-attention", "lite")
    page.page.get_by_role("tab", name="Variant views").click(
        timeout=150_000
    )  # the tab appears once the views are computed
    _reading_has(page, "convolution head(s) of width 7")
    page.wait_plot("#view-lite")
    lite = page.plot("#view-lite")
    # default model: 4 layers x 2 convolution heads of taps (one heatmap), then one share line per layer
    assert lite["traces"] == 1 + 4 and lite["names"][1:] == [f"layer {i}" for i in range(4)]
    assert lite["x"][0] == [-6, -5, -4, -3, -2, -1, 0]  # causal taps of width 7
    assert lite["cells"] == 8 * 7
    assert page.page.locator("#view-sandwich .js-plotly-plot").count() == 0
    page.shot("views_lite", full_page=True)

    page.choose("ctl-layer", "sandwich")
    _reading_has(page, "aafafaff")  # n = 4, s = 1: a (a f)^3 f
    page.wait_plot("#view-sandwich")
    text = page.page.evaluate(TRACE_TEXT_JS, "#view-sandwich")
    assert [c for row in text for c in row] == ["a0", "a1", "f0", "a2", "f1", "a3", "f2", "f3"]  # s = 1, n = 4
    page.wait_plot("#view-lite")  # lite attention is still on: both views show
    page.shot("views_sandwich", full_page=True)
    page.check_clean()
