"""The Train tab inside the main app (``python app.py``) in Chromium: play, the curves move, pause
stops the work, download gives config + safetensors; then the "Weights: your run" choice redraws the
Attention tab from the trained model, "initial" restores the first maps, and another session (a
fresh browser context) has no trained model to switch to (its choice falls back to bundled)."""

import json
import urllib.request

from browser_page import DECODE_JS, Page  # noqa: E402

from explorer.training import checkpoint

CURVE_POINTS_JS = """() => { const e = document.querySelector('#train-curves .js-plotly-plot');
  if (!e || !e.data || e.data.length < 2) return 0; return (e.data[1].x || []).length; }"""
STEP_JS = """() => { const m = (document.querySelector('#train-status').innerText || '').match(/step (\\d+) \\//);
  return m ? parseInt(m[1]) : -1; }"""


def _curve_pace_ms(p, timeout: int) -> float:
    """Wait until the curves move (three points) -> ms of page time between two of their updates: this
    run's pace, from which the check that a pause stopped the work takes its wait."""
    p.wait_for_function(f"() => ({CURVE_POINTS_JS})() >= 1", timeout=timeout)
    t1 = p.evaluate("() => performance.now()")
    p.wait_for_function(f"() => ({CURVE_POINTS_JS})() >= 3", timeout=timeout)
    return (p.evaluate("() => performance.now()") - t1) / 2


# the first heatmap's values (layer 0 head 0), rounded: what "the maps changed" compares
MAP_JS = (
    "() => {"
    + DECODE_JS
    + """
  const e = document.querySelector('#attention-grid .js-plotly-plot');
  if (!e || !e.data || !e.data.length) return null;
  return JSON.stringify(decode(e.data[0].z).map(v => (v === null || Number.isNaN(v)) ? null : Math.round(v * 1e4)));
}"""
)
SMALL = {"ctl-n_layers": "2", "ctl-d_model": "64"}  # the Train tab's default model


def _switch(page: Page, option: str):
    page.page.locator("#weights-switch label").filter(has_text=option).click()


def _switch_value(page: Page) -> str:
    return page.page.evaluate(
        "() => { const i = document.querySelector('#weights-switch input:checked'); return i ? i.value : null; }"
    )


def _maps(page: Page):
    return page.page.evaluate(MAP_JS)


def _wait_maps_differ(page: Page, before: str, timeout=90_000):
    page.page.wait_for_function(f"([b]) => ({MAP_JS})() !== null && ({MAP_JS})() !== b", arg=[before], timeout=timeout)


def test_train_play_pause_download_then_trained_weights_in_the_attention_tab(open_page):
    page = open_page()
    assert "never your run's weights" in page.page.locator("#weights-note").inner_text()
    for elem_id, value in SMALL.items():  # the main controls describe the model the Train tab trains
        page.commit_number(elem_id, value)
        page.settle()
    initial = _maps(page)
    page.tab("Train")
    box = page.page.locator("#train-steps input").first
    box.fill("2000")  # long enough that only the pause can end it
    box.press("Tab")
    page.page.click("#train-play")
    pace = _curve_pace_ms(page.page, 150_000)  # the curves move
    page.page.click("#train-pause")
    page.page.wait_for_function(
        "() => document.querySelector('#train-status').innerText.includes('stopped at step')", timeout=60_000
    )
    stopped = page.page.evaluate(STEP_JS)
    assert 0 < stopped < 2000
    page.page.wait_for_timeout(max(1000, 3 * pace))  # three of this run's updates: a running loop would show
    assert page.page.evaluate(STEP_JS) == stopped  # the work really stopped
    page.page.click("#train-download")
    page.page.locator("#train-files a").first.wait_for(timeout=90_000)
    hrefs = page.page.eval_on_selector_all("#train-files a", "els => els.map(e => e.href)")
    weights = [h for h in hrefs if h.endswith(".safetensors")]
    assert weights and any(h.endswith(".config.json") for h in hrefs), hrefs
    with urllib.request.urlopen(weights[0], timeout=30) as r:  # the file the browser would save
        cfg, _, meta = checkpoint.load(r.read())
    assert int(meta["step"]) == stopped and cfg.n_layers == 2 and cfg.d_model == 64

    page.tab("Attention")
    _switch(page, "your run")
    _wait_maps_differ(page, initial)
    assert _switch_value(page) == "trained"
    assert f"trained for {stopped} steps" in page.page.locator("#status").inner_text()
    page.shot("attention-trained")
    _switch(page, "initial")
    page.page.wait_for_function(f"([b]) => ({MAP_JS})() === b", arg=[initial], timeout=90_000)
    page.check_clean()
    page.close()  # the first visitor leaves

    other = open_page()  # another visitor: a new session, nothing trained
    for elem_id, value in SMALL.items():
        other.commit_number(elem_id, value)
        other.settle()
    before = _maps(other)
    assert before == initial
    _switch(other, "your run")
    other.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('No trained model')", timeout=60_000
    )
    other.settle()
    assert _switch_value(other) == "bundled" and _maps(other) == before  # no bundle serves this small config


def test_train_endpoints_through_gradio_client(app_url):
    """The Train tab's events are the app's ``/train_*`` endpoints: one step, then the download is a
    loadable safetensors file whose config is the one sent (a client keeps its session's state)."""
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    api = client.view_api(return_format="dict", print_info=False)
    assert {
        "/train_play",
        "/train_step",
        "/train_pause",
        "/train_reset",
        "/train_download",
        "/train_upload",
        "/train_reproduce",
    } <= set(api["named_endpoints"])
    cfg = {"n_layers": 1, "d_model": 32, "n_heads": 2, "max_len": 64}
    status, *_ = client.predict(
        json.dumps(cfg), "copy", 5, 3e-3, 0, "constant", 4, 16, 0, "", "trained", api_name="/train_step"
    )
    assert "step 1 / 5" in status
    files = client.predict(api_name="/train_download")
    paths = [
        f if isinstance(f, str) else f.get("path", f.get("value"))
        for f in (files["value"] if isinstance(files, dict) else files)
    ]
    weights = [p for p in paths if str(p).endswith(".safetensors")]
    loaded, _, meta = checkpoint.load(weights[0])
    assert loaded.n_layers == 1 and loaded.d_model == 32 and int(meta["step"]) == 1
