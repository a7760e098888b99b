"""A visitor's session in a real browser: long text, presets, layer changes, number boxes, hostile
links, exports and a stopped sweep. Each test failed on an earlier version of the app:
the old page wrote 65,000 characters into the address bar, looped on presets, hid Norm placement,
recomputed on every keystroke, rendered echoed HTML, and kept a stopped sweep running."""

import glob
import os
import tempfile
import time

import pytest

GRID = "#attention-grid"


def _text_box(page):
    return page.page.locator("#text textarea").first


@pytest.mark.parametrize("text", ["a" * 65_000, "中" * 8_000], ids=["ascii-65000", "cjk-8000"])
def test_long_text_keeps_the_link_short_and_a_reload_works(page, browser, text):
    box = _text_box(page)
    box.fill(text)
    box.blur()
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('256 are used')", timeout=60_000
    )
    page.settle()
    assert len(page.page.url) < 2_000, len(page.page.url)  # only what the app uses goes into the link
    before = page.plot(GRID)
    page.choose("ctl-attention", "block_local")  # another change still redraws
    page.wait_changed(GRID, before)
    page.settle()
    link = page.page.url
    page.page.reload()  # F5
    page.wait_plot(GRID)
    page.page.wait_for_function(
        "(v) => document.querySelector('#ctl-attention input').value === v", arg="block_local", timeout=60_000
    )
    used = _text_box(page).input_value()
    assert len(used.encode("utf-8")) <= 256 and text.startswith(used)
    assert page.page.url == link
    page.check_clean()


def test_a_preset_draws_once_then_the_page_goes_quiet(page):
    page.wait_plot("#zoom-plot")  # the page-load chain's second event; then the rest of it
    page.settle(quiet_ms=2_000)
    before = page.plot(GRID)
    for preset, word in (
        ("Vanilla Transformer (2017)", "Vanilla"),
        ("Shaw relative (2018)", "Shaw"),
        ("LLaMA (2023)", "LLaMA"),
    ):
        n0 = len(page.requests)
        page.choose("preset", preset)
        page.page.wait_for_function(
            "(w) => { const v = document.querySelector('#share-url textarea, "
            "#share-url input').value; return v.includes('preset=') && v.includes(w); }",
            arg=word,
            timeout=60_000,
        )
        _wait_requests(page, n0 + 5)  # the last two events show no progress: settle alone may return before them
        page.settle()
        assert page.quiet_for(2_500) == 0, preset  # no request for 2.5 s once the figures are drawn
        # one chain: attention, statistics and zoom, views, analysis, surgery (the preset fills the
        # controls without the queue)
        assert len(page.requests) - n0 <= 5, (preset, page.requests[n0:])
        assert page.plot(GRID)["blank"] == before["blank"], preset  # all three are causal full attention
    page.check_clean()


def _wait_requests(page, n: int, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while len(page.requests) < n and time.time() < deadline:
        page.page.wait_for_timeout(250)


def _visible(page, field):
    return page.page.locator(f"#ctl-{field}").is_visible()


def test_norm_placement_stays_visible_through_layer_changes(page):
    assert _visible(page, "norm_placement") and _visible(page, "norm")
    for layer, placement in (
        ("reversible", None),
        (None, "none"),
        ("standard", None),
        ("gated", None),
        ("universal", "post"),
        ("standard", "pre"),
    ):
        if layer:
            page.choose("ctl-layer", layer)
        if placement:
            page.choose("ctl-norm_placement", placement)
        page.settle()
        assert _visible(page, "norm_placement"), (layer, placement)
        assert _visible(page, "norm"), (layer, placement)
    page.choose("ctl-layer", "standard")
    page.choose("ctl-norm_placement", "none")
    page.settle()
    assert "not used" in page.page.locator("#ctl-norm").inner_text()  # placement none: said on screen
    page.check_clean()


def test_typing_a_number_fires_one_computation_and_fractions_are_refused(page):
    page.wait_plot("#zoom-plot")  # the page-load chain's second event; then the rest of it
    page.settle(quiet_ms=2_000)
    box = page.page.locator("#ctl-d_model input")
    box.click()
    box.fill("")
    n0 = len(page.requests)
    box.press_sequentially("256", delay=150)
    assert page.quiet_for(1_000) == 0  # nothing on keystrokes (no warning about 2 or 25)
    box.press("Enter")
    page.page.wait_for_function(
        "() => document.querySelector('#share-url textarea, #share-url input').value.includes('d_model=256')",
        timeout=60_000,
    )
    _wait_requests(page, n0 + 5)
    page.settle()
    assert page.page.locator("#status").inner_text().strip() == ""
    assert len(page.requests) - n0 <= 5  # one chain: attention, statistics and zoom, views, analysis, surgery
    assert "whole numbers" in page.page.locator("#ctl-n_layers").inner_text()  # the range is shown
    before = page.plot(GRID)
    page.commit_number("ctl-n_layers", "3.5")
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('whole number')", timeout=60_000
    )
    assert page.plot(GRID) == before  # 3.5 is not silently used as 4
    page.check_clean()


def test_linformer_while_causal_unticks_causal_and_says_so(page):
    assert page.page.locator("#ctl-causal input").is_checked()
    page.page.locator("#ctl-attention input").first.click()
    option = page.page.get_by_role("option", name="linformer (needs causal off)", exact=True)
    assert option.count() == 1  # marked before it is chosen
    option.click()
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('Causal unticked')", timeout=60_000
    )
    page.page.wait_for_function("() => !document.querySelector('#ctl-causal input').checked", timeout=30_000)
    page.settle()
    assert page.value("ctl-attention") == "linformer"
    page.check_clean()


@pytest.mark.parametrize(
    "hostile",
    [
        '<a href="https://evil.example/login">Click here to re-authenticate</a>',
        '<img src="https://evil.example/pixel.png">',
    ],
)
def test_a_hostile_link_is_shown_as_text(open_page, hostile):
    from urllib.parse import quote, urlparse

    fetched = []
    p = open_page("?attention=" + quote(hostile), wait=False)
    p.page.on("request", lambda r: fetched.append(r.url) if urlparse(r.url).hostname == "evil.example" else None)
    # the refused field is named (its value shown as text) and the rest of the link is kept
    p.page.wait_for_function(
        "() => (document.querySelector('#status') || {}).innerText?.includes('could not be used')", timeout=60_000
    )
    p.settle()
    status = p.page.locator("#status")
    assert status.locator("a").count() == 0 and status.locator("img").count() == 0
    assert p.page.locator("a[href*='evil.example'], img[src*='evil.example']").count() == 0
    assert "evil.example" in status.inner_text()  # shown as text
    assert not fetched


def _exports():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "explorer-export-*")))


def test_export_serves_one_zip_and_leaves_no_temporary_copy(page):
    import importlib.util
    import json
    import zipfile

    before = _exports()
    page.page.locator("#export").click()
    links = page.page.locator("#downloads a")
    links.first.wait_for(timeout=120_000)
    page.settle()
    hrefs = links.evaluate_all("els => els.map(e => e.getAttribute('href') || '')")
    assert len(hrefs) == 1 and hrefs[0].rsplit("/", 1)[-1].startswith("transformer-explorer-")
    with page.page.expect_download() as info:
        links.first.click()
    path = info.value.path()
    assert 0 < os.path.getsize(path) < 48 * 2**20
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"README.txt", "config.json", "figures.html"} <= names
        assert json.loads(zf.read("config.json"))["attention"] == page.value("ctl-attention")
        pngs = [n for n in names if n.endswith(".png")]
        readme = zf.read("README.txt").decode()
        if importlib.util.find_spec("kaleido") is not None:  # the server renders with the Chromium tests drive
            # or, on a host too loaded to start the browser in time, the README says exactly that
            assert len(pngs) >= 4 or "skipped, the browser did not start within" in readme, readme
        else:
            assert "PNG figures: skipped, kaleido is not installed" in readme
        assert all(zf.read(n).startswith(b"\x89PNG") for n in pngs)
    assert "transformer" in page.page.locator("#status").inner_text()  # the status names the zip
    assert _exports() <= before  # the app's own temporary folder is gone once Gradio serves the file
    page.check_clean()


@pytest.mark.parametrize("how", ["stop button", "page closed"])
def test_stopping_a_sweep_frees_the_slot_within_one_run(open_page, app_url, how):
    _stop_a_sweep(open_page("?attention=sliding_window&n_layers=12&d_model=512&n_heads=16"), app_url, how)


def _stop_a_sweep(page, app_url, how):
    from gradio_client import Client

    page.page.wait_for_function("() => document.querySelector('#ctl-n_layers input').value === '12'", timeout=60_000)
    page.settle()
    page.tab("Latency & memory")
    page.page.locator("#lengths textarea, #lengths input").first.fill("256,260,264,268,272,276,280,284")
    page.page.get_by_label("forward_backward").check()
    page.page.locator("#run-sweep").click()
    page.page.wait_for_timeout(2_500)  # the sweep is running its first length
    if how == "stop button":
        page.page.locator("#stop-sweep").click()
    else:  # the visitor leaves: the event stream closes
        page.page.close()
    from gradio_client.exceptions import AppError

    t0 = time.perf_counter()
    client = Client(app_url, verbose=False)  # the same address: refused until the stopped sweep has ended
    while True:
        try:
            recs = client.predict(
                '{"n_layers": 1, "d_model": 32, "n_heads": 2}', "16", "forward", api_name="/benchmark"
            )  # shares the sweep's slot
            break
        except AppError as exc:
            assert "One heavy job at a time" in str(exc) and time.perf_counter() - t0 < 8, str(exc)
            time.sleep(0.25)
    waited = time.perf_counter() - t0
    print(f"{how}: the next sweep waited {waited:.1f} s")
    assert recs[0]["status"] == "ok"
    assert waited < 8, f"the next sweep waited {waited:.1f} s for a stopped one"


STATS_TITLE = "() => document.querySelector('#attention-stats .js-plotly-plot').layout.title.text"
TTL = 3  # EXPLORER_SESSION_TTL of the server below, seconds (expiry checked every 0.75 s)


def _held(url: str, session_hash: str) -> bool:
    """Does Gradio still hold this session? (its deep-link route answers "" for an unknown one)"""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}gradio_api/deep_link?session_hash={session_hash}", timeout=30) as r:
        return json.loads(r.read() or b'""') != ""


def _wait_idle(page, since: float, seconds: float, timeout_s: float = 120) -> None:
    """Wait until the page has sent and heard nothing for ``seconds`` (its own trace of joins and stream
    messages, which a late step of a chain on a busy machine can still add), nor anyone since ``since``."""
    from browser_page import BUSY_JS

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pending, quiet_ms, _progress = page.page.evaluate(BUSY_JS)
        if not pending and quiet_ms >= seconds * 1000 and time.monotonic() - since >= seconds:
            return
        page.page.wait_for_timeout(250)
    raise AssertionError(f"the page was never idle for {seconds} s:\n{page.trace_text()}")


def test_an_idle_session_expires_and_the_page_still_redraws(open_page, serve_app):
    """An idle session is dropped after the TTL; the page's next commit (back to the default
    attention, which the rebuilt default state believes is on screen) still redraws every figure."""
    import json

    with serve_app({"EXPLORER_SESSION_TTL": str(TTL)}, log_name="app-server-ttl.log") as url:
        page = open_page(url)
        page.settle()
        joins = []
        page.page.on("request", lambda r: joins.append(r.post_data) if "/queue/join" in r.url else None)
        before, full_stats = page.plot(GRID), page.page.evaluate(STATS_TITLE)
        page.choose("ctl-attention", "sliding_window")
        page.wait_changed(GRID, before)
        page.settle()
        session = json.loads(joins[0])["session_hash"]
        assert _held(url, session)  # the probe sees a live session
        # another share of allowed pairs (the statistics come with the chain's detail step, drawn a task later)
        page.page.wait_for_function(f"(old) => ({STATS_TITLE})() !== old", arg=full_stats, timeout=60_000)
        probed = time.monotonic()  # the probe touched the session: idle counts from it too
        _wait_idle(page, since=probed, seconds=TTL + TTL / 4 + 2)  # no event: the session must expire
        assert not _held(url, session)
        sliding = page.plot(GRID)
        page.choose("ctl-attention", "full")
        page.wait_changed(GRID, sliding)  # redrawn, although the rebuilt state says "full is drawn"
        page.settle()
        assert page.plot(GRID)["blank"] == before["blank"]
        # the statistics follow too (drawn with the chain's detail step, a task after the grid)
        page.page.wait_for_function(f"(want) => ({STATS_TITLE})() === want", arg=full_stats, timeout=60_000)
        assert "attention=" not in page.page.url  # the share link is the default page's again
        page.check_clean()
        page.close()  # before its server stops
