"""Each figure update is drawn once (``explorer.app.page.render_once_js``), in Debian's Chromium: during a
redraw chain the draws Gradio starts on outgoing plot elements are skipped, and every figure on the
page still shows the new value (the grid's panels follow the new layer count, no blank plot)."""

COUNTS_JS = "() => window.__renderOnce"
# trace count of the grid on screen, and plot elements of the Attention tab without a drawn figure
STATE_JS = """() => ({panels: document.querySelector('#attention-grid .js-plotly-plot').data.length,
  blank: [...document.querySelectorAll('#attention-grid, #attention-stats, #zoom-plot')]
    .filter(b => { const g = b.querySelector('.js-plotly-plot'); return !g || !g._fullLayout; }).map(b => b.id)})"""


def test_a_redraw_chain_skips_the_outgoing_draws_and_shows_the_new_figures(page):
    p = page.page
    page.settle()
    before = p.evaluate(COUNTS_JS)
    heads = min(8, int(page.value("ctl-n_heads")))
    page.commit_number("ctl-n_layers", "3")
    p.wait_for_function(f"() => document.querySelector('#attention-grid .js-plotly-plot').data.length === {3 * heads}",
                        timeout=60_000)
    page.settle()
    after = p.evaluate(COUNTS_JS)
    assert after["skipped"] > before["skipped"], (before, after)  # outgoing elements were not drawn into
    assert after["drawn"] > before["drawn"], (before, after)      # the new ones were
    state = p.evaluate(STATE_JS)
    assert state["panels"] == 3 * heads and not state["blank"], state
    page.check_clean()
