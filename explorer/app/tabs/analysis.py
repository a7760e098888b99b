"""Analysis tabs."""
from __future__ import annotations
import json
import gradio as gr
from explorer.analysis import experiments as ex
from explorer.app import seq2seq as ui_encdec
from explorer.figures import readings as report
from explorer.runtime.limits import MAX_TEXT_BYTES
from models import ModelConfig
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import kv_cache_figure
from explorer.app.messages import as_text
from explorer.app.controls import current_config
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.analysis.experiments import placement_results


KV_LENGTHS = [2 ** k for k in range(7, 18)]


ANALYSIS = ("grad", "grad_md", "model_md", "kv", "config_code", *ui_encdec.ANALYSIS)


def analysis_outputs(cfg: ModelConfig, text: str) -> dict:
    results, skipped = placement_results(cfg)
    grad_fig = gradient_figure(results, cfg.norm_placement)
    reading = report.gradient_reading(results, cfg.norm_placement, skipped)
    seq = max(1, min(len(as_text(text).encode("utf-8")), MAX_TEXT_BYTES))
    summary = ex.model_summary(cfg, seq_len=seq)
    kv = kv_cache_figure(ex.kv_cache_bytes(cfg, KV_LENGTHS))
    return {"grad": grad_fig, "grad_md": reading, "model_md": report.model_markdown(summary), "kv": kv,
            "config_code": json.dumps(cfg.to_dict(), indent=2), **ui_encdec.analysis_updates(cfg)}


def refresh_analysis(values: dict, text, state=None) -> dict:
    """-> gradient figure, reading, model card, KV figure, config JSON; skipped when the attention
    event drew nothing new or the config is bad (the attention handler already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in ANALYSIS}
    try:
        return analysis_outputs(current_config(values), text)
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in ANALYSIS}
