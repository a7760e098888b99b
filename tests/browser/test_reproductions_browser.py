"""The reproductions panel in Chromium: the stored induction run is on the page before any press, its
timeline slider shows the snapshot of the chosen step, and "Run live on this machine" draws the live
curves over the stored (dashed) ones."""

PLOT_NAMES = (
    "(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot'); "
    "return e && e.data ? e.data.map(t => t.name || '') : []; }"
)
TITLE = (
    "(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot'); "
    "return e && e.layout && e.layout.title ? e.layout.title.text : ''; }"
)


def test_stored_run_timeline_then_live_overlay(open_page):
    page = open_page()
    page.tab("Train")
    page.page.get_by_text("Reproductions: the source texts' results on this machine").click()
    page.wait_plot("#train-repro-plot")
    assert "stored run of" in page.page.locator("#train-repro-reading").inner_text()
    page.wait_plot("#train-repro-timeline")
    assert "at step 500 of 500" in page.page.evaluate(TITLE, "#train-repro-timeline")
    box = page.page.locator("#train-repro-step input[type=number]").first
    box.fill("100")
    box.press("Enter")
    page.page.wait_for_function(
        f"() => ({TITLE})('#train-repro-timeline').includes('at step 100 of 500')", timeout=60_000
    )
    page.page.click("#train-repro-run")
    page.page.wait_for_function(
        "() => document.querySelector('#train-repro-reading').innerText.includes('live run')", timeout=180_000
    )
    names = page.page.evaluate(PLOT_NAMES, "#train-repro-plot")
    assert "stored: second-half loss" in names and "second-half loss" in names, names
    page.shot("reproduction-live-over-stored")
    page.check_clean()
