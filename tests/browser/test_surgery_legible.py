"""The Surgery tab's two figures are legible where a person reads them, measured in Debian's Chromium
after a surgery (attention = sliding_window on the default bundle: its difference view and its Surgery
table) on a 1440 x 900 laptop, a 1280 x 720 projector in presentation mode, a 1024 x 768 projector
(normal mode, the controls shown: the narrowest figure that keeps its panels side by side) and a
390 x 844 phone:

* no visible text of either figure (titles, ticks, legend, the numbers in the "moved, per head" cells)
  is rendered under ``MIN_PX`` px: a cell too small for readable text has none (its value is on hover);
* every tick label (the slanted change names, the colour bar's ticks) lies wholly inside the figure's svg;
* no line of a figure's title touches another line of it (the title and its small-print note) or any
  other text of the figure;
* the difference view prints no text over text at all (the table's slanted labels are left out of that
  check: the boxes of rotated text overlap where the glyphs do not).

The three desktop screens are one page: the projector draws the figures in presentation mode, then
measures again after presentation mode is switched off and on (a figure re-laid out, not redrawn); then
the window is resized to the laptop's and the older projector's size (re-laid out again, as for a window
resized). The phone is a page of its own (a mobile, touch context)."""

from test_phone_layout import OVERLAPS_JS

MIN_PX = 11
FIGURES = ("surgery-diff", "surgery-table")

# -> {figure id: {small: [[px, text]], outside: [[tick text, px past the left, right, top, bottom edge]],
#     clash: [[title line, other text, overlap w, overlap h]], lines: title lines}} for each figure
MEASURE_JS = """([ids, minPx]) => { const out = {};
  for (const id of ids) {
    const gd = document.querySelector('#' + id + ' .js-plotly-plot');
    if (!gd || gd.offsetParent === null) { out[id] = null; continue; }
    const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
    const shown = (e) => { for (let n = e; n && n !== gd; n = n.parentElement) { const s = getComputedStyle(n);
      if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0') return false; }
      const b = e.getBoundingClientRect(); return b.width >= 1 && b.height >= 1; };
    const texts = [...gd.querySelectorAll('svg text')].filter((t) => t.textContent.trim() && !t.closest('.hoverlayer')
      && shown(t));
    const small = [];
    for (const t of texts) for (const e of [t, ...t.querySelectorAll('tspan')]) {
      const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.replace(/\\u200b/g, '').trim());
      const px = parseFloat(getComputedStyle(e).fontSize);
      if (own && px < minPx - 0.05) small.push([px, e.textContent.trim().slice(0, 30)]);
    }
    const r = (b) => [b.left, b.top, b.right, b.bottom];
    const outside = texts.filter((t) => /tick/.test(t.getAttribute('class') || '') || t.closest('[class*="tick"]'))
      .map((t) => { const b = t.getBoundingClientRect();
        return [t.textContent.trim().slice(0, 30), svg.left - b.left, b.right - svg.right, svg.top - b.top, b.bottom - svg.bottom]; })
      .filter((row) => row.slice(1).some((v) => v > 0.5)).map((row) => row.map((v) => typeof v === 'number' ? Math.round(v) : v));
    const lines = [...gd.querySelectorAll('.gtitle tspan.line')].filter((l) => l.textContent.replace(/\\u200b/g, '').trim())
      .map((l) => [l.textContent.replace(/\\u200b/g, '').trim().slice(0, 30), r(l.getBoundingClientRect())]);
    const others = texts.filter((t) => !t.closest('.gtitle') && !t.classList.contains('gtitle'))
      .map((t) => [t.textContent.trim().slice(0, 30), r(t.getBoundingClientRect())]);
    const clash = [];
    lines.forEach(([ta, a], i) => { for (const [tb, b] of [...lines.slice(i + 1), ...others]) {
      const w = Math.min(a[2], b[2]) - Math.max(a[0], b[0]), h = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
      if (w > 1 && h > 1) clash.push([ta, tb, Math.round(w), Math.round(h)]); } });
    out[id] = {small, outside, clash, lines: lines.map(([t, b]) => [t, Math.round(b[1]), Math.round(b[3])])};
  }
  return out; }"""  # noqa: E501 (JavaScript kept verbatim)

PROJECTOR = {"width": 1280, "height": 720}
RESIZED = {
    "laptop": {"width": 1440, "height": 900},
    "xga": {"width": 1024, "height": 768},  # an older projector, controls shown: a 614 px figure
}
PHONE = dict(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)


def _present(page, on: bool):
    p = page.page
    if p.evaluate("() => document.body.classList.contains('presentation')") != on:
        p.locator("#present-toggle").click()
    p.wait_for_function(f"() => document.body.classList.contains('presentation') === {str(on).lower()}")
    page.laid_out()  # the page's layout scripts: a resize, then their pass after Plotly's


def _surgery(page):
    """The default bundle under attention = sliding_window, the Surgery tab open, both figures drawn."""
    p = page.page
    p.locator("#ctl-attention").scroll_into_view_if_needed()
    page.choose("ctl-attention", "sliding_window")
    p.wait_for_function(
        "() => ((document.querySelector('#weights-line') || {}).innerText || '').includes('Surgery')", timeout=120_000
    )
    page.settle()
    page.tab("Surgery")
    p.wait_for_function(
        "() => { const d = document.querySelector('#surgery-diff .js-plotly-plot'), "
        "t = document.querySelector('#surgery-table .js-plotly-plot'); "
        "return d && d.data && d.data.length > 1 && t && t.data && t.data.length > 1 "
        "&& d.offsetParent !== null; }",
        timeout=60_000,
    )
    page.settle()
    page.laid_out()  # the layout scripts' pass after the tab's figures are resized


def _problems(page, where: str) -> list:
    """What a person would not read in the two figures now (an empty list: nothing)."""
    p = page.page
    seen = p.evaluate(MEASURE_JS, [list(FIGURES), MIN_PX])
    out = [(where, fig, "not on screen") for fig in FIGURES if seen[fig] is None]
    for fig, m in seen.items():
        if m is None:
            continue
        if m["small"]:
            out.append((where, fig, f"text under {MIN_PX} px", m["small"][:8]))
        if m["outside"]:
            out.append((where, fig, "tick labels past the svg (px past its left, right, top, bottom)", m["outside"]))
        if m["clash"]:
            out.append((where, fig, "title lines on other text (overlap w, h)", m["clash"][:8], "lines", m["lines"]))
    overlaps = p.evaluate(OVERLAPS_JS).get("surgery-diff")
    if overlaps:
        out.append((where, "surgery-diff", "text over text (overlap w, h)", overlaps[:8]))
    return out


def test_surgery_figures_are_legible_on_a_phone(open_page):
    page = open_page(**PHONE)
    _surgery(page)
    page.shot("surgery-legible-phone", full_page=True)
    problems = _problems(page, "phone")
    assert not problems, "\n".join(map(str, problems))
    page.check_clean()


def test_surgery_figures_are_legible_on_desktop_screens(open_page):
    page = open_page(viewport=PROJECTOR)
    p = page.page
    _present(page, True)
    _surgery(page)
    page.shot("surgery-legible-projector")
    problems = _problems(page, "projector")
    _present(page, False)  # the figures re-laid out for another mode, not redrawn
    problems += _problems(page, "projector, presentation mode off")
    _present(page, True)
    problems += _problems(page, "projector, presentation mode on again")
    _present(page, False)
    for view, size in RESIZED.items():  # the window resized: re-laid out again
        p.set_viewport_size(size)
        p.wait_for_function("(w) => window.innerWidth === w", arg=size["width"])
        page.laid_out()
        page.shot(f"surgery-legible-{view}")
        problems += _problems(page, view)
    assert not problems, "\n".join(map(str, problems))
    page.check_clean()
