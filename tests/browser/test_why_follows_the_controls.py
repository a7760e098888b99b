"""The Why tab never shows another configuration's reading as current: a change made while it was closed is
drawn when it opens, and a change made while it is open is drawn by the redraw chain. Judged from the head
roles table, which differs between the bundled models (each has its own stored circuit card)."""

ROLES = (  # whitespace folded: a hidden tab's text is laid out otherwise
    "() => ((document.querySelector('#why-roles table') || {}).textContent || '').replace(/\\s+/g, ' ').trim()"
)

FIRST_SHOWN = """() => {
  window.__firstRoles = '';
  const look = () => {
    const t = (ROLES)();
    if (t && !window.__firstRoles) window.__firstRoles = t;
  };
  look();
  new MutationObserver(look).observe(document.body, {childList: true, subtree: true, characterData: true});
}""".replace("ROLES", ROLES)


def _roles(page) -> str:
    return page.page.evaluate(ROLES)


def _changed_from(page, before: str) -> str:
    page.page.wait_for_function(
        f"(before) => {{ const t = ({ROLES})(); return t && t !== before; }}",
        arg=before,
        timeout=120_000,
    )
    return _roles(page)


def test_the_why_tab_draws_the_controls_scene_when_opened_and_while_open(page):
    page.tab("Why")
    page.page.wait_for_function(f"() => ({ROLES})()", timeout=120_000)
    page.settle()
    landing = _roles(page)
    # closed: the change is not drawn there, and opening the tab draws it
    page.tab("Attention")
    page.choose("preset", "Trained: ALiBi")
    page.settle()
    page.page.evaluate(FIRST_SHOWN)
    page.tab("Why")
    alibi = _changed_from(page, landing)
    assert page.page.evaluate("() => window.__firstRoles") == landing  # what the tab held, then redrawn
    page.settle()
    # open: the chain redraws it
    page.choose("preset", "Trained: post-LN")
    post = _changed_from(page, alibi)
    assert post != landing
    page.settle()
    # closed and back to a scene it shows already: opening it costs no request that changes anything
    page.tab("Attention")
    page.tab("Why")
    page.settle()
    assert _roles(page) == post
    page.check_clean()
