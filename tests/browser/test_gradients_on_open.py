"""The Gradients tab is drawn where it is seen: a change made on another tab leaves its figure alone (it
measures every norm placement and up to 84 models for Theorem 1), and opening the tab draws the scene
the controls hold. Judged from the tab's reading, whose bold entry is the current placement: Gradio mounts
a tab's content when it opens, so what the tab shows first (caught by a mutation observer set before the
click) is what the chain left in it, and what it settles on is the opened tab's own drawing."""

# the bold placement of the theorem's line ("post 0.571 -> 0.607 ..."), not its bold title
CURRENT = (
    "() => [...document.querySelectorAll('#grad-reading strong')].map(e => e.innerText)"
    ".find(t => /^[a-z_]+ [0-9]/.test(t)) || ''"
)

FIRST_SHOWN = """() => {
  window.__firstGrad = '';
  const look = () => {
    const t = (CURRENT)();
    if (t && !window.__firstGrad) window.__firstGrad = t;
  };
  look();
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true, characterData: true});
}""".replace("CURRENT", CURRENT)


def _current(page) -> str:
    return page.page.evaluate(CURRENT)


def _open_gradients(page) -> str:
    """Open the tab; -> the first placement its reading showed."""
    page.page.evaluate(FIRST_SHOWN)
    page.tab("Gradients")
    page.page.wait_for_function("() => window.__firstGrad")
    return page.page.evaluate("() => window.__firstGrad")


def test_a_change_on_another_tab_is_drawn_when_the_gradients_tab_opens(page):
    page.choose("ctl-norm_placement", "post")
    page.settle()
    first = _open_gradients(page)
    assert first.startswith("pre "), f"the chain drew the hidden Gradients tab: it opened on {first!r}"
    page.page.wait_for_function(f"() => ({CURRENT})().startsWith('post ')", timeout=90_000)
    page.settle()
    # while the tab is open, a change is drawn by the chain itself
    page.choose("ctl-norm_placement", "sandwich")
    page.page.wait_for_function(f"() => ({CURRENT})().startsWith('sandwich ')", timeout=90_000)
    page.settle()
    # back on another tab, the way back to an already drawn scene costs nothing
    page.tab("Attention")
    page.choose("ctl-norm_placement", "pre")
    page.settle()
    assert _open_gradients(page).startswith("sandwich ")
    page.page.wait_for_function(f"() => ({CURRENT})().startsWith('pre ')", timeout=90_000)
    page.check_clean()


def test_a_link_to_the_gradients_tab_draws_its_config_there(open_page):
    page = open_page("?norm_placement=post&tab=gradients")
    page.page.wait_for_function(f"() => ({CURRENT})().startsWith('post ')", timeout=90_000)
    page.settle()
    page.check_clean()
