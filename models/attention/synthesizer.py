"""Synthesizer attention: Tay, Bahri, Metzler, Juan, Zhao & Zheng 2021, "Synthesizer: Rethinking
Self-Attention in Transformer Models".

The attention logits are *synthesized* instead of formed by a query-key dot product:

- ``synthesizer_dense``: per head, ``B_i = W2 relu(W1 x_i + b1) + b2`` with ``W2`` of width
  ``max_len`` (one logit per key position, sliced to the first ``L``). The paper feeds the layer
  input ``x_i`` (``d_model`` wide) to ``W1``; the attention core only sees the projected heads, so
  here ``x_i`` is the head's query projection ``q_i = W_q^h x_i`` (``d_h`` wide). This is the same
  function class with ``W1`` factored through rank ``d_h`` (``W1 W_q^h``), and it adds no
  per-layer ``d_model``-wide weights; the key projection is unused.
- ``synthesizer_random``: a ``[h, max_len, max_len]`` logits matrix ``R`` independent of the input,
  learned (default) or a fixed buffer (``synthesizer_fixed=True``, the paper's "fixed random"
  variant), initialised N(0, 1) from the model seed. Query and key projections are unused.

Both: ``softmax(logits)`` (causal: keys ``j > i`` masked out), times ``V``; the effective attention is
exactly that softmax. There is no ``q . k``, so no score modifier of a position encoding can be
honoured (rope's relative property lives in ``q . k``): position information comes from an absolute
encoding added to the embeddings (``sinusoidal`` / ``learned``), as in the paper, or from the
position-indexed ``R`` and ``W2`` themselves. Inputs longer than ``max_len`` raise ``ConfigError``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG, expand_kv

SYNTHESIZER_FIXED = Param("synthesizer_fixed", bool, False)

_SALT = 0x5E7A
MAX_RANDOM = 1 << 26  # entries of R per layer (256 MiB in fp32): a buffer, so MAX_PARAMS does not bound it


def _check_len(cfg, L: int) -> None:
    if L > cfg.max_len:
        raise ConfigError(
            "max_len",
            cfg.max_len,
            f"an integer >= {L}: {cfg.attention} synthesizes one logit per key position up to "
            f"max_len={cfg.max_len} but the input has {L} positions; raise max_len or shorten the input",
        )


def _attend(logits: torch.Tensor, v: torch.Tensor, cfg, need_weights: bool):
    """``logits [B or 1, h, L, L]`` -> softmax (causal-masked, soft-capped) times ``v [B, h, L, d_h]``."""
    L = logits.shape[-1]
    if cfg.softcap is not None:
        logits = cfg.softcap * torch.tanh(logits / cfg.softcap)
    if cfg.causal:
        future = torch.ones(L, L, dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(future, NEG)
    work = torch.promote_types(v.dtype, torch.float32)  # at least fp32, float64 kept
    p = torch.softmax(logits.to(work), dim=-1)
    out = (p @ v.to(work)).to(v.dtype)  # (B, h, L, d_h)
    probs = p.expand(v.shape[0], -1, -1, -1).to(v.dtype).contiguous() if need_weights else None  # own memory per row
    return out, probs


class DenseSynthesizer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, dh, n = cfg.n_heads, cfg.d_head, cfg.max_len
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT)
        # nn.Linear's default init (uniform +-1/sqrt(fan_in)) per head
        self.w1 = nn.Parameter((torch.rand(h, dh, dh, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.b1 = nn.Parameter((torch.rand(h, dh, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.w2 = nn.Parameter((torch.rand(h, dh, n, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.b2 = nn.Parameter((torch.rand(h, n, generator=gen) * 2 - 1) / math.sqrt(dh))

    def forward(self, q, k, v, mods, ctx):
        B, h, L, d = q.shape
        _check_len(self.cfg, L)
        v = expand_kv(v, h)
        w1, b1, w2, b2 = (p.to(q.dtype) for p in (self.w1, self.b1, self.w2, self.b2))
        hidden = torch.relu(torch.einsum("bhld,hde->bhle", q, w1) + b1[:, None])  # (B, h, L, d_h)
        logits = torch.einsum("bhle,hen->bhln", hidden, w2[:, :, :L]) + b2[:, None, :L]  # (B, h, L, L)
        out, probs = _attend(logits, v, self.cfg, ctx.need_weights)
        return out, probs, {}


class RandomSynthesizer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT + 1)
        r = torch.randn(cfg.n_heads, cfg.max_len, cfg.max_len, generator=gen)  # (h, max_len, max_len)
        if cfg.synthesizer_fixed:
            self.register_buffer("R", r)
        else:
            self.R = nn.Parameter(r)

    def forward(self, q, k, v, mods, ctx):
        B, h, L, d = q.shape
        _check_len(self.cfg, L)
        v = expand_kv(v, h)
        logits = self.R[None, :, :L, :L]  # (1, h, L, L): the same for every input
        out, probs = _attend(logits, v, self.cfg, ctx.need_weights)
        return out, probs, {}


def check_random(cfg) -> None:
    if cfg.n_heads * cfg.max_len**2 > MAX_RANDOM:
        raise ConfigError(
            "max_len",
            cfg.max_len,
            f"an integer <= {math.isqrt(MAX_RANDOM // cfg.n_heads)} with attention='synthesizer_random' "
            f"and n_heads={cfg.n_heads}: R holds n_heads * max_len^2 logits per layer "
            f"(limit {MAX_RANDOM})",
        )


CAPS = AttentionCaps(
    accepts=frozenset(),
    memory_keys=False,
    refuses_because=(
        "synthesizes its logits without a query-key dot product, so there is nothing to rotate, bias or add "
        "relative vectors to (use an absolute encoding: sinusoidal or learned, as the paper)"
    ),
)

VARIANTS = (
    Variant(
        "synthesizer_dense",
        "Tay et al. 2021 (Synthesizer, dense)",
        "Each token synthesizes its own row of attention logits over max_len positions with a two-layer MLP: "
        "no query-key dot product.",
        build=DenseSynthesizer,
        params=("max_len",),
        caps=CAPS,
        n_params=lambda c: c.n_heads * (c.d_head * c.d_head + c.d_head + c.d_head * c.max_len + c.max_len),
    ),
    Variant(
        "synthesizer_random",
        "Tay et al. 2021 (Synthesizer, random)",
        "A learned (or fixed) random attention matrix per head, the same for every input: attention "
        "without looking at the tokens.",
        build=RandomSynthesizer,
        params=("max_len", SYNTHESIZER_FIXED),
        check=check_random,
        caps=CAPS,
        n_params=lambda c: 0 if c.synthesizer_fixed else c.n_heads * c.max_len * c.max_len,
    ),
)
