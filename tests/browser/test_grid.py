"""The attention grid a speaker drives, in Debian's Chromium: click a panel -> the zoom shows that head
(one request), the Layers / Heads shown pickers redraw the grid and go into the share link, a link
restores them, and the grid fits a 1280x720 and a 1920x1080 screen in presentation mode."""

ZOOM_TITLE = (
    "() => { const e = document.querySelector('#zoom-plot .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)
GRID = "() => { const e = document.querySelector('#attention-grid .js-plotly-plot'); return e; }"
# the centre of the subplot that draws trace k, in page pixels (from Plotly's own axis geometry)
PANEL_CENTRE = """(k) => {
  const gd = document.querySelector('#attention-grid .js-plotly-plot');
  const t = gd._fullData[k], fl = gd._fullLayout;
  const xa = fl[t.xaxis.replace('x', 'xaxis')], ya = fl[t.yaxis.replace('y', 'yaxis')];
  const r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa._length / 2, r.top + ya._offset + ya._length / 2, t.name];
}"""


def _grid_names(page):
    return page.page.evaluate("() => document.querySelector('#attention-grid .js-plotly-plot').data.map(t => t.name)")


def test_click_a_panel_zooms_into_that_head_then_the_pickers_redraw_the_grid(page, open_page):
    """One page: the clicks on panels (the default 4 x 4 grid), then the pickers (``_pickers``)."""
    page.page.wait_for_function(f"({ZOOM_TITLE})().includes('Layer 0, head 0')", timeout=90_000)
    page.settle()
    page.page.locator("#attention-grid").scroll_into_view_if_needed()
    x, y, name = page.page.evaluate(PANEL_CENTRE, 2 * 4 + 3)  # default: 4 layers x 4 heads, row-major
    assert name == "layer 2 head 3"
    sent = len(page.requests)
    page.page.mouse.click(x, y)
    page.page.wait_for_function(f"({ZOOM_TITLE})().includes('Layer 2, head 3')", timeout=60_000)
    page.settle()
    assert len(page.requests) - sent == 1  # one click = one zoom request
    assert page.value("zoom-layer") == "layer 2" and page.value("zoom-head") == "head 3"
    # the zoom that changed is on screen (it sits below the grid, out of sight at 1280x720 before)
    top, bottom, height = page.page.evaluate(
        "() => { const r = document.querySelector('#zoom-plot').getBoundingClientRect();"
        " return [r.top, r.bottom, window.innerHeight]; }"
    )
    assert 0 <= top < height - min(bottom - top, height) / 2, (top, bottom, height)
    page.page.locator("#attention-grid").scroll_into_view_if_needed()
    x, y, name = page.page.evaluate(PANEL_CENTRE, 1 * 4 + 0)
    page.page.mouse.click(x, y)
    page.page.wait_for_function(f"({ZOOM_TITLE})().includes('Layer 1, head 0')", timeout=60_000)
    page.check_clean()
    _pickers(page, open_page)


def _pickers(page, open_page):
    """The Layers / Heads shown pickers redraw the grid and go into the share link; a link restores them."""
    page.settle()
    page.commit_number("grid-layers", "1-2")
    page.page.wait_for_function(f"() => ({GRID})().data.length === 8", timeout=60_000)
    page.commit_number("grid-heads", "3")
    page.page.wait_for_function(f"() => ({GRID})().data.length === 2", timeout=60_000)
    assert _grid_names(page) == ["layer 1 head 3", "layer 2 head 3"]
    assert "layers 1-2 of 4" in page.page.evaluate(f"() => ({GRID})().layout.title.text")
    page.page.wait_for_function(
        "() => document.querySelector('#share-url textarea, #share-url input').value.includes('grid_layers=1-2')",
        timeout=30_000,
    )
    link = page.value("share-url")
    assert "grid_heads=3" in link
    # a bad pick: a warning naming the box and the valid forms; the grid stays as it was
    page.commit_number("grid-layers", "7")
    page.page.wait_for_function(
        "() => document.querySelector('#status') && "
        "document.querySelector('#status').innerText.includes('Layers shown')",
        timeout=30_000,
    )
    assert "0-3" in page.page.locator("#status").inner_text()
    assert _grid_names(page) == ["layer 1 head 3", "layer 2 head 3"]
    # the link restores the picks
    other = open_page(link)
    other.page.wait_for_function(f"() => ({GRID})() && ({GRID})().data.length === 2", timeout=90_000)
    assert other.value("grid-layers") == "1-2" and other.value("grid-heads") == "3"
    other.check_clean()


def test_eight_layers_fit_the_screen_in_presentation_mode(open_page):
    """One page, resized from a 1280x720 screen to a 1920x1080 one."""
    p = open_page("?n_layers=8&n_heads=8")
    p.page.set_viewport_size({"width": 1280, "height": 720})
    p.page.wait_for_function(f"() => ({GRID})().data.length === 64", timeout=90_000)
    p.page.locator("#present-toggle").click()
    p.page.locator("#controls-toggle").click()
    for size in ((1280, 720), (1920, 1080)):
        p.page.set_viewport_size({"width": size[0], "height": size[1]})
        p.page.wait_for_function("(w) => window.innerWidth === w", arg=size[0])
        p.laid_out()
        p.page.locator("#attention-grid").scroll_into_view_if_needed()
        box = p.page.evaluate(f"() => ({GRID})().getBoundingClientRect().height")
        assert box <= size[1], f"the 8-row grid is {box}px tall on a {size[1]}px screen"
        p.shot(f"grid-{size[0]}x{size[1]}")
    p.check_clean()
