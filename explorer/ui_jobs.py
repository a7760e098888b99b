"""Long jobs of the app: the latency sweep (cancellable) and the export (leaves no files behind).

Handlers take control values by name and return ``{output name: value}`` like ``ui_handlers``.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading

import gradio as gr

from models import ConfigError, ModelConfig

from . import experiments as ex
from . import export_zip, plots, plots_compare, plots_encdec, plots_views, report, ui_encdec
from .activity import LOAD
from .limits import parse_lengths
from .ui_handlers import _problem, _state, _text, _warn, analysis_outputs, attention_outputs, current_config
from .ui_encdec import FIXED_LEN
from .ui_text import shown

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
def export_sections(cfg: ModelConfig, text: str, state, separator=None) -> tuple:
    """Every figure the session shows for ``cfg`` -> ``(sections, sweeps)``: ``[(title, [(stem,
    figure), ...]), ...]`` and the sweep records ``[(series, attention, records), ...]`` (the
    Latency tab's sweep and the Compare tab's A/B sweep, when the session ran them)."""
    grid, stats, _ = attention_outputs(cfg, text, separator)
    analysis = analysis_outputs(cfg, text)
    maps = ex.attention_maps(cfg, text, separator=ui_encdec.separator(separator))
    sections = [(f"Attention maps: {cfg.attention}", [("attention-maps", grid), ("attention-stats", stats)]),
                ("Gradient norms at initialisation", [("gradient-norms", analysis["grad"])]),
                ("KV cache for decoding", [("kv-cache", analysis["kv"])])]
    if maps.stacks:  # encoder-decoder: the cross-attention and the encoder's maps, gradients per stack
        sections[1:1] = [("Cross-attention and encoder self-attention",
                          [("cross-attention", plots_encdec.cross_grid(maps)),
                           ("encoder-attention", plots_encdec.encoder_grid(maps))])]
        sections.append(("Gradient norms per stack", [("gradient-norms-per-stack", analysis["grad_stacks"]["value"])]))
    views = [(f"view-{name}", fig) for name, fig in plots_views.view_figures(maps.views).items()]
    if views:  # only the variants that have views (layer 0, head 0 for the comparison)
        sections.append((f"Variant views: {cfg.attention}, {cfg.ffn}, {cfg.memory}, {cfg.layer}", views))
    session, sweeps = _state(state), []
    sweep = session.get("sweep")
    if sweep:
        base = sweep.get("baseline_name", "full")
        fig = plots.sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"], base)
        sections.append(("Latency and memory vs sequence length", [("latency-memory", fig)]))
        sweeps += [("current", sweep["attention"], sweep["current"]), ("baseline", base, sweep["baseline"])]
    ab = session.get("ab_sweep")
    if ab:
        fig = plots_compare.ab_sweep_figure(ab["a"], ab["b"], ab["name_a"], ab["name_b"])
        sections.append(("A/B: latency and memory vs sequence length", [("ab-latency-memory", fig)]))
        sweeps += [("A", ab["name_a"], ab["a"]), ("B", ab["name_b"], ab["b"])]
    return sections, sweeps


def export_files(values: dict, text, state, separator=None) -> dict:
    """Write ``transformer-explorer-<hash>.zip`` (``explorer.export_zip``) into a fresh temporary folder.

    -> files (the zip's path), export_dir (the folder: ``cleanup_export`` deletes it once Gradio has
    copied the file into its cache, which ``delete_cache`` bounds), status (what the zip holds, and
    why PNGs are missing when they are)."""
    out = None
    try:
        cfg = current_config(values)
        sections, sweeps = export_sections(cfg, _text(text), state, separator)
        out = tempfile.mkdtemp(prefix="explorer-export-")
        path, summary = export_zip.write_zip(out, cfg, _text(text), sections, sweeps, separator=separator)
    except Exception as exc:
        cleanup_export(out)
        return {"files": gr.skip(), "export_dir": None, "status": _warn(_problem(exc))}
    return {"files": gr.update(value=path, visible=True), "export_dir": out, "status": f"📦 {shown(summary, 600)}"}


def cleanup_export(export_dir) -> None:
    """Delete an export's temporary folder (only folders ``export_files`` made)."""
    if not isinstance(export_dir, str):
        return
    base = os.path.basename(os.path.normpath(export_dir))
    if os.path.dirname(os.path.normpath(export_dir)) == os.path.normpath(tempfile.gettempdir()) \
            and base.startswith("explorer-export-"):
        shutil.rmtree(export_dir, ignore_errors=True)
