"""Pooled implicit attention maps of recurrent layers (state-space, delta rule) without ``L x L``.

A causal layer whose output is linear in its values, ``o_i = sum_{j <= i} A_ij v_j`` (Mamba-2's
``A_ij = (C_i . B_j) exp(sum_{r=j+1..i} dt_r a) dt_j``, the gated delta rule's ``A_ij`` from its WY / UT
form), has an exact implicit attention matrix ``A`` whose weights can be negative and whose rows do not sum
to one. Its pooled map (the cells and statistics of ``kernels.pooled_dense``, with ``A`` in place of the
probabilities) comes from the layer's own chunked kernel, run on *indicator values* instead of its values:

- ``apply(E)`` with ``E_jb = [j in key block b]`` returns ``sum_{j in b} A_ij`` for every query ``i``
  (``O(L x cells)`` memory, never ``L x L``); the query rows of a block are then averaged, as
  ``pool_probs`` averages them: ``mass[a, b] = (1 / n_a) sum_{i in a} sum_{j in b} A_ij``;
- three more channels: ``[j < sink_k]`` gives the sink mass ``S_i``, ``1`` the row sum ``R_i``, ``j`` the first
  moment ``M_i = sum_j A_ij j``, so the distance ``D_i = sum_j A_ij |j - i| = i R_i - M_i`` (causal: j <= i);
- the local mass ``W_i = sum_{i - window < j <= i} A_ij`` needs each weight near the diagonal; those
  depend only on the tokens between ``j`` and ``i``, so ``band(start, stop)`` (the dense map of the
  positions ``[start, stop)`` on their own, with no earlier state) gives them exactly: the rows
  ``[s, s + window)`` read the band ``[s - window, s + window)``, ``O(L x window)`` in all; a layer that gives
  ``blocks`` (its dense blocks on and below the diagonal, from its chunk quantities: ``kernels.cpu.implicit_bands``)
  has them all in one batched pass instead.

The entropy ``-sum_j p_ij ln p_ij`` is not defined for signed weights that are not a distribution: it is
NaN, and ``note`` says so. Every other number equals ``pool_probs`` applied to the dense ``A`` (the test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ..pooled_dense import PooledAttention, check_stats_args, rows_per_block
from .implicit_bands import window_mass

NOTE = (
    "implicit attention of a recurrent layer: signed weights whose rows are not probabilities, so cells and "
    "statistics are sums of weights and the entropy is undefined"
)


class ImplicitOps(NamedTuple):
    """What a recurrent layer offers for its implicit map ``A`` (``core.implicit_ops``; arguments of
    :func:`pooled_implicit`): ``apply`` and ``band`` always, ``blocks`` and ``cells`` where it has them."""

    apply: Callable  # values (B, h, L, c) -> A values
    band: Callable  # (start, stop) -> the dense A of those positions on their own
    blocks: Callable | None = None  # width -> (diag, sub): the blocks on and below the diagonal
    cells: Callable | None = None  # block -> (B, h, nb, nb) sums of A over every pair of position blocks


BLOCKS_MAX_WINDOW = 256  # wider windows cut the band into dense maps instead (blocks hold L x window per head)


def indicator_values(length: int, block_k: int | None, sink_k: int, device, dtype=torch.float32) -> torch.Tensor:
    """``(L, n_kp + 3)``: one column per key block, then ``[j < sink_k]``, ``1``, ``j``; ``block_k=None``: the three
    last columns only (the cells come from elsewhere)."""
    j = torch.arange(length, device=device)
    extra = torch.stack([(j < sink_k).to(dtype), torch.ones(length, device=device, dtype=dtype), j.to(dtype)], 1)
    if block_k is None:
        return extra
    onehot = torch.nn.functional.one_hot(j // block_k, -(-length // block_k)).to(dtype)  # (L, n_kp)
    return torch.cat([onehot, extra], 1)


def local_mass(band, length: int, window: int) -> torch.Tensor:
    """``W_i = sum_{i - window < j <= i} A_ij`` as ``(B, h, L)`` from ``band(start, stop) -> (B, h, n, n)``."""
    rows = []
    for s in range(0, length, window):
        lo, hi = max(0, s - window), min(length, s + window)
        a = band(lo, hi)  # (B, h, n, n): exact for every pair inside [lo, hi)
        i = torch.arange(s, hi, device=a.device)[:, None]  # the rows [s, hi) of this piece
        j = torch.arange(lo, hi, device=a.device)[None, :]
        near = (j <= i) & (j > i - window)  # (rows, n)
        rows.append((a[:, :, s - lo :, :] * near.to(a.dtype)).sum(-1))
    return torch.cat(rows, -1)


def pooled_implicit(
    apply,
    band,
    *,
    batch: int,
    heads: int,
    length: int,
    block_q: int,
    block_k: int | None = None,
    sink_k: int = 4,
    window: int = 64,
    device=None,
    dtype=torch.float32,
    blocks=None,
    cells=None,
    backend: str = "implicit (chunked recurrence)",
) -> PooledAttention:
    """The pooled implicit map of a causal recurrent layer of ``length`` positions (module docstring).

    ``apply(values (B, h, L, c)) -> (B, h, L, c)``: ``sum_{j <= i} A_ij values_j`` per head (here the same
    indicator columns for every head, an expanded view); ``band(start, stop) -> (B, h, n, n)``: the dense ``A``
    of the positions ``[start, stop)`` on their own; ``blocks(width) -> (diag, sub)`` (optional): the dense blocks on
    and below the diagonal of ``A`` cut every ``width`` positions (``kernels.cpu.implicit_bands``), all at once,
    which replaces the bands' one call per window; ``cells(block) -> (B, h, nb, nb)`` (optional): the map's sums
    over every pair of position blocks (Mamba-2's from its blocks' states, ``implicit_bands.ssd_cells``), which
    leaves only three indicator columns for ``apply``."""
    check_stats_args(sink_k, window)
    block_k = block_q if block_k is None else block_k
    if length < 1 or block_q < 1 or block_k < 1:
        raise ValueError(f"pooled_implicit: length {length}, blocks {block_q} x {block_k} must be >= 1")
    by_state = cells is not None and block_q == block_k  # the cells from the layer's block states
    vals = indicator_values(length, None if by_state else block_k, int(sink_k), device, dtype)  # the layer's dtype
    out = apply(vals.expand(batch, heads, *vals.shape))  # (B, h, L, n_kp + 3): row sums per indicator
    B, h = batch, heads
    nkp, nqp = -(-length // block_k), -(-length // block_q)
    if by_state:
        mass = cells(block_q).double()  # (B, h, n_qp, n_kp) sums
    else:
        a_of = torch.arange(length, device=out.device) // block_q
        mass = out.new_zeros(B, h, nqp, nkp).index_add_(2, a_of, out[..., :nkp]).double()  # (B, h, n_qp, n_kp)
    mass = mass / rows_per_block(length, block_q, out.device).double()[:, None]
    sink, total, moment = out[..., -3:].double().unbind(-1)
    i = torch.arange(length, device=out.device, dtype=torch.float64)
    distance = i * total - moment  # sum_j A_ij (i - j), every j <= i
    if blocks is not None and window <= BLOCKS_MAX_WINDOW:
        local = window_mass(*blocks(int(window)), length).double()
    else:
        local = local_mass(band, length, int(window)).double()
    dt = torch.float32
    return PooledAttention(
        mass=mass.to(dt),
        entropy=torch.full((B, h, length), float("nan"), dtype=dt, device=out.device),
        distance=distance.to(dt),
        sink=sink.to(dt),
        local=local.to(dt),
        block_q=block_q,
        block_k=block_k,
        q_len=length,
        k_len=length,
        sink_k=int(sink_k),
        window=int(window),
        backend=backend,
        note=NOTE,
    )
