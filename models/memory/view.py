"""What the memory view draws: how far back each query sees, and one attention map per call.

A call with several segments runs the stack once per segment; :func:`merge_segments` turns the
per-segment ``LayerInfo`` records into one per layer:

- ``attention``: ``(B, h, L, L_k)`` over every key used in the call, columns ordered as the keys
  are (compressed slots oldest first, then token positions ascending, memory tokens first); so
  ``L_k`` = memory length at the start of the call + slots compressed during it + ``L``. Each
  segment's rows sit at its key columns, zeros elsewhere, so rows still sum to 1.
  ``key_ids (L_k,)`` names the columns: a position ``>= 0``, or ``-(serial + 1)`` for a
  compressed slot / memory token.
- per-token fields (``input``, ``reach``, ``exit_depth``, ...: ``context.TOKEN_FIELDS``) are
  concatenated along the sequence; the auxiliary losses become one ``loss_total`` weighted by
  segment length (their sum is the length-weighted mean); everything else is the last segment's
  value, and ``segments`` keeps all per-segment records.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from ..attention.layout import ParamView, pattern_key, pattern_rows
from ..attention.patterns import PATTERNS
from ..context import LOSS_FIELDS, TOKEN_FIELDS, layer_loss


def local_reach(cfg, L: int, device=None) -> torch.Tensor:
    """``(L,)``: distance from each query back to the oldest key it may attend within its segment."""
    if cfg.attention in PATTERNS:
        reach = _pattern_reach(cfg.attention, pattern_key(cfg), bool(cfg.causal), int(L))
    else:  # content-based / linearised mechanisms: no fixed pattern, the whole segment is reachable
        reach = torch.arange(L)
    return reach.to(device)


@lru_cache(maxsize=16)
def _pattern_reach(attention, params, causal, L, chunk=512):
    rows = pattern_rows(ParamView({**dict(params), "attention": attention, "causal": causal}), L)
    out = []
    for a in range(0, L, chunk):  # row chunks: never an L x L mask
        allowed = rows(a, min(L, a + chunk))
        first = allowed.int().argmax(dim=1)  # the first True of each row
        out.append((torch.arange(a, a + allowed.shape[0]) - first).clamp(min=0))
    return torch.cat(out)


def _sort_key(ids: torch.Tensor) -> torch.Tensor:
    big = 1 << 40  # compressed slots / memory tokens before every position, by serial
    return torch.where(ids < 0, -ids - 1 - big, ids)


def merge_segments(segments: list, lengths: list) -> list:
    """``segments[s]`` = the ``LayerInfo`` of segment ``s`` (one per layer) -> one merged record per layer."""
    if len(segments) == 1:
        return segments[0]
    total = sum(lengths)
    merged = []
    for n in range(len(segments[0])):
        parts = [seg[n] for seg in segments]
        info = parts[-1].copy()
        info.segments = parts
        for name in TOKEN_FIELDS:
            vals = [getattr(p, name) for p in parts]
            if all(isinstance(v, torch.Tensor) for v in vals):
                setattr(info, name, torch.cat(vals, dim=1))
        losses = [layer_loss(p) for p in parts]
        if any(x is not None for x in losses):
            for name in LOSS_FIELDS:
                setattr(info, name, None)
            info.loss_total = sum(l * (n_s / total) for l, n_s in zip(losses, lengths) if l is not None)
        if all(isinstance(p.attention, torch.Tensor) and p.key_ids is not None for p in parts):
            info.attention, info.key_ids = _merge_attention(parts)
        else:
            info.attention = None
        merged.append(info)
    return merged


def _merge_attention(parts: list):
    ids = torch.unique(torch.cat([p.key_ids for p in parts]))
    ids = ids[_sort_key(ids).argsort()]
    lookup = {int(x): c for c, x in enumerate(ids.tolist())}
    rows = []
    for p in parts:
        a = p.attention  # (B, h, L_s, P_s + L_s)
        cols = torch.tensor([lookup[int(x)] for x in p.key_ids.tolist()], device=a.device)
        full = a.new_zeros(*a.shape[:3], ids.numel())
        full[..., cols] = a
        rows.append(full)
    return torch.cat(rows, dim=2), ids  # (B, h, L, L_k)
