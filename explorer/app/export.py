"""Export."""
from __future__ import annotations
import os
import shutil
import tempfile
import gradio as gr
from explorer.analysis import experiments as ex
from explorer.app import seq2seq as ui_encdec
from explorer.app.messages import problem, as_text, warn
from explorer.app.state import read_state
from explorer.app.tabs.analysis import analysis_outputs
from explorer.app.tabs.attention import attention_outputs
from explorer.app.controls import current_config
from explorer.export import archive as export_zip
from explorer.figures import compare as plots_compare
from explorer.figures import seq2seq as plots_encdec
from explorer.figures import views as plots_views
from explorer.runtime.untrusted import shown
from models import ModelConfig
from explorer.figures.latency import sweep_figure


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
    session, sweeps = read_state(state), []
    sweep = session.get("sweep")
    if sweep:
        base = sweep.get("baseline_name", "full")
        fig = sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"], base)
        sections.append(("Latency and memory vs sequence length", [("latency-memory", fig)]))
        sweeps += [("current", sweep["attention"], sweep["current"]), ("baseline", base, sweep["baseline"])]
    ab = session.get("ab_sweep")
    if ab:
        fig = plots_compare.ab_sweep_figure(ab["a"], ab["b"], ab["name_a"], ab["name_b"])
        sections.append(("A/B: latency and memory vs sequence length", [("ab-latency-memory", fig)]))
        sweeps += [("A", ab["name_a"], ab["a"]), ("B", ab["name_b"], ab["b"])]
    return sections, sweeps


def export_files(values: dict, text, state, separator=None) -> dict:
    """Write ``transformer-explorer-<hash>.zip`` (``explorer.export.archive``) into a fresh temporary folder.

    -> files (the zip's path), export_dir (the folder: ``cleanup_export`` deletes it once Gradio has
    copied the file into its cache, which ``delete_cache`` bounds), status (what the zip holds, and
    why PNGs are missing when they are)."""
    out = None
    try:
        cfg = current_config(values)
        sections, sweeps = export_sections(cfg, as_text(text), state, separator)
        out = tempfile.mkdtemp(prefix="explorer-export-")
        path, summary = export_zip.write_zip(out, cfg, as_text(text), sections, sweeps, separator=separator)
    except Exception as exc:
        cleanup_export(out)
        return {"files": gr.skip(), "export_dir": None, "status": warn(problem(exc))}
    return {"files": gr.update(value=path, visible=True), "export_dir": out, "status": f"📦 {shown(summary, 600)}"}


def cleanup_export(export_dir) -> None:
    """Delete an export's temporary folder (only folders ``export_files`` made)."""
    if not isinstance(export_dir, str):
        return
    base = os.path.basename(os.path.normpath(export_dir))
    if os.path.dirname(os.path.normpath(export_dir)) == os.path.normpath(tempfile.gettempdir()) \
            and base.startswith("explorer-export-"):
        shutil.rmtree(export_dir, ignore_errors=True)
