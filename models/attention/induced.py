"""Attention through a short learned sequence: ISAB (Set Transformer) and Luna, bidirectional only.

``isab``: induced set attention (Lee et al. 2019, "Set Transformer", ISAB).

``m = n_inducing`` learned inducing points attend to the sequence, then the sequence attends to
what they gathered, in ``O(m L)`` instead of ``O(L^2)``. Per head (``d_h`` = head width, all
scores scaled by ``1/sqrt(d_h)``):

    A1 = softmax(I K^T)        [m, Lk]   I: the inducing points' queries, learned [h, m, d_h]
    H  = A1 V                  [m, d_h]  what each inducing point gathered
    A2 = softmax(Q (H W_k)^T)  [Lq, m]   W_k: learned [h, d_h, d_h], the keys of H
    out = A2 H = (A2 A1) V

so the effective attention ``A2 A1`` is exactly the matrix applied to ``V``; both factors are
row-stochastic, hence so is their product. With weights requested the layer also records both
steps (``LayerInfo.induced_pack`` = ``A1``, ``induced_unpack`` = ``A2``) for the explorer's view. The inducing points
are learned directly in head space (the paper's ``I`` through its query projection: the same family of functions with
fewer parameters). Deviation: the paper's MAB wraps ``H`` in a residual, LayerNorm and row-wise FFN
before the second attention; here ``H`` is used as gathered so that the layer stays one attention
whose map is ``A2 A1`` (the block's own residual and FFN follow as in every layer). ``softcap``
caps both score matrices. RoPE rotates the sequence's queries and keys; the inducing points carry
no position. Bidirectional only: every inducing point reads the whole sequence, so any position's
output depends on the future.

``luna`` (Ma et al. 2021, "Luna: Linear Unified Nested Attention"): the same pack / unpack, but the
short sequence ``P [m, d]`` (``d = n_heads * d_h``, the heads' concatenated width) is carried from layer
to layer (through the forward context):

    Y_P = softmax((P W_q) K^T) V      pack   (per head, P W_q split into heads; W_q learned [d, d])
    out = softmax(Q (Y_P W_k)^T) Y_P  unpack (W_k learned [d, d] on the heads of Y_P concatenated)
    P'  = LayerNorm(Y_P + P)          the next layer's packed sequence

The first layer's ``P`` is a learned ``[m, d]`` table (normal, std ``d^-1/2``). Effective
attention ``A2 A1`` as for ISAB. Deviations: the unpack reads ``Y_P`` itself as values (the paper
projects them, and the pack attention's output projection is left out), so the map is exactly the
matrix applied to ``V``; the core is built without its layer index, so every layer owns an initial
table and only the first layer of a pass reads its own (the others receive no gradient). Causal
models are refused: the paper's causal Luna packs a separate context for every prefix (with an
activation in place of the unpack softmax), a different mechanism not built here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..variant import Param, Variant
from .common import expand_kv
from .residual import check_layer_to_layer

N_INDUCING = Param("n_inducing", int, 16, range=(1, 4096), cap=256)  # a learned n_inducing x d table per layer


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
        k, v = expand_kv(k, h).to(work), expand_kv(v, h).to(work)  # (B, h, Lk, d_h)
        queries = self.inducing.to(work).expand(B, -1, -1, -1)  # (B, h, m, d_h)
        key_of = lambda g: g @ self.key_of_h.to(work)  # noqa: E731  (B, h, m, d_h) @ (h, d_h, d_h)
        out, _, a1, a2 = _packed_attention(q.to(work), k, v, queries, key_of, self.cfg.softcap)
        return out.to(q.dtype), *_display(a1, a2, q.dtype, ctx)


def _display(a1, a2, dtype, ctx):
    """``(probs, aux)``: the effective map ``A2 A1`` and both steps, only when weights are requested."""
    if not ctx.need_weights:
        return None, {}
    probs = (a2 @ a1).to(dtype)  # (B, h, Lq, Lk)
    return probs, {"induced_pack": a1.detach(), "induced_unpack": a2.detach()}  # (B, h, m, Lk), (B, h, Lq, m)


def _packed_attention(q, k, v, queries, key_of, softcap):
    """Pack then unpack: ``queries [B, h, m, d_h]`` read ``k, v``; ``q`` reads what they gathered.

    ``key_of`` maps the gathered ``[B, h, m, d_h]`` to their keys. Returns ``(out, gathered, a1, a2)``.
    """
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    a1 = torch.softmax(_cap(queries @ k.transpose(-1, -2) * scale, softcap), -1)  # (B, h, m, Lk)
    gathered = a1 @ v  # (B, h, m, d_h)
    a2 = torch.softmax(_cap(q @ key_of(gathered).transpose(-1, -2) * scale, softcap), -1)  # (B, h, Lq, m)
    return a2 @ gathered, gathered, a1, a2


def _heads(x: torch.Tensor, h: int) -> torch.Tensor:
    B, m, d = x.shape
    return x.view(B, m, h, d // h).transpose(1, 2)  # (B, h, m, d_h)


def _merge(x: torch.Tensor) -> torch.Tensor:
    B, h, m, dh = x.shape
    return x.transpose(1, 2).reshape(B, m, h * dh)  # (B, m, d)


class LunaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg.n_heads * cfg.d_head
        self.initial = nn.Parameter(torch.randn(cfg.n_inducing, d) * d**-0.5)  # (m, d): P of the first layer
        self.pack_query = nn.Linear(d, d, bias=False)
        self.unpack_key = nn.Linear(d, d, bias=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, q, k, v, mods, ctx):
        B, h, lq, d = q.shape
        work = torch.promote_types(q.dtype, torch.float32)
        k, v = expand_kv(k, h).to(work), expand_kv(v, h).to(work)  # (B, h, Lk, d_h)
        packed = ctx.packed if ctx.packed is not None else self.initial.to(work).expand(B, -1, -1)  # (B, m, d)
        queries = _heads(self.pack_query(packed.to(self.pack_query.weight.dtype)).to(work), h)
        key_of = lambda g: _heads(self.unpack_key(_merge(g).to(self.unpack_key.weight.dtype)).to(work), h)  # noqa: E731
        out, gathered, a1, a2 = _packed_attention(q.to(work), k, v, queries, key_of, self.cfg.softcap)
        ctx.packed = self.norm((_merge(gathered) + packed).to(self.norm.weight.dtype))  # (B, m, d)
        return out.to(q.dtype), *_display(a1, a2, q.dtype, ctx)


def _luna_params(m: int, w: int) -> int:
    """The initial table ``[m, w]``, the pack query and unpack key maps ``[w, w]`` and the LayerNorm of the
    heads' concatenated width ``w = n_heads * d_h``."""
    return m * w + 2 * w * w + 2 * w


def check_luna(cfg) -> None:
    check_layer_to_layer(cfg, "the packed sequence of the previous layer")


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because="has no (query, key) score for a position bias or relative vectors: queries meet keys "
    "only through the inducing points, which have no position",
    causal_modes=frozenset({False}),
    causal_reason="it is bidirectional only (every inducing point summarises the whole sequence, future included)",
)

LUNA_CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=CAPS.refuses_because.replace("inducing", "packed"),
    causal_modes=frozenset({False}),
    causal_reason="it is bidirectional only (the packed sequence reads every position; the paper's causal Luna, "
    "one packed context per prefix, is a different mechanism not built here)",
)

VARIANTS = (
    Variant(
        "isab",
        "Lee et al. 2019 (Set Transformer, ISAB)",
        "n_inducing learned points attend to the sequence, then the sequence attends to them: O(m L).",
        build=InducedSetAttention,
        params=(N_INDUCING,),
        caps=CAPS,
        n_params=lambda c: c.n_heads * c.n_inducing * c.d_head + c.n_heads * c.d_head * c.d_head,
    ),
    Variant(
        "luna",
        "Ma et al. 2021 (Luna)",
        "Pack the sequence into n_inducing positions carried from layer to layer, then unpack: O(m L).",
        build=LunaAttention,
        params=(N_INDUCING,),
        check=check_luna,
        caps=LUNA_CAPS,
        n_params=lambda c: _luna_params(c.n_inducing, c.n_heads * c.d_head),
    ),
)
