"""The schedule's chips in a real browser: typing a schedule draws one chip per layer at once, a preset fills
them, and a bad schedule says so in place (explorer/app/controls/schedule_chips.py)."""

CHIPS = "() => [...document.querySelectorAll('#schedule-chips .chip')].map(e => e.getAttribute('title'))"


def _open_group(page):
    page.page.locator("#modern-group").get_by_text("Layers and attention terms").first.click()
    page.page.locator("#ctl-layer_schedule textarea, #ctl-layer_schedule input").first.wait_for()


def test_typing_a_schedule_draws_its_chips_and_a_preset_fills_them(page):
    _open_group(page)
    box = page.page.locator("#ctl-layer_schedule textarea, #ctl-layer_schedule input").first
    box.fill("sliding_window,full")
    page.page.wait_for_function(f"() => ({CHIPS})().length === 4 && ({CHIPS})()[0] === 'layer 0: sliding_window'")
    assert page.page.evaluate(CHIPS) == [f"layer {i}: {k}" for i, k in enumerate(["sliding_window", "full"] * 2)]
    box.fill("nonsense<b>")
    page.page.wait_for_function("() => document.querySelector('#schedule-chips .invalid') !== null")
    assert "<b>" not in page.page.locator("#schedule-chips").inner_html()
    box.fill("")
    box.press("Enter")
    page.settle()
    page.page.wait_for_function(f"() => ({CHIPS})().length === 0")  # no schedule: no chips
    page.choose("preset", "Gemma 3 (2025)")
    page.page.wait_for_function(f"() => ({CHIPS})().length === 6", timeout=60_000)
    titles = page.page.evaluate(CHIPS)
    assert titles[:6] == [f"layer {i}: sliding_window" for i in range(5)] + ["layer 5: full"]
    page.settle()
    page.check_clean()
