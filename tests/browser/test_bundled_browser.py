"""The landing page in Chromium opens on the bundled trained model: the weights line names it, every
panel of the grid carries a head label, the zoomed head says it in words; a surgery change (sliding
pattern) keeps the weights and the line reports the change in held-out loss; "initial"
draws the untrained model; the Surgery tab shows the stored table."""

import re

WEIGHTS_LINE = "() => (document.querySelector('#weights-line') || {}).innerText || ''"
LABELS_JS = """() => { const e = document.querySelector('#attention-grid .js-plotly-plot');
  if (!e || !e.layout) return []; return (e.layout.annotations || []).map(a => a.hovertext || a.text); }"""
# (a label wider than its panel shows a short code, "IND 0.71", with the full label as its hover text)
KINDS = ("previous-token", "induction", "first-token", "delimiter", "local", "broad", "mixed")


def _line(page) -> str:
    return page.page.evaluate(WEIGHTS_LINE)


def test_landing_page_draws_the_bundled_model_with_head_labels(open_page):
    page = open_page()
    line = _line(page)
    assert "bundled model 'default'" in line and "steps" in line and "nats/byte" in line
    checked = page.page.evaluate("() => document.querySelector('#weights-switch input:checked').value")
    assert checked == "bundled"
    labels = [t for t in page.page.evaluate(LABELS_JS) if t.split(" ")[0] in KINDS]
    assert len(labels) == 16, labels  # 4 layers x 4 heads, each labelled
    assert any(re.match(r"previous-token [01]\.\d\d", t) for t in labels), labels
    assert sum(t.startswith("induction") for t in labels) >= 2, labels  # trained: an initial model has none
    assert "Head types on this text" in page.page.locator("#head-types").inner_text()  # the table under the grid
    page.shot("landing-bundled")

    page.choose("ctl-attention", "strided")  # no bundle has it: the default bundle's weights, moved
    page.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes('Surgery: held-out loss')", timeout=90_000)
    line = _line(page)
    assert "moved to" in line and re.search(r"\(\+\d\.\d{3}\)", line), line
    page.settle()
    page.tab("Surgery")
    page.wait_plot("#surgery-table")
    assert "Surgery on bundle 'default'" in page.page.locator("#surgery-reading").inner_text()
    page.wait_plot("#surgery-diff")
    page.shot("surgery-tab")

    page.tab("Attention")
    page.page.locator("#weights-switch label").filter(has_text="initial").click()
    page.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes('initial weights')", timeout=90_000)
    page.settle()
    page.check_clean()
