"""Surgery operates on the weights on screen, in Chromium: picking sliding_window keeps the default bundle
(the weights line says surgery and that a model trained with this pattern exists); the page's button shows
that bundle by name (the Weights choice and the share link carry it), and Undo goes back to the default
bundle."""

WEIGHTS_LINE = "() => (document.querySelector('#weights-line') || {}).innerText || ''"
CHECKED = "() => (document.querySelector('#weights-switch input:checked') || {}).value || ''"


def _wait_line(page, needle: str) -> str:
    page.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes({needle!r})", timeout=120_000)
    return page.page.evaluate(WEIGHTS_LINE)


def test_a_pattern_change_keeps_the_weights_on_screen_and_the_trained_one_is_an_explicit_choice(open_page):
    page = open_page()
    page.choose("ctl-attention", "sliding_window")
    line = _wait_line(page, "A model trained with this pattern exists")
    assert "bundled model 'default'" in line and "Surgery: held-out loss" in line, line
    assert page.page.evaluate(CHECKED) == "bundled"
    button = page.page.locator("#weights-show")
    button.wait_for(state="visible", timeout=30_000)
    page.settle()
    button.click()
    line = _wait_line(page, "bundled model 'sliding_window'")
    assert "Surgery" not in line and "moved to" not in line, line
    page.page.wait_for_function(f"() => ({CHECKED})() === 'bundle:sliding_window'", timeout=30_000)
    assert page.page.locator("#weights-show").is_hidden()
    page.page.wait_for_function(
        "() => (document.querySelector('#share-url textarea, #share-url input') || {})"
        ".value && document.querySelector('#share-url textarea, #share-url input')"
        ".value.includes('preset=Trained')",
        timeout=30_000,
    )
    page.settle()
    page.page.locator("#undo").click()
    page.page.wait_for_function(f"() => ({CHECKED})() === 'bundled'", timeout=60_000)
    line = _wait_line(page, "bundled model 'default'")
    page.settle()
    page.check_clean()
