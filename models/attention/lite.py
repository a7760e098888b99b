"""Long-Short Range Attention (Wu, Liu, Lin, Lin, Han 2020, "Lite Transformer", LSRA).

The channels split in two: the first ``h/2`` heads run softmax attention (global context; every
position modifier and the causal mask honoured, through ``kernels.attention`` on their slice of the
modifiers), the other ``h/2`` heads run a lightweight convolution over their values (local
context). The two halves are concatenated along the channels and go through the layer's output
projection.

The convolution is Wu et al. 2019's lightweight convolution: one kernel of width ``K =
conv_kernel`` per head, softmax-normalised over its taps and shared by the head's ``d_h``
channels (depthwise, weight-shared). Causal: taps at ``i-K+1 .. i``; bidirectional: ``i-K//2 ..
i-K//2+K-1``. At the sequence edges the taps that fall outside are dropped and the remaining
weights renormalised, so each output is a weighted mean of its neighbours' values and the branch
is exactly a banded attention matrix whose rows sum to 1 (fairseq zero-pads instead; our edge
rows would otherwise not sum to 1).

Effective attention (display): the attention heads show their softmax map, the convolution heads
the banded matrix they apply; the layer also records the convolution taps (softmax of each kernel)
and the convolution heads' share of every position's squared output norm (``LayerInfo.conv_taps``,
``conv_share``). Deviations: the convolution branch reads the layer's value
projection of its heads (the paper has its own input projection with a GLU), and the query / key
projections of the convolution heads are left unused (zero gradient), which keeps the layer's
Q/K/V projections shared with every other mechanism.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from ..capabilities import AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import check_no_memory, expand_kv

CONV_KERNEL = Param("conv_kernel", int, 7, range=(1, 1024), cap=63)  # the convolution branch's width


def head_mods(mods: dict, heads: slice, n_heads: int) -> dict:
    """The position modifiers of a subset of query heads (per-head tables sliced, shared ones kept)."""
    out = {}
    for name, t in mods.items():
        per_head = isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == n_heads  # else shared (1, ...)
        out[name] = t[heads] if per_head else t
    return out


class LiteAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.n_attn = cfg.n_heads // 2
        self.kernel = nn.Parameter(torch.randn(cfg.n_heads - self.n_attn, cfg.conv_kernel) * 0.1)  # (h/2, K)

    def offsets(self) -> int:
        """Left padding: taps cover ``i - pad .. i - pad + K - 1``."""
        K = self.cfg.conv_kernel
        return K - 1 if self.cfg.causal else K // 2

    def conv(self, v: torch.Tensor) -> torch.Tensor:
        """``v [B, hc, L, d]`` -> the renormalised lightweight convolution ``[B, hc, L, d]``."""
        B, hc, L, d = v.shape
        K, pad = self.cfg.conv_kernel, self.offsets()
        w = torch.softmax(self.kernel.float(), -1).to(v.dtype)  # (hc, K)
        x = v.permute(0, 1, 3, 2).reshape(B, hc * d, L)  # (B, hc * d, L): one channel per (head, dim)
        ker = w.repeat_interleave(d, 0).unsqueeze(1)  # (hc * d, 1, K)
        y = F.conv1d(F.pad(x, (pad, K - 1 - pad)), ker, groups=hc * d)  # (B, hc * d, L)
        ones = F.pad(torch.ones(1, hc, L, dtype=v.dtype, device=v.device), (pad, K - 1 - pad))
        norm = F.conv1d(ones, w.unsqueeze(1), groups=hc)  # (1, hc, L): weight of the in-range taps
        y = y.view(B, hc, d, L) / norm.unsqueeze(2)
        return y.permute(0, 1, 3, 2)  # (B, hc, L, d)

    def conv_matrix(self, L: int, device) -> torch.Tensor:
        """``[hc, L, L]``: the banded matrix the convolution applies (rows sum to 1)."""
        K, pad = self.cfg.conv_kernel, self.offsets()
        w = torch.softmax(self.kernel.float(), -1)  # (hc, K)
        i, j = torch.arange(L, device=device)[:, None], torch.arange(L, device=device)[None, :]
        tap = j - i + pad  # (L, L)
        inside = (tap >= 0) & (tap < K)
        m = torch.where(inside, w[:, tap.clamp(0, K - 1)], 0.0)  # (hc, L, L)
        return m / m.sum(-1, keepdim=True)

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        a = slice(0, self.n_attn)
        k, v = expand_kv(k, h), expand_kv(v, h)  # (B, h, L, d_h)
        qa, ka, va = q[:, a], k[:, a], v[:, a]
        amods = head_mods(mods, a, h)
        if ctx.need_weights:
            out_a, p_a = kernels.attention_ref(qa, ka, va, causal=cfg.causal, softcap=cfg.softcap, **amods)
        else:
            out_a = kernels.attention(qa, ka, va, causal=cfg.causal, softcap=cfg.softcap, **amods)
        out_c = self.conv(v[:, self.n_attn :])
        out = torch.cat([out_a, out_c.to(out_a.dtype)], dim=1)  # (B, h, L, d_h)
        probs, aux = None, {}
        if ctx.need_weights:
            conv = self.conv_matrix(L, q.device).to(p_a.dtype).unsqueeze(0).expand(B, -1, -1, -1)
            probs = torch.cat([p_a, conv], dim=1)  # (B, h, L, L)
            aux = {"conv_taps": torch.softmax(self.kernel.detach().float(), -1), "conv_share": conv_share(out_a, out_c)}
        return out, probs, aux


def conv_share(out_a: torch.Tensor, out_c: torch.Tensor) -> torch.Tensor:
    """``(B, L)``: the convolution heads' share of each position's squared output norm (before the
    output projection). The halves are concatenated, so ``|out|^2 = |out_a|^2 + |out_c|^2`` and the
    attention share is ``1 -`` this one (an all-zero output counts as half and half)."""
    ea = out_a.detach().float().pow(2).sum(dim=(1, 3))  # (B, L) over the attention heads and d_h
    ec = out_c.detach().float().pow(2).sum(dim=(1, 3))  # (B, L) over the convolution heads
    return torch.where(ea + ec > 0, ec / (ea + ec).clamp_min(1e-30), 0.5)


def check(cfg) -> None:
    if cfg.n_heads < 2 or cfg.n_heads % 2:
        raise ConfigError(
            "n_heads", cfg.n_heads, "an even number >= 2 with attention='lite': half the heads attend, half convolve"
        )
    check_no_memory(
        cfg, "lite attention", "convolves over the segment's own positions, which a memory prefix would not extend"
    )


CAPS = AttentionCaps(memory_keys=False)

VARIANTS = (
    Variant(
        "lite",
        "Wu et al. 2020 (Lite Transformer, LSRA)",
        "Half the heads attend (long range), half run a lightweight convolution of width conv_kernel (short range).",
        build=LiteAttention,
        params=(CONV_KERNEL,),
        check=check,
        caps=CAPS,
        n_params=lambda c: (c.n_heads - c.n_heads // 2) * c.conv_kernel,
    ),
)
