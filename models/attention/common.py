"""Helpers shared by the content-based / linearized / low-rank mechanisms (docs/catalogue.md section 2).

- ``expand_kv``: GQA/MQA K/V heads repeated to the query heads (query head ``n`` reads K/V head
  ``n // (h // h_kv)``, LLaMA's ``repeat_kv``); these mechanisms mix keys in ways the block-sparse
  kernels do not cover, so they work on per-query-head copies.
- ``check_no_softcap`` / ``check_no_memory``: shared halves of the mechanisms' own checks (which
  position encodings a mechanism honours is a capability on its record, ``models.capabilities``).
- ``pair_bias``: the score bias of ``kernels/reference.py`` (``rel_bias`` and ALiBi) for an
  arbitrary gathered set of (query, key) absolute positions, so mechanisms that keep a score
  matrix (lsh, routing) honour ``t5`` and ``alibi`` exactly as the kernels do.
- ``group_ranks``: rank of every position inside its bucket / cluster (stable, position order),
  the building block of "sort by bucket" without a Python loop.
"""

from __future__ import annotations

import torch

from ..errors import ConfigError

NEG = -1e9  # finite "minus infinity" for masked logits: exp underflows to exactly 0 in fp32


def expand_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    rep = n_heads // x.shape[1]
    return x if rep == 1 else x.repeat_interleave(rep, dim=1)  # (B, h, L, d_h)


def check_no_softcap(cfg, mechanism: str) -> None:
    if cfg.softcap is not None:
        raise ConfigError(
            "softcap", cfg.softcap, f"None: {mechanism} never forms the score matrix, so there is no score to cap"
        )


def check_no_memory(cfg, mechanism: str, reason: str) -> None:
    if cfg.memory != "none":
        raise ConfigError("memory", cfg.memory, f"'none': {mechanism} {reason}")


def pair_bias(mods: dict, rel: torch.Tensor, lk: int, n_heads: int) -> torch.Tensor | None:
    """Additive score bias for pairs with ``rel = j - i_abs`` of shape ``[B, h, ...]``.

    ``rel_bias[n, rel + Lk - 1] - alibi_slopes[n] * |rel|`` as in ``kernels.attention_ref``;
    ``None`` when the position encoding adds no bias.
    """
    rel_bias, slopes = mods.get("rel_bias"), mods.get("alibi_slopes")
    if rel_bias is None and slopes is None:
        return None
    view = (1, n_heads) + (1,) * (rel.dim() - 2)
    bias = torch.zeros((), device=rel.device)
    if rel_bias is not None:
        head = torch.arange(n_heads, device=rel.device).view(view)
        bias = bias + rel_bias[head, (rel + lk - 1).clamp(0, rel_bias.shape[-1] - 1)].float()
    if slopes is not None:
        bias = bias - slopes.float().view(view) * rel.abs().float()
    return bias


def group_ranks(labels: torch.Tensor, n_groups: int):
    """``labels [..., L]`` in ``[0, n_groups)`` -> ``(rank [..., L], counts [..., n_groups])``.

    ``rank`` is the number of earlier positions with the same label (a stable sort by
    ``(label, position)``), so it depends only on positions ``<= i``: a causal model built on it
    cannot see the future.
    """
    L = labels.shape[-1]
    pos = torch.arange(L, device=labels.device)
    order = torch.argsort(labels * L + pos, dim=-1)  # (..., L) positions sorted by (label, pos)
    counts = torch.zeros(*labels.shape[:-1], n_groups, dtype=torch.long, device=labels.device)
    counts.scatter_add_(-1, labels, torch.ones_like(labels))
    starts = counts.cumsum(-1) - counts  # first sorted index of each group
    sorted_labels = labels.gather(-1, order)
    sorted_rank = pos - starts.gather(-1, sorted_labels)  # (..., L)
    rank = torch.empty_like(labels).scatter_(-1, order, sorted_rank)
    return rank, counts


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x [B, h, L, d]``, ``idx [B, h, N]`` -> ``x[b, n, idx]`` of shape ``[B, h, N, d]``."""
    return x.gather(2, idx.unsqueeze(-1).expand(*idx.shape, x.shape[-1]))


def scatter_dense(
    probs: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, lq: int, lk: int, valid: torch.Tensor
) -> torch.Tensor:
    """Sum sparse probabilities into a dense ``[B, h, lq, lk]`` matrix (display only).

    ``probs``, ``q_pos`` (query index 0..lq-1), ``k_pos`` (key index 0..lk-1) and ``valid`` share a
    shape ``[B, h, ...]``; invalid entries are dropped.
    """
    B, h = probs.shape[:2]
    flat = torch.where(valid, q_pos * lk + k_pos, torch.full_like(q_pos, lq * lk))  # lq*lk = bin for drops
    dense = probs.new_zeros(B, h, lq * lk + 1)
    dense.scatter_add_(-1, flat.reshape(B, h, -1), torch.where(valid, probs, 0.0).reshape(B, h, -1))
    return dense[..., :-1].view(B, h, lq, lk)
