"""The Compare tab's A/B sweep: A (pinned) and B (the controls) timed over the same lengths, one
figure with both per panel, failures on their own curve, and a reading checked against the records."""

import asyncio
import csv
import io
import sys
import threading
import zipfile
from types import SimpleNamespace

import pytest

from explorer.app.api.export import cleanup_export, export_files
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import new_state
from explorer.app.server import jobs
from explorer.app.tabs import compare as ui_compare
from explorer.figures import compare as plots_compare
from explorer.figures.compare import COLORS
from explorer.figures.readings import ab_sweep_reading
from models import ModelConfig

A = ModelConfig(n_layers=2, d_model=32, n_heads=2)
B = A.replace(attention="sliding_window", window=4)


def _rec(L, ms=None, peak=None, status="ok", reason=""):
    return {
        "seq_len": L,
        "ms": ms,
        "peak_bytes": peak,
        "status": status,
        "backend": "test",
        "reason": reason,
        "mode": "forward",
        "memory_method": "measured",
    }


def test_handler_times_a_and_b_over_the_same_lengths():
    out = ui_compare.run_ab_sweep(config_values(B), A.to_dict(), "16,32", "forward", new_state())
    ab = out["state"]["ab_sweep"]
    for side in ("a", "b"):
        assert [r["seq_len"] for r in ab[side]] == [16, 32] and all(r["status"] == "ok" for r in ab[side])
    assert ab["name_a"] == "full" and ab["name_b"].startswith("sliding_window")
    fig = out["ab_sweep"]
    for axis in ("x", "x2"):
        names = [t.name for t in fig.data if t.xaxis == axis and t.mode == "lines+markers"]
        assert len(names) == 2 and names[0].startswith("A (pinned)") and names[1].startswith("B (now)")
        for t in fig.data:
            if t.xaxis == axis:
                assert list(t.x) == [16, 32]
    a32, b32 = ab["a"][1], ab["b"][1]
    faster = "A" if a32["ms"] < b32["ms"] else "B"
    assert out["ab_md"].startswith("At L=32") and f"**{faster} is" in out["ab_md"]
    assert f"{max(a32['ms'], b32['ms']) / min(a32['ms'], b32['ms']):.2f}×" in out["ab_md"]


def test_reading_and_failure_markers_from_known_records():
    a = [_rec(16, 10.0, 4 * 2**20), _rec(32, 20.0, 8 * 2**20), _rec(64, status="oom", reason="no memory")]
    b = [_rec(16, 4.0, 2 * 2**20), _rec(32, 5.0, 2 * 2**20), _rec(64, 9.0, 3 * 2**20)]
    text = ab_sweep_reading(a, b, "full", "sliding_window")
    assert "At L=32" in text and "**B is 4.00× faster**" in text and "**B needs 4.00× less peak memory**" in text
    assert "A (full) L=64: OOM" in text
    fig = plots_compare.ab_sweep_figure(a, b, "full", "sliding_window")
    marks = [t for t in fig.data if t.mode == "markers+text"]
    assert len(marks) == 2  # one per panel, A's only
    for t in marks:
        assert t.marker.color == COLORS["A"] and list(t.text) == ["A: OOM"] and list(t.x) == [64]
    # on A's curve: its last two points continued (time doubles with L here, memory too)
    assert [t.y[0] for t in marks] == pytest.approx([40.0, 16.0])
    assert fig.layout.yaxis.title.text == "time per batch (ms)" and fig.layout.yaxis2.title.text == "peak memory (MiB)"


def test_nothing_pinned_and_bad_input():
    out = ui_compare.run_ab_sweep(config_values(B), None, "16", "forward", None)
    assert "Pin as A" in out["ab_md"] and "ab_sweep" not in out["state"]
    out = ui_compare.run_ab_sweep(config_values(B), A.to_dict(), "16,abc", "forward", None)
    assert "seq\\_lens" in out["ab_md"] and "⚠️" in out["ab_md"]
    out = ui_compare.run_ab_sweep(config_values(B), A.to_dict(), "16", "<b>x</b>", None)
    assert "mode" in out["ab_md"] and "<b>" not in out["ab_md"]


def test_stopped_before_it_starts_records_cancelled():
    out = ui_compare.run_ab_sweep(config_values(B), A.to_dict(), "16,32", "forward", None, should_stop=lambda: True)
    ab = out["state"]["ab_sweep"]
    assert all(r["status"] == "cancelled" for r in ab["a"] + ab["b"])
    assert out["ab_md"].startswith("⏹ A/B sweep stopped")


def test_cancelling_the_event_stops_the_worker_before_its_slot_is_freed():
    async def main():
        task = asyncio.ensure_future(
            ui_compare.run_ab_sweep_job(
                config_values(B), A.to_dict(), "16,32,64,128,256,512,1024,2048", "forward", None
            )
        )
        await asyncio.sleep(0.3)
        assert jobs.HEAVY.running("sweep") == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert jobs.HEAVY.running("sweep") == 0  # the worker had ended when the event did
        assert not [t for t in threading.enumerate() if t.name == "explorer-job"]

    asyncio.run(main())


def test_a_second_sweep_of_the_same_visitor_is_refused_with_a_message():
    who = SimpleNamespace(session_hash="ab-visitor")

    async def main():
        first = asyncio.ensure_future(
            ui_compare.run_ab_sweep_job(
                config_values(B), A.to_dict(), "16,32,64,128,256,512,1024,2048", "forward", None, request=who
            )
        )
        await asyncio.sleep(0.3)
        second = await ui_compare.run_ab_sweep_job(config_values(B), A.to_dict(), "16", "forward", None, request=who)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return second

    out = asyncio.run(main())
    assert "One heavy job at a time" in out["ab_md"].replace("\\", "")


def test_export_carries_the_ab_sweep(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)
    state = ui_compare.run_ab_sweep(config_values(B), A.to_dict(), "16", "forward", new_state())["state"]
    out = export_files(config_values(B), "abc", state)
    try:
        with zipfile.ZipFile(out["files"]["value"]) as zf:
            rows = list(csv.DictReader(io.StringIO(zf.read("sweep.csv").decode())))
            html = zf.read("figures.html").decode()
    finally:
        cleanup_export(out["export_dir"])
    assert [(r["series"], r["seq_len"]) for r in rows] == [("A", "16"), ("B", "16")]
    assert rows[0]["attention"] == "full" and "A/B: latency and memory" in html


def test_a_bad_pin_in_a_link_pins_nothing_and_says_so(monkeypatch):
    from types import SimpleNamespace

    from explorer.app.tabs import compare as tab

    said = []
    monkeypatch.setattr(tab.gr, "Warning", lambda msg: said.append(msg))
    out = tab.pinned_from_url(SimpleNamespace(query_params={"pin": "n_layers=1e9&attention=sliding_window"}))
    assert out["pinned"] is None and len(said) == 1
    assert "pin" in said[0] and "n_layers=" in said[0]
    said.clear()
    out = tab.pinned_from_url(SimpleNamespace(query_params={"pin": "attention=sliding_window"}))
    assert out["pinned"]["attention"] == "sliding_window" and said == []
