"""Talking-heads attention (Shazeer, Lan, Cheng, Ding, Hou 2020, "Talking-Heads Attention").

Full softmax attention whose heads exchange information on both sides of the softmax:

    S'_n = sum_m W_logits[n, m] S_m          (S_m: head m's scores [Lq, Lk], every modifier added)
    P_n  = softmax(S'_n)                     (masked: causal, as the dense path)
    W'_n = sum_m W_weights[n, m] P_m         (the weights actually applied to the values)
    out_n = W'_n V_n (+ W'_n rel_v)

One ``[h, h]`` pair per layer (the paper's ``h_k = h = h_v`` case). Both matrices start as the
identity, so a freshly built model computes exactly full softmax attention and the mixing is
learned from there (the paper does not fix an initialiser; identity keeps every existing
comparison with ``full`` meaningful at initialisation). Mixing the unmasked scores is safe because
the mask is the same for every head; masked pairs get probability 0 in every ``P_m`` and so in ``W'``.

Effective attention (display): ``W'``, the matrix applied to the values. Its rows sum to
``sum_m W_weights[n, m]`` (1 at initialisation), not to 1 in general: the paper's post-softmax
mixing is not renormalised.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capabilities import AttentionCaps
from ..variant import Variant
from .scores import allowed_pairs, attend, dense_scores, masked_softmax


class TalkingHeadsAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h = cfg.n_heads
        self.mix_logits = nn.Parameter(torch.eye(h))  # (h, h): [new head, old head]
        self.mix_weights = nn.Parameter(torch.eye(h))

    def forward(self, q, k, v, mods, ctx):
        lq, lk = q.shape[2], k.shape[2]
        s = dense_scores(q, k, mods, self.cfg.softcap)  # (B, h, Lq, Lk)
        s = torch.einsum("nm,bmij->bnij", self.mix_logits.to(s.dtype), s)
        p = masked_softmax(s, allowed_pairs(lq, lk, self.cfg.causal, q.device))
        w = torch.einsum("nm,bmij->bnij", self.mix_weights.to(p.dtype), p)  # (B, h, Lq, Lk)
        out = attend(w, v, mods).to(q.dtype)
        mix = torch.stack([self.mix_logits, self.mix_weights]).detach()  # (2, h, h) for the views
        return out, (w.to(q.dtype) if ctx.need_weights else None), {"head_mix": mix}


VARIANTS = (
    Variant(
        "talking_heads",
        "Shazeer et al. 2020 (Talking-Heads Attention)",
        "Full softmax attention whose heads are mixed by learned [h, h] matrices before and after the softmax.",
        build=TalkingHeadsAttention,
        caps=AttentionCaps(),
        n_params=lambda c: 2 * c.n_heads * c.n_heads,
    ),
)
