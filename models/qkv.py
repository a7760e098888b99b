"""The Q/K/V and output projections of multi-head attention, shared by every attention sublayer.

``QKVProjection`` owns ``q_proj``, ``k_proj``, ``v_proj`` (``n_heads`` query heads, ``n_kv_heads``
key/value heads: MHA, GQA or MQA) and ``out_proj``, without bias unless ``cfg.attn_bias`` asks for them
(``"qkv"``: q, k, v, as Qwen2; ``"all"``: the output projection too, as GPT-2 and BERT). The self-attention sublayer
(``models.blocks.Attention``), the decoder's cross-attention (``models.encdec``) and the layer
structures that call a sublayer's projections on other inputs (funnel's pooled queries, the
compressive memory's reconstruction loss) subclass or call it, so the head split is written once.
Parameter names (``q_proj.weight`` ...) are part of saved checkpoints and the explorer's gradient
plots: subclasses keep them at their own top level.
"""

from __future__ import annotations

import torch
from torch import nn


def projection_params(cfg, d_value: int | None = None) -> int:
    """Parameters of one ``QKVProjection``: q and out with ``n_heads``, k and v with ``n_kv_heads``; only
    ``out_proj`` (``n_heads`` heads of ``d_value``) for a core that owns its projections (MLA)."""
    if d_value is not None:
        return cfg.n_heads * d_value * cfg.d_model + (cfg.d_model if cfg.attn_bias == "all" else 0)
    weights = 2 * cfg.d_model * cfg.n_heads * cfg.d_head + 2 * cfg.d_model * cfg.kv_heads * cfg.d_head
    bias = cfg.attn_bias
    qkv = (cfg.n_heads + 2 * cfg.kv_heads) * cfg.d_head if bias in ("qkv", "all") else 0
    return weights + qkv + (cfg.d_model if bias == "all" else 0)


class QKVProjection(nn.Module):
    """``d_value``: set when the attention core owns its Q/K/V projections (``AttentionCaps.own_projections``,
    MLA): only ``out_proj`` is built, reading ``n_heads`` heads of ``d_value`` (then ``d_head``)."""

    def __init__(self, cfg, d_value: int | None = None):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.d_head = cfg.d_head if d_value is None else d_value
        h, hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        bias = cfg.attn_bias
        qkv_bias, out_bias = bias in ("qkv", "all"), bias == "all"
        if d_value is None:
            self.q_proj = nn.Linear(cfg.d_model, h * dh, bias=qkv_bias)
            self.k_proj = nn.Linear(cfg.d_model, hkv * dh, bias=qkv_bias)
            self.v_proj = nn.Linear(cfg.d_model, hkv * dh, bias=qkv_bias)
        self.out_proj = nn.Linear(h * dh, cfg.d_model, bias=out_bias)

    def heads(self, t: torch.Tensor, n_heads: int) -> torch.Tensor:
        """``(B, L, n_heads * d_h) -> (B, n_heads, L, d_h)``."""
        B, L, _ = t.shape
        return t.view(B, L, n_heads, self.d_head).transpose(1, 2)  # (B, n, L, d_h)

    def project(self, x_q: torch.Tensor, x_kv: torch.Tensor) -> tuple:
        """``q (B, h, Lq, d_h)`` from ``x_q (B, Lq, d)``; ``k, v (B, h_kv, Lk, d_h)`` from ``x_kv (B, Lk, d)``."""
        q = self.heads(self.q_proj(x_q), self.n_heads)
        k = self.heads(self.k_proj(x_kv), self.n_kv_heads)
        v = self.heads(self.v_proj(x_kv), self.n_kv_heads)
        return q, k, v

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """``out (B, h, L, d_h)`` -> the output projection of the concatenated heads ``(B, L, d)``."""
        B, h, L, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, h * dh))  # (B, L, h * d_h) -> (B, L, d)
