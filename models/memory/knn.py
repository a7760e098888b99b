"""kNN memory: the Memorizing Transformer (Wu et al. 2022, "Memorizing Transformers").

One layer (the second-to-last, ``n_layers - 2``; the only layer when ``n_layers == 1``) keeps an
external store of past ``(key, value)`` pairs per batch element, FIFO, up to ``knn_size``. Keys are
stored unit-normalised (the paper normalises keys to keep retrieval scores in range). Each query,
unit-normalised, retrieves its exact top-``knn_k`` stored keys by inner product (brute force: the
store is small, so no approximate index is needed), attends over them with a softmax of the
cosine scores times a learned per-head temperature (initialised to 10; query-key normalised
attention needs a scale, Henry et al. 2020), and a learned per-head gate ``g = sigmoid(b_h)``
(``b_h`` initialised to 0) mixes ``g * retrieved + (1 - g) * local``. Keys and queries are taken
before the position encoding (stored memories carry no position, as in the paper); K/V head
``n // (h / h_kv)`` serves query head ``n``. While the store is empty the layer is plain local
attention. After each segment the segment's keys/values are appended (detached).
Causal models only.

Info of that layer: ``knn_gate (h,)``, ``knn_index (B, h, L, k)`` (slots in the store),
``knn_positions`` (their absolute positions), ``knn_weights`` (the retrieved softmax);
``attention`` stays the local map (rows sum to 1), ``reach`` includes the retrieved positions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..capabilities import MemoryCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import SEGMENT_LEN, Memory

# the store (per batch element) and the neighbours each query retrieves; knn_lm / spalm read both
KNN_SIZE = Param("knn_size", int, 1024, range=(1, 1 << 16), cap=65536)
KNN_K = Param("knn_k", int, 8, range=(1, 1024), cap=256)


def knn_retrieve(queries: torch.Tensor, keys: torch.Tensor, k: int):
    """Exact top-``k`` inner-product search, grouped by K/V head.

    ``queries (B, h, L, d)`` (normalised), ``keys (B, h_kv, S, d)``; query head ``n`` searches K/V
    head ``n // (h // h_kv)``. Returns ``(scores, index)``, each ``(B, h, L, min(k, S))``, best first.
    """
    B, h, L, d = queries.shape
    hkv, S = keys.shape[1], keys.shape[2]
    grouped = queries.reshape(B, hkv, (h // hkv) * L, d)  # (B, h_kv, rep * L, d): no K copies
    sim = grouped @ keys.transpose(-1, -2)  # (B, h_kv, rep * L, S)
    top = sim.topk(min(k, S), dim=-1)
    return top.values.view(B, h, L, -1), top.indices.view(B, h, L, -1)


def gather_values(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values (B, h_kv, S, d)``, ``index (B, h, L, k)`` -> ``(B, h, L, k, d)``."""
    B, h, L, k = index.shape
    hkv, d = values.shape[1], values.shape[-1]
    idx = index.reshape(B, hkv, -1)  # (B, h_kv, rep * L * k)
    out = values.gather(2, idx[..., None].expand(-1, -1, -1, d))  # (B, h_kv, rep * L * k, d)
    return out.view(B, h, L, k, d)


class KNNMemory(Memory):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.layer = max(cfg.n_layers - 2, 0)
        self.gate = nn.Parameter(torch.zeros(cfg.n_heads))  # sigmoid(0) = 1/2: equal mix at init
        self.log_temperature = nn.Parameter(torch.full((cfg.n_heads,), math.log(10.0)))

    def hook(self, index):
        return self._attend if index == self.layer else None

    def _attend(self, core, q, k, v, mods, ctx, *, q_raw, k_raw, info):
        out, probs, aux = core(q, k, v, mods, ctx)
        info.knn_new = (F.normalize(k_raw, dim=-1).detach(), v.detach())  # stored after the segment
        g = torch.sigmoid(self.gate)
        info.knn_gate = g.detach()
        state = ctx.state
        if state is None or state.knn_keys is None or state.knn_keys.shape[2] == 0:
            return out, probs, aux
        qn = F.normalize(q_raw, dim=-1)
        scores, index = knn_retrieve(qn, state.knn_keys, self.cfg.knn_k)  # (B, h, L, k)
        temp = self.log_temperature.exp()[None, :, None, None]
        w = torch.softmax(scores * temp, dim=-1)  # (B, h, L, k)
        retrieved = (w.unsqueeze(-1) * gather_values(state.knn_values, index).to(w.dtype)).sum(-2)  # (B, h, L, d_h)
        info.knn_index = index
        info.knn_positions = state.knn_pos[index]
        info.knn_weights = w.detach()
        g = g[None, :, None, None].to(out.dtype)
        return g * retrieved.to(out.dtype) + (1 - g) * out, probs, aux

    def update(self, state, ctx, attention_of):
        new_keys = new_values = None
        for info in ctx.layers:
            got, info.knn_new = info.knn_new, None
            if got is not None:  # the kNN layer (absent only if a stack skipped it)
                new_keys, new_values = got
        out = super().update(state, ctx, attention_of)
        if new_keys is None:
            return out
        S = self.cfg.knn_size
        if state.knn_keys is None:
            keys, values, pos = new_keys, new_values, ctx.positions
        else:
            keys = torch.cat([state.knn_keys, new_keys], dim=2)
            values = torch.cat([state.knn_values, new_values], dim=2)
            pos = torch.cat([state.knn_pos, ctx.positions])
        return out.replace(knn_keys=keys[:, :, -S:], knn_values=values[:, :, -S:], knn_pos=pos[-S:])

    def _annotate(self, info, state, ctx):
        super()._annotate(info, state, ctx)
        if info.index != self.layer:
            return
        n = 0 if state.knn_pos is None else int(state.knn_pos.numel())
        info.memory_len = n
        info.memory = {"knn": n}
        if info.knn_positions is not None:  # farthest retrieved token, over heads and neighbours
            first = info.knn_positions.amin(dim=(1, 3))  # (B, h, L, k) -> (B, L)
            back = ctx.positions[None, :] - first
            info.reach = torch.maximum(info.reach, back)


def check_knn(cfg):
    if not cfg.causal:
        raise ConfigError(
            "memory",
            "knn",
            "a causal model (causal=True): the Memorizing Transformer's store holds the past "
            "of a left-to-right model; a bidirectional model has no 'past' segments",
        )


VARIANTS = (
    Variant(
        "knn",
        "Wu et al. 2022 (Memorizing Transformer)",
        "One layer retrieves the top-k past (key, value) pairs from a store of knn_size and gates them with "
        "local attention.",
        build=KNNMemory,
        params=(SEGMENT_LEN, KNN_SIZE, KNN_K),
        check=check_knn,
        caps=MemoryCaps(),
        n_params=lambda c: 2 * c.n_heads,
    ),
)
