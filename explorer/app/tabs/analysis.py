"""The Gradients tab, the Model tab and the KV-cache figure of the Latency tab, filled by one event.

After the attention grid, one request computes what these show for the config: the per-layer
gradient norms under every norm placement (the session's trained weights for the placement they
belong to, the others at initialisation), the model card (parameters, measured FLOPs per token at
the text's length), the KV-cache bytes, the config as JSON, and the per-stack gradient figure of a
model of several stacks. Skipped when the grid event drew nothing new.
"""
from __future__ import annotations

import json

import gradio as gr

from explorer.analysis import kv_cache_bytes, model_summary, placement_results
from explorer.analysis.weights import applicable
from explorer.app import stacks
from explorer.app.controls import current_config
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import kv_cache_figure
from explorer.figures.readings import gradient_reading, model_markdown
from explorer.runtime.limits import MAX_TEXT_BYTES
from models import ModelConfig

KV_LENGTHS = [2 ** k for k in range(7, 18)]
ANALYSIS = ("grad", "grad_md", "model_md", "kv", "config_code", *stacks.ANALYSIS)


def analysis_outputs(cfg: ModelConfig, text: str, weights=None) -> dict:
    """``{grad, grad_md, model_md, kv, config_code, grad_stacks}`` of ``cfg`` (``text``: its length
    is the model card's FLOPs length)."""
    results, skipped = placement_results(cfg, weights)
    seq = max(1, min(len(str(text or "").encode("utf-8")), MAX_TEXT_BYTES))
    return {"grad": gradient_figure(results, cfg.norm_placement),
            "grad_md": gradient_reading(results, cfg.norm_placement, skipped),
            "model_md": model_markdown(model_summary(cfg, seq_len=seq)),
            "kv": kv_cache_figure(kv_cache_bytes(cfg, KV_LENGTHS)),
            "config_code": json.dumps(cfg.to_dict(), indent=2),
            **stacks.analysis_updates(cfg, applicable(weights, cfg))}


def refresh_analysis(values: dict, text, state=None, weights=None) -> dict:
    """-> gradient figure, reading, model card, KV figure, config JSON; skipped when the attention
    event drew nothing new or the config is bad (the attention handler already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in ANALYSIS}
    try:
        return analysis_outputs(current_config(values), text, weights)
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in ANALYSIS}
