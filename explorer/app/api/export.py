"""The export: every figure the session shows for a config, in one zip that leaves nothing behind.

``export_sections`` draws the figures from the analyses directly (the attention grid, its statistics
and the zoomed head, the other stacks' maps, gradient norms per placement and per stack, the KV cache,
the variant views, the Surgery tab, the Compare tab when A is pinned, the Train tab's run, and the
session's sweeps), so the Export button and ``/export`` share one path and
neither goes through a UI handler. Both hand it the request's weights source
(``explorer.analysis.source.WeightsSource``): the zip draws the weights the page draws, its gradient
figure is the Gradients tab's (``tabs.analysis.gradient_panel``), its text is read with the checkpoint's
tokenizer when one is drawn, and Compare's pinned A is drawn with the same choice.

``export_files`` writes ``transformer-explorer-<hash>.zip`` (``explorer.export.archive``) into a fresh
temporary folder the app owns (``_OWNED``: only folders it made are ever deleted); ``cleanup_export``
deletes that folder once Gradio has copied the file into its cache (which ``delete_cache`` bounds). A
session's next export deletes its previous folder first, and at most ``MAX_EXPORT_DIRS`` folders live
at once (the oldest deleted), so exports whose clean-up event never ran do not pile up.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from collections import OrderedDict

import gradio as gr

from explorer.analysis import attention_maps, gradient_norms, kv_cache_bytes
from explorer.analysis.source import CHECKPOINT, WeightsSource
from explorer.analysis.weights import applicable
from explorer.app.server.messages import problem, warn
from explorer.app.controls.state import drawn_config, read_state
from explorer.app.tabs import compare
from explorer.app.tabs.parts import train_runs
from explorer.app.tabs import surgery as surgery_tab
from explorer.app.tabs.analysis import KV_LENGTHS, gradient_panel
from explorer.export import archive
from explorer.figures.attention import attention_grid, attention_stats
from explorer.figures.compare import ab_sweep_figure
from explorer.figures.latency import kv_cache_figure, sweep_figure
from explorer.figures.stacks import extra_grid, stack_gradient_figure
from explorer.figures.views import view_figures
from explorer.figures.zoom import head_figure
from explorer.runtime.configs import app_config
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import as_text, model_input
from explorer.runtime.untrusted import shown
from models import ModelConfig

TEMP_PREFIX = "explorer-export-"
MAX_EXPORT_DIRS = 8  # export folders alive at once (1.6 MB each with PNGs): the oldest is deleted past it
_OWNED: OrderedDict = OrderedDict()  # folder -> None: the export folders this process made and has not deleted
_OWNED_LOCK = threading.Lock()


def export_sections(cfg: ModelConfig, text: str, state=None, separator=None, weights=None, zoom=None,
                    pinned=None, train_state=None) -> tuple:
    """Every figure the session shows for ``cfg`` -> ``(sections, sweeps)``: ``[(title, [(stem,
    figure), ...]), ...]`` and the sweep records ``[(series, attention, records), ...]`` (the
    Latency tab's sweep and the Compare tab's A/B sweep, when the session ran them).

    ``zoom``: the zoomed head ``(layer, head)``; ``pinned``: the Compare tab's A (a config dict), drawn
    against ``cfg`` as B; ``train_state``: the Train tab's state, whose run's figures are added when
    it holds one. Each figure's section names it (the statistics PNG is no "Attention maps").
    ``weights``: the request's ``WeightsSource`` (or a record, or None: the initial weights)."""
    w = applicable(weights, cfg)
    maps = attention_maps(cfg, text, separator=separator, weights=w)
    grad_fig, _reading, _drawn = gradient_panel(cfg, text, w)
    sections = [(f"Attention maps: {cfg.attention}", [("attention-maps", attention_grid(maps))]),
                ("Attention pattern and per-head statistics", [("attention-stats", attention_stats(maps))])]
    if zoom is not None and any(v is not None for v in zoom):  # the page's zoom (an API export has none)
        layer, head = _zoomed(zoom)
        sections.append((f"Zoomed head: layer {layer}, head {head}", [("zoomed-head", head_figure(maps, layer, head))]))
    sections += [("Gradient norms by norm placement", [("gradient-norms", grad_fig)]),
                 ("KV cache for decoding", [("kv-cache", kv_cache_figure(kv_cache_bytes(cfg, KV_LENGTHS)))])]
    if maps.stacks:  # a model of several stacks: the other stacks' and the cross-attention maps, per-stack norms
        stems = {name: ("cross-attention" if m.mask_kind == "full" else f"{m.stack}-attention")
                 for name, m in maps.stacks.items()}
        selfs = " and ".join(m.stack for m in maps.stacks.values() if m.mask_kind != "full")
        sections[1:1] = [(f"Cross-attention and {selfs} self-attention",
                          [(stems[name], extra_grid(m)) for name, m in maps.stacks.items()])]
        sections.append(("Gradient norms per stack",
                         [("gradient-norms-per-stack", stack_gradient_figure(gradient_norms(cfg, weights=w)))]))
    views = [(f"view-{name}", fig) for name, fig in view_figures(maps.views).items()]
    if views:  # only the variants that have views (layer 0, head 0 for the comparison)
        sections.append((f"Variant views: {cfg.attention}, {cfg.ffn}, {cfg.memory}, {cfg.layer}", views))
    if w is not None:  # drawn with trained weights: the Surgery tab's figures
        sections += _surgery_section(cfg, text, separator, w)
    if pinned and not (isinstance(weights, WeightsSource) and weights.kind == CHECKPOINT):  # Compare refuses one
        sections.append(_compare_section(app_config(pinned), cfg, text, separator, weights))
    sections += _train_section(train_state)
    session, sweeps = read_state(state), []
    sweep = session.get("sweep")
    if sweep:
        base = sweep.get("baseline_name", "full")
        fig = sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"], base)
        sections.append(("Latency and memory vs sequence length", [("latency-memory", fig)]))
        sweeps += [("current", sweep["attention"], sweep["current"]), ("baseline", base, sweep["baseline"])]
    ab = session.get("ab_sweep")
    if ab:
        fig = ab_sweep_figure(ab["a"], ab["b"], ab["name_a"], ab["name_b"])
        sections.append(("A/B: latency and memory vs sequence length", [("ab-latency-memory", fig)]))
        sweeps += [("A", ab["name_a"], ab["a"]), ("B", ab["name_b"], ab["b"])]
    return sections, sweeps


def _zoomed(zoom) -> tuple:
    """The zoom pickers' values as ints (clamped to the model by ``head_figure``); bad values are layer / head 0."""
    try:
        return max(0, int(zoom[0] or 0)), max(0, int(zoom[1] or 0))
    except (TypeError, ValueError, IndexError):
        return 0, 0


def _surgery_section(cfg: ModelConfig, text: str, separator, w) -> list:
    """The Surgery tab's difference view (when the trained weights are operated on) and its table."""
    out = surgery_tab.surgery_outputs(cfg, text, separator, w)
    figs = [("surgery-difference", out["surgery_diff"])] if w is not None and w.surgery else []
    if out["surgery_table_md"]:
        figs.append(("surgery-table", out["surgery_table"]))
    what = "the checkpoint's pretrained weights" if w.checkpoint else "the trained weights"
    return [(f"Surgery on {what}", figs)] if figs else []


def _compare_section(a: ModelConfig, b: ModelConfig, text: str, separator, weights) -> tuple:
    """A (pinned) vs B (the controls), each drawn as the Compare tab draws it for the page's Weights choice
    (``weights``: the request's source; a bare record draws A only when it belongs to A)."""
    out = compare.compare_outputs(a, b, text, separator, compare.side_weights(weights))
    return ("Compare A (pinned) / B (the controls)", [("compare-a", out["grid_a"]), ("compare-b", out["grid_b"]),
                                                     ("compare-gradients", out["compare_grad"])])


def _train_section(train_state) -> list:
    """The Train tab's curves, probe attention and gradient norms, when the session holds a run."""
    if not isinstance(train_state, dict) or train_state.get("trainer") is None or train_state.get("snap") is None:
        return []
    curves, probe, grads = train_runs.figures(train_state)
    task = train_state["trainer"].run_cfg.task
    return [(f"Training run ({task} task, step {train_state['snap'].step})",
             [("train-curves", curves), ("train-probe-attention", probe), ("train-gradient-norms", grads)])]


def write_export(cfg: ModelConfig, text: str, state=None, separator=None, weights=None, **extra) -> tuple:
    """The zip in a fresh temporary folder -> ``(folder, path, summary)``; the folder is deleted on failure.
    ``extra``: ``export_sections``' zoom, pinned and train_state."""
    folder = None
    try:
        sections, sweeps = export_sections(cfg, text, state, separator, weights, **extra)
        folder = _new_folder()
        tokenizer = getattr(applicable(weights, cfg), "tokenizer", None)
        used = model_input(cfg, text, separator, tokenizer=tokenizer)  # the text as the maps read it
        label = (f"Input text (the first {MAX_TEXT_BYTES} tokens of the checkpoint's tokenizer)" if tokenizer is not None
                 else f"Input text (first {MAX_TEXT_BYTES} bytes, one token per byte)")
        path, summary = archive.write_zip(folder, cfg, used.text, sections, sweeps, separator=used.separator,
                                          text_label=label)
    except BaseException:
        cleanup_export(folder)
        raise
    return folder, path, summary


def export_files(values: dict, text, state, separator=None, weights=None, zoom_layer=None, zoom_head=None,
                 pinned=None, train_state=None, export_dir=None) -> dict:
    """The Export button -> files (the zip's path), export_dir (its folder, deleted by
    ``cleanup_export`` once served, or by this session's next export: ``export_dir`` is the previous
    one), status (what the zip holds, and why PNGs are missing when they are). The zoomed head, the
    Compare tab (when A is pinned) and the Train tab's run come along."""
    cleanup_export(export_dir)  # this session's previous zip: already served
    try:
        folder, path, summary = write_export(drawn_config(values, weights), as_text(text), state, separator, weights,
                                             zoom=(zoom_layer, zoom_head), pinned=pinned, train_state=train_state)
    except Exception as exc:
        return {"files": gr.skip(), "export_dir": None, "status": warn(problem(exc))}
    return {"files": gr.update(value=path, visible=True), "export_dir": folder, "status": f"📦 {shown(summary, 600)}"}


def _new_folder() -> str:
    """A fresh export folder, owned; past ``MAX_EXPORT_DIRS`` live ones, the oldest is deleted."""
    folder = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    with _OWNED_LOCK:
        _OWNED[folder] = None
        stale = [_OWNED.popitem(last=False)[0] for _ in range(max(0, len(_OWNED) - MAX_EXPORT_DIRS))]
    for old in stale:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def cleanup_export(export_dir) -> None:
    """Delete an export's temporary folder: only one ``write_export`` made in this process and has not
    deleted yet (any other path, a client's included, is left alone)."""
    if not isinstance(export_dir, str):
        return
    with _OWNED_LOCK:
        owned = _OWNED.pop(export_dir, False) is None
    if owned:
        shutil.rmtree(export_dir, ignore_errors=True)
