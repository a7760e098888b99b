"""Attention over a structured pattern (section 1): block-sparse on every backend.

The pattern becomes a ``kernels.BlockMask`` (tiles of ``BLOCK`` x ``BLOCK``) and the attention
runs through ``kernels.attention``, which visits only the allowed tiles (Triton on CUDA,
block-sparse PyTorch on CPU). ``full`` skips the layout and runs dense (SDPA / flash).
Keys before the segment (memory) are always visible; the pattern applies to the segment itself.
When the caller asks for the attention weights, the dense reference computes them (every
masked-out probability is exactly 0) and its output is used, so the logits are the same.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

import kernels

from .layout import ParamView, pattern_key, pattern_layout, pattern_mask

BLOCK = 64


def segment_mask(cfg, lq: int, prefix: int) -> torch.Tensor:
    """``[Lq, prefix + Lq]``: memory columns all visible, then the pattern of the segment."""
    pat = pattern_mask(cfg, lq)
    if prefix == 0:
        return pat
    return torch.cat([torch.ones(lq, prefix, dtype=torch.bool), pat], dim=1)


@lru_cache(maxsize=16)
def _layout_cached(attention, params, causal, lq, prefix, block):
    view = ParamView({**dict(params), "attention": attention, "causal": causal})
    return pattern_layout(view, lq, prefix, block)


def pattern_block_mask(cfg, lq: int, prefix: int = 0, block: int = BLOCK) -> kernels.BlockMask:
    """The memoised ``BlockMask`` of ``cfg``'s pattern for a segment of ``lq`` queries."""
    return _layout_cached(cfg.attention, pattern_key(cfg), bool(cfg.causal), int(lq), int(prefix), block)


class PatternAttention(nn.Module):
    """Softmax attention restricted to ``cfg.attention``'s pattern; no parameters of its own."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        lq, lk = q.shape[2], k.shape[2]
        prefix = lk - lq
        if ctx.need_weights:
            mask = None if cfg.attention == "full" else segment_mask(cfg, lq, prefix).to(q.device)
            out, probs = kernels.attention_ref(q, k, v, causal=cfg.causal, mask=mask, softcap=cfg.softcap, **mods)
            return out, probs, {}
        if cfg.attention == "full":
            out = kernels.attention(q, k, v, causal=cfg.causal, softcap=cfg.softcap, **mods)
        else:  # the layout already holds the causal AND
            bm = pattern_block_mask(cfg, lq, prefix).to(q.device)
            out = kernels.attention(q, k, v, block_mask=bm, softcap=cfg.softcap, **mods)
        return out, None, {}
