"""The export: one ``transformer-explorer-<hash>.zip`` with the config, the figures and the sweep.

Contents: ``config.json`` (``ModelConfig.from_dict`` rebuilds it), ``README.txt`` (what each file is,
the app version and commit, the input text), ``figures.html`` (every figure, interactive and
offline: plotly.js inlined once), one PNG per figure (``explorer.export.png``; skipped, and said so
in README.txt, where kaleido or a Chrome is missing) and ``sweep.csv`` when the session ran a sweep.
The archive is bounded: at most ``MAX_ZIP_BYTES`` of content (a file that would pass it is left out
and README.txt says so). The text is the part the model read (the caller's ``model_input(...).text``).
No gradio and no torch here: ``explorer.app.api.export`` draws the figures and calls ``write_zip``.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import hashlib
import html
import io
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.export.png import png_size, render_pngs

if TYPE_CHECKING:
    from models import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
MAX_ZIP_BYTES = 48 * 2**20  # uncompressed content of one archive
README_RESERVE = 64 * 2**10  # kept for README.txt, written last
# attention_ms: the attention cores' own share of latency_ms (explorer.analysis.cost.core_timer), empty where not timed
CSV_COLUMNS = (
    "series",
    "attention",
    "seq_len",
    "mode",
    "latency_ms",
    "attention_ms",
    "peak_memory_bytes",
    "status",
    "backend",
    "device",
    "src_len",
    "tgt_len",
    "reason",
)


def zip_name(cfg: ModelConfig, text: str) -> str:
    """``transformer-explorer-<10 hex digits of the config and text>.zip``."""
    digest = hashlib.sha1((cfg.to_json() + "\0" + text).encode("utf-8")).hexdigest()[:10]
    return f"transformer-explorer-{digest}.zip"


def figures_html(sections: list) -> str:
    """One page with every figure; plotly.js inlined once (the file works offline).
    ``sections``: ``[(title, [(stem, figure), ...]), ...]``."""
    parts, first = [], True
    for title, figs in sections:
        parts.append(f"<h2 style='font-family:sans-serif'>{html.escape(title)}</h2>")
        for _, fig in figs:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=first))
            first = False
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Transformer Family Explorer figures</title>"
        "</head><body>" + "".join(parts) + "</body></html>"
    )


def sweep_rows(sweeps: list) -> list:
    """``sweeps``: ``[(series, attention name, records), ...]`` -> one CSV row dict per record, i.e.
    per (attention, length, mode); failures keep their status (OOM, TIMEOUT, ...) and empty numbers."""
    rows = []
    for series, name, records in sweeps:
        for r in records or []:
            rows.append(
                {
                    "series": series,
                    "attention": name,
                    "seq_len": r["seq_len"],
                    "mode": r.get("mode", ""),
                    "latency_ms": "" if r.get("ms") is None else f"{r['ms']:.6g}",
                    "attention_ms": "" if r.get("attn_ms") is None else f"{r['attn_ms']:.6g}",
                    "peak_memory_bytes": "" if r.get("peak_bytes") is None else int(r["peak_bytes"]),
                    "status": "ok" if r["status"] == "ok" else str(r["status"]).upper(),
                    "backend": r.get("backend", ""),
                    "device": r.get("device", ""),
                    "src_len": r.get("src_len", ""),
                    "tgt_len": r.get("tgt_len", ""),
                    "reason": r.get("reason", ""),
                }
            )
    return rows


def sweep_csv(rows: list) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@functools.lru_cache(maxsize=1)
def app_version() -> str:
    """``0.1.0, commit abc1234`` from pyproject.toml and git, each part ``unknown`` when unavailable."""
    version = "unknown"
    try:
        import tomllib

        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except Exception:
        pass
    commit = "unknown"
    try:
        got = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=3
        )
        if got.returncode == 0 and re.fullmatch(r"[0-9a-f]{4,40}", got.stdout.strip()):
            commit = got.stdout.strip()
    except Exception:
        pass
    return f"{version}, commit {commit}"


def _printable(text: str) -> str:
    """The text with control characters written as escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _readme(cfg, text, separator, files: list, png_note: str, left_out: list, text_label: str) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "Transformer Family Explorer export",
        "",
        f"Created: {now}",
        f"App: {app_version()}",
        f"Configuration: attention={cfg.attention}, position={cfg.position}, norm_placement={cfg.norm_placement}, "
        f"ffn={cfg.ffn}, memory={cfg.memory}, layer={cfg.layer}",
        f"{text_label}: {_printable(text)}",
    ]
    if separator:
        lines.append(f"Source / target separator: {_printable(str(separator))[:16]}")
    lines += ["", "Files:"]
    width = max((len(name) for name, _ in files), default=10)
    lines += [f"  {name:<{width}}  {what}" for name, what in files]
    lines += ["", png_note]
    if left_out:
        lines += ["", "Left out:"] + [f"  {why}" for why in left_out]
    return "\n".join(lines) + "\n"


def write_zip(
    out_dir: str,
    cfg: ModelConfig,
    text: str,
    sections: list,
    sweeps: list,
    separator=None,
    render=render_pngs,
    text_label: str = "Input text (one token per byte)",
) -> tuple:
    """Write the archive into ``out_dir`` -> ``(path, summary)``; ``summary`` is one line for the
    status (what it holds, and why PNGs are missing if they are). ``sections`` as ``figures_html``;
    ``sweeps`` as ``sweep_rows``; ``render``: ``png.render_pngs`` (tests replace it)."""
    figures = [
        (f"{n:02d}-{stem}", fig)
        for n, (stem, fig) in enumerate((item for _, figs in sections for item in figs), start=1)
    ]
    titles = {
        f"{n:02d}-{stem}": title
        for n, (title, stem) in enumerate(((title, stem) for title, figs in sections for stem, _ in figs), start=1)
    }
    rendered = render(figures)
    entries = [
        (
            "config.json",
            json.dumps(cfg.to_dict(), indent=2),
            "the configuration; ModelConfig.from_dict(json.load(open('config.json'))) rebuilds it",
        ),
        (
            "figures.html",
            figures_html(sections),
            "every figure, interactive; opens offline (plotly.js is included once)",
        ),
    ]
    rows = sweep_rows(sweeps)
    if rows:
        entries.append(
            (
                "sweep.csv",
                sweep_csv(rows),
                "the latency / memory sweep: one row per (series, attention, length, mode); latency_ms is "
                "the median of timed runs and attention_ms the attention cores' share of it, peak_memory_bytes "
                "measured; status ok, OOM, TIMEOUT, CANCELLED ...",
            )
        )
    for stem, fig in figures:
        if stem in rendered.pngs:
            w, h = png_size(fig)
            entries.append((f"{stem}.png", rendered.pngs[stem], f"{titles[stem]} ({w} x {h} px)"))
    if rendered.skipped:
        png_note = f"PNG figures: skipped, {rendered.skipped}. figures.html has every figure."
    else:
        png_note = f"PNG figures: {len(rendered.pngs)} of {len(figures)} rendered by kaleido (headless Chromium)."
    left_out, kept, total = list(rendered.notes), [], 0
    for name, content, what in entries:
        size = len(content.encode("utf-8") if isinstance(content, str) else content)
        if total + size > MAX_ZIP_BYTES - README_RESERVE:
            left_out.append(f"{name}: {size:,} bytes would pass the archive's {MAX_ZIP_BYTES // 2**20} MB limit")
            continue
        kept.append((name, content, what))
        total += size
    readme = _readme(
        cfg,
        text,
        separator,
        [("README.txt", "this file")] + [(n, w) for n, _, w in kept],
        png_note,
        left_out,
        text_label,
    )[:README_RESERVE]
    path = os.path.join(out_dir, zip_name(cfg, text))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.txt", readme)
        for name, content, _ in kept:
            # PNGs are already compressed: stored as they are
            zf.writestr(name, content, compress_type=zipfile.ZIP_STORED if name.endswith(".png") else None)
    n_png = sum(name.endswith(".png") for name, _, _ in kept)
    summary = f"{os.path.basename(path)}: config.json, figures.html, {n_png} PNG(s)" + (
        ", sweep.csv" if any(name == "sweep.csv" for name, _, _ in kept) else ""
    )
    if rendered.skipped:
        summary += f". PNGs skipped: {rendered.skipped}."
    elif left_out:
        summary += f". Left out: {'; '.join(left_out)[:300]}."
    return path, summary
