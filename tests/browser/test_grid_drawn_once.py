"""A laptop-wide attention grid is drawn once per figure: its head labels are fitted before Plotly
draws it, not by a second draw after it.

Measured in Debian's Chromium: the page's layout script counts the relayouts it makes
(``window.__phoneLayout.adapted``), and a listener counts the grid's draws (``plotly_afterplot``
on each graph div Gradio mounts). References: each label's rendered box against its panel's
(the axis length Plotly drew), and the server's own label (kept beside the shown one) in the hover text."""

import pytest

COUNT_JS = """() => { const t = window.__draws = window.__draws || {n: 0, divs: new WeakSet()};
  const look = () => { const gd = document.querySelector('#attention-grid .js-plotly-plot');
    if (gd && !t.divs.has(gd) && typeof gd.on === 'function') { t.divs.add(gd); gd.on('plotly_afterplot', () => t.n++); }
    requestAnimationFrame(look); };
  look(); }"""  # noqa: E501 (JavaScript kept verbatim)
LABELS_JS = """() => { const gd = document.querySelector('#attention-grid .js-plotly-plot'), full = gd._fullLayout;
  return gd.layout.annotations.map((a, i) => { const el = gd.querySelectorAll('.annotation')[i];
    const box = el.querySelector('.annotation-text').getBoundingClientRect();
    const xa = full[(a.xref.split(' ')[0]).replace('x', 'xaxis')];
    return {text: a.text, hover: a.hovertext || null, label: a._label || a.text, width: box.width, panel: xa._length}; }); }"""  # noqa: E501 (JavaScript kept verbatim)


@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, {"width": 1280, "height": 720}])
def test_the_grid_is_drawn_once_with_labels_that_fit_their_panels(open_page, viewport):
    page = open_page(viewport=viewport)
    page.settle()
    assert page.page.evaluate("() => window.__phoneLayout.adapted") == 0, "the first grid was laid out twice"
    page.page.evaluate(COUNT_JS)
    page.choose("ctl-attention", "sliding_window")
    page.page.wait_for_function("() => window.__draws.n >= 1", timeout=60_000)
    page.settle()
    assert page.page.evaluate("() => window.__phoneLayout.adapted") == 0, "a redraw was laid out again after it"
    labels = page.page.evaluate(LABELS_JS)
    assert len(labels) == 16
    for lab in labels:
        assert lab["width"] <= lab["panel"], lab  # every label inside its panel's width
        # shortened labels keep the server's text on hover; a label shown whole needs none
        assert (lab["hover"] is None) == (lab["text"] == lab["label"]), lab
        assert lab["hover"] in (None, lab["label"])
    assert any(lab["text"] != lab["label"] for lab in labels), "no label needed its short code at this width"
    page.check_clean()
