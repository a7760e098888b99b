"""Each figure update is drawn once (``explorer.app.page.render_once_js``), in Debian's Chromium: during a
redraw chain the draws Gradio starts on outgoing plot elements are skipped, and every figure on the
page still shows the new value (the grid's panels follow the new layer count, no blank plot)."""

COUNTS_JS = "() => window.__renderOnce"
# trace count of the grid on screen, and plot elements of the Attention tab without a drawn figure
STATE_JS = """() => ({panels: document.querySelector('#attention-grid .js-plotly-plot').data.length,
  blank: [...document.querySelectorAll('#attention-grid, #attention-stats, #zoom-plot')]
    .filter(b => { const g = b.querySelector('.js-plotly-plot'); return !g || !g._fullLayout; }).map(b => b.id)})"""


def test_a_redraw_chain_skips_the_outgoing_draws_and_shows_the_new_figures(page):
    """Also, first, on the same page: each draw runs in a task of its own (``_draw_order``)."""
    p = page.page
    page.settle()
    _draw_order(page)
    before = p.evaluate(COUNTS_JS)
    heads = min(8, int(page.value("ctl-n_heads")))
    page.commit_number("ctl-n_layers", "3")
    p.wait_for_function(
        f"() => document.querySelector('#attention-grid .js-plotly-plot').data.length === {3 * heads}", timeout=60_000
    )
    page.settle()
    after = p.evaluate(COUNTS_JS)
    assert after["skipped"] > before["skipped"], (before, after)  # outgoing elements were not drawn into
    assert after["drawn"] > before["drawn"], (before, after)  # the new ones were
    state = p.evaluate(STATE_JS)
    assert state["panels"] == 3 * heads and not state["blank"], state
    page.check_clean()


# per animation frame (what the next paint shows), each Attention figure's box: its height when it holds a drawn
# figure, else 0
FRAMES_JS = """() => { window.__frames = [];
  const tick = () => { window.__frames.push(['attention-grid', 'attention-stats', 'zoom-plot'].map((id) => {
      const box = document.getElementById(id);
      const drawn = box && [...box.querySelectorAll('.js-plotly-plot')].some((g) => g.isConnected && g._fullLayout);
      return drawn ? Math.round(box.getBoundingClientRect().height) : 0; }));
    if (!window.__stopFrames) requestAnimationFrame(tick); };
  window.__stopFrames = false; requestAnimationFrame(tick); }"""


def test_every_frame_of_a_redraw_shows_a_figure_in_each_box_and_quick_changes_leave_one(page):
    """The draws run in tasks after Gradio's swap of the elements: the old figure stays until the new one is drawn.
    Then, on the same page, picks faster than the draws (``_quick_changes``)."""
    p = page.page
    page.settle()
    before = p.evaluate(COUNTS_JS)
    p.evaluate(FRAMES_JS)
    page.choose("ctl-attention", "sliding_window")
    p.wait_for_function(
        "() => document.querySelector('#attention-grid .js-plotly-plot').layout.title.text.includes('sliding')",
        timeout=60_000,
    )
    page.settle()
    p.evaluate("() => { window.__stopFrames = true; }")
    frames = p.evaluate("() => window.__frames")
    after = p.evaluate(COUNTS_JS)
    assert len(frames) > 10, frames
    blank = [i for i, f in enumerate(frames) if 0 in f]
    assert not blank, (len(frames), blank[:10], [frames[i] for i in blank[:10]])
    assert after["kept"] > before["kept"], (before, after)  # outgoing figures stood in for the new elements
    _quick_changes(page)


DRAW_ORDER_JS = """async () => {
  const make = () => { const d = document.createElement('div'); d.style.width = '300px'; document.body.appendChild(d); return d; };
  const a = make(), b = make(), fig = [{type: 'heatmap', z: [[1, 2], [3, 4]]}];
  const pa = Plotly.react(a, fig, {height: 200}), pb = Plotly.react(b, fig, {height: 200});
  const seen = [[!!a._fullLayout, !!b._fullLayout]];           // as the calls return
  await new Promise((r) => setTimeout(r, 0));
  seen.push([!!a._fullLayout, !!b._fullLayout]);                // one task later
  const done = await Promise.all([pa, pb]);
  seen.push([!!a._fullLayout, !!b._fullLayout, done[0] === a, done[1] === b]);
  Plotly.purge(a); Plotly.purge(b); a.remove(); b.remove();
  return seen; }"""  # noqa: E501 (JavaScript kept verbatim)


def _draw_order(page):
    """Two figures asked for in one task: neither is drawn as the calls return, the first one task later, the
    second after it; each promise resolves with its element, as Plotly's own does."""
    assert page.page.evaluate(DRAW_ORDER_JS) == [[False, False], [True, False], [True, True, True, True]]


# per Attention box: how many plot elements it holds, and the drawn one's title
BOXES_JS = """() => ['attention-grid', 'attention-stats', 'zoom-plot'].map((id) => {
  const plots = [...document.getElementById(id).querySelectorAll('.js-plotly-plot')];
  return [id, plots.length, plots.map((g) => String((g.layout.title || {}).text || ''))]; })"""


def _quick_changes(page):
    """Picks faster than the draws: every outgoing figure that stood in is gone once the page settles, and each box
    shows exactly one figure, the grid's for the last pick."""
    p = page.page
    page.settle()
    for option in ("block_local", "bigbird", "strided", "longformer"):  # four picks (sliding_window is on)
        page.choose("ctl-attention", option)
        p.wait_for_timeout(150)
    p.wait_for_function(
        "() => document.querySelector('#attention-grid .js-plotly-plot').layout.title.text.includes('longformer')",
        timeout=90_000,
    )
    page.settle()
    boxes = p.evaluate(BOXES_JS)
    assert all(n == 1 for _, n, _ in boxes), boxes
    assert "longformer" in boxes[0][2][0], boxes
    page.check_clean()
