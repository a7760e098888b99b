"""One dropdown change in a real Chromium, counted by ``benchmarks.netcheck.Wire`` (the event stream
as the page reads it, the other requests from the DevTools protocol):
one chain of five events (Gradio 6.31's dropdown fires ``input`` twice per pick, which ran the
whole redraw twice), no download of the page document (Plotly's clip paths pointed at the old
address after the share link rewrote it, so Chromium fetched the ~0.6 MB page on each redraw), and
the 650 kB budget per whole redraw chain. Bytes only: times are the benchmark's (``python -m benchmarks.netcheck``)."""

import json

import pytest

from benchmarks.netcheck import Wire

GRID = "#attention-grid"
# bytes per redraw chain, about 0.5 s at 10 Mbit/s: the landing text must be over ~100 bytes for BigBird's random
# blocks to differ from full attention at the defaults, and the five events' maps grow with its square (the 110-byte
# text sends ~600 kB in all; the attention event alone stays within test_payload's 500 kB)
BUDGET = 650_000
CHAIN = 5  # attention grid, statistics + zoom, views, gradients + model card, surgery


@pytest.mark.parametrize("target", ["sliding_window", "strided"])
def test_a_dropdown_change_runs_one_chain_within_the_budget(open_page, app_url, target):
    page = open_page("about:blank", wait=False)
    # The Wire is attached before the app loads: its stream counter wraps the page's fetch when a
    # document starts, so it sees every event stream, the load chain's included.
    wire = Wire(page.page, mbit=1000, latency_ms=0)  # counting only: no throttling
    page.page.goto(app_url)
    page.wait_plot(GRID)
    page.wait_plot("#zoom-plot")  # the load chain's second event, then the rest of it
    page.settle(quiet_ms=2_000)
    wire.settle(page.page)
    loaded = dict(wire.bytes)
    events = []
    page.page.on(
        "request", lambda r: events.append(json.loads(r.post_data)["fn_index"]) if "/queue/join" in r.url else None
    )
    before = page.plot(GRID)
    page.choose("ctl-attention", target)
    page.wait_changed(GRID, before)
    for _ in range(120):  # the chain's last event (its progress is hidden, so settle may not wait for it)
        if len(events) >= CHAIN:
            break
        page.page.wait_for_timeout(500)
    page.settle()
    wire.settle(page.page)
    assert len(events) >= CHAIN and len(set(events)) == len(events), events  # each handler once
    got = {k: v - loaded[k] for k, v in wire.bytes.items()}
    assert got["page"] == 0, got  # the document is not downloaded again
    assert 100_000 < got["stream"] <= BUDGET, got  # the figures came, within the budget
    assert sum(got.values()) <= BUDGET + 10_000, got
    page.check_clean()
