"""Gated attention output (Qiu et al. 2025, "Gated Attention for Large Language Models", position G1;
``ModelConfig.attn_gate``).

After the attention core (scaled dot-product attention, or whatever mechanism the layer runs) and
before the output projection, each head's result is multiplied by a sigmoid gate computed from the
layer's normalised input ``x`` (the same input the Q/K/V projections read):

    out_n = core_n * sigmoid(x W_g)_n

- ``headwise``: ``W_g: d_model -> n_heads``, one scalar per head and position, broadcast over d_head;
- ``elementwise``: ``W_g: d_model -> n_heads * d_head``, one gate per head dimension; gate unit
  ``n * d_head + e`` gates dimension ``e`` of head ``n``. transformers' Qwen3-Next computes the same
  gate inside ``q_proj`` (``num_heads * head_dim * 2`` outputs viewed as ``(heads, 2 * head_dim)`` and
  chunked: per head ``head_dim`` query rows then ``head_dim`` gate rows), so its
  ``q_proj.weight[2 n d_head + d_head + e]`` is our ``gate_proj.weight[n d_head + e]`` and its
  ``q_proj.weight[2 n d_head + e]`` our ``q_proj.weight[n d_head + e]``.

``gate_proj`` has a bias exactly when ``q_proj`` has one (``attn_bias`` "qkv" / "all"), as the gate
rows of Qwen3-Next's fused ``q_proj`` do.
"""

from __future__ import annotations

import torch
from torch import nn

GATES = ("none", "headwise", "elementwise")


def gate_width(cfg) -> int:
    """Gate units of one layer: 0, ``n_heads`` or ``n_heads * d_head``."""
    return {"none": 0, "headwise": cfg.n_heads, "elementwise": cfg.n_heads * cfg.d_head}[cfg.attn_gate]


def gate_params(cfg) -> int:
    """Parameters the gate adds to one self-attention sublayer (weight, and a bias with q_proj's)."""
    n = gate_width(cfg)
    return n * cfg.d_model + (n if cfg.attn_bias in ("qkv", "all") else 0)


def make_gate(cfg) -> nn.Linear | None:
    """``gate_proj: d_model -> gate_width``, or None without ``attn_gate``."""
    n = gate_width(cfg)
    return nn.Linear(cfg.d_model, n, bias=cfg.attn_bias in ("qkv", "all")) if n else None


def gate_heads(gate_proj: nn.Linear | None, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out (B, h, L, d_h)`` times ``sigmoid(gate_proj(x))`` for ``x (B, L, d_model)``; ``out`` itself
    without a gate."""
    if gate_proj is None:
        return out
    B, h, L, dh = out.shape
    g = torch.sigmoid(gate_proj(x))  # (B, L, h) or (B, L, h * d_h)
    g = g.view(B, L, h, -1).transpose(1, 2)  # (B, h, L, 1 or d_h): broadcast over d_h when headwise
    return out * g.to(out.dtype)
