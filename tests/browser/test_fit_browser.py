"""Every figure fits its screen, in Debian's Chromium: a phone (one column, every tab one tap away, no
sideways scroll), every tab x (normal, presentation) x (controls shown, hidden) at 1280x720 (each shown
figure as wide as its container, also one drawn while its tab was hidden), and presentation mode at
1280x720 and 1920x1080 (a one-line header, the first figure and its title on one screen, square map
cells, text of at least 16 px)."""

import pytest

# Each figure on screen: the width its figure was drawn at (Plotly's layout) and its element's width
# (the container Gradio gives it), with the block's id.
FIGS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent !== null
    && g._fullLayout).map(g => ({id: (g.closest('.block') || {}).id, fig: g._fullLayout.width,
    svg: g.querySelector('svg.main-svg').getBoundingClientRect().width,
    box: g.getBoundingClientRect().width, block: g.closest('.block').getBoundingClientRect().width}))"""
TABS_JS = """() => [...document.querySelectorAll('#tabs button[role="tab"]')].filter(b => b.offsetParent !== null)
    .map(b => b.innerText.trim())"""
ALL_TABS = [
    "Attention",
    "Gradients",
    "Latency & memory",
    "Model",
    "Surgery",
    "Compare A/B",
    "Long context",
    "Why",
    "Train",
]


def _misfits(page, tol=2):
    return [f for f in page.evaluate(FIGS_JS) if abs(f["fig"] - f["box"]) > tol or abs(f["svg"] - f["box"]) > tol]


def _wait_fitted(page, timeout=8000):
    """Figures are resized one animation frame after their container changes (and Plotly's own resize
    waits ~100 ms): wait until none is off, then return what is still off (nothing)."""
    try:
        page.wait_for_function(
            f"() => ({FIGS_JS})().every(f => Math.abs(f.fig - f.box) <= 2 && Math.abs(f.svg - f.box) <= 2)",
            timeout=timeout,
        )
    except Exception:  # noqa: BLE001 - the assertion below says which figures
        pass
    return _misfits(page)


def test_a_phone_gets_one_column_and_every_tab(open_page):
    """On a phone the figures come first, each column the screen's width, every tab a button on screen."""
    phone = open_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    p = phone.page
    phone.settle()  # the load chain's figures drawn
    phone.laid_out()
    assert p.evaluate("() => document.documentElement.scrollWidth") <= 390
    controls, figures = p.locator("#controls").bounding_box(), p.locator("#figures").bounding_box()
    inner = p.evaluate("() => document.querySelector('#controls').parentElement.clientWidth")
    assert controls["width"] >= 0.9 * inner and figures["width"] >= 0.9 * inner, (controls, figures, inner)
    # the figures first, the controls below them (the page's jump button goes between the two)
    assert figures["y"] < 400 < controls["y"], ("the figures do not come first", figures, controls)
    assert p.evaluate(TABS_JS) == ALL_TABS  # no "..." menu: every tab is a button on screen
    for name in ALL_TABS:
        tab = p.get_by_role("tab", name=name)
        tab.click()
        assert tab.get_attribute("aria-selected") == "true"
        assert p.evaluate("() => document.documentElement.scrollWidth") <= 390, name
        for fig in p.evaluate(FIGS_JS):
            assert fig["svg"] <= fig["block"] + 1 and fig["svg"] >= 0.9 * fig["block"], (name, fig)
    phone.check_clean()


def test_every_figure_fits_its_container_in_every_tab_and_mode(open_page):
    page = open_page(viewport={"width": 1280, "height": 720})
    p = page.page
    # a figure drawn while its tab is hidden: change a control on Gradients, then open Attention
    page.tab("Gradients")
    page.commit_number("ctl-n_layers", "3")
    page.settle()
    for presentation in (False, True):
        for hidden in (False, True):
            for name in ALL_TABS:
                page.tab(name)
                assert not _wait_fitted(p), (
                    name,
                    "presentation" if presentation else "normal",
                    "controls hidden" if hidden else "controls shown",
                    _misfits(p),
                )
            p.locator("#controls-toggle").click()
        p.locator("#present-toggle").click()
    # tabs flipped while a redraw chain draws them
    page.tab("Gradients")
    page.commit_number("ctl-n_layers", "2")
    for name in ("Attention", "Surgery", "Gradients", "Train", "Attention"):
        page.tab(name)
        p.wait_for_timeout(150)
    page.settle()
    for name in ALL_TABS:
        page.tab(name)
        assert not _wait_fitted(p), (name, "after a redraw chain with tabs flipped", _misfits(p))
    page.check_clean()


HEADER_JS = "() => document.querySelector('#app-header').getBoundingClientRect().height"
# the attention grid's first panel: pixels per key and per query
CELL_JS = """() => { const l = document.querySelector('#attention-grid .js-plotly-plot')._fullLayout;
  const x = l.xaxis, y = l.yaxis, nx = x.range[1] - x.range[0], ny = Math.abs(y.range[0] - y.range[1]);
  return [x._length / nx, y._length / ny]; }"""
# visible plot text under 16 px in the grid (head labels) and the gradient figure (every axis' ticks,
# minor ones too); not the legend, whose entries Plotly spaces for the size it knows
SMALL_TEXT_JS = """(sel) => [...document.querySelectorAll(sel + ' .js-plotly-plot text')].filter(t =>
    t.textContent.trim() && !t.closest('.legend') && t.getBoundingClientRect().width > 0 && parseFloat(getComputedStyle(t).fontSize) < 16)
    .map(t => [t.getAttribute('class'), t.textContent.slice(0, 20), getComputedStyle(t).fontSize])"""  # noqa: E501 (JavaScript kept verbatim)


def _fits_one_screen(page, size):
    """Presentation mode on (the Attention tab): a one-line header, the grid and the statistics each on one
    screen with their titles, square map cells, no grid text under 16 px."""
    p = page.page
    assert p.evaluate(HEADER_JS) <= 80, "the header takes more than one line"
    page.laid_out()
    for sel in ("#attention-grid", "#attention-stats"):
        p.locator(sel).scroll_into_view_if_needed()
        p.evaluate(f"() => document.querySelector('{sel}').scrollIntoView({{block: 'start'}})")
        svg = p.locator(f"{sel} svg.main-svg").first.bounding_box()
        title = p.locator(f"{sel} .gtitle").first.bounding_box()
        assert svg["y"] >= -1 and svg["y"] + svg["height"] <= size[1] + 1, (sel, svg)
        assert title["y"] >= svg["y"] - 1 and title["x"] + title["width"] <= svg["x"] + svg["width"] + 1, (sel, title)
    per_key, per_query = p.evaluate(CELL_JS)
    assert abs(per_key / per_query - 1) < 0.05, f"map cells are {per_key:.1f} x {per_query:.1f} px"
    assert not p.evaluate(SMALL_TEXT_JS, "#attention-grid")


# The attention grid with the page and the figure column scrolled to their tops: its box, its figure's
# height, and its first panel's pixels per key and per query.
GRID_AT_TOP_JS = """() => { window.scrollTo(0, 0); const col = document.getElementById('figures'); col.scrollTop = 0;
  const g = document.querySelector('#attention-grid .js-plotly-plot'), r = g.getBoundingClientRect(), l = g._fullLayout;
  const x = l.xaxis, y = l.yaxis;
  return {top: r.top, bottom: r.bottom, height: l.height, title: g.querySelector('.gtitle').getBoundingClientRect().top,
          cell: [x._length / (x.range[1] - x.range[0]), y._length / Math.abs(y.range[0] - y.range[1])]}; }"""


def _grid_at_top(p, fits, timeout=15_000):
    """The grid's geometry once ``fits(geometry)`` holds (or the timeout passes: the caller asserts)."""
    deadline = p.evaluate("() => performance.now()") + timeout
    while True:
        g = p.evaluate(GRID_AT_TOP_JS)
        if fits(g) or p.evaluate("() => performance.now()") > deadline:
            return g
        p.wait_for_timeout(150)


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_presentation_mode_fits_one_screen(open_page, size):
    """Presentation mode at the projector's size, one page: a one-line header, the first figure and its
    title on one screen, square map cells, text of at least 16 px (``_fits_one_screen``); with the page
    and the figure column at their tops (the header, buttons and tabs above the grid), the whole
    attention grid and its title are on screen, its cells square; also after a redraw (the pickers:
    fewer layers, then all again); the Gradients tab's figure fits and has no text under 16 px. Back
    in normal mode the grid has the height the server drew it at (``grid_height``)."""
    from explorer.figures.attention import MAX_GRID, grid_height
    from models import ModelConfig

    rows = min(ModelConfig().n_layers, MAX_GRID)
    page = open_page(viewport={"width": size[0], "height": size[1]})
    p = page.page
    p.locator("#present-toggle").click()
    p.wait_for_function("() => document.body.classList.contains('presentation')")
    _fits_one_screen(page, size)

    def on_screen(g):
        return g["top"] >= -1 and g["bottom"] <= size[1] + 0.5 and g["title"] >= g["top"] - 1

    def check(what):
        g = _grid_at_top(p, on_screen)
        assert on_screen(g), (what, size, g)
        assert abs(g["cell"][0] / g["cell"][1] - 1) < 0.05, (what, "cells not square", g)
        return g

    check("presentation")
    for spec, _n in (("0-1", 2), ("all", rows)):
        p.locator("#grid-layers textarea, #grid-layers input").first.fill(spec)
        p.locator("#grid-layers textarea, #grid-layers input").first.press("Enter")
        page.settle()
        g = check(f"layers {spec}")
        assert g["height"] <= size[1], (spec, g)  # the panels as large as the screen allows, never past it
    page.tab("Gradients")
    assert not _wait_fitted(p)
    assert not p.evaluate(SMALL_TEXT_JS, "#grad-plot")
    page.tab("Attention")
    p.locator("#present-toggle").click()
    p.wait_for_function("() => !document.body.classList.contains('presentation')")
    g = _grid_at_top(p, lambda g: abs(g["height"] - grid_height(rows)[0]) <= 1)
    assert abs(g["height"] - grid_height(rows)[0]) <= 1, ("normal mode: the server's height", g)
    page.check_clean()
