"""How the page travels: the document compressed, Gradio's assets as Gradio sends them, Plotly preloaded.

References: the document as sent without compression (``Accept-Encoding: identity``) is what the
gzipped one must decompress to, byte for byte; ``Content-Encoding`` and the files named by the
``Link`` header are read from real responses of the served app; in Chromium the Resource Timing
API says when the Plotly module's fetch started, against the document's own timings."""

import gzip
import re
import urllib.request

from explorer.app.page.transport import BROTLI_EXTENSIONS, preload_links


def _get(url: str, encoding: str) -> tuple[dict, bytes]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": encoding})
    with urllib.request.urlopen(req, timeout=60) as r:
        return {k.lower(): v for k, v in r.headers.items()}, r.read()


def test_the_document_is_gzipped_and_decompresses_to_the_plain_page(app_url):
    plain_headers, plain = _get(app_url, "identity")
    headers, body = _get(app_url, "gzip, deflate, br")
    assert "content-encoding" not in plain_headers and b"gradio_config" in plain
    assert headers.get("content-encoding") == "gzip"
    page = gzip.decompress(body)
    # the page carries its session's own values (a fresh session hash, the server's time): same length
    # and the same text outside those
    assert abs(len(page) - len(plain)) < 200 and page[:2000] == plain[:2000]
    assert len(body) < len(plain) / 4, (len(body), len(plain))


def test_the_link_header_names_modules_that_the_app_serves(app_url):
    headers, _ = _get(app_url, "identity")
    links = re.findall(r"<([^>]+)>; rel=modulepreload", headers.get("link", ""))
    assert links and any("PlotlyPlot-" in u for u in links), headers.get("link")
    assert headers["link"] == preload_links()
    for url in links:
        h, body = _get(app_url + url, "identity")
        assert h["content-type"].startswith(("text/javascript", "application/javascript")) and body


def test_gradio_assets_keep_their_brotli(app_url):
    """The text files Gradio's Brotli middleware compresses stay Brotli's (the gzip here is only for
    what it leaves): a JavaScript module asked with both encodings comes back as br."""
    link = re.findall(r"<([^>]+)>", preload_links())[0]
    assert "." + link.rsplit(".", 1)[1] in BROTLI_EXTENSIONS
    headers, _ = _get(app_url + link, "gzip, deflate, br")
    assert headers.get("content-encoding") == "br"


TIMINGS_JS = """() => { const nav = performance.getEntriesByType('navigation')[0];
  const plotly = performance.getEntriesByType('resource').find(r => r.name.includes('/PlotlyPlot-'));
  const app = performance.getEntriesByType('resource').find(r => /\\/index-[^/]*\\.js$/.test(r.name));
  return {interactive: nav.domInteractive, plotly: plotly && plotly.startTime, app: app && app.startTime}; }"""


def test_plotly_is_fetched_before_the_app_script_asks_for_it(open_page):
    """Without the preload, the plot component imports Plotly once it mounts: after the document is
    parsed and Gradio's scripts have run. With it, the fetch starts as the headers arrive: before
    the document is interactive and before Gradio's own entry script is requested."""
    page = open_page()
    t = page.page.evaluate(TIMINGS_JS)
    assert t["plotly"] is not None and t["app"] is not None, t
    assert t["plotly"] < t["interactive"] and t["plotly"] <= t["app"], t
    page.check_clean()


# per animation frame from the start: the first frame in which window.Plotly exists, and the first in which the
# grid's plot element is in the page
FRAMES_JS = """(() => { window.__seen = {};
  const tick = () => { const s = window.__seen, t = performance.now();
    if (s.plotly === undefined && window.Plotly) s.plotly = t;
    if (s.grid === undefined && document.querySelector('#attention-grid [data-testid=plotly]')) s.grid = t;
    if (s.plotly === undefined || s.grid === undefined) requestAnimationFrame(tick); };
  requestAnimationFrame(tick); })()"""


def test_the_page_runs_plotlys_cartesian_build_evaluated_before_the_grid_mounts(browser, app_url):
    """The plot module is answered with the cartesian build (``plotly_build``), and the document's async module
    script evaluates it as soon as it has arrived: window.Plotly exists frames before Gradio mounts the grid's
    plot element (before, the element's mount imported it: the same frame or later)."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        ctx.add_init_script(FRAMES_JS)
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(app_url)
        page.wait_for_function(
            "() => { const e = document.querySelector('#attention-grid .js-plotly-plot'); return e && e._fullLayout; }",
            timeout=90_000,
        )
        seen = page.evaluate("() => window.__seen")
        version = page.evaluate("() => window.Plotly.version")
        traces = page.evaluate("() => Object.keys(window.Plotly.PlotSchema.get().traces)")
        tags = page.evaluate("() => document.querySelectorAll('script[type=module][async][src*=PlotlyPlot-]').length")
    finally:
        ctx.close()
    assert version == "3.4.0" and "sankey" not in traces and {"heatmap", "scatter", "bar"} <= set(traces), (
        version,
        traces,
    )
    assert tags == 1
    assert seen["plotly"] < seen["grid"], seen
    assert not errors, errors
