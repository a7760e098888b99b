"""Real-browser tests: Playwright driving Debian's Chromium (never a downloaded browser).

Reads plot data from the page (the Plotly graph div's ``data``), checks that no error toast and no
console error appears. Screenshots go to a temporary folder; refreshing the README's screenshots is
its own command: ``EXPLORER_SCREENSHOTS=assets/screenshots python -m pytest tests/browser/test_pages.py``.
"""

from explorer.analysis import attention_maps


def test_page_loads_with_heatmaps_then_the_gradient_and_model_tabs_and_bad_input_keeps_them(page):
    """The start page's maps; its Gradients and Model tabs; a bad number warns and keeps the figures."""
    grid = page.plot("#attention-grid")
    assert grid["traces"] == 16 and grid["names"][0] == "layer 0 head 0"
    # default: full causal attention on the default text -> the upper triangle is blank
    n = int(round(grid["cells"] ** 0.5))
    assert grid["blank"] == n * (n - 1) // 2
    # PNG export: Plotly's own toolbar button, in the browser
    assert page.page.locator("#attention-grid .modebar-btn[data-title='Download plot as a PNG']").count() == 1
    page.shot("attention")
    page.check_clean()
    # the Gradients and Model tabs of the same page
    page.tab("Gradients")
    page.wait_plot("#grad-plot")
    grad = page.plot("#grad-plot")
    assert {"post", "pre (current)", "sandwich", "rezero = 0", "none"} <= set(grad["names"])
    assert "last layer ÷ first layer" in page.page.locator("#grad-reading").inner_text()
    page.shot("gradients")
    page.tab("Model")
    page.page.wait_for_function("() => document.querySelector('#model-card').innerText.includes('parameters')")
    page.shot("model")
    page.check_clean()
    # bad input warns and keeps the last figures
    page.tab("Attention")
    before = page.plot("#attention-grid")
    page.page.locator("#ctl-n_layers input").fill("99")
    page.page.locator("#ctl-n_layers input").press("Tab")
    page.page.wait_for_function("() => document.querySelector('#status').innerText.includes('n_layers')")
    assert page.plot("#attention-grid") == before
    page.check_clean()


def test_preset_then_attention_dropdown_change_the_map(page):
    before = page.plot("#attention-grid")
    page.choose("preset", "Mistral 7B (2023)")
    page.wait_changed("#attention-grid", before)
    assert page.value("ctl-attention") == "sliding_window" and page.value("ctl-n_kv_heads") == "2"
    mistral = page.plot("#attention-grid")
    assert mistral["traces"] == 4 * 8  # 8 heads in the preset
    n = int(round(mistral["cells"] ** 0.5))
    assert mistral["blank"] == n * n - sum(min(i + 1, 32) for i in range(n))  # window 32, causal
    page.choose("ctl-attention", "block_local")
    page.wait_changed("#attention-grid", mistral)
    local = page.plot("#attention-grid")
    assert local["blank"] == n * n - sum(i % 16 + 1 for i in range(n))  # blocks of 16, causal
    page.check_clean()


def test_share_link_restores_every_control_in_a_new_context(page, open_page):
    before = page.plot("#attention-grid")
    page.choose("ctl-attention", "strided")
    page.wait_changed("#attention-grid", before)
    page.page.locator("#ctl-n_layers input").fill("3")
    page.page.locator("#ctl-n_layers input").press("Tab")
    page.page.wait_for_function("() => document.querySelector('#attention-grid .js-plotly-plot').data.length === 12")
    page.page.wait_for_function(
        "() => document.querySelector('#share-url textarea, #share-url input').value.includes('n_layers=3')"
    )
    link = page.value("share-url")
    assert "attention=strided" in link and page.page.url == link  # the address bar carries the config too
    other = open_page(link)
    other.page.wait_for_function(
        "() => document.querySelector('#attention-grid .js-plotly-plot').data.length === 12", timeout=60_000
    )
    assert other.value("ctl-attention") == "strided" and other.value("ctl-n_layers") == "3"
    assert other.plot("#attention-grid")["blank"] == page.plot("#attention-grid")["blank"]
    other.check_clean()


def test_a_hostile_link_warns_and_keeps_the_rest(open_page):
    hostile = open_page("?n_layers=%3Cscript%3E&bogus=1")
    # the refused fields are named (escaped, never run) and the rest of the link is kept
    hostile.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('could not be used')", timeout=60_000
    )
    assert "n_layers" in hostile.page.locator("#status").inner_text()
    assert hostile.value("ctl-n_layers") == "4"
    hostile.check_clean()


def test_sweep_draws_curves(page):
    before = page.plot("#attention-grid")
    page.choose("ctl-attention", "sliding_window")
    page.wait_changed("#attention-grid", before)
    page.tab("Latency & memory")
    page.page.locator("#lengths textarea, #lengths input").first.fill("128,256,512,1024")
    page.page.locator("#run-sweep").click()
    page.wait_plot("#sweep-plot", timeout=180_000)
    sweep = page.plot("#sweep-plot")
    assert any(n.startswith("sliding_window (slope") for n in sweep["names"])
    assert any(n.startswith("full (baseline) (slope") for n in sweep["names"])
    curve = sweep["names"].index(next(n for n in sweep["names"] if n.startswith("sliding_window")))
    assert sweep["x"][curve] == [128, 256, 512, 1024]
    page.shot("latency")
    page.check_clean()


def _reading(preset):
    """The views reading line the app must settle on for ``preset`` (computed here, in-process)."""

    from explorer.app.controls.share import DEFAULT_TEXT
    from explorer.figures.views import views_reading
    from explorer.runtime.presets import preset_config

    return views_reading(attention_maps(preset_config(preset), DEFAULT_TEXT).views).split("\n")[0].replace("**", "")


def _settle(page, preset):
    """Wait until the views show ``preset`` itself (filling the controls passes through mixed configs)."""
    page.page.wait_for_function(
        "(t) => (document.querySelector('#views-reading') || {}).innerText?.includes(t)",
        arg=_reading(preset),
        timeout=60_000,
    )


def test_preset_with_a_view_shows_it_in_the_variant_views_tab(page):
    assert page.page.get_by_role("tab", name="Variant views").count() == 0  # default config: no views
    page.choose("preset", "Switch Transformer (2021)")
    page.page.get_by_role("tab", name="Variant views").click(timeout=60_000)
    _settle(page, "Switch Transformer (2021)")
    page.wait_plot("#view-experts")
    experts = page.plot("#view-experts")
    assert experts["names"][:4] == [f"layer {i}" for i in range(4)]  # one histogram per layer
    assert all(len(x) == 8 for x in experts["x"][:4])  # 8 experts in the preset
    panels = page.page.evaluate(
        "() => document.querySelector('#view-experts .js-plotly-plot').layout.annotations.map(a => a.text)"
    )
    assert sum("dropped" in t for t in panels) == 4
    assert page.page.locator("#view-approximation .js-plotly-plot").count() == 0  # not this variant's view
    page.shot("views_experts")
    page.choose("preset", "Reformer (2020)")
    _settle(page, "Reformer (2020)")
    page.wait_plot("#view-approximation")
    page.wait_plot("#view-groups")
    approx = page.plot("#view-approximation")
    assert approx["names"] == ["effective (lsh)", "exact softmax", "|effective − exact|"]
    assert page.page.locator("#view-experts .js-plotly-plot").count() == 0
    page.shot("views_approximation", full_page=True)
    page.check_clean()
