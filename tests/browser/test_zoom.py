"""Zooming into one head in Debian's Chromium: the zoom fills on load, picking a head redraws it, and
the pickers follow the number of layers."""

TITLE = (
    "() => { const e = document.querySelector('#zoom-plot .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)


def test_pick_a_head_and_zoom(page):
    page.page.wait_for_function(f"({TITLE})().includes('Layer 0, head 0')", timeout=90_000)
    # token labels on the axes: the default text starts with "The"
    assert (
        page.page.evaluate("() => document.querySelector('#zoom-plot .js-plotly-plot').layout.yaxis.ticktext[1]")
        == "1 h"
    )
    page.choose("zoom-layer", "layer 3")
    page.page.wait_for_function(f"({TITLE})().includes('Layer 3, head 0')", timeout=60_000)
    page.choose("zoom-head", "head 2")
    page.page.wait_for_function(f"({TITLE})().includes('Layer 3, head 2')", timeout=60_000)
    page.commit_number("ctl-n_layers", "2")  # layer 3 no longer exists: the zoom falls back to layer 0
    page.page.wait_for_function(f"({TITLE})().includes('Layer 0, head 2')", timeout=60_000)
    page.shot("zoom")
    page.check_clean()
