"""Transformer-XL's relative position term: ``xl`` (Dai et al. 2019, "Transformer-XL: Attentive
Language Models Beyond a Fixed-Length Context").

The score is ``(q_i + u) . k_j + (q_i + v) . W_R r_(i-j)``, all times the attention scale, with
``r`` the sinusoid of the distance, ``W_R`` per layer and the global biases ``u, v`` shared by all
layers (as in the paper). It reaches ``kernels.attention`` as ``rel_k`` and ``rel_bias``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import RELATIVE_KV, SCORE_BIAS, PositionCaps
from ..variant import Variant
from .absolute import sinusoid
from .base import INIT_STD, NoPosition, relative_range


class TransformerXL(NoPosition):
    """``(q_i + u) . k_j + (q_i + v) . W_R r_(i-j)``, all times the attention scale.

    Written for the kernel as ``q' = q + u``, ``rel_k[h, rel + Lk - 1] = (W_R r_(-rel))_h`` and
    ``rel_bias = scale * (v - u)_h . rel_k``, since ``(q+u).R + (v-u).R = (q+v).R``.
    ``u, v`` are shared by all layers (as in the paper); ``W_R`` is per layer.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.d_model, self.n_heads, self.d_head = cfg.d_model, cfg.n_heads, cfg.d_head
        self.u = nn.Parameter(torch.randn(cfg.n_heads, cfg.d_head) * INIT_STD)
        self.v = nn.Parameter(torch.randn(cfg.n_heads, cfg.d_head) * INIT_STD)
        self.w_r = nn.ModuleList(
            [nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False) for _ in range(cfg.n_layers)]
        )

    def modify(self, q, k, layer, k_start=0, scale=None):
        lk, d_h = k.shape[2], q.shape[-1]
        scale = 1.0 / math.sqrt(d_h) if scale is None else scale
        w = self.w_r[layer].weight
        dist = -relative_range(lk, q.device)  # i - j for each table row
        r = sinusoid(dist, self.d_model, w.dtype)  # (2Lk-1, d)
        rel_k = self.w_r[layer](r).view(2 * lk - 1, self.n_heads, self.d_head).transpose(0, 1)  # (h, 2Lk-1, d_h)
        rel_bias = scale * torch.einsum("hd,hrd->hr", self.v - self.u, rel_k)  # (h, 2Lk-1)
        q = q + self.u[None, :, None, :].to(q.dtype)  # (B, h, Lq, d_h)
        return q, k, {"rel_k": rel_k, "rel_bias": rel_bias}


VARIANTS = (
    Variant(
        "xl",
        "Dai et al. 2019 (Transformer-XL)",
        "Relative sinusoids projected per layer, with learned global content and position biases u, v.",
        build=TransformerXL,
        caps=PositionCaps(produces=frozenset({SCORE_BIAS, RELATIVE_KV}), relative=True),
        n_params=lambda c: 2 * c.n_heads * c.d_head + c.n_layers * c.d_model * c.n_heads * c.d_head,
    ),
)
