"""One cell of a long-context result, exactly (``view.long_context``'s grid is pooled).

``zoom(result, side, layer, head, q_cell, k_cell)`` computes one cell's exact token-level map: the model's forward up
to that layer with an ``Interventions`` record whose core observer takes the layer's post-position ``q``, ``k`` and
score modifiers and evaluates the softmax of the cell's query rows over all keys (``rows x L``, float64), then stops
the forward; a recurrent mixer's cell is its implicit weights from its own kernel (``implicit_region``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.long_context.view import LongContext
from kernels.reference import clipped_index, expand_kv
from models import ConfigError
from models.attention.layout import pattern_rows
from models.attention.sparse import PatternAttention
from models.blocks import layer_attentions
from models.interventions import Interventions


@dataclass
class Zoom:
    side: str
    layer: int
    head: int
    rows: tuple  # (first, stop) query positions
    keys: tuple  # (first, stop) key positions
    probs: np.ndarray  # (rows, keys) exact weights of the region: softmax probabilities, or a recurrent
    # mixer's implicit attention (signed, not a distribution)
    pooled: float  # the pooled map's mass of the cell (the mean over its rows of their sum)
    exact: float  # the same from the exact rows
    ids: tuple  # the passage's token ids (labels for the axes)


class _Captured(Exception):
    """Raised from the zoom's core observer once it has the rows: the rest of the forward is not needed."""


def exact_rows(core, q, k, mods, r0: int, r1: int, head: int) -> torch.Tensor:
    """``(r1 - r0, Lk)`` float64 softmax probabilities of query rows ``r0 .. r1 - 1`` of head ``head``, with
    the scores of ``kernels/reference.py`` (scale, soft cap, rel_k, rel_bias, ALiBi, the pattern, causality,
    learned sinks: then a row sums to less than one)."""
    if not isinstance(core, PatternAttention):
        raise ConfigError(
            "attention",
            core.cfg.attention,
            "a structured pattern (the zoom computes a softmax over "
            "the pattern's keys; other mechanisms' maps are shown pooled only)",
        )
    if mods.get("pair_bias") is not None:
        raise ConfigError("position", core.cfg.position, "a position without a per-pair bias (zoom)")
    cfg = core.cfg
    lq, lk, d = q.shape[2], k.shape[2], q.shape[-1]
    qr = q[:, head : head + 1, r0:r1].double()  # (B, 1, R, d)
    kk = expand_kv(k, q.shape[1])[:, head : head + 1].double()  # (B, 1, Lk, d)
    i_abs = torch.arange(r0, r1)[:, None] + (lk - lq)
    rel = torch.arange(lk)[None, :] - i_abs  # (R, Lk)
    s = qr @ kk.transpose(-1, -2)
    if mods.get("rel_k") is not None:
        rk = mods["rel_k"].double()
        rk = rk[head : head + 1] if rk.shape[0] > 1 else rk
        s = s + (qr @ rk.transpose(-1, -2)).gather(-1, clipped_index(rel, rk.shape[-2]).expand(*s.shape))
    s = s / math.sqrt(d)
    if cfg.softcap is not None:
        s = cfg.softcap * torch.tanh(s / cfg.softcap)
    if mods.get("rel_bias") is not None:
        s = s + mods["rel_bias"].double()[head][rel + lk - 1]
    if mods.get("alibi_slopes") is not None:
        s = s - mods["alibi_slopes"].double()[head] * rel.abs()
    if cfg.attention == "full":
        allowed = rel <= 0 if cfg.causal else torch.ones_like(rel, dtype=torch.bool)
    else:
        allowed = pattern_rows(cfg, lq)(r0, r1)
    s = s[0, 0].masked_fill(~allowed, float("-inf"))  # (R, Lk)
    if mods.get("sinks") is not None:  # learned sinks (models/sinks.py): one more softmax column, dropped
        sink = mods["sinks"].double()[head].expand(s.shape[0], 1)
        return torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[:, :-1]
    p = torch.softmax(s, dim=-1)
    return p.nan_to_num(0.0)


def implicit_region(core, call, r0: int, r1: int, c0: int, c1: int, head: int) -> torch.Tensor:
    """``(r1 - r0, c1 - c0)`` float64 implicit attention weights ``A_ij`` of a recurrent mixer's head ``head``
    (``core.implicit_ops``): its own kernel run on one indicator value per key of the cell, ``O(L x keys)``,
    so a cell far from the diagonal at 16k tokens costs what one near it does."""
    apply = core.implicit_ops(call.q, call.k, call.v, call.mods).apply
    B, h, L = call.v.shape[:3]
    onehot = torch.zeros(L, c1 - c0, dtype=call.v.dtype, device=call.v.device)
    onehot[torch.arange(c0, c1), torch.arange(c1 - c0)] = 1.0  # column m: the key c0 + m
    return apply(onehot.expand(B, h, L, c1 - c0))[0, head, r0:r1].double()


def zoom(result: LongContext, side: int = 0, layer: int = 0, head: int = 0, q_cell=None, k_cell=None) -> Zoom:
    """The exact token-level map of one cell of ``result``'s grid (module docstring); ``q_cell`` / ``k_cell``
    default to the cell of the last query block holding most of its mass off the diagonal."""
    if not 0 <= int(side) < len(result.sides):
        raise ConfigError("side", side, f"an index in [0, {len(result.sides) - 1}]")
    s = result.sides[int(side)]
    n_l, n_h, n_q, n_k = s.mass.shape
    for name, v, n in (("layer", layer, n_l), ("head", head, n_h)):
        if not 0 <= int(v) < n:
            raise ConfigError(name, v, f"an index in [0, {n - 1}]")
    layer, head = int(layer), int(head)
    q_cell = n_q - 1 if q_cell in (None, "") else int(q_cell)
    if k_cell in (None, ""):
        row = s.mass[layer, head, q_cell].copy()
        row[max(0, q_cell - 1) : q_cell + 1] = -1  # off the diagonal: where the long-range mass went
        k_cell = int(np.argmax(row)) if row.max() > 0 else q_cell
    for name, v, n in (("query cell", q_cell, n_q), ("key cell", k_cell, n_k)):
        if not 0 <= int(v) < n:
            raise ConfigError(name, v, f"an index in [0, {n - 1}]")
    r0, r1 = q_cell * s.block_q, min(result.length, (q_cell + 1) * s.block_q)
    c0, c1 = int(k_cell) * s.block_k, min(result.length, (int(k_cell) + 1) * s.block_k)
    attn = layer_attentions(s.model)[layer]
    got = {}

    def capture(call):  # the picked layer's core inputs; the rest of the forward is not needed
        if call.attn is attn:
            if hasattr(attn.core, "implicit_ops"):  # a recurrent mixer: its implicit weights of the cell's keys
                got["region"] = implicit_region(attn.core, call, r0, r1, c0, c1, head)
            else:
                got["region"] = exact_rows(attn.core, call.q, call.k, call.mods, r0, r1, head)[:, c0:c1]
            raise _Captured()

    try:
        with torch.no_grad():
            s.model(
                torch.tensor([result.passage.ids], dtype=torch.long), interventions=Interventions(observe_cores=capture)
            )
    except _Captured:
        pass
    region = got["region"]
    return Zoom(
        s.name,
        layer,
        head,
        (r0, r1),
        (c0, c1),
        region.float().numpy(),
        float(s.mass[layer, head, q_cell, k_cell]),
        float(region.sum(-1).mean()),
        result.passage.ids,
    )
