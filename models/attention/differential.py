"""Differential attention, ``differential`` (Ye, Dong, Xia, Sun, Zhu, Huang, Wei 2025, "Differential
Transformer", ICLR 2025).

Each head's attention is the difference of two softmax maps, which cancels the attention both maps give
to irrelevant context ("attention noise"):

    [Q1, Q2] = Q,  [K1, K2] = K                 each head's query and key split into halves of d = d_h / 2
    A = softmax(Q1 K1^T / sqrt(d)) - lambda * softmax(Q2 K2^T / sqrt(d))
    lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init
    lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))   for layer l = 1 .. n_layers
    head = (1 - lambda_init) * RMSNorm(A V)     V: the head's full d_h values (the paper's 2d)

Width mapping (the explorer keeps ``d_model`` and ``n_heads``): the paper's head of dimension ``d`` has
queries and keys of ``2d`` and values of ``2d``; here the head width ``d_h`` (``head_dim``, by default
``d_model / n_heads``) plays ``2d``, so Q1, K1 are the first ``d_h / 2`` numbers of a head's query / key
and Q2, K2 the last, the values are the head's ``d_h`` numbers, and the paper's "half the heads of a Transformer
of the same width" is ``n_heads`` of this model
(the official code's layout: its queries viewed as ``2h`` heads of ``d``, head ``n``'s halves at ``2n, 2n+1``).
``lq1, lk1, lq2, lk2``: learned vectors of ``d`` per layer, shared by the heads, drawn from N(0, 0.1^2) as
the official code does; the RMSNorm (the paper's GroupNorm over heads) is one learned gain of ``d_h`` applied
to each head's output (eps 1e-5). RoPE rotates each half as a head of ``d`` (``rotary_parts = 2``), as the
official code rotates its ``2h`` half-heads. GQA: query head ``n`` reads K/V head ``n // (h / h_kv)`` and
splits that head's key into K1, K2 (the official code repeats its half-heads instead; the same for MHA).
``lambda_init`` uses the sublayer's layer index (``layer_index``): a universal stack's shared layer is layer 1.

The effective attention the views show is ``A``: it has negative weights and its rows sum to ``1 - lambda``
(``rows_sum_to_one=False``); it is what multiplies ``V`` (before the per-head norm). Without maps, the two
softmax products ``softmax(Q_i K_i^T / sqrt(d)) V`` run through the shared kernels (``kernels.attention``: the
Triton flash kernel on CUDA, SDPA or the block-sparse PyTorch path on a CPU; GQA in the kernel), the halves
``d`` zero-padded to the common kernel width of ``d`` and ``d_h`` (``padded.py``) with the explicit scale
``1 / sqrt(d)``; the lambda combination and the norm stay in PyTorch. With maps (``need_weights``) the two score
matrices are formed in dense PyTorch, at least in float32.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Variant
from .common import expand_kv
from .padded import padded_attention
from .scores import allowed_pairs, masked_softmax

LAMBDA_STD = 0.1  # the official initialisation of lq1, lk1, lq2, lk2
NORM_EPS = 1e-5  # the official sub-layer RMSNorm's epsilon


def lambda_init(layer: int) -> float:
    """``0.8 - 0.6 exp(-0.3 (l - 1))`` for the 0-based ``layer`` (``l = layer + 1``)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


class DifferentialAttention(nn.Module):
    def __init__(self, cfg, layer: int = 0):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        d = cfg.d_head // 2
        self.lambda_init = lambda_init(layer)
        self.lambda_q1 = nn.Parameter(torch.empty(d).normal_(0.0, LAMBDA_STD))
        self.lambda_k1 = nn.Parameter(torch.empty(d).normal_(0.0, LAMBDA_STD))
        self.lambda_q2 = nn.Parameter(torch.empty(d).normal_(0.0, LAMBDA_STD))
        self.lambda_k2 = nn.Parameter(torch.empty(d).normal_(0.0, LAMBDA_STD))
        self.subln = nn.RMSNorm(cfg.d_head, eps=NORM_EPS)

    def lam(self) -> torch.Tensor:
        """``lambda`` (a scalar tensor)."""
        l1 = torch.exp((self.lambda_q1 * self.lambda_k1).sum())
        l2 = torch.exp((self.lambda_q2 * self.lambda_k2).sum())
        return l1 - l2 + self.lambda_init

    def forward(self, q, k, v, mods, ctx):
        """``q (B, h, Lq, d_h)``, ``k, v (B, h_kv, Lk, d_h)`` -> ``(B, h, Lq, d_h)``; without maps through the
        shared kernels, with them dense."""
        if not ctx.need_weights:
            return self._kernel_forward(q, k, v), None, {}
        return self._dense_forward(q, k, v, ctx)

    def _kernel_forward(self, q, k, v) -> torch.Tensor:
        """``A V = softmax(Q1 K1^T / sqrt(d)) V - lambda softmax(Q2 K2^T / sqrt(d)) V``: two calls of
        ``kernels.attention`` (Triton on CUDA, SDPA / block-sparse PyTorch on a CPU) with the same full-width
        ``V`` (half-width queries and keys zero-padded to a common kernel width, ``padded.py``; GQA in the
        kernel), the lambda combination and the per-head norm in PyTorch (at least float32)."""
        cfg = self.cfg
        dh = q.shape[-1]
        d, dtype = dh // 2, q.dtype
        acc = torch.promote_types(dtype, torch.float32)
        o1, o2 = (
            padded_attention(
                q[..., part], k[..., part], v, scale=1.0 / math.sqrt(d), causal=cfg.causal, softcap=cfg.softcap
            ).to(acc)
            for part in (slice(0, d), slice(d, dh))
        )
        av = o1 - self.lam().to(acc) * o2  # (B, h, Lq, d_h)
        return (self.subln(av.to(self.subln.weight.dtype)) * (1.0 - self.lambda_init)).to(dtype)

    def _dense_forward(self, q, k, v, ctx):
        """The output and the map ``A`` in dense PyTorch (at least float32), for the views."""
        cfg = self.cfg
        B, h, lq, dh = q.shape
        lk, d = k.shape[2], dh // 2
        dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(acc), expand_kv(k, h).to(acc), expand_kv(v, h).to(acc)  # (B, h, L*, d_h)
        allowed = allowed_pairs(lq, lk, cfg.causal, q.device)
        maps = []
        for part in (slice(0, d), slice(d, dh)):  # (Q1, K1), then (Q2, K2)
            s = q[..., part] @ k[..., part].transpose(-1, -2) * (1.0 / math.sqrt(d))  # (B, h, Lq, Lk)
            if cfg.softcap is not None:
                s = cfg.softcap * torch.tanh(s / cfg.softcap)
            maps.append(masked_softmax(s, allowed))
        lam = self.lam().to(acc)
        a = maps[0] - lam * maps[1]  # (B, h, Lq, Lk): rows sum to 1 - lambda
        out = self.subln((a @ v).to(self.subln.weight.dtype)) * (1.0 - self.lambda_init)  # (B, h, Lq, d_h)
        return out.to(dtype), a.to(dtype), {}


def _width_field(cfg) -> tuple:
    """The field that sets the head width: ``head_dim`` when given, else ``d_model`` (``d_model / n_heads``)."""
    return ("d_model", cfg.d_model) if cfg.head_dim is None else ("head_dim", cfg.head_dim)


def check(cfg) -> None:
    if cfg.d_head % 2:
        raise ConfigError(
            *_width_field(cfg),
            f"a head width d_head = {cfg.d_head} that is even with attention='differential' "
            "(each head's query and key split into two halves)",
        )
    if cfg.position == "rope" and cfg.d_head % 4:
        raise ConfigError(
            *_width_field(cfg),
            f"a head width d_head = {cfg.d_head} divisible by 4 with attention='differential' and "
            "position='rope' (each half-head of d_h / 2 is rotated in pairs)",
        )


VARIANTS = (
    Variant(
        "differential",
        "Ye et al. 2025 (Differential Transformer)",
        "Each head's attention is the difference of two softmax maps, lambda-weighted, then a per-head RMSNorm.",
        build=DifferentialAttention,
        params=("causal", "softcap"),
        check=check,
        caps=AttentionCaps(
            accepts=frozenset({ROTARY}),
            refuses_because="forms two softmax maps from half-width queries and keys, which the paper defines "
            "with rotary positions only",
            rotary_parts=2,
            layer_index=True,
            rows_sum_to_one=False,
        ),
        n_params=lambda c: 4 * (c.d_head // 2) + c.d_head,
    ),
)
