"""Attention that reads the previous layer's attention: RealFormer and predictive attention priors.

``realformer`` (He, Ravula, Kanagal, Ainslie 2020, "RealFormer: Transformer Likes Residual
Attention"): each layer's pre-softmax scores are its own scores plus the previous layer's
pre-softmax scores, ``S_l = Q_l K_l^T / sqrt(d_h) + S_(l-1)``, so the residual accumulates over
the stack; the first layer is plain. "Scores" means everything before the softmax: position
biases (T5, ALiBi) and softcap included, so they accumulate too, exactly as the paper's ``Prev``.

``predictive_attention`` (Wang et al. 2021, "Predictive Attention Transformer: Improving
Transformer with Attention Map Prediction"): the previous layer's attention maps, as an image with
``h`` channels, go through a 2-D convolution (``h -> h`` channels, 3 x 3, with bias) and are mixed
into the current scores with a learned weight ``alpha = sigmoid(a)`` (``a = 0`` at init, so 0.5):
``S_l = alpha * Conv(P_(l-1)) + (1 - alpha) * Q_l K_l^T / sqrt(d_h)``; the first layer is plain.
Bidirectional: the kernel is centred (zero padding 1 on every side). Causal: the kernel covers
rows ``i-2 .. i`` (zero padding 2 above the map, none below), so row ``i`` reads only earlier
queries' maps and the model never sees the future; columns ``j-1 .. j+1`` are harmless since the
previous map is exactly 0 right of the diagonal. Deviations: the paper's mixing weight is a fixed
hyper-parameter; the task asks for a learned one, and the paper's first layer also has no
previous map.

The previous layer's scores / maps travel in the ``ForwardContext`` of the pass
(``prev_scores``, ``prev_probs``), never on a module. Both need a plain stack of blocks
(``layer="standard"``) and no memory: see ``check``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..capabilities import AttentionCaps
from ..errors import ConfigError
from ..variant import Variant
from .common import check_no_memory
from .scores import allowed_pairs, attend, dense_scores, masked_softmax

KERNEL = 3


def prior_share(prior, own: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``(B, h)``: ``|prior| / (|prior| + |own|)`` (Frobenius norms over the allowed pairs) of the two
    terms of a layer's scores, detached, for the views; 0 for the first layer (no prior)."""
    own = own.detach().float().masked_fill(~allowed, 0.0)
    n_own = own.square().sum((-1, -2)).sqrt()  # (B, h)
    if prior is None:
        return torch.zeros_like(n_own)
    n_prior = prior.detach().float().masked_fill(~allowed, 0.0).square().sum((-1, -2)).sqrt()
    return n_prior / (n_prior + n_own).clamp_min(1e-30)


def _carried(ctx, name: str, like: torch.Tensor):
    """The previous layer's tensor, or None for the first layer (or a mismatched shape)."""
    prev = getattr(ctx, name)
    if prev is None:
        return None
    if prev.shape != like.shape:
        raise ConfigError(
            "attention",
            "(previous layer shape)",
            f"layers of one pass with the same keys: got {tuple(prev.shape)} then {tuple(like.shape)}",
        )
    return prev


class RealFormerAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        lq, lk = q.shape[2], k.shape[2]
        s = dense_scores(q, k, mods, self.cfg.softcap)  # (B, h, Lq, Lk)
        prev = _carried(ctx, "prev_scores", s)
        allowed = allowed_pairs(lq, lk, self.cfg.causal, q.device)
        share = prior_share(prev, s, allowed)
        if prev is not None:
            s = s + prev
        ctx.prev_scores = s  # unmasked: masked pairs are masked again in every layer
        p = masked_softmax(s, allowed)
        out = attend(p, v, mods).to(q.dtype)
        return out, (p.to(q.dtype) if ctx.need_weights else None), {"prior_share": share}


class PredictiveAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.conv = nn.Conv2d(cfg.n_heads, cfg.n_heads, KERNEL)  # PyTorch's default init
        self.alpha = nn.Parameter(torch.zeros(()))  # sigmoid(0) = 0.5

    def predict(self, prev: torch.Tensor) -> torch.Tensor:
        """``Conv(P_(l-1))`` with the padding that keeps it causal when the model is."""
        r = KERNEL // 2
        pad = (r, r, KERNEL - 1, 0) if self.cfg.causal else (r, r, r, r)  # (left, right, top, bottom)
        w = self.conv.weight.dtype
        return self.conv(F.pad(prev, pad).to(w)).to(prev.dtype)  # (B, h, Lq, Lk)

    def forward(self, q, k, v, mods, ctx):
        lq, lk = q.shape[2], k.shape[2]
        s = dense_scores(q, k, mods, self.cfg.softcap)  # (B, h, Lq, Lk)
        prev = _carried(ctx, "prev_probs", s)
        allowed = allowed_pairs(lq, lk, self.cfg.causal, q.device)
        aux = {"prior_share": prior_share(None, s, allowed)}
        if prev is not None:
            a = torch.sigmoid(self.alpha)
            prior, own = a.to(s.dtype) * self.predict(prev.to(s.dtype)), (1 - a.to(s.dtype)) * s
            s = prior + own
            aux = {"prior_share": prior_share(prior, own, allowed), "prior_alpha": a.detach()}
        p = masked_softmax(s, allowed)
        ctx.prev_probs = p
        out = attend(p, v, mods).to(q.dtype)
        return out, (p.to(q.dtype) if ctx.need_weights else None), aux


def check_layer_to_layer(cfg, what: str) -> None:
    """Mechanisms that hand ``what`` from one layer to the next inside one pass (through the context)."""
    if cfg.layer != "standard":
        raise ConfigError(
            "layer",
            cfg.layer,
            f"'standard' with attention={cfg.attention!r}: it reads {what} inside one pass, which needs a plain "
            "stack of blocks (a reversible stack recomputes layers in backward without it; universal, gated and "
            "early-exit stacks change what the previous layer is)",
        )
    check_no_memory(cfg, f"{cfg.attention} attention", f"reads {what}, and a memory gives every layer its own keys")


def check(cfg) -> None:
    check_layer_to_layer(cfg, "the previous layer's attention")


CAPS = AttentionCaps(memory_keys=False)

VARIANTS = (
    Variant(
        "realformer",
        "He et al. 2020 (RealFormer)",
        "Residual attention: each layer's pre-softmax scores add the previous layer's scores.",
        build=RealFormerAttention,
        check=check,
        caps=CAPS,
        surgery=True,
    ),
    Variant(
        "predictive_attention",
        "Wang et al. 2021 (Predictive Attention Transformer)",
        "A 3x3 convolution over the previous layer's attention maps, mixed into the scores with a learned weight.",
        build=PredictiveAttention,
        check=check,
        caps=CAPS,
        n_params=lambda c: c.n_heads * c.n_heads * KERNEL * KERNEL + c.n_heads + 1,
    ),
)
