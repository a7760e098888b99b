"""Qwen3 (Qwen Team 2025, "Qwen3 Technical Report"): a Llama-style decoder whose attention normalises each
head's queries and keys.

Everything the Llama family reads (``models.hf.llama``: RoPE, pre-norm RMSNorm, SwiGLU, GQA, the sliding
window of ``use_sliding_window`` / ``max_window_layers`` / ``layer_types``, ``attention_bias`` -> biases on
q, k, v and o, tied head), plus ``self_attn.q_norm`` / ``self_attn.k_norm``: an RMSNorm (``rms_norm_eps``) over
each head's ``head_dim`` dims of the projected queries and keys, gains ``[head_dim]`` shared by the heads,
before RoPE (the catalogue's ``qk_norm="head"``, ``models/qkv.py``). No q/k/v biases by default (Qwen2 had
them). ``head_dim`` -> ``head_dim``; a config.json without it has Qwen3's default of 128 (transformers'
``Qwen3Config``), whatever ``hidden_size / num_attention_heads`` is (Qwen3-0.6B: 1024 / 16 heads of 128).
"""

from __future__ import annotations

from . import llama
from .fields import Fields
from .mapping import Rule

MODEL_TYPES = ("qwen3",)
NAMES = llama.NAMES
SIZES = llama.SIZES
HEAD_DIM = 128  # transformers' Qwen3Config.head_dim when config.json has none


def config(f: Fields) -> tuple:
    fields, notes = llama.config(f, head_dim=HEAD_DIM)
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
