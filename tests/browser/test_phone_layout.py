"""What a person sees on a 390 x 844 phone and on a 1280 x 720 projector, measured in Debian's Chromium:
on the phone the attention grid starts on the first screen, a control change is one tap (or one Enter)
from its figure, no figure of any tab prints text over text (the boxes of its SVG text elements),
and the grid's panels stay at least ``MIN_PANEL`` px; in presentation mode the grid's head labels
fit their panels (a short code, the full label on hover) and touch neither each other nor the
panels' titles, the panels grow when the controls are hidden, and the zoomed head is one screen tall.

The page's layout script (``explorer.app.page.phone_js.PHONE_JS``) is added to each page as well: it
installs itself once, so a page that already runs it is unchanged."""

from explorer.app.page.phone_js import MIN_PANEL, PHONE_JS

PHONE = {"width": 390, "height": 844}
PROJECTOR = {"width": 1280, "height": 720}

# -> {plot id: [[text a, text b, overlap w, overlap h], ...]} for every visible Plotly figure: pairs of its
# SVG text elements whose boxes overlap by more than 1 px both ways (hover labels and hidden text aside)
OVERLAPS_JS = """() => { const out = {};
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (gd.offsetParent === null || !gd.getBoundingClientRect().width) continue;
    const boxes = [];
    for (const t of gd.querySelectorAll('svg text')) {
      if (!t.textContent.trim() || t.closest('.hoverlayer')) continue;
      let hidden = false;
      for (let e = t; e && e !== gd; e = e.parentElement) { const s = getComputedStyle(e);
        if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') { hidden = true; break; } }
      const b = t.getBoundingClientRect();
      if (!hidden && b.width >= 1 && b.height >= 1) boxes.push([t.textContent.trim().slice(0, 40), b]);
    }
    const pairs = [];
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [ta, a] = boxes[i], [tb, b] = boxes[j];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 1) pairs.push([ta, tb, Math.round(w), Math.round(h)]);
    }
    out[(gd.closest('[id]') || {}).id || 'plot'] = pairs;
  }
  return out; }"""  # noqa: E501 (JavaScript kept verbatim)
# -> [grid's page y, tab bar's page y, [panel px ...], grid's top in the viewport]
GRID_JS = """() => { const blk = document.querySelector('#attention-grid'), gd = blk.querySelector('.js-plotly-plot');
  const full = gd._fullLayout, tabs = document.querySelector('#tabs [role="tablist"]') || document.querySelector('#tabs');
  const panels = Object.keys(full).filter((k) => /^xaxis\\d*$/.test(k)).map((k) => Math.min(full[k]._length,
    full[k.replace('x', 'y')]._length));
  return [blk.getBoundingClientRect().top + scrollY, tabs.getBoundingClientRect().top + scrollY, panels,
          gd.getBoundingClientRect().top]; }"""  # noqa: E501 (JavaScript kept verbatim)
# -> the grid's head labels: [[shown text, full text (hover), box, panel box]] and the boxes of its axis titles
LABELS_JS = """() => { const gd = document.querySelector('#attention-grid .js-plotly-plot'), full = gd._fullLayout;
  const g = gd.getBoundingClientRect(), rect = (e) => { const b = e.getBoundingClientRect();
    return [b.left, b.top, b.right, b.bottom]; };
  const labels = full.annotations.map((a, i) => {
    const x = full[a.xref.split(' ')[0].replace('x', 'xaxis')], y = full[a.yref.split(' ')[0].replace('y', 'yaxis')];
    const note = gd.querySelector(`.annotation[data-index="${i}"]`);
    return [a.text, a.hovertext || a.text, note ? rect(note) : null,
            [g.left + x._offset, g.top + y._offset, g.left + x._offset + x._length, g.top + y._offset + y._length]]; });
  const titles = [...gd.querySelectorAll('[class*="xtitle"], [class*="ytitle"]')].filter((t) => t.textContent.trim())
    .map(rect);
  return [labels, titles]; }"""
JUMP_JS = """() => { const b = document.querySelector('#phone-jump'), r = b && b.getBoundingClientRect();
  return b && getComputedStyle(b).display !== 'none' ? [b.textContent, r.width, r.height, r.bottom <= innerHeight] : null; }"""  # noqa: E501 (JavaScript kept verbatim)


def _install(page):
    """The layout script on the page (a no-op where the page runs it already), its first pass done."""
    page.page.add_script_tag(content=f"({PHONE_JS})();")
    page.page.wait_for_function(
        "() => { const gd = document.querySelector('#attention-grid .js-plotly-plot');"
        " return gd && gd.__phone && gd.__phone.key; }",
        timeout=30_000,
    )
    page.settle()  # the load chain's figures drawn
    page.laid_out()


def _wait(p, condition: str, timeout: int = 10_000) -> None:
    """Wait for ``condition`` (a scroll's end); at the timeout return: the caller's assertion says what is off."""
    try:
        p.wait_for_function(condition, timeout=timeout)
    except Exception:  # noqa: BLE001 - the assertion after it names what is wrong
        pass


def _apart(a, b, slack=1):
    return a[2] <= b[0] + slack or b[2] <= a[0] + slack or a[3] <= b[1] + slack or b[3] <= a[1] + slack


def _phone(open_page):
    page = open_page(viewport=PHONE, is_mobile=True, has_touch=True)
    _install(page)
    return page


def test_phone_grid_is_on_the_first_screen_and_one_tap_from_a_control(open_page):
    page = _phone(open_page)
    p = page.page
    grid_y, tabs_y, panels, _ = p.evaluate(GRID_JS)
    page.shot("phone-first-screen")
    assert tabs_y < grid_y < PHONE["height"], f"tab bar at y = {tabs_y:.0f}, grid at y = {grid_y:.0f}"
    assert len(panels) == 16 and min(panels) >= MIN_PANEL, f"panels of {panels} px"
    assert p.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]

    # a control change, made down in the controls: the button jumps back to the grid
    before = page.plot("#attention-grid")
    p.locator("#ctl-attention").scroll_into_view_if_needed()
    assert p.evaluate("() => document.querySelector('#ctl-attention').getBoundingClientRect().top") < PHONE["height"]
    page.choose("ctl-attention", "sliding_window")
    page.wait_changed("#attention-grid", before)
    page.settle()
    top = p.evaluate(GRID_JS)[3]
    assert top < -300 or top > PHONE["height"], f"the grid was on screen already (top at {top:.0f} px)"
    text, width, height, inside = p.evaluate(JUMP_JS)
    assert "Result" in text and height >= 44 and inside, (text, height, inside)
    p.locator("#phone-jump").tap()
    _wait(p, f"() => {{ const t = ({GRID_JS})()[3]; return 0 <= t && t < {PHONE['height'] / 2}; }}")
    top = p.evaluate(GRID_JS)[3]
    assert 0 <= top < PHONE["height"] / 2, f"after the tap the grid's top is at {top:.0f} px"
    page.shot("phone-after-jump")

    # by keyboard: the same button, Enter, to the controls and back; focus goes where the page went
    assert "Controls" in p.evaluate(JUMP_JS)[0]
    p.focus("#phone-jump")
    p.keyboard.press("Enter")
    _wait(p, "() => Math.abs(document.querySelector('#controls').getBoundingClientRect().top) < 20")
    assert abs(p.evaluate("() => document.querySelector('#controls').getBoundingClientRect().top")) < 20
    assert p.evaluate("() => document.activeElement.id") == "controls"
    p.focus("#phone-jump")
    p.keyboard.press("Enter")
    _wait(p, f"() => {{ const t = ({GRID_JS})()[3]; return 0 <= t && t < {PHONE['height'] / 2}; }}")
    assert 0 <= p.evaluate(GRID_JS)[3] < PHONE["height"] / 2
    page.check_clean()


TABS = ("Attention", "Gradients", "Latency & memory", "Model", "Surgery", "Compare A/B", "Long context", "Why")


def test_phone_figures_of_every_tab_print_no_text_over_text(open_page):
    page = _phone(open_page)
    p = page.page
    p.locator("#pin-a").click()  # A pinned: the Compare tab draws its grids and gradients
    page.settle()
    seen, over = [], {}
    for name in TABS:
        page.tab(name)
        if name == "Compare A/B":
            p.locator("#compare-run").click()
            page.wait_plot("#compare-grid-b")
            page.settle()
        page.laid_out(quiet_ms=1000)  # the layout script's pass after the tab's figures are resized
        for plot, pairs in p.evaluate(OVERLAPS_JS).items():
            seen.append(plot)
            if pairs:
                over[f"{name}: {plot}"] = pairs[:6]
        wide = p.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')].filter((g) => g.offsetParent)"
            ".map((g) => g.getBoundingClientRect().right).filter((r) => r > innerWidth + 1)"
        )
        assert not wide, f"{name}: a figure runs past the screen's right edge: {wide}"
        page.shot(f"phone-{name.split()[0].lower()}", full_page=True)
    assert {"attention-grid", "attention-stats", "grad-plot", "compare-grid-a", "compare-grad"} <= set(seen), seen
    assert not over, f"text over text at 390 px: {over}"
    page.check_clean()


def test_projected_grid_labels_fit_their_panels_at_1280(open_page):
    page = open_page(viewport=PROJECTOR)
    _install(page)
    p = page.page
    normal = min(p.evaluate(GRID_JS)[2])
    p.locator("#present-toggle").click()
    p.wait_for_function("() => document.body.classList.contains('presentation')")
    page.laid_out(quiet_ms=1000)
    for hidden in (False, True):
        grid_y, _, panels, top = p.evaluate(GRID_JS)
        labels, titles = p.evaluate(LABELS_JS)
        assert labels and all(box for _, _, box, _ in labels)
        for text, full, box, panel in labels:
            assert box[0] >= panel[0] - 1 and box[2] <= panel[2] + 1, f"{text!r} runs out of its panel: {box} {panel}"
            if text != full:  # collapsed: a code of the full label, which the hover gives
                assert full.split()[0].upper().startswith(text.split()[0][:1]), (text, full)
        for i, (a, *_rest) in enumerate(labels):
            for b in labels[i + 1 :]:
                assert _apart(labels[i][2], b[2]), f"{a!r} overlaps {b[0]!r}"
            for t in titles:
                assert _apart(labels[i][2], t), f"{a!r} overlaps a panel title at {t}"
        overlaps = p.evaluate(OVERLAPS_JS)
        assert not overlaps["attention-grid"], overlaps["attention-grid"]
        assert not overlaps["zoom-plot"], overlaps["zoom-plot"]  # the zoomed head: its token labels apart
        zoom = p.evaluate("() => document.querySelector('#zoom-plot .js-plotly-plot').getBoundingClientRect().height")
        assert zoom <= PROJECTOR["height"], f"the zoomed head is {zoom:.0f} px tall on a 720 px screen"
        bottom = p.evaluate(
            "() => document.querySelector('#attention-grid .js-plotly-plot').getBoundingClientRect().bottom"
        )
        assert bottom <= PROJECTOR["height"] + 1, f"the grid ends at {bottom:.0f} px"
        page.shot("projected-grid" + ("-controls-hidden" if hidden else ""))
        if not hidden:
            shown = min(panels)
            assert shown >= 0.95 * min(normal, 90), f"panels of {shown:.0f} px (normal view {normal:.0f} px)"
            p.locator("#controls-toggle").click()
            p.wait_for_function("() => document.querySelector('#controls').offsetParent === null")
            page.laid_out(quiet_ms=1000)
        else:
            assert min(panels) >= 1.25 * shown, (
                f"hiding the controls took the panels from {shown:.0f} to {min(panels):.0f} px only"
            )
    page.check_clean()
