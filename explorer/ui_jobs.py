"""Long jobs of the app: the latency sweep (cancellable) and the export (leaves no files behind).

Handlers take control values by name and return ``{output name: value}`` like ``ui_handlers``.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import threading

import gradio as gr

from models import ConfigError, ModelConfig

from . import experiments as ex
from . import plots, plots_encdec, plots_views, report, ui_encdec
from .activity import LOAD
from .limits import parse_lengths
from .ui_handlers import _problem, _state, _text, _warn, analysis_outputs, attention_outputs, current_config
from .ui_encdec import FIXED_LEN
from .ui_text import shown_html

SWEEP_BUDGET_S = 3.0


# ---------------------------------------------------------------------------- sweep
def sweep_baseline(cfg: ModelConfig):
    """``(name, config)`` the sweep compares against: a reversible stack against the same model with
    standard layers (its activation memory is what stays flat in depth), otherwise the same model
    with ``full`` attention; ``(None, None)`` when the config is its own baseline."""
    if cfg.layer == "reversible":
        return "standard layers", cfg.replace(layer="standard")
    if cfg.attention != "full":
        return "full", cfg.replace(attention="full")
    return None, None


def sweep_outputs(cfg: ModelConfig, lengths: list, mode: str, progress=None, should_stop=None,
                  seq2seq_axis: str = "both") -> tuple:
    """Sweep the current config and its baseline -> (figure, reading, records). An encoder-decoder
    sweeps ``seq2seq_axis`` (source, target or both lengths; ``explorer.sweep``)."""
    axis = (dict(seq2seq_axis=seq2seq_axis or "both", fixed_len=FIXED_LEN) if cfg.architecture == "encoder_decoder"
            else {})
    def part(lo, hi):
        if progress is None:
            return None
        return lambda frac, msg: progress(lo + (hi - lo) * frac, desc=msg)

    base_name, base_cfg = sweep_baseline(cfg)
    current = ex.latency_memory_sweep(cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S, should_stop=should_stop,
                                      progress=part(0.0, 0.5 if base_cfg is not None else 1.0), **axis)
    baseline = None
    if base_cfg is not None:
        try:
            baseline = ex.latency_memory_sweep(base_cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S,
                                               should_stop=should_stop, progress=part(0.5, 1.0), **axis)
        except ConfigError:  # the baseline is not valid with this config: no baseline
            baseline = None
    name = cfg.attention if base_name != "standard layers" else f"{cfg.attention}, reversible layers"
    if axis:
        name += {"both": " (source = target length)", "source": f" (source length; target {FIXED_LEN})",
                 "target": f" (target length; source {FIXED_LEN})"}[axis["seq2seq_axis"]]
    fig = plots.sweep_figure(current, baseline, name, base_name or "full")
    reading = report.sweep_reading(current, baseline, name, base_name or "full")
    if cfg.layer == "reversible" and mode == "forward":
        reading += (" Reversible layers save *activation* memory, which only exists when gradients are taken:"
                    " measure forward_backward to see it.")
    return fig, reading, {"current": current, "baseline": baseline, "attention": name,
                          "baseline_name": base_name or "full"}


def run_sweep(values: dict, lengths, mode, state, progress=None, should_stop=None, seq2seq_axis="both") -> dict:
    """-> sweep figure, reading, state (the records kept for the export)."""
    state = _state(state)
    try:
        cfg = current_config(values)
        lengths = parse_lengths(lengths)
        if mode not in ("forward", "forward_backward"):
            raise ConfigError("mode", mode, "'forward' or 'forward_backward'")
        fig, reading, records = sweep_outputs(cfg, lengths, mode, progress, should_stop, seq2seq_axis)
    except Exception as exc:
        return {"sweep": gr.skip(), "sweep_md": _warn(_problem(exc)), "state": state}
    if any(r["status"] == "cancelled" for r in records["current"] + (records["baseline"] or [])):
        reading = "⏹ Sweep stopped: the lengths it did not reach are marked cancelled. " + reading
    return {"sweep": fig, "sweep_md": reading, "state": {**state, "sweep": records}}


def client_gone_probe():
    """A no-argument check: has the browser / client of the running event gone away?

    Gradio marks a running event's job not ``alive`` when its client's event stream closes
    (``queueing.clean_events``) but neither cancels the task nor offers a public accessor, so this
    reads that flag defensively (any surprise means "still connected"). Must be created in the
    event's context (it reads Gradio's per-event context variables)."""
    try:
        from gradio.context import LocalContext
        blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    except Exception:
        return lambda: False
    if blocks is None or event_id is None:
        return lambda: False

    def gone() -> bool:
        try:
            for job_set in blocks._queue.active_jobs:
                for job in job_set or []:
                    if getattr(job, "_id", None) == event_id:
                        return not job.alive
        except Exception:
            return False
        return False
    return gone


async def cancellable(work):
    """Run ``work(should_stop)`` in a worker thread; ``should_stop()`` turns True when the event is
    cancelled (``job.cancel()``, the Stop button) or its client disconnects. The event (and so its
    concurrency slot) ends only once the worker has stopped, so the next job starts at once."""
    stop = threading.Event()
    gone = client_gone_probe()

    def run():
        with LOAD.busy():
            return work(lambda: stop.is_set() or gone())

    task = asyncio.ensure_future(asyncio.to_thread(run))  # to_thread keeps Gradio's context (progress)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait({task})
        raise


async def run_sweep_cancellable(values: dict, lengths, mode, state, progress=None, seq2seq_axis="both") -> dict:
    """``run_sweep``, stopped between two modules when the event is cancelled or its client leaves."""
    return await cancellable(lambda should_stop: run_sweep(values, lengths, mode, state, progress, should_stop,
                                                           seq2seq_axis))


# ---------------------------------------------------------------------------- export
def _figures_html(sections: list) -> str:
    """One page with every figure; plotly.js inlined once (the file works offline)."""
    parts, first = [], True
    for title, figs in sections:
        parts.append(f"<h2 style='font-family:sans-serif'>{shown_html(title)}</h2>")
        for fig in figs:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=first))
            first = False
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Transformer Family Explorer figures</title>"
            "</head><body>" + "".join(parts) + "</body></html>")


def export_files(values: dict, text, state, separator=None) -> dict:
    """Write ``config.json`` and ``figures.html`` (every tab's figures) into a fresh temporary folder.

    -> files (the paths), export_dir (the folder: ``cleanup_export`` deletes it once Gradio has
    copied the files into its cache, which ``delete_cache`` bounds)."""
    try:
        cfg = current_config(values)
        grid, stats, _ = attention_outputs(cfg, _text(text), separator)
        analysis = analysis_outputs(cfg, _text(text))
        maps = ex.attention_maps(cfg, _text(text), separator=ui_encdec.separator(separator))
    except Exception as exc:
        _warn(_problem(exc))
        return {"files": gr.skip(), "export_dir": None}
    sections = [(f"Attention maps: {cfg.attention}", [grid, stats]),
                ("Gradient norms at initialisation", [analysis["grad"]]),
                ("KV cache for decoding", [analysis["kv"]])]
    if maps.stacks:  # encoder-decoder: the cross-attention and the encoder's maps, gradients per stack
        sections[1:1] = [("Cross-attention and encoder self-attention", [plots_encdec.cross_grid(maps),
                                                                         plots_encdec.encoder_grid(maps)])]
        sections.append(("Gradient norms per stack", [analysis["grad_stacks"]["value"]]))
    view_figs = list(plots_views.view_figures(maps.views).values())
    if view_figs:  # only the variants that have views (layer 0, head 0 for the comparison)
        sections.append((f"Variant views: {cfg.attention}, {cfg.ffn}, {cfg.memory}, {cfg.layer}", view_figs))
    sweep = _state(state).get("sweep")
    if sweep:
        fig = plots.sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"],
                                 sweep.get("baseline_name", "full"))
        sections.append(("Latency and memory vs sequence length", [fig]))
    out = tempfile.mkdtemp(prefix="explorer-export-")
    files = {"config.json": json.dumps(cfg.to_dict(), indent=2), "figures.html": _figures_html(sections)}
    paths = []
    for name, content in files.items():
        path = os.path.join(out, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        paths.append(path)
    return {"files": gr.update(value=paths, visible=True), "export_dir": out}


def cleanup_export(export_dir) -> None:
    """Delete an export's temporary folder (only folders ``export_files`` made)."""
    if not isinstance(export_dir, str):
        return
    base = os.path.basename(os.path.normpath(export_dir))
    if os.path.dirname(os.path.normpath(export_dir)) == os.path.normpath(tempfile.gettempdir()) \
            and base.startswith("explorer-export-"):
        shutil.rmtree(export_dir, ignore_errors=True)
