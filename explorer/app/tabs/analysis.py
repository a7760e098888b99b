"""The Gradients tab, the Model tab and the KV-cache figure of the Latency tab, filled by one event.

After the attention grid, one request computes what these show for the config: the per-layer
gradient norms (``gradient_panel``: ``explorer.analysis.gradients.drawn_gradients``, the path the export
and ``/gradients`` take too: every norm placement, the weights drawn for the placement they belong to,
the others at initialisation; a pretrained checkpoint's own placement on its loss on the text), the model card (parameters, measured FLOPs per token at
the text's length), the KV-cache bytes, the config as JSON, and the per-stack gradient figure of a
model of several stacks. Skipped when the grid event drew nothing new.
"""
from __future__ import annotations

import json

import gradio as gr

from explorer.analysis import kv_cache_bytes, model_summary
from explorer.analysis.gradients import drawn_gradients
from explorer.analysis.weights import applicable
from explorer.app.tabs.parts import stacks
from explorer.app.server.messages import problem
from explorer.app.controls.state import drawn_config, read_state
from explorer.app.tabs.parts.gradients_depth import depth_panel
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import kv_cache_figure
from explorer.figures.readings import gradient_reading, model_markdown
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.untrusted import shown
from models import ModelConfig
from models.architectures import arrangement, stack_depth

KV_LENGTHS = [2 ** k for k in range(7, 18)]
ANALYSIS = ("grad", "grad_md", "model_md", "kv", "config_code", *stacks.ANALYSIS)


def gradient_panel(cfg: ModelConfig, text: str, weights=None) -> tuple:
    """``(figure, reading, drawn)``: the Gradients tab's figure and reading of ``cfg`` drawn with ``weights``
    (a ``WeightsSource``, a record or None) and the ``DrawnGradients`` they show; the export draws this."""
    drawn = drawn_gradients(cfg, text, weights)
    title = None
    if drawn.on_text:
        title = (f"Gradient norms of the pretrained checkpoint's next-token loss on your text ({drawn.tokens} tokens), "
                 f"{cfg.norm_placement} placement")
    reading = gradient_reading(drawn.results, cfg.norm_placement, drawn.skipped)
    theorem = None if drawn.on_text else depth_panel(cfg, weights, drawn.results)  # Theorem 1 above the profile
    if theorem is not None:
        return theorem[0], f"{theorem[1]}\n\n{reading}", drawn
    return gradient_figure(drawn.results, cfg.norm_placement, title), reading, drawn


def analysis_outputs(cfg: ModelConfig, text: str, weights=None) -> dict:
    """``{grad, grad_md, model_md, kv, config_code, grad_stacks}`` of ``cfg`` (``text``: its length
    is the model card's FLOPs length)."""
    w = applicable(weights, cfg)
    fig, reading, drawn = gradient_panel(cfg, text, w)
    seq = drawn.tokens if drawn.on_text else max(1, min(len(str(text or "").encode("utf-8")), MAX_TEXT_BYTES))
    return {"grad": fig, "grad_md": reading, "model_md": card(cfg, seq, w, getattr(weights, "loaded", None)),
            "kv": kv_cache_figure(kv_cache_bytes(cfg, KV_LENGTHS)),
            "config_code": json.dumps(cfg.to_dict(), indent=2),
            **stacks.analysis_updates(cfg, w)}


def stack_layers(cfg: ModelConfig) -> int:
    return stack_depth(cfg, arrangement(cfg).head)


def card(cfg: ModelConfig, seq: int, weights=None, loaded=None) -> str:
    """The model card, with the KV cache per decoded token and, for a checkpoint (``loaded``: the request's
    record; looked up by the weights' id otherwise), where it comes from."""
    md = model_markdown(model_summary(cfg, seq_len=seq, weights=weights))
    per_token = kv_cache_bytes(cfg, [1])["current"][0]
    head, sep, rest = md.partition("\n")
    kv = (f"KV cache: **{per_token:,} bytes per token** in fp16 ({stack_layers(cfg)} layers × {cfg.kv_heads} K/V "
          f"heads × {cfg.d_head} × K and V × 2 bytes).")
    if weights is not None and weights.checkpoint:
        from explorer.analysis import checkpoints

        loaded = checkpoints.load(loaded or weights.checkpoint)
        kv += (f"\n\nPretrained **{shown(loaded.describe())}**, vocabulary of {cfg.vocab_size:,} tokens: "
               + "; ".join(shown(n) for n in loaded.notes) + ".")
    return f"{head}\n{kv}\n{rest}" if sep else f"{md}\n{kv}"


def refresh_analysis(values: dict, text, state=None, weights=None) -> dict:
    """-> gradient figure, reading, model card, KV figure, config JSON; skipped when the attention
    event drew nothing new or the config is bad (the attention handler already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in ANALYSIS}
    try:
        return analysis_outputs(drawn_config(values, weights), text, weights)
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in ANALYSIS}
