"""Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report"), text only: Gemma 2's decoder (``models.hf.gemma2``:
sandwich RMSNorms with gains stored as ``1 + w``, GeGLU, embeddings times ``sqrt(hidden_size)``, the tied head,
``query_pre_attn_scalar`` equal to ``head_dim`` or refused) with five sliding-window layers per full one, a RoPE
base per layer kind and a per-head query/key norm.

- ``layer_types`` (absent: layer ``i`` full when ``(i + 1) % sliding_window_pattern == 0``, pattern 6) -> the
  ``layer_schedule``; ``sliding_window`` -> ``window`` (a query sees ``sliding_window`` keys, its own counted).
- RoPE: the full layers' base ``rope_theta`` (default 1e6) -> ``rope_base``, the sliding layers'
  ``rope_local_base_freq`` (default 1e4) -> ``rope_local_base``; transformers 5 writes both as
  ``rope_parameters = {"full_attention": {...}, "sliding_attention": {...}}``. Any scaling but ``default`` is
  refused by name (the 4B-27B checkpoints' linear factor 8 scales only the full layers; the catalogue's
  ``rope_scale`` would scale every layer).
- ``self_attn.q_norm`` / ``k_norm``: RMSNorm of each head's queries and keys before RoPE, gains ``1 + w``
  (``qk_norm="head"``).
- Soft caps are off by default (``attn_logit_softcapping`` / ``final_logit_softcapping`` null); set, they map as
  Gemma 2's. ``use_bidirectional_attention`` (EmbeddingGemma) is refused: the catalogue's layers are causal here.
- ``model_type`` ``gemma3`` (the multimodal checkpoint: ``text_config`` beside a vision tower, weights under
  ``model.language_model.``) is refused by name: load a text-only ``gemma3_text`` checkpoint.
"""

from __future__ import annotations

import math

from . import gemma2
from .fields import Fields
from .mapping import Rule

MODEL_TYPES = ("gemma3_text", "gemma3")
NAMES = {**gemma2.NAMES, "rope_local_base": "rope_local_base_freq"}
SIZES = {**gemma2.SIZES, "sliding_window_pattern": (1, 1 << 20, "every how many layers one is full")}
THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma3TextConfig's defaults
OLD_KEYS = {"full_attention": "rope_theta", "sliding_attention": "rope_local_base_freq"}


def _theta(f: Fields, kind: str, params) -> float:
    """The RoPE base of the layers of ``kind`` from ``rope_parameters[kind]`` or the older flat keys."""
    if params is None:
        theta = f.hf.get(OLD_KEYS[kind], THETA[kind])
        scaling = f.hf.get("rope_scaling") if kind == "full_attention" else None
    else:
        entry = params.get(kind) or {}
        if not isinstance(entry, dict):
            f.refuse("rope_parameters", str(params)[:80], "an object per layer type with rope_type and rope_theta")
        theta, scaling = entry.get("rope_theta", f.hf.get(OLD_KEYS[kind], THETA[kind])), entry
    if scaling is not None:
        if not isinstance(scaling, dict):
            f.refuse("rope_scaling", str(scaling)[:80], "null or an object with a type")
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type != "default":
            f.refuse(
                "rope_scaling",
                rope_type,
                f"rope_scaling type {rope_type!r} of the {kind} layers is not supported: only 'default' (the "
                "catalogue's rope_scale would scale every layer, Gemma 3 scales only the full ones)",
            )
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (math.isfinite(theta) and theta > 0):
        f.refuse(OLD_KEYS[kind], theta, "a finite positive number (RoPE's base)")
    return float(theta)


def _rope(f: Fields, types: list) -> dict:
    params = f.hf.get("rope_parameters")
    if params is not None and (not isinstance(params, dict) or not set(params) <= set(THETA)):
        f.refuse("rope_parameters", str(params)[:80], f"an object with the layer types {list(THETA)}")
    if f.hf.get("partial_rotary_factor", 1.0) != 1.0:
        f.refuse("partial_rotary_factor", f.hf.get("partial_rotary_factor"), "1.0 (Gemma 3 rotates every dimension)")
    full, local = _theta(f, "full_attention", params), _theta(f, "sliding_attention", params)
    kinds = set(types)
    if kinds == {"full_attention"}:
        return {"rope_base": full}
    if kinds == {"sliding_attention"}:
        return {"rope_base": local}
    return {"rope_base": full, "rope_local_base": local}


def config(f: Fields) -> tuple:
    if f.hf.get("model_type") == "gemma3":
        f.refuse(
            "model_type",
            "gemma3",
            "'gemma3_text': the multimodal Gemma 3 (text_config, a vision tower, weights under "
            "model.language_model.) is not supported; a text-only Gemma 3 checkpoint is",
        )
    if f.hf.get("use_bidirectional_attention", False) is not False:
        f.refuse("use_bidirectional_attention", f.hf.get("use_bidirectional_attention"), "false (causal layers)")
    fields, notes = gemma2.common(f, caps=(None, None))
    period = f.integer("sliding_window_pattern", 6, lo=1, hi=1 << 20)
    types = gemma2.layer_types(f, fields["n_layers"], period)
    att = gemma2.attention(f, types)
    pos = _rope(f, types)
    notes.insert(1, "q_norm / k_norm: RMSNorm of each head's queries and keys before RoPE (qk_norm='head')")
    if "rope_local_base" in pos:
        notes.append(
            f"RoPE base {pos['rope_base']:g} in the full layers, {pos['rope_local_base']:g} in the sliding ones"
        )
    return {**fields, **att, **pos, "qk_norm": "head"}, notes + gemma2.window_note(att)


canonical = gemma2.canonical


def rules(f: Fields, cfg) -> dict:
    out = gemma2.rules(f, cfg)
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.self_attn.", f"stack.blocks.{i}.attn."
        out[dst + "q_norm.weight"] = Rule((src + "q_norm.weight",), gemma2.gain)
        out[dst + "k_norm.weight"] = Rule((src + "k_norm.weight",), gemma2.gain)
    return out
