"""Qwen3 (Qwen Team 2025, "Qwen3 Technical Report"): a Llama-style decoder whose attention normalises each
head's queries and keys.

Everything the Llama family reads (``models.hf.llama``: RoPE, pre-norm RMSNorm, SwiGLU, GQA, the sliding
window of ``use_sliding_window`` / ``max_window_layers`` / ``layer_types``, ``attention_bias`` -> biases on
q, k, v and o, tied head), plus ``self_attn.q_norm`` / ``self_attn.k_norm``: an RMSNorm (``rms_norm_eps``) over
each head's ``head_dim`` dims of the projected queries and keys, gains ``[head_dim]`` shared by the heads,
before RoPE (the catalogue's ``qk_norm="head"``, ``models/qkv.py``). No q/k/v biases by default (Qwen2 had
them). A ``head_dim`` other than ``hidden_size / num_attention_heads`` is refused by name, as for Llama: the
catalogue's head width is ``d_model / n_heads``.
"""

from __future__ import annotations

from . import llama
from .fields import Fields
from .mapping import Rule

MODEL_TYPES = ("qwen3",)
NAMES = llama.NAMES
SIZES = llama.SIZES


def config(f: Fields) -> tuple:
    fields, notes = llama.config(f)
    notes.insert(1, "q_norm / k_norm: RMSNorm of each head's queries and keys before RoPE (qk_norm='head')")
    return {**fields, "qk_norm": "head"}, notes


canonical = llama.canonical


def rules(f: Fields, cfg) -> dict:
    out = llama.rules(f, cfg)
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.self_attn.", f"stack.blocks.{i}.attn."
        out[dst + "q_norm.weight"] = Rule((src + "q_norm.weight",))
        out[dst + "k_norm.weight"] = Rule((src + "k_norm.weight",))
    return out
