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
