"""Undo and reset in Debian's Chromium: the controls and the map come back to what they were."""

GRID = "#attention-grid"


def _wait_attention(page, value):
    page.page.wait_for_function(
        f"() => document.querySelector('#ctl-attention input').value === '{value}'", timeout=60_000
    )
    page.settle()


def test_undo_then_reset(page):
    page.settle()
    full = page.plot(GRID)
    page.choose("ctl-attention", "block_local")
    page.wait_changed(GRID, full)
    page.settle()
    local = page.plot(GRID)
    page.choose("ctl-attention", "sliding_window")
    page.wait_changed(GRID, local)
    page.settle()
    page.page.locator("#undo").click()
    _wait_attention(page, "block_local")
    assert page.value("ctl-attention") == "block_local" and page.plot(GRID)["blank"] == local["blank"]
    page.page.locator("#reset").click()
    _wait_attention(page, "full")
    assert page.value("ctl-attention") == "full" and page.plot(GRID)["blank"] == full["blank"]
    page.page.locator("#undo").click()  # undo the reset
    _wait_attention(page, "block_local")
    assert page.plot(GRID)["blank"] == local["blank"]
    page.check_clean()
