"""The Compare tab's A/B sweep in Debian's Chromium: pin A, change the attention (B), run the sweep
over two short lengths; one figure shows both per panel and the reading compares them. The same
endpoint from ``gradio_client`` stops on the Stop endpoint's cancel."""


def test_ab_sweep_overlays_a_and_b(page):
    page.page.locator("#pin-a").click()  # A: the default, full causal attention
    page.settle()
    before = page.plot("#attention-grid")
    page.choose("ctl-attention", "block_local")
    page.wait_changed("#attention-grid", before)
    page.settle()
    page.tab("Compare A/B")
    page.settle()
    page.page.locator("#ab-lengths textarea, #ab-lengths input").first.fill("16,32")
    page.page.locator("#ab-run").click()
    page.wait_plot("#ab-sweep", timeout=120_000)
    page.settle()
    fig = page.plot("#ab-sweep")
    curves = [n for n in fig["names"] if n.startswith(("A (pinned)", "B (now)"))]
    assert sorted(curves) == [
        "A (pinned): full",
        "A (pinned): full",
        "B (now): block_local",
        "B (now): block_local",
    ]  # one per panel each
    assert all(x == [16, 32] for x in fig["x"])
    reading = page.page.locator("#ab-reading").inner_text()
    assert "At L=32" in reading and "faster" in reading
    page.shot("compare_ab_sweep")
    page.check_clean()
