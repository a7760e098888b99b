"""Real-browser tests: Playwright driving Debian's Chromium (never a downloaded browser).

Reads plot data from the page (the Plotly graph div's ``data``), checks that no error toast and no
console error appears, and saves one screenshot per tab to ``assets/screenshots/``.
"""
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "assets" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1600, "height": 1100}

if CHROMIUM is None:
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (CI must install Debian's chromium: see .ci/run)",
                    pytrace=False)
    pytest.skip("chromium is not installed (apt-get install -y chromium); browser tests skipped",
                allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")

# Values of a Plotly array as sent by the server: a plain array, or a base64 typed array
# ({dtype, bdata, shape}) that plotly.py uses for numpy data.
DECODE_JS = """const decode = (a) => {
  if (!a || Array.isArray(a) || ArrayBuffer.isView(a)) return Array.from(a || [], r => (Array.isArray(r) || ArrayBuffer.isView(r)) ? Array.from(r) : r).flat();
  const bin = atob(a.bdata), buf = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) buf[i] = bin.charCodeAt(i);
  const T = {f4: Float32Array, f8: Float64Array, u1: Uint8Array, i1: Int8Array, u2: Uint16Array, i2: Int16Array,
             u4: Uint32Array, i4: Int32Array}[a.dtype];
  return Array.from(new T(buf.buffer));
};"""
# Summary of a Plotly graph inside the element with id `sel`: trace count, names, x values and,
# for trace 0, the number of cells and of blank (NaN: not allowed) cells.
PLOT_JS = """(sel) => {""" + DECODE_JS + """
  const el = document.querySelector(sel + ' .js-plotly-plot');
  if (!el || !el.data) return null;
  const out = {traces: el.data.length, names: el.data.map(t => t.name || ''), cells: 0, blank: 0,
               x: el.data.map(t => t.x ? decode(t.x) : [])};
  for (const v of decode(el.data[0].z)) { out.cells++; if (v === null || Number.isNaN(v) || v === 0) out.blank++; }
  return out;
}"""
BLANK_JS = """([sel, blank]) => {""" + DECODE_JS + """
  const e = document.querySelector(sel + ' .js-plotly-plot');
  if (!e || !e.data) return false;
  return decode(e.data[0].z).filter(v => v === null || Number.isNaN(v) || v === 0).length !== blank;
}"""


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """A fresh context + page that records console errors and checks for error toasts."""

    def __init__(self, browser, url):
        self.ctx = browser.new_context(viewport=VIEWPORT)
        self.page = self.ctx.new_page()
        self.errors = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        self.wait_plot("#attention-grid")

    def plot(self, sel):
        return self.page.evaluate(PLOT_JS, sel)

    def wait_plot(self, sel, timeout=90_000):
        self.page.wait_for_function(f"() => {{ const e = document.querySelector('{sel} .js-plotly-plot'); "
                                    "return e && e.data && e.data.length > 0; }", timeout=timeout)

    def wait_changed(self, sel, before, timeout=60_000):
        self.page.wait_for_function(BLANK_JS, arg=[sel, before["blank"]], timeout=timeout)

    def choose(self, elem_id, option):
        self.page.locator(f"#{elem_id} input").first.click()
        self.page.get_by_role("option", name=option, exact=True).click()

    def value(self, elem_id):
        return self.page.locator(f"#{elem_id} input, #{elem_id} textarea").first.input_value()

    def tab(self, name):
        self.page.get_by_role("tab", name=name).click()

    def shot(self, name, full_page=False):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.wait_for_timeout(800)  # let Plotly finish its transition
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)

    def check_clean(self):
        assert self.page.locator(".toast-body.error").count() == 0, "an error toast is showing"
        assert not self.errors, f"browser console errors: {self.errors}"

    def close(self):
        self.ctx.close()


@pytest.fixture
def page(browser, app_url):
    p = Page(browser, app_url)
    yield p
    p.close()


def test_page_loads_with_heatmaps(page):
    grid = page.plot("#attention-grid")
    assert grid["traces"] == 16 and grid["names"][0] == "layer 0 head 0"
    # default: full causal attention on the default text -> the upper triangle is blank
    n = int(round(grid["cells"] ** 0.5))
    assert grid["blank"] == n * (n - 1) // 2
    # PNG export: Plotly's own toolbar button, in the browser
    assert page.page.locator("#attention-grid .modebar-btn[data-title='Download plot as a PNG']").count() == 1
    page.shot("attention")
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


def test_share_link_restores_every_control_in_a_new_context(page, browser):
    before = page.plot("#attention-grid")
    page.choose("ctl-attention", "strided")
    page.wait_changed("#attention-grid", before)
    page.page.locator("#ctl-n_layers input").fill("3")
    page.page.locator("#ctl-n_layers input").press("Tab")
    page.page.wait_for_function("() => document.querySelector('#attention-grid .js-plotly-plot').data.length === 12")
    page.page.wait_for_function("() => document.querySelector('#share-url textarea, #share-url input').value"
                                ".includes('n_layers=3')")
    link = page.value("share-url")
    assert "attention=strided" in link and page.page.url == link  # the address bar carries the config too
    other = Page(browser, link)
    try:
        other.page.wait_for_function("() => document.querySelector('#attention-grid .js-plotly-plot').data.length === 12",
                                     timeout=60_000)
        assert other.value("ctl-attention") == "strided" and other.value("ctl-n_layers") == "3"
        assert other.plot("#attention-grid")["blank"] == page.plot("#attention-grid")["blank"]
        other.check_clean()
    finally:
        other.close()


def test_bad_input_warns_and_keeps_the_last_figures(page, browser, app_url):
    before = page.plot("#attention-grid")
    page.page.locator("#ctl-n_layers input").fill("99")
    page.page.locator("#ctl-n_layers input").press("Tab")
    page.page.wait_for_function("() => document.querySelector('#status').innerText.includes('n_layers')")
    assert page.plot("#attention-grid") == before
    page.check_clean()
    hostile = Page(browser, app_url + "?n_layers=%3Cscript%3E&bogus=1")
    try:
        hostile.page.wait_for_function("() => document.querySelector('#status').innerText.includes('defaults')",
                                       timeout=60_000)
        assert hostile.value("ctl-n_layers") == "4"
        hostile.check_clean()
    finally:
        hostile.close()


def test_gradient_and_model_tabs(page):
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
    from explorer import experiments as ex
    from explorer.presets import preset_config
    from explorer.share import DEFAULT_TEXT
    from explorer.ui_views import views_reading
    return views_reading(ex.attention_maps(preset_config(preset), DEFAULT_TEXT).views).split("\n")[0].replace("**", "")


def _settle(page, preset):
    """Wait until the views show ``preset`` itself (filling the controls passes through mixed configs)."""
    page.page.wait_for_function("(t) => (document.querySelector('#views-reading') || {}).innerText?.includes(t)",
                                arg=_reading(preset), timeout=60_000)


def test_preset_with_a_view_shows_it_in_the_variant_views_tab(page):
    assert page.page.get_by_role("tab", name="Variant views").count() == 0  # default config: no views
    page.choose("preset", "Switch Transformer (2021)")
    page.page.get_by_role("tab", name="Variant views").click(timeout=60_000)
    _settle(page, "Switch Transformer (2021)")
    page.wait_plot("#view-experts")
    experts = page.plot("#view-experts")
    assert experts["names"][:4] == [f"layer {i}" for i in range(4)]  # one histogram per layer
    assert all(len(x) == 8 for x in experts["x"][:4])  # 8 experts in the preset
    panels = page.page.evaluate("() => document.querySelector('#view-experts .js-plotly-plot').layout"
                                ".annotations.map(a => a.text)")
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
