"""Induced set attention (Lee et al. 2019, "Set Transformer", ISAB), bidirectional only.

``m = n_inducing`` learned inducing points attend to the sequence, then the sequence attends to
what they gathered, in ``O(m L)`` instead of ``O(L^2)``. Per head (``d_h`` = head width, all
scores scaled by ``1/sqrt(d_h)``):

    A1 = softmax(I K^T)        [m, Lk]   I: the inducing points' queries, learned [h, m, d_h]
    H  = A1 V                  [m, d_h]  what each inducing point gathered
    A2 = softmax(Q (H W_k)^T)  [Lq, m]   W_k: learned [h, d_h, d_h], the keys of H
    out = A2 H = (A2 A1) V

so the effective attention ``A2 A1`` is exactly the matrix applied to ``V``; both factors are
row-stochastic, hence so is their product. The inducing points are learned directly in head space
(the paper's ``I`` through its query projection: the same family of functions with fewer
parameters). Deviation: the paper's MAB wraps ``H`` in a residual, LayerNorm and row-wise FFN
before the second attention; here ``H`` is used as gathered so that the layer stays one attention
whose map is ``A2 A1`` (the block's own residual and FFN follow as in every layer). ``softcap``
caps both score matrices. RoPE rotates the sequence's queries and keys; the inducing points carry
no position. Bidirectional only: every inducing point reads the whole sequence, so any position's
output depends on the future.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..variant import Variant
from .common import expand_kv


def _cap(s: torch.Tensor, softcap):
    return s if softcap is None else softcap * torch.tanh(s / softcap)


class InducedSetAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, m, d = cfg.n_heads, cfg.n_inducing, cfg.d_head
        bound = math.sqrt(6.0 / (m + d))  # Xavier-uniform per head, as the reference's I
        self.inducing = nn.Parameter(torch.empty(h, m, d).uniform_(-bound, bound))  # (h, m, d_h)
        bound = math.sqrt(6.0 / (2 * d))
        self.key_of_h = nn.Parameter(torch.empty(h, d, d).uniform_(-bound, bound))  # (h, d_h, d_h)

    def forward(self, q, k, v, mods, ctx):
        B, h, lq, d = q.shape
        work = torch.promote_types(q.dtype, torch.float32)
        scale = 1.0 / math.sqrt(d)
        k, v = expand_kv(k, h).to(work), expand_kv(v, h).to(work)  # (B, h, Lk, d_h)
        inducing = self.inducing.to(work)
        a1 = torch.softmax(_cap(torch.einsum("nmd,bnld->bnml", inducing, k) * scale, self.cfg.softcap), -1)
        gathered = a1 @ v  # (B, h, m, d_h)
        keys = torch.einsum("bnmd,nde->bnme", gathered, self.key_of_h.to(work))  # (B, h, m, d_h)
        a2 = torch.softmax(_cap(q.to(work) @ keys.transpose(-1, -2) * scale, self.cfg.softcap), -1)  # (B, h, Lq, m)
        out = (a2 @ gathered).to(q.dtype)
        probs = (a2 @ a1).to(q.dtype) if ctx.need_weights else None  # (B, h, Lq, Lk)
        return out, probs, {}


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}), memory_keys=False,
    refuses_because="has no (query, key) score for a position bias or relative vectors: queries meet keys "
                    "only through the inducing points, which have no position",
    causal_modes=frozenset({False}),
    causal_reason="it is bidirectional only (every inducing point summarises the whole sequence, future included)")

VARIANTS = (
    Variant("isab", "Lee et al. 2019 (Set Transformer, ISAB)",
            "n_inducing learned points attend to the sequence, then the sequence attends to them: O(m L).",
            build=InducedSetAttention, params=("n_inducing",), caps=CAPS,
            n_params=lambda c: c.n_heads * c.n_inducing * c.d_head + c.n_heads * c.d_head * c.d_head),
)
