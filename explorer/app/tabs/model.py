"""The Model tab: the model card (parameters, measured FLOPs per token at the text's length, the KV cache per
decoded token, a checkpoint's origin) and the config as JSON, filled in the chain's analysis stage."""

from __future__ import annotations

import json

import gradio as gr

from explorer.analysis import kv_cache_bytes, model_summary
from explorer.analysis.source import drawn_for
from explorer.app.controls.state import after_the_grid, drawn_config
from explorer.app.tabs.contract import Landing, Step, Tab
from explorer.figures.readings import model_markdown
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import model_input
from explorer.runtime.untrusted import shown
from models import ModelConfig
from models.architectures import arrangement, stack_config, stack_depth
from models.schedule import layer_kinds

OUTPUTS = ("model_md", "config_code")


def stack_layers(cfg: ModelConfig) -> int:
    return stack_depth(cfg, arrangement(cfg).head)


def card(cfg: ModelConfig, seq: int, weights=None, loaded=None) -> str:
    """The model card, with the KV cache per decoded token and, for a checkpoint (``loaded``: the request's
    record; looked up by the weights' id otherwise), where it comes from."""
    md = model_markdown(model_summary(cfg, seq_len=seq, weights=weights))
    cache = kv_cache_bytes(cfg, [1])
    per_token = cache["current"][0]
    head, sep, rest = md.partition("\n")
    kv = (
        f"KV cache: **{per_token:,} bytes per token** in fp16 ({stack_layers(cfg)} layers × {cfg.kv_heads} K/V "
        f"heads × {cfg.d_head} × K and V × 2 bytes)."
        if not cache["own_rule"]
        else f"KV cache: **{per_token:,} bytes per token** in fp16 ({stack_layers(cfg)} layers × "
        f"{cache['values_per_token_layer']} values the {cfg.attention} cache keeps per token × 2 bytes)."
    )
    if cache["state_values"]:  # recurrent layers keep a state, not keys: say what stays fixed and what grows
        kv = state_line(cfg, cache)
    if cfg.layer_schedule:
        kv += "\n\n" + schedule_lines(cfg)
    if weights is not None and weights.checkpoint:
        from explorer.analysis.weights import checkpoints

        loaded = checkpoints.load(loaded or weights.checkpoint)
        kv += (
            f"\n\nPretrained **{shown(loaded.describe())}**, vocabulary of {cfg.vocab_size:,} tokens: "
            + "; ".join(shown(n) for n in loaded.notes)
            + "."
        )
    return f"{head}\n{kv}\n{rest}" if sep else f"{md}\n{kv}"


def state_line(cfg: ModelConfig, cache: dict) -> str:
    """The card's decode memory of a model with recurrent layers (``kv_cache_bytes(cfg, [1])``): their fixed
    state, and the KV cache per token of the layers that cache keys (none in a pure recurrent model)."""
    fixed, parts = 0, []
    for key, values in cache["state_values"].items():
        total = sum(rows[0] for token, rows in cache["by_kind"].items() if token.partition(":")[0] == key)
        fixed += total
        parts.append(f"{total // (values * cache['bytes_per_value'])} `{key}` layers × {values:,} values")
    grows = cache["current"][0] - fixed
    line = f"Recurrent state: **{fixed:,} bytes** in fp16 at every context length ({'; '.join(parts)} × 2 bytes)"
    if grows:
        return line + f"; KV cache of the attention layers: **{grows:,} bytes per token**."
    return line + "; no KV cache: decoding memory does not grow with the context."


def schedule_lines(cfg: ModelConfig) -> str:
    """A layer schedule in the card: each run of layers with its kind, then the cache at ``max_len`` tokens by kind
    (a window or a chunk keeps only its span of keys, so the full layers hold most of a long context's cache)."""
    kinds = [k.token for k in layer_kinds(stack_config(cfg, arrangement(cfg).head))]
    runs, start = [], 0
    for i in range(1, len(kinds) + 1):
        if i == len(kinds) or kinds[i] != kinds[start]:
            span = f"L{start}" if i - 1 == start else f"L{start}–L{i - 1}"
            runs.append(f"{span} `{kinds[start]}`")
            start = i
    at = cfg.max_len
    cache = kv_cache_bytes(cfg, [at])
    parts = "; ".join(f"`{kind}` layers {b[0]:,}" for kind, b in cache["by_kind"].items())
    return (
        f"Layers (schedule `{cfg.layer_schedule}`): {', '.join(runs)}. KV cache at {at:,} tokens: "
        f"**{cache['current'][0]:,} bytes** in fp16 ({parts})."
    )


def text_length(cfg: ModelConfig, text: str, w=None) -> int:
    """The length the card's FLOPs are measured at: the tokens a checkpoint's tokenizer reads from ``text``,
    else the text's bytes (at most ``MAX_TEXT_BYTES``)."""
    if w is not None and getattr(w, "tokenizer", None) is not None:
        try:
            return max(1, len(model_input(cfg, text, tokenizer=w.tokenizer).sequences[0][1]))
        except Exception:  # an empty text: the card at length 1
            return 1
    return max(1, min(len(str(text or "").encode("utf-8")), MAX_TEXT_BYTES))


def model_outputs(cfg: ModelConfig, text: str, weights=None) -> dict:
    """``{model_md, config_code}`` of ``cfg`` drawn with ``weights`` (a ``WeightsSource`` or a record)."""
    w = drawn_for(weights, cfg)
    return {
        "model_md": card(cfg, text_length(cfg, text, w), w, getattr(weights, "loaded", None)),
        "config_code": json.dumps(cfg.to_dict(), indent=2),
    }


def refresh_model(values: dict, text, state=None, weights=None) -> dict:
    """-> the card and the config JSON; skipped like the other tabs of the analysis stage."""
    return after_the_grid(state, OUTPUTS, lambda: model_outputs(drawn_config(values, weights), text, weights))


def build(landing: Landing) -> dict:
    first = model_outputs(landing.cfg, landing.text, landing.weights)
    out = {}
    with gr.Tab("Model", id="model"):
        out["model_md"] = gr.Markdown(first["model_md"], elem_id="model-card")
        out["config_code"] = gr.Code(
            first["config_code"], language="json", label="Config (JSON)", elem_id="config-json"
        )
    return out


TAB = Tab("model", build, steps=(Step("analysis", refresh_model, ("text", "state"), OUTPUTS),))
