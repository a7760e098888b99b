"""The Train tab in Chromium (Playwright, Debian's chromium): play, see the curves move, pause (the
step counter stops), download the trained model, and a bad setting warns instead of crashing.

Runs ``python -m benchmarks.train_tab`` (the tab alone in a small Blocks app) on a free port.
"""

import urllib.request

import pytest

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


@pytest.fixture(scope="module")
def train_url(serve_app):
    """The standalone Train tab, served by the app tests' launcher."""
    with serve_app(log_name="train-demo.log", command=("-m", "benchmarks.train_tab")) as url:
        yield url


@pytest.fixture()
def page(open_page, train_url):
    """The Playwright page of the Train tab, its play button shown; no uncaught page error by the end."""
    p = open_page(train_url, wait="#train-play", viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    yield p.page
    assert not p.page_errors, p.page_errors


def _set_number(page, elem_id, value):
    box = page.locator(f"#{elem_id} input").first
    box.fill(str(value))
    box.press("Tab")


def test_play_moves_the_curves_then_pause_stops_and_download(page):
    _set_number(page, "train-steps", 2000)  # long enough that only the pause can end it
    page.click("#train-play")
    pace = _curve_pace_ms(page, 120_000)  # the curves move
    assert page.evaluate("() => document.querySelector('#train-attention .js-plotly-plot').data.length") >= 2
    assert page.evaluate("() => document.querySelector('#train-grads .js-plotly-plot').data.length") >= 1
    page.click("#train-pause")
    page.wait_for_function(
        "() => document.querySelector('#train-status').innerText.includes('stopped at step')", timeout=60_000
    )
    stopped = page.evaluate(STEP_JS)
    assert 0 < stopped < 2000
    page.wait_for_timeout(max(1000, 3 * pace))  # three of this run's updates: a running loop would show
    assert page.evaluate(STEP_JS) == stopped  # the work really stopped
    page.click("#train-download")
    link = page.locator("#train-files a").first
    link.wait_for(timeout=30_000)
    hrefs = page.eval_on_selector_all("#train-files a", "els => els.map(e => e.href)")
    weights = [h for h in hrefs if h.endswith(".safetensors")]
    assert weights and any(h.endswith(".config.json") for h in hrefs), hrefs
    with urllib.request.urlopen(weights[0], timeout=30) as r:  # the file the browser would save
        cfg, model, meta = checkpoint.load(r.read())
    assert int(meta["step"]) == stopped and cfg.n_layers == 2
    assert page.locator(".toast-body.error").count() == 0


def test_cap_is_refused_with_a_message(page):
    _set_number(page, "train-batch", 512)
    _set_number(page, "train-len", 1024)
    page.click("#train-play")
    page.wait_for_function(
        "() => document.querySelector('#train-status').innerText.includes('batch_size')", timeout=30_000
    )
    assert "tokens here" in page.locator("#train-status").inner_text()
