"""Presentation mode, the collapsible control column, figures kept in view, and a phone viewport, in
Debian's Chromium. Screenshots of presentation mode go to the screenshot folder (temporary unless
refreshed)."""

import os

TITLE_PX = """() => parseFloat(getComputedStyle(document.querySelector('#attention-grid .gtitle')).fontSize)"""
READING_PX = """() => parseFloat(getComputedStyle(document.querySelector('#maps-reading p')).fontSize)"""


def test_presentation_mode_enlarges_text_and_hides_controls_then_figures_stay_in_view_and_titles_clear(page):
    """One page: presentation mode (``_enlarges``), then, back in normal mode at 1280 x 720, the figures
    kept in view while the controls scroll (``_stay_in_view``) and the titles (``_titles_clear``)."""
    _enlarges(page)
    page.page.locator("#present-toggle").click()
    page.page.wait_for_function("() => !document.body.classList.contains('presentation')")
    _stay_in_view(page)
    _titles_clear(page)


def _enlarges(page):
    title, reading = page.page.evaluate(TITLE_PX), page.page.evaluate(READING_PX)
    page.page.locator("#present-toggle").click()
    page.page.wait_for_function("() => document.body.classList.contains('presentation')")
    assert page.page.evaluate(TITLE_PX) >= title + 4
    assert page.page.evaluate(READING_PX) >= reading * 1.3
    assert page.page.locator("#controls").is_visible()
    page.page.locator("#controls-toggle").click()
    page.page.wait_for_function(
        "() => !document.querySelector('#controls') || document.querySelector('#controls').offsetParent === null"
    )
    # the figure column takes the freed width
    assert page.page.locator("#figures").bounding_box()["width"] > 0.9 * page.page.viewport_size["width"]
    page.shot("presentation")
    page.page.locator("#controls-toggle").click()
    page.page.wait_for_function("() => document.querySelector('#controls').offsetParent !== null")
    page.check_clean()


def _stay_in_view(page):
    page.page.set_viewport_size({"width": 1280, "height": 720})
    page.page.evaluate("() => window.scrollTo(0, 0)")
    page.page.wait_for_function("() => window.scrollY === 0")
    tall = page.page.evaluate("() => document.querySelector('#controls').getBoundingClientRect().height")
    assert tall > 720  # the case this guards: a control column taller than the screen
    page.page.mouse.move(200, 400)
    # the wheel scrolls smoothly, over several frames (longer on a busy machine), and a wheel that
    # meets the page while the new viewport is being laid out can be dropped: wheel again until the page
    # has gone past 500 px, then wait until it has stood still for 300 ms
    for _ in range(5):
        page.page.mouse.wheel(0, 1500)
        try:
            page.page.wait_for_function("() => window.scrollY > 500", timeout=2_000)
            break
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError: wheel again
            continue
    assert page.page.evaluate("() => window.scrollY") > 500
    page.page.wait_for_function(
        """() => { const w = window.__still = window.__still || {y: -1, t: 0};
      const now = performance.now(); if (window.scrollY !== w.y) { w.y = window.scrollY; w.t = now; }
      return now - w.t > 300; }""",
        polling=50,
        timeout=10_000,
    )
    top = page.page.evaluate("() => document.querySelector('#figures').getBoundingClientRect().top")
    assert -1 <= top < 720 / 2, f"the figure column scrolled away (top at {top}px)"
    page.check_clean()


def test_a_phone_viewport_has_no_horizontal_page_scroll(open_page):
    phone = open_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)  # first paint drawn
    phone.settle()  # the load chain's figures drawn
    phone.laid_out()
    width = phone.page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width}px wide on a 390px screen"
    phone.page.screenshot(path=os.path.join(phone.shots, "phone.png"))


# Per figure of the tab: the box of Gradio's label (null when hidden), of the figure's title and of
# the figure's own svg, in page pixels.
BOXES_JS = """(ids) => ids.map(id => { const blk = document.querySelector('#' + id);
  const box = e => { if (!e || e.offsetParent === null) return null; const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  return {id, label: box(blk.querySelector('label[data-testid="block-label"]')),
          title: box(blk.querySelector('.gtitle')), svg: box(blk.querySelector('svg.main-svg'))}; })"""


UNLABELLED = {"attention-grid"}  # its title says what it shows: no label takes a line of the first screen


def _apart(a, b):
    return a["bottom"] <= b["top"] or b["bottom"] <= a["top"] or a["right"] <= b["left"] or b["right"] <= a["left"]


def _titles_clear(page):
    """Each figure's title lies inside its figure (a title of several lines pinned to the top used to
    stick out above it), and Gradio's label never covers it: above the figure normally, hidden in
    presentation mode, where the title is larger and says the same; the grid has none (its title names it)."""
    page.page.set_viewport_size({"width": 1280, "height": 720})
    tabs = {"Attention": ["attention-grid"], "Gradients": ["grad-plot"]}
    for mode in ("normal", "presentation"):
        if mode == "presentation":
            page.page.locator("#present-toggle").click()
            page.page.wait_for_function("() => document.body.classList.contains('presentation')")
        for tab, ids in tabs.items():
            page.page.get_by_role("tab", name=tab).click()
            page.page.wait_for_function(
                "(id) => { const t = document.querySelector('#' + id + ' .gtitle'); "
                "return t && t.offsetParent !== null; }",
                arg=ids[0],
            )
            for fig in page.page.evaluate(BOXES_JS, ids):
                title, svg, label = fig["title"], fig["svg"], fig["label"]
                assert title["top"] >= svg["top"] - 0.5, (mode, fig)
                if mode == "presentation":
                    assert label is None, (mode, fig)
                elif fig["id"] in UNLABELLED:
                    assert label is None, (mode, fig)
                else:
                    assert label is not None and _apart(label, title), (mode, fig)
    page.page.locator("#present-toggle").click()
    page.page.get_by_role("tab", name="Attention").click()
    page.check_clean()
