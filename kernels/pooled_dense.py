"""Pooled attention maps: the record every backend returns, the display block size, and dense pooling.

A pooled map cuts the ``Lq x Lk`` attention matrix of one head into cells of ``block_q`` query rows by
``block_k`` keys; cell ``(a, b)`` holds the attention mass query block ``a`` puts on key block ``b``:

    mass[a, b] = (1 / n_a) sum_{i in block a} sum_{j in block b} p_ij

(``n_a`` = query rows of block ``a`` inside the sequence), so a query block's cells sum to one when
every row has an allowed key. Beside it, per query ``i`` (absolute position ``i_abs = i + Lk - Lq``):

    entropy   H_i = -sum_j p_ij ln p_ij                       (nats)
    distance  D_i =  sum_j p_ij |j - i_abs|                   (positions)
    sink      S_i =  sum_{j < sink_k} p_ij                    (mass on the first keys)
    local     W_i =  sum_{|j - i_abs| < window} p_ij          (mass inside the local window)

With learned attention sinks (gpt-oss: a per-head logit in every row's softmax, no value) a row of
``p`` sums to ``1 - p_sink_i``; ``pool_probs(..., learned_sink=p_sink)`` then counts the learned sink
as the sink it is: ``S_i = p_sink_i + sum_{j < sink_k} p_ij``, and ``H_i`` gains its term
``-p_sink_i ln p_sink_i`` (the entropy of the whole row, keys and sink, which sums to one); the mass
cells and ``D_i``, ``W_i`` read keys only (the sink has no position).

``pool_probs`` computes all of it from a dense probability matrix: it is the reference the kernels
are tested against, and the path of mechanisms whose only map is a dense effective one. The kernels
(``kernels/pooled.py``) compute the same numbers without ever holding ``L x L``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .reference import relative_positions

MAX_CELLS = 256  # a display of at most 256 x 256 cells per head
TILE = 64  # the kernels' layout tile: pooled blocks are multiples of it


@dataclass
class PooledAttention:
    """Pooled attention of ``B x h`` heads over ``q_len`` queries and ``k_len`` keys."""

    mass: torch.Tensor  # (B, h, n_qp, n_kp), at least float32: see the module docstring
    entropy: torch.Tensor  # (B, h, Lq) nats
    distance: torch.Tensor  # (B, h, Lq) mean |j - i_abs| under p
    sink: torch.Tensor  # (B, h, Lq) mass on keys j < sink_k
    local: torch.Tensor  # (B, h, Lq) mass on |j - i_abs| < window
    block_q: int  # query rows per cell
    block_k: int  # keys per cell
    q_len: int
    k_len: int
    sink_k: int
    window: int
    backend: str  # what computed it ("torch-cpu block-sparse", "triton (sm_90) pooled", "dense", ...)
    note: str = ""  # what was left out and why (e.g. an entropy with no closed form), else ""

    def stats(self) -> dict:
        """The per-query statistics by name, each ``(B, h, Lq)``."""
        return {"entropy": self.entropy, "distance": self.distance, "sink": self.sink, "local": self.local}


def pooled_block(length: int, max_cells: int = MAX_CELLS, tile: int = TILE) -> int:
    """The smallest multiple of ``tile`` that cuts ``length`` positions into at most ``max_cells``."""
    if length < 1 or max_cells < 1 or tile < 1:
        raise ValueError(f"pooled_block: length {length}, max_cells {max_cells}, tile {tile} must be >= 1")
    return tile * max(1, -(-length // (tile * max_cells)))


def rows_per_block(length: int, block: int, device=None) -> torch.Tensor:
    """``(n_blocks,)`` float: positions of each block inside the sequence (the last may be short)."""
    n = -(-length // block)
    starts = torch.arange(n, device=device) * block
    return (torch.clamp(length - starts, max=block)).to(torch.float32)


def check_stats_args(sink_k: int, window: int) -> None:
    if int(sink_k) < 0:
        raise ValueError(f"sink_k must be >= 0, got {sink_k}")
    if int(window) < 1:
        raise ValueError(f"window must be >= 1, got {window}")


def pool_probs(
    probs: torch.Tensor,
    block_q: int,
    block_k: int | None = None,
    *,
    sink_k: int = 4,
    window: int = 64,
    backend: str = "dense",
    learned_sink: torch.Tensor | None = None,
) -> PooledAttention:
    """Pool a dense probability matrix ``probs [B, h, Lq, Lk]`` (queries the last ``Lq`` of ``Lk``);
    ``learned_sink [B, h, Lq]``: the learned sinks' share of each row (module docstring), or None."""
    check_stats_args(sink_k, window)
    block_k = block_q if block_k is None else block_k
    B, h, lq, lk = probs.shape
    nqp, nkp = -(-lq // block_q), -(-lk // block_k)
    p = F.pad(probs, (0, nkp * block_k - lk, 0, nqp * block_q - lq))
    mass = p.view(B, h, nqp, block_q, nkp, block_k).sum(dim=(3, 5))  # (B, h, n_qp, n_kp)
    mass = mass / rows_per_block(lq, block_q, probs.device).to(mass.dtype)[:, None]
    dist = relative_positions(lq, lk, probs.device).abs().to(probs.dtype)  # (Lq, Lk): |j - i_abs|
    entropy, sink = torch.special.entr(probs).sum(-1), probs[..., :sink_k].sum(-1)
    if learned_sink is not None:
        learned_sink = learned_sink.to(probs.dtype)
        entropy, sink = entropy + torch.special.entr(learned_sink), sink + learned_sink
    return PooledAttention(
        mass=mass,
        entropy=entropy,
        distance=(probs * dist).sum(-1),
        sink=sink,
        local=(probs * (dist < window)).sum(-1),
        block_q=block_q,
        block_k=block_k,
        q_len=lq,
        k_len=lk,
        sink_k=int(sink_k),
        window=int(window),
        backend=backend,
    )
