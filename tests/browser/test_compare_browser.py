"""Compare A/B in Debian's Chromium: pin, change a control, see both maps; the comparison's share
link restores A, B and the Compare tab in a fresh browser context."""


def _both_drawn(page):
    for sel in ("#compare-grid-a", "#compare-grid-b"):
        page.wait_plot(sel)
    return page.plot("#compare-grid-a"), page.plot("#compare-grid-b")


def _blank_block_local(n):
    return n * n - sum(i % 16 + 1 for i in range(n))  # blocks of 16, causal


def test_pin_change_compare_and_share(page, open_page):
    page.page.locator("#pin-a").click()  # A: the default, full causal attention
    page.settle()
    before = page.plot("#attention-grid")
    page.choose("ctl-attention", "block_local")
    page.wait_changed("#attention-grid", before)
    page.settle()
    page.tab("Compare A/B")
    page.page.wait_for_function(
        "() => document.querySelector('#compare-grid-b .js-plotly-plot') && "
        "document.querySelector('#compare-grid-b .js-plotly-plot').data"
    )
    page.settle()
    a, b = _both_drawn(page)
    n = int(round(a["cells"] ** 0.5))
    assert a["blank"] == n * (n - 1) // 2 and b["blank"] == _blank_block_local(n)
    reading = page.page.locator("#compare-reading").inner_text()
    assert "attention" in reading and "block_local" in reading and "full" in reading
    page.shot("compare_ab")
    link = page.value("compare-link")
    assert link.startswith("http://127.0.0.1:") and "tab=compare" in link and "pin=" in link  # a full URL
    assert page.page.url == link  # the address bar carries the comparison
    page.check_clean()

    other = open_page(link, wait=False)  # the whole URL, as a visitor pastes it
    other.page.wait_for_function(
        "() => document.querySelector('#compare-grid-a .js-plotly-plot') && "
        "document.querySelector('#compare-grid-a .js-plotly-plot').data",
        timeout=90_000,
    )
    assert other.page.get_by_role("tab", name="Compare A/B").get_attribute("aria-selected") == "true"
    a2, b2 = _both_drawn(other)
    assert a2["blank"] == a["blank"] and b2["blank"] == b["blank"]
    assert other.value("ctl-attention") == "block_local"
    other.check_clean()
