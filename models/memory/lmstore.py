"""Output-side retrieval memories: kNN-LM (Khandelwal et al. 2020) and SPALM (Yogatama et al. 2021).

Both keep a datastore of ``(context vector, next token)`` pairs from past segments, per batch
element, FIFO up to ``knn_size``: the context vector of position ``t`` is the final hidden state
``h_t`` (the layer stack's output, before the final norm and the head) and its value is token
``x_{t+1}``. The last position of a segment waits in the state (``pending``) until the next
segment brings its next token. Everything stored is detached; the state is explicit and
immutable like every memory's. Queries retrieve the exact ``knn_k`` nearest stored vectors by
squared Euclidean distance (brute force). Causal models only: the store holds a left-to-right
model's past.

- ``knn_lm``: ``p_kNN(y) = sum_k softmax(-d_k) [y_k = y]`` and the model's logits become
  ``log(lambda p_kNN + (1 - lambda) p_LM)`` with a fixed ``lambda = knn_lambda``. No parameters.
- ``spalm``: the retrieved next tokens' embeddings ``e_{y_k}`` (a learned table of its own) are
  combined by attention of the hidden state, ``m = sum_k softmax(h . e_{y_k}) e_{y_k}``, and a
  learned gate ``g = sigmoid(w_g . h + b_g)`` mixes ``z = g h + (1 - g) m`` into the hidden state
  before the final norm and the head.

With an empty store both leave the model exactly as it is. When attention weights are requested
(display), the last layer's ``LayerInfo`` also records each position's neighbours (stored next
token, squared distance, position of the stored context), the memory's weight in the mixture
(``knn_lambda``; ``1 - g`` for SPALM) and the next-token distributions without the memory, from
the memory alone (``p_kNN``; SPALM: the head applied to ``m``, i.e. ``g = 0``) and mixed.

These memories act on the model's output, not on attention, through two methods the model calls
around its head: ``head_input(x, ctx)`` (before the final norm / head) and
``final_logits(x, logits, ctx)`` (after it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..capabilities import MemoryCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import SEGMENT_LEN, Memory, MemoryState
from .knn import KNN_K, KNN_SIZE

KNN_LAMBDA = Param("knn_lambda", float, 0.25)  # kNN-LM's fixed weight of p_kNN in the mixture


@dataclass(frozen=True)
class StoreState(MemoryState):
    """``MemoryState`` plus the datastore: ``store_keys (B, S, d)``, ``store_next (B, S)`` token ids,
    ``store_pos (S,)`` positions of the contexts, ``pending (B, d)`` the last unpaired hidden state."""

    store_keys: torch.Tensor | None = None
    store_next: torch.Tensor | None = None
    store_pos: torch.Tensor | None = None
    pending: torch.Tensor | None = None

    def store_size(self) -> int:
        return 0 if self.store_pos is None else int(self.store_pos.numel())


def nearest(queries: torch.Tensor, keys: torch.Tensor, k: int):
    """Exact ``k`` nearest ``keys (B, S, d)`` of ``queries (B, L, d)`` by squared L2 distance.

    Returns ``(dist, index)``, each ``(B, L, min(k, S))``, nearest first."""
    dist = torch.cdist(queries.float(), keys.float()).pow(2)  # (B, L, S)
    top = dist.topk(min(k, keys.shape[1]), dim=-1, largest=False)
    return top.values, top.indices


class StoreMemory(Memory):
    """The datastore shared by ``knn_lm`` and ``spalm``; subclasses decide how retrieval is used."""

    def new_state(self, batch_size: int = 1, device=None) -> StoreState:
        base = super().new_state(batch_size, device)
        return StoreState(**{f: getattr(base, f) for f in base.__dataclass_fields__})

    def retrieve(self, h: torch.Tensor, state):
        """``(weights, next_tokens, dist, index)`` of the ``knn_k`` nearest contexts, each ``(B, L, k)``
        (``index`` into the store); None if the store is empty."""
        if not isinstance(state, StoreState) or state.store_size() == 0:
            return None
        dist, index = nearest(h, state.store_keys.to(h.dtype), self.cfg.knn_k)
        weights = torch.softmax(-dist, dim=-1)  # (B, L, k)
        return weights, state.store_next.gather(1, index.flatten(1)).view_as(index), dist, index

    def head_input(self, x, ctx):
        ctx.layers[-1].lm_hidden = x.detach()  # the contexts to store after the segment
        return x

    def final_logits(self, x, logits, ctx):
        return logits

    def record(self, ctx, got, mix, p_model, p_memory, p_mixed) -> None:
        """Display only (weights requested): the neighbours of every position, padded to ``knn_k``
        (token / position -1, distance NaN), the memory's weight ``mix (B, L)`` and the next-token
        distributions without / from / with the memory, on the last layer's record."""
        if not ctx.need_weights:
            return
        B, L, V = p_model.shape
        k = self.cfg.knn_k
        nxt = p_model.new_full((B, L, k), -1, dtype=torch.long)
        pos = torch.full_like(nxt, -1)
        dist = p_model.new_full((B, L, k), float("nan"), dtype=torch.float32)
        if got is not None:
            _, n_, d_, index = got
            n = n_.shape[-1]
            nxt[..., :n], dist[..., :n] = n_, d_.float()
            pos[..., :n] = ctx.state.store_pos.to(index.device)[index]
        if p_memory is None:
            p_memory = torch.full_like(p_model, float("nan"))
        ctx.layers[-1].record(
            lm_next=nxt,
            lm_dist=dist,
            lm_pos=pos,
            lm_mix=mix.detach().float(),
            lm_p_model=p_model.detach().float(),
            lm_p_memory=p_memory.detach().float(),
            lm_p_mixed=p_mixed.detach().float(),
        )

    def update(self, state, ctx, attention_of):
        h, ctx.layers[-1].lm_hidden = ctx.layers[-1].lm_hidden, None  # (B, L, d)
        out = super().update(state, ctx, attention_of)
        tokens, start = ctx.tokens, state.pos
        keys, nxt, pos = h[:, :-1], tokens[:, 1:], ctx.positions[:-1]  # context t -> token t + 1
        if state.pending is not None:  # the previous segment's last context -> this segment's first token
            keys = torch.cat([state.pending[:, None], keys], dim=1)
            nxt = torch.cat([tokens[:, :1], nxt], dim=1)
            pos = torch.cat([pos.new_tensor([start - 1]), pos])
        if state.store_size():
            keys = torch.cat([state.store_keys, keys], dim=1)
            nxt = torch.cat([state.store_next, nxt], dim=1)
            pos = torch.cat([state.store_pos, pos])
        S = self.cfg.knn_size
        return out.replace(store_keys=keys[:, -S:], store_next=nxt[:, -S:], store_pos=pos[-S:], pending=h[:, -1])


class KNNLM(StoreMemory):
    def final_logits(self, x, logits, ctx):
        got = self.retrieve(x, ctx.state)
        p_lm = torch.softmax(logits.float(), dim=-1)  # (B, L, V)
        if got is None:
            self.record(ctx, None, p_lm.new_zeros(p_lm.shape[:2]), p_lm, None, p_lm)
            return logits
        weights, nxt = got[:2]
        lam = self.cfg.knn_lambda
        p_knn = torch.zeros_like(logits, dtype=weights.dtype).scatter_add_(-1, nxt, weights)  # (B, L, V)
        p = lam * p_knn + (1.0 - lam) * p_lm
        self.record(ctx, got, p_lm.new_full(p_lm.shape[:2], lam), p_lm, p_knn, p)
        return torch.log(p.clamp(min=torch.finfo(p.dtype).tiny)).to(logits.dtype)


class SPALM(StoreMemory):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.token_embed = nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model) * 0.02)
        self.gate_w = nn.Parameter(torch.zeros(cfg.d_model))
        self.gate_b = nn.Parameter(torch.zeros(()))  # g = 1/2 at init

    def head_input(self, x, ctx):
        x = super().head_input(x, ctx)
        got = self.retrieve(x, ctx.state)
        if got is None:
            if ctx.need_weights:
                p = torch.softmax(ctx.classifier(x).float(), dim=-1)
                self.record(ctx, None, p.new_zeros(p.shape[:2]), p, None, p)
            return x
        nxt = got[1]
        e = self.token_embed[nxt].to(x.dtype)  # (B, L, k, d) embeddings of the retrieved next tokens
        a = torch.softmax(torch.einsum("bld,blkd->blk", x, e), dim=-1)
        m = torch.einsum("blk,blkd->bld", a, e)  # (B, L, d)
        g = torch.sigmoid(x @ self.gate_w + self.gate_b)[..., None]  # (B, L, 1)
        z = g * x + (1 - g) * m
        if ctx.need_weights:  # the distributions of g = 1 (model alone), g = 0 (memory alone) and the learned g
            p_of = lambda h: torch.softmax(ctx.classifier(h).float(), dim=-1)  # noqa: E731
            self.record(ctx, got, 1 - g[..., 0], p_of(x), p_of(m), p_of(z))
        return z


def check_store(cfg) -> None:
    if not cfg.causal:
        raise ConfigError(
            "memory",
            cfg.memory,
            "a causal model (causal=True): the datastore pairs past contexts with their next "
            "token, which only a left-to-right model has",
        )
    lam = cfg.knn_lambda
    if not (math.isfinite(lam) and 0.0 <= lam <= 1.0):
        raise ConfigError("knn_lambda", lam, "a number in [0, 1]: the weight of p_kNN in the mixture")


VARIANTS = (
    Variant(
        "knn_lm",
        "Khandelwal et al. 2020 (kNN-LM)",
        "Interpolates the LM's next-token distribution with that of the k nearest stored contexts.",
        build=KNNLM,
        params=(SEGMENT_LEN, KNN_SIZE, KNN_K, KNN_LAMBDA),
        check=check_store,
        caps=MemoryCaps(),
        n_params=lambda c: 0,
    ),
    Variant(
        "spalm",
        "Yogatama et al. 2021 (SPALM)",
        "A learned gate mixes the embeddings of the retrieved contexts' next tokens into the final hidden state.",
        build=SPALM,
        params=(SEGMENT_LEN, KNN_SIZE, KNN_K),
        check=check_store,
        caps=MemoryCaps(),
        n_params=lambda c: c.vocab_size * c.d_model + c.d_model + 1,
    ),
)
