"""The export zip (``explorer.export.archive`` through ``export_files``): its files against
independent readings (the ModelConfig, the session's sweep records, the PNG header), the fallback
without kaleido, the bounds (figures, size, one browser at a time) and no files left behind."""

import csv
import glob
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import zipfile

import pytest

from explorer.app.api.export import cleanup_export, export_files, export_sections
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import new_state
from explorer.app.tabs.latency import run_sweep
from explorer.export import archive as export_zip
from explorer.export import png as png_render
from explorer.figures.base import message_figure
from models import ModelConfig

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2, attention="sliding_window", window=4)
CHROME = shutil.which("chromium") or shutil.which("google-chrome") or shutil.which("chrome")
TEXT = "hello\x1b[31m export"


def _leftovers() -> set:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "explorer-export-*")))


def _ihdr_size(png: bytes) -> tuple:
    """(width, height) from the IHDR chunk, which the PNG format puts first after the signature."""
    assert png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def _children(pid: int) -> list:
    """Every live descendant of ``pid`` (read from /proc)."""
    kids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            child = int(stat.split("/")[2])
            kids += [child, *_children(child)]
    return kids


@pytest.fixture(autouse=True)
def private_tmp(monkeypatch, tmp_path):
    """This test's own temporary folder: an app server of a browser test in the other worker exports into the
    shared /tmp at the same time, and its folder is not this test's leftover."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(autouse=True)
def no_warm_browser():
    """Each test starts without a kept browser and leaves none behind."""
    png_render._HOLDER.shutdown()
    yield
    png_render._HOLDER.shutdown()


@pytest.fixture(scope="module")
def swept():
    return run_sweep(config_values(SMALL), "16,32", "forward", new_state())["state"]


def _export(state, **kw):
    before = _leftovers()
    out = export_files(config_values(SMALL), TEXT, state, **kw)
    path = out["files"]["value"]
    with zipfile.ZipFile(path) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    cleanup_export(out["export_dir"])
    assert _leftovers() <= before  # the temporary folder is gone
    return os.path.basename(path), files, out["status"]


@pytest.mark.slow
def test_zip_holds_config_csv_html_and_pngs_of_the_expected_size(swept):
    pytest.importorskip("kaleido")
    if CHROME is None:
        pytest.skip("no Chrome / Chromium for kaleido")
    name, files, status = _export(swept)
    assert name == export_zip.zip_name(SMALL, TEXT) and name.startswith("transformer-explorer-")
    assert ModelConfig.from_dict(json.loads(files["config.json"])) == SMALL
    # CSV: one row per record of the session's sweep, the numbers as recorded
    rows = list(csv.DictReader(io.StringIO(files["sweep.csv"].decode())))
    sweep = swept["sweep"]
    records = [("current", r) for r in sweep["current"]] + [("baseline", r) for r in sweep["baseline"]]
    assert len(rows) == len(records) == 4
    for row, (series, r) in zip(rows, records):
        assert row["series"] == series and int(row["seq_len"]) == r["seq_len"] and row["mode"] == "forward"
        assert float(row["latency_ms"]) == pytest.approx(r["ms"], rel=1e-5)
        assert (
            row["attention_ms"] == ""
            if r.get("attn_ms") is None
            else float(row["attention_ms"]) == pytest.approx(r["attn_ms"], rel=1e-5)
        )
        assert int(row["peak_memory_bytes"]) == r["peak_bytes"] and row["status"] == "ok"
        assert row["backend"] == r["backend"]
    assert {r["attention"] for r in rows} == {"sliding_window", "full"}
    # PNGs: one per figure the session shows, each the size png_size promised
    sections, _ = export_sections(SMALL, TEXT, swept)
    figs = [fig for _, items in sections for _, fig in items]
    pngs = sorted(n for n in files if n.endswith(".png"))
    assert len(pngs) == len(figs) == 5 and pngs[0] == "01-attention-maps.png" and pngs[-1] == "05-latency-memory.png"
    for png_name, fig in zip(pngs, figs):
        png = files[png_name]
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert _ihdr_size(png) == png_render.png_size(fig) == (1400, fig.layout.height)
    html = files["figures.html"].decode()
    assert html.count("Plotly.newPlot") == 5 and html.count("* plotly.js v") == 1
    readme = files["README.txt"].decode()
    assert "5 of 5 rendered" in readme and "sweep.csv" in readme and "commit" in readme
    assert "hello\\x1b[31m export" in readme and "\x1b" not in readme  # the text, control characters escaped
    assert "5 PNG" in status


def test_without_kaleido_the_zip_has_everything_else_and_says_why(swept, monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # `import kaleido` raises ImportError
    name, files, status = _export(swept)
    assert sorted(files) == ["README.txt", "config.json", "figures.html", "sweep.csv"]
    readme = files["README.txt"].decode()
    assert "PNG figures: skipped, kaleido is not installed" in readme and "pip install kaleido" in readme
    assert "PNGs skipped" in status and "kaleido" in status


def test_without_a_sweep_there_is_no_csv(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)
    _, files, _ = _export(new_state())
    assert "sweep.csv" not in files and "config.json" in files


def test_a_bad_config_exports_nothing_and_leaves_nothing(monkeypatch):
    before = _leftovers()
    out = export_files({**config_values(SMALL), "n_heads": 3}, TEXT, None)
    assert out["export_dir"] is None and "n\\_heads=3" in out["status"] and "⚠️" in out["status"]

    def fail(*a, **k):  # a failure after the folder was made: the folder goes too
        raise OSError("disk full")

    monkeypatch.setattr(export_zip, "write_zip", fail)
    out = export_files(config_values(SMALL), TEXT, None)
    assert out["export_dir"] is None and "incident" in out["status"]
    assert "disk full" not in out["status"] and "OSError" not in out["status"]  # internal text stays in the log
    assert _leftovers() <= before


def test_size_and_figure_caps(swept, monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)
    monkeypatch.setattr(export_zip, "MAX_ZIP_BYTES", 1_000_000)  # the HTML page (plotly.js: ~4.6 MB) cannot fit
    _, files, status = _export(swept)
    assert "figures.html" not in files and "config.json" in files and "sweep.csv" in files
    readme = files["README.txt"].decode()
    assert "figures.html" in readme and "would pass the archive's 0 MB limit" in readme
    monkeypatch.setattr(png_render, "MAX_FIGURES", 2)
    got = png_render.render_pngs([(f"f{i}", None) for i in range(5)])
    assert got.notes == ["3 figure(s) past the first 2 were not rendered"] and "kaleido" in got.skipped


def test_one_browser_at_a_time(monkeypatch):
    pytest.importorskip("kaleido")
    running, most, lock = [0], [0], threading.Lock()

    def fake_run(figures):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return png_render.Rendered(pngs={s: b"" for s, _ in figures})

    monkeypatch.setattr(png_render, "_run", fake_run)
    threads = [threading.Thread(target=png_render.render_pngs, args=([("x", None)],)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def test_a_browser_that_does_not_start_in_time_is_closed(monkeypatch):
    pytest.importorskip("kaleido")
    if CHROME is None:
        pytest.skip("no Chrome / Chromium for kaleido")
    monkeypatch.setattr(png_render, "STARTUP_S", 0.05)
    fig = message_figure("x", "t")
    got = png_render.render_pngs([("x", fig)])
    assert not got.pngs and "did not start within" in got.skipped
    deadline = time.time() + 10
    while _browser_children() and time.time() < deadline:
        time.sleep(0.2)
    assert not _browser_children()


@pytest.mark.slow
def test_the_browser_is_reused_while_warm_and_closed_when_idle(monkeypatch):
    pytest.importorskip("kaleido")
    if CHROME is None:
        pytest.skip("no Chrome / Chromium for kaleido")
    monkeypatch.setattr(png_render, "IDLE_S", 3.0)
    fig = message_figure("x", "t")
    first = png_render.render_pngs([("x", fig)])
    pid = png_render._HOLDER.pid()
    second = png_render.render_pngs([("y", fig)])
    assert first.pngs["x"] == second.pngs["y"] and pid is not None and png_render._HOLDER.pid() == pid
    deadline = time.time() + 30
    while _browser_children() and time.time() < deadline:
        time.sleep(0.5)
    assert png_render._HOLDER.pid() is None and not _browser_children()


def _browser_children() -> list:
    out = []
    for pid in _children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"chrom" in cmd:
            out.append(pid)
    return out


def test_the_csv_carries_the_attention_cores_own_time():
    recs = [
        {"seq_len": 256, "ms": 12.5, "attn_ms": 4.25, "peak_bytes": 10, "status": "ok", "mode": "forward"},
        {"seq_len": 512, "ms": None, "attn_ms": None, "peak_bytes": None, "status": "oom", "mode": "forward"},
    ]
    rows = list(csv.DictReader(io.StringIO(export_zip.sweep_csv(export_zip.sweep_rows([("current", "full", recs)])))))
    assert [r["attention_ms"] for r in rows] == ["4.25", ""] and [r["latency_ms"] for r in rows] == ["12.5", ""]
    assert rows[1]["status"] == "OOM" and list(rows[0]) == list(export_zip.CSV_COLUMNS)
