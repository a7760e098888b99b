"""OLMo 2 (OLMo et al. 2024, "2 OLMo 2 Furious"): a Llama-style decoder with the norms moved after the
sublayers and a query/key norm over the whole projections.

Each block is ``h = x + RMSNorm_a(Attn(x))``, ``out = h + RMSNorm_f(MLP(h))`` (``post_attention_layernorm``,
``post_feedforward_layernorm``; no norm before a sublayer): the catalogue's ``norm_placement="res_post"``,
with the final ``norm`` before the head. ``self_attn.q_norm`` / ``k_norm`` are RMSNorms over the whole query
projection ``[num_attention_heads * head_dim]`` and key projection ``[num_key_value_heads * head_dim]``,
before the split into heads and before RoPE (``qk_norm="all"``, ``models/qkv.py``). The rest is read as the
Llama family reads it (``models.hf.llama``: RoPE and its scaling refusals, SwiGLU, GQA, ``attention_bias`` ->
biases on q, k, v and o, tied head), except that OLMo 2 has no sliding window (transformers' model ignores a
``sliding_window`` key, so this reader does too) and ``rms_norm_eps`` defaults to 1e-5 as in its config class.
"""

from __future__ import annotations

from . import llama
from .fields import Fields
from .mapping import Rule

MODEL_TYPES = ("olmo2",)
NAMES = {k: v for k, v in llama.NAMES.items() if k != "window"}
SIZES = {}


def config(f: Fields) -> tuple:
    fields, notes = llama.config(f, windowed=False)
    notes.insert(1, "norms after each sublayer, inside the residual branch (norm_placement='res_post')")
    notes.insert(2, "q_norm / k_norm: RMSNorm over the whole query and key projections before RoPE (qk_norm='all')")
    fields = {**fields, "norm_placement": "res_post", "qk_norm": "all", "norm_eps": f.number("rms_norm_eps", 1e-5)}
    return fields, notes


canonical = llama.canonical


def rules(f: Fields, cfg) -> dict:
    out = llama.rules(f, cfg)  # the same names, but each block's two norms sit after their sublayers
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        out[dst + "res_attn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_feedforward_layernorm.weight",))
        out[dst + "attn.q_norm.weight"] = Rule((src + "self_attn.q_norm.weight",))
        out[dst + "attn.k_norm.weight"] = Rule((src + "self_attn.k_norm.weight",))
    return out
