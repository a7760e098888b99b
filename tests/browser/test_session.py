"""A visitor's session in a real browser: long text, presets, layer changes, number boxes and hostile
links. Each test failed on an earlier version of the app: the old page wrote 65,000 characters into the
address bar, looped on presets, hid Norm placement, recomputed on every keystroke and rendered echoed
HTML. The session's server-side work (an export, a stopped sweep, an idle session's expiry) is
tests/browser/test_session_server.py."""

import time

import pytest

GRID = "#attention-grid"


def _text_box(page):
    return page.page.locator("#text textarea").first


@pytest.mark.parametrize("text", ["a" * 65_000, "中" * 8_000], ids=["ascii-65000", "cjk-8000"])
def test_long_text_keeps_the_link_short_and_a_reload_works(page, browser, text):
    box = _text_box(page)
    box.fill(text)
    box.blur()
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('256 are used')", timeout=60_000
    )
    page.settle()
    assert len(page.page.url) < 2_000, len(page.page.url)  # only what the app uses goes into the link
    before = page.plot(GRID)
    page.choose("ctl-attention", "block_local")  # another change still redraws
    page.wait_changed(GRID, before)
    page.settle()
    link = page.page.url
    page.page.reload()  # F5
    page.wait_plot(GRID)
    page.page.wait_for_function(
        "(v) => document.querySelector('#ctl-attention input').value === v", arg="block_local", timeout=60_000
    )
    used = _text_box(page).input_value()
    assert len(used.encode("utf-8")) <= 256 and text.startswith(used)
    assert page.page.url == link
    page.check_clean()


def test_a_preset_draws_once_then_the_page_goes_quiet(page):
    page.wait_plot("#zoom-plot")  # the page-load chain's second event; then the rest of it
    page.settle(quiet_ms=2_000)
    before = page.plot(GRID)
    for preset, word in (
        ("Vanilla Transformer (2017)", "Vanilla"),
        ("Shaw relative (2018)", "Shaw"),
        ("LLaMA (2023)", "LLaMA"),
    ):
        n0 = len(page.requests)
        page.choose("preset", preset)
        page.page.wait_for_function(
            "(w) => { const v = document.querySelector('#share-url textarea, "
            "#share-url input').value; return v.includes('preset=') && v.includes(w); }",
            arg=word,
            timeout=60_000,
        )
        _wait_requests(page, n0 + 5)  # the last two events show no progress: settle alone may return before them
        page.settle()
        assert page.quiet_for(2_500) == 0, preset  # no request for 2.5 s once the figures are drawn
        # one chain: attention, statistics and zoom, views, analysis, surgery (the preset fills the
        # controls without the queue)
        assert len(page.requests) - n0 <= 5, (preset, page.requests[n0:])
        assert page.plot(GRID)["blank"] == before["blank"], preset  # all three are causal full attention
    page.check_clean()


def _wait_requests(page, n: int, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while len(page.requests) < n and time.time() < deadline:
        page.page.wait_for_timeout(250)


def _visible(page, field):
    return page.page.locator(f"#ctl-{field}").is_visible()


def test_norm_placement_stays_visible_through_layer_changes_then_linformer_unticks_causal(page):
    """Then, on the same page (causal still ticked), linformer (``_linformer_unticks_causal``)."""
    assert _visible(page, "norm_placement") and _visible(page, "norm")
    for layer, placement in (
        ("reversible", None),
        (None, "none"),
        ("standard", None),
        ("gated", None),
        ("universal", "post"),
        ("standard", "pre"),
    ):
        if layer:
            page.choose("ctl-layer", layer)
        if placement:
            page.choose("ctl-norm_placement", placement)
        page.settle()
        assert _visible(page, "norm_placement"), (layer, placement)
        assert _visible(page, "norm"), (layer, placement)
    page.choose("ctl-layer", "standard")
    page.choose("ctl-norm_placement", "none")
    page.settle()
    assert "not used" in page.page.locator("#ctl-norm").inner_text()  # placement none: said on screen
    page.check_clean()
    _linformer_unticks_causal(page)


def test_typing_a_number_fires_one_computation_and_fractions_are_refused(page):
    page.wait_plot("#zoom-plot")  # the page-load chain's second event; then the rest of it
    page.settle(quiet_ms=2_000)
    box = page.page.locator("#ctl-d_model input")
    box.click()
    box.fill("")
    n0 = len(page.requests)
    box.press_sequentially("256", delay=150)
    assert page.quiet_for(1_000) == 0  # nothing on keystrokes (no warning about 2 or 25)
    box.press("Enter")
    page.page.wait_for_function(
        "() => document.querySelector('#share-url textarea, #share-url input').value.includes('d_model=256')",
        timeout=60_000,
    )
    _wait_requests(page, n0 + 5)
    page.settle()
    assert page.page.locator("#status").inner_text().strip() == ""
    assert len(page.requests) - n0 <= 5  # one chain: attention, statistics and zoom, views, analysis, surgery
    assert "whole numbers" in page.page.locator("#ctl-n_layers").inner_text()  # the range is shown
    before = page.plot(GRID)
    page.commit_number("ctl-n_layers", "3.5")
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('whole number')", timeout=60_000
    )
    assert page.plot(GRID) == before  # 3.5 is not silently used as 4
    page.check_clean()


def _linformer_unticks_causal(page):
    """Linformer while causal is ticked: causal is unticked and the status says so."""
    assert page.page.locator("#ctl-causal input").is_checked()
    page.page.locator("#ctl-attention input").first.click()
    option = page.page.get_by_role("option", name="linformer (needs causal off)", exact=True)
    assert option.count() == 1  # marked before it is chosen
    option.click()
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('Causal unticked')", timeout=60_000
    )
    page.page.wait_for_function("() => !document.querySelector('#ctl-causal input').checked", timeout=30_000)
    page.settle()
    assert page.value("ctl-attention") == "linformer"
    page.check_clean()


@pytest.mark.parametrize(
    "hostile",
    [
        '<a href="https://evil.example/login">Click here to re-authenticate</a>',
        '<img src="https://evil.example/pixel.png">',
    ],
)
def test_a_hostile_link_is_shown_as_text(open_page, hostile):
    from urllib.parse import quote, urlparse

    fetched = []
    p = open_page("?attention=" + quote(hostile), wait=False)
    p.page.on("request", lambda r: fetched.append(r.url) if urlparse(r.url).hostname == "evil.example" else None)
    # the refused field is named (its value shown as text) and the rest of the link is kept
    p.page.wait_for_function(
        "() => (document.querySelector('#status') || {}).innerText?.includes('could not be used')", timeout=60_000
    )
    p.settle()
    status = p.page.locator("#status")
    assert status.locator("a").count() == 0 and status.locator("img").count() == 0
    assert p.page.locator("a[href*='evil.example'], img[src*='evil.example']").count() == 0
    assert "evil.example" in status.inner_text()  # shown as text
    assert not fetched
