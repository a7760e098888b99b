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
from explorer.analysis.gradients import text_gradient_norms
from explorer.analysis.weights import applicable
from explorer.app import stacks
from explorer.app.controls import current_config
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import kv_cache_figure
from explorer.figures.readings import gradient_reading, model_markdown
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import DEFAULT_TEXT, model_input
from explorer.runtime.untrusted import shown
from models import ModelConfig, registries
from models.architectures import arrangement, stack_depth

KV_LENGTHS = [2 ** k for k in range(7, 18)]
CHECKPOINT_GRADIENT_TOKENS = 128  # a pretrained model's backward on a CPU: 128 tokens of the text
ANALYSIS = ("grad", "grad_md", "model_md", "kv", "config_code", *stacks.ANALYSIS)


def analysis_outputs(cfg: ModelConfig, text: str, weights=None) -> dict:
    """``{grad, grad_md, model_md, kv, config_code, grad_stacks}`` of ``cfg`` (``text``: its length
    is the model card's FLOPs length)."""
    w = applicable(weights, cfg)
    title = None
    if w is not None and w.checkpoint:  # a pretrained model: its own placement, on the text's LM loss
        results, skipped, seq = checkpoint_gradients(cfg, text, w)
        title = (f"Gradient norms of the pretrained checkpoint's next-token loss on your text ({seq} tokens), "
                 f"{cfg.norm_placement} placement")
    else:
        results, skipped = placement_results(cfg, weights)
        seq = max(1, min(len(str(text or "").encode("utf-8")), MAX_TEXT_BYTES))
    return {"grad": gradient_figure(results, cfg.norm_placement, title),
            "grad_md": gradient_reading(results, cfg.norm_placement, skipped),
            "model_md": card(cfg, seq, w),
            "kv": kv_cache_figure(kv_cache_bytes(cfg, KV_LENGTHS)),
            "config_code": json.dumps(cfg.to_dict(), indent=2),
            **stacks.analysis_updates(cfg, applicable(weights, cfg))}


def stack_layers(cfg: ModelConfig) -> int:
    return stack_depth(cfg, arrangement(cfg).head)


def card(cfg: ModelConfig, seq: int, weights=None) -> str:
    """The model card, with the KV cache per decoded token and, for a checkpoint, where it comes from."""
    md = model_markdown(model_summary(cfg, seq_len=seq, weights=weights))
    per_token = kv_cache_bytes(cfg, [1])["current"][0]
    head, sep, rest = md.partition("\n")
    kv = (f"KV cache: **{per_token:,} bytes per token** in fp16 ({stack_layers(cfg)} layers × {cfg.kv_heads} K/V "
          f"heads × {cfg.d_head} × K and V × 2 bytes).")
    if weights is not None and weights.checkpoint:
        from explorer.analysis import checkpoints

        loaded = checkpoints.load(weights.checkpoint)
        kv += (f"\n\nPretrained **{shown(loaded.describe())}**, vocabulary of {cfg.vocab_size:,} tokens: "
               + "; ".join(shown(n) for n in loaded.notes) + ".")
    return f"{head}\n{kv}\n{rest}" if sep else f"{md}\n{kv}"


def checkpoint_gradients(cfg: ModelConfig, text: str, weights) -> tuple:
    """``(results, skipped, tokens)``: a checkpoint's gradient norms of the language-modelling loss on the
    first ``CHECKPOINT_GRADIENT_TOKENS`` tokens of the text; the other norm placements would need other
    weights (skipped, saying so)."""
    ids = model_input(cfg, text or DEFAULT_TEXT, max_bytes=CHECKPOINT_GRADIENT_TOKENS,
                      tokenizer=weights.tokenizer).ids("tokens") if len(arrangement(cfg).inputs) == 1 else ()
    why = "a pretrained checkpoint is drawn with its own norm placement (another one needs other weights)"
    others = [p for p in registries()["norm_placement"] if p != cfg.norm_placement]
    skipped = {", ".join(others): why}
    if len(ids) < 2:
        note = "an encoder-decoder's" if ids == () else "a text of one token's"
        return {}, {cfg.norm_placement: f"no next-token loss on {note} checkpoint text", **skipped}, max(1, len(ids))
    return {cfg.norm_placement: text_gradient_norms(cfg, ids, weights)}, skipped, len(ids)


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
