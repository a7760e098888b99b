"""What a keyboard user, a reader of low contrast, a screen reader and a phone user meet, measured in
Debian's Chromium: the accent text (active tab, device badge, primary button) at WCAG AA, a dropdown
picked with Enter keeps focus and shows a focus ring, every figure has a name and a description, the
status line holds its space, a link over 64 KB is refused with the page's own notice, Back and Forward
step through the committed configurations without a reload; at 390x844
every button is a 44 px target, no table cell breaks a word, the Latency tab's radio labels are whole."""

from test_contrast_browser import CONTRAST_JS

AA = 4.5
ACCENT = 'button[role="tab"][aria-selected="true"], .device-badge, button.primary'

# -> [[id, role, aria-label, description text]] of every visible Plotly figure
NAMES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter((gd) => gd.offsetParent !== null)
  .map((gd) => { const d = gd.getAttribute('aria-describedby'), el = d && document.getElementById(d);
    return [(gd.closest('[id]') || {}).id, gd.getAttribute('role'), gd.getAttribute('aria-label'),
            el ? el.textContent.trim() : null]; })"""
# -> [[button text, height]] of every visible button under 44 px tall (Gradio's footer, outside the app's
# container, is out of the stylesheet's reach)
SMALL_TARGETS_JS = """() => Array.from(document.querySelectorAll('button')).filter((b) => b.offsetParent !== null
    && b.getBoundingClientRect().width > 2 && !b.closest('.offscreen, .js-plotly-plot, .modebar, footer'))
  .map((b) => [b.textContent.trim().slice(0, 30) || b.getAttribute('aria-label'), b.getBoundingClientRect().height])
  .filter(([, h]) => h < 44 - 0.5)"""
# -> words of visible table cells drawn on more than one line (broken mid-word)
BROKEN_WORDS_JS = """() => { const out = [];
  for (const cell of document.querySelectorAll('#figures td, #figures th, #model-card td, #model-card th')) {
    if (cell.offsetParent === null) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /[^\\s\\-\u2010-\u2014\\/]+/g; let m;  // a word; a break at its hyphen is no break inside it
      while ((m = re.exec(node.data))) {
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects()).filter((b) => b.width > 0).map((b) => Math.round(b.top)));
        if (lines.size > 1) out.push(m[0]);
      } } }
  return out; }"""
# -> [[label text, its width, the width it needs, right edge, viewport width]] of the radio labels of `sel`
CLIPPED_JS = """(sel) => Array.from(document.querySelectorAll(sel + ' label')).map((l) => {
  const span = l.querySelector('span') || l, r = l.getBoundingClientRect();
  return [span.textContent.trim(), span.clientWidth, span.scrollWidth, r.right, window.innerWidth]; })"""


# -> [height of the status line, page y of the block after it]
BELOW_STATUS_JS = """() => { const s = document.querySelector('#status'), b = s.getBoundingClientRect();
  let next = s.nextElementSibling; while (next && next.offsetParent === null) next = next.nextElementSibling;
  return [b.height, next ? next.getBoundingClientRect().top + window.scrollY : b.bottom + window.scrollY]; }"""


def test_keyboard_contrast_names_and_status_at_1280(open_page):
    page = open_page(viewport={"width": 1280, "height": 720}, color_scheme="light")
    p = page.page
    rows = p.evaluate(CONTRAST_JS, ACCENT)
    kinds = " ".join(str(r[0]) for r in rows)
    assert "device-badge" in kinds and "primary" in kinds and len(rows) >= 3, rows
    low = [r for r in rows if r[-1] < AA]
    assert not low, f"accent text under {AA}:1: {low}"

    # a figure is named in the frame after it is drawn: wait for the frames, then read every name
    p.wait_for_function(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter((gd) => gd.offsetParent !== null).every((gd) => gd.getAttribute('role') === 'img')""",
        timeout=15_000,
    )
    names = p.evaluate(NAMES_JS)
    assert len(names) >= 2, names
    for fid, role, label, described in names:
        assert role == "img" and label and len(label) > 10, (fid, role, label)
        assert described and len(described) > 40, (fid, described)  # the tab's reading, in words
    grid = next(n for n in names if n[0] == "attention-grid")
    title = p.evaluate("() => document.querySelector('#attention-grid .gtitle').textContent")
    assert title[:20] in grid[2]

    # the status line holds its space: a message appearing moves nothing below it
    before = p.evaluate(BELOW_STATUS_JS)
    p.locator("#undo").click()  # nothing to undo yet: a message in the status line, the config unchanged
    p.wait_for_function("() => document.querySelector('#status').innerText.trim().length > 0", timeout=60_000)
    after = p.evaluate(BELOW_STATUS_JS)
    assert abs(after[0] - before[0]) <= 1 and abs(after[1] - before[1]) <= 1, (
        f"the status line grew from {before[0]:.0f} to {after[0]:.0f} px, "
        f"moving the controls {after[1] - before[1]:.0f} px"
    )

    # Enter on a dropdown option: the value changes, focus stays on the control, with a visible ring
    field = p.locator("#ctl-attention input").first
    field.focus()
    p.keyboard.press("Control+A")
    p.keyboard.type("sliding_window")
    p.get_by_role("option", name="sliding_window", exact=True).wait_for()
    p.keyboard.press("Enter")
    p.wait_for_function("() => document.querySelector('#ctl-attention input').value === 'sliding_window'")
    try:  # the option list closes (on a loaded machine, a while after the value changed)
        p.wait_for_function("() => document.querySelectorAll('[role=\"option\"]').length === 0", timeout=15_000)
    except Exception:  # noqa: BLE001 - the assertion below says so
        pass
    focus = p.evaluate("""() => { const a = document.activeElement, cs = getComputedStyle(a);
      return [!!a.closest('#ctl-attention'), a.tagName, cs.outlineStyle, parseFloat(cs.outlineWidth),
              document.querySelectorAll('[role="option"]').length]; }""")
    assert focus[0], f"focus went to {focus[1]}"
    assert focus[2] != "none" and focus[3] >= 2, f"no visible focus ring: {focus}"
    assert focus[4] == 0, "the option list stayed open"
    page.settle()

    page.check_clean()


def test_a_link_over_64_kb_gets_the_notice_of_any_long_link(open_page, app_url):
    page = open_page("?text=" + "a" * 70_000, wait=False, viewport={"width": 1280, "height": 720})
    p = page.page
    p.wait_for_function(
        "() => /could not be used/.test(document.querySelector('#status')?.innerText || '')", timeout=90_000
    )
    status = p.evaluate("() => document.querySelector('#status').innerText")
    assert "at most 4000 characters" in status, status
    page.wait_plot("#attention-grid")
    # the refused query leaves the address bar and the Share box
    p.wait_for_function(
        "() => window.location.search === '' && !/aaaa/.test("
        "document.querySelector('#share-url textarea, #share-url input').value)",
        timeout=60_000,
    )
    assert p.evaluate("() => document.querySelector('#share-url textarea, #share-url input').value") == app_url


def test_phone_targets_tables_and_labels_at_390(open_page):
    page = open_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    p = page.page
    small = p.evaluate(SMALL_TARGETS_JS)
    assert not small, f"buttons under 44 px tall: {small[:10]}"
    for name, check in (("Model", "table"), ("Latency", "radio")):
        page.tab(name)
        shown = "#model-card td" if check == "table" else "#mode label"
        p.wait_for_function(f"() => [...document.querySelectorAll('{shown}')].some((e) => e.offsetParent !== null)")
        page.laid_out(quiet_ms=300)  # the tab's layout done
        if check == "table":
            assert p.evaluate("() => document.querySelectorAll('#model-card td').length") > 4
            broken = p.evaluate(BROKEN_WORDS_JS)
            assert not broken, f"words broken across lines: {broken[:10]}"
        else:
            labels = p.evaluate(CLIPPED_JS, "#mode")
            assert any(t == "forward_backward" for t, *_ in labels), labels
            cut = [row for row in labels if row[2] > row[1] + 1 or row[3] > row[4] + 1]
            assert not cut, f"radio labels clipped: {cut}"
    page.check_clean()


def _shows(p, value, url):
    """The Attention control holds ``value`` and the address bar ``url``."""
    p.wait_for_function(
        "([v, url]) => document.querySelector('#ctl-attention input').value === v && window.location.href === url",
        arg=[value, url],
        timeout=60_000,
    )


def test_back_and_forward_step_through_committed_changes_without_a_reload(page):
    p = page.page
    start = p.evaluate("() => { window.__sameDocument = true; return history.length; }")
    urls = [p.evaluate("() => window.location.href")]
    for value in ("sliding_window", "bigbird"):
        page.choose("ctl-attention", value)
        p.wait_for_function("(url) => window.location.href !== url", arg=urls[-1], timeout=60_000)
        page.settle()
        urls.append(p.evaluate("() => window.location.href"))
    assert p.evaluate("() => history.length") == start + 2  # one entry per committed change
    p.go_back()
    _shows(p, "sliding_window", urls[1])
    page.settle()
    p.wait_for_function(
        "(url) => document.querySelector('#share-url textarea, #share-url input').value === url",
        arg=urls[1],
        timeout=60_000,
    )  # the Share box follows
    p.go_back()
    _shows(p, "full", urls[0])
    page.settle()
    p.go_forward()
    _shows(p, "sliding_window", urls[1])
    page.settle()
    assert p.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    assert p.evaluate("() => history.length") == start + 2  # stepping did not add entries
    page.check_clean()
