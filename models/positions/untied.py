"""Position encodings that add a content-dependent or absolute per-pair term to the scores.

Both produce the ``pair_bias`` modifier: a tensor ``[B or 1, h, Lq, Lk]`` added to the scaled scores
(after the softcap, like ``rel_bias``; kind ``pair_score``). Neither term is a function of
``j - i`` alone, so they cannot ride on ``rel_bias`` / ``rel_k``; only mechanisms that form every
score honour them.

- ``deberta`` (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention"):
  ``A_ij = (Qc_i . Kc_j + Qc_i . Kr_{d(i,j)} + Kc_j . Qr_{d(j,i)}) / sqrt(3 d_h)``. Relative
  positions ``i - j`` go through DeBERTa's log buckets (``deberta_buckets`` = position buckets,
  exact below half of them, log-spaced up to ``deberta_max_distance``), then
  ``d(i, j) = clamp(bucket(i - j) + S, 0, 2S - 1)`` with ``S = deberta_buckets`` (DeBERTa-v2's
  ``c2p_pos``; ``p2c_pos`` uses ``-bucket``). One table ``P [2S, d_model]`` is shared by all
  layers, projected per layer by ``W_kr`` / ``W_qr`` (no biases) into ``Kr``, ``Qr``. The
  content-to-position term is the kernels' ``rel_k`` (a table row per distance); the
  position-to-content term, which depends on the key's content, is the ``pair_bias``.
- ``tupe`` (Ke et al. 2021, "Rethinking Positional Encoding in Language Pre-training"):
  ``A_ij = (x_i W_Q . x_j W_K) / sqrt(2 d_h) + (p_i U_Q . p_j U_K) / sqrt(2 d_h) [+ b_(j-i)]``:
  a learned absolute table ``p [max_len, d_model]`` never added to the embeddings, its own
  projections ``U_Q, U_K`` shared by all layers (the paper shares the positional correlation
  across layers), and with ``tupe_relative`` TUPE-R's relative bias ``b`` in T5 buckets
  (``t5_num_buckets``, ``t5_max_distance``, ``t5.py``), per head, shared by layers. No [CLS] untying: these
  models have no [CLS] token.

The ``1/sqrt(3)`` / ``1/sqrt(2)`` of the content term is applied to ``q`` (the attention's own
``1/sqrt(d_h)`` stays), and the pair terms arrive already scaled.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import PAIR_SCORE, RELATIVE_KV, SCORE_BIAS, PositionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import INIT_STD
from .t5 import T5_MAX_DISTANCE, T5_NUM_BUCKETS, t5_relative_bucket

# DeBERTa's position buckets (rows of a learned table) and the distance they reach; TUPE-R's switch
DEBERTA_BUCKETS = Param("deberta_buckets", int, 32, range=(2, 4096), cap=256)
DEBERTA_MAX_DISTANCE = Param("deberta_max_distance", int, 128, range=(3, 1 << 20), cap=16384)
TUPE_RELATIVE = Param("tupe_relative", bool, False)


def deberta_log_bucket(rel: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """DeBERTa-v2's ``make_log_bucket_position``: exact for ``|rel| <= bucket_size // 2``, then
    ``sign * (ceil(log(|rel| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid)``."""
    mid = bucket_size // 2
    rel = rel.long()
    sign = torch.sign(rel)
    inside = (rel < mid) & (rel > -mid)
    abs_pos = torch.where(inside, torch.full_like(rel, mid - 1), rel.abs())
    log_pos = (
        torch.ceil(torch.log(abs_pos.double() / mid) / math.log((max_position - 1) / mid) * (mid - 1)).long() + mid
    )
    return torch.where(abs_pos <= mid, rel, log_pos * sign)


def _query_key_rel(lq: int, lk: int, device) -> torch.Tensor:
    """``i - j`` for query ``i`` (at absolute ``i + lk - lq``) and key ``j``: ``[lq, lk]``."""
    i = torch.arange(lq, device=device)[:, None] + (lk - lq)
    return i - torch.arange(lk, device=device)[None, :]


def _expand_heads(k: torch.Tensor, h: int) -> torch.Tensor:
    rep = h // k.shape[1]
    return k if rep == 1 else k.repeat_interleave(rep, dim=1)  # (B, h, Lk, d_h)


class DeBERTa(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.d_head = cfg.n_heads, cfg.d_head
        self.span, self.max_distance = cfg.deberta_buckets, cfg.deberta_max_distance
        self.rel_embed = nn.Parameter(torch.randn(2 * self.span, cfg.d_model) * INIT_STD)
        self.w_kr = nn.ModuleList(
            nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False) for _ in range(cfg.n_layers)
        )
        self.w_qr = nn.ModuleList(
            nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False) for _ in range(cfg.n_layers)
        )

    def embed(self, x, pos):
        return x

    def _index(self, rel: torch.Tensor) -> torch.Tensor:
        return (deberta_log_bucket(rel, self.span, self.max_distance) + self.span).clamp(0, 2 * self.span - 1)

    def modify(self, q, k, layer, k_start=0, scale=None):
        lq, lk, h, dh = q.shape[2], k.shape[2], self.h, self.d_head
        factor = 1.0 / math.sqrt(3 * dh)
        kr = self.w_kr[layer](self.rel_embed).view(2 * self.span, h, dh).transpose(0, 1)  # (h, 2S, d_h)
        qr = self.w_qr[layer](self.rel_embed).view(2 * self.span, h, dh).transpose(0, 1)
        # c2p: table row r holds j - i_abs = r - (Lk - 1), i.e. i - j = Lk - 1 - r
        rows = (lk - 1) - torch.arange(2 * lk - 1, device=q.device)
        rel_k = kr[:, self._index(rows)]  # (h, 2Lk-1, d_h)
        # p2c: Kc_j . Qr[clamp(-bucket(i - j) + S)] for every pair
        idx = self._index(-_query_key_rel(lq, lk, q.device))  # (Lq, Lk)
        kq = _expand_heads(k, h) @ qr.to(k.dtype).transpose(-1, -2)  # (B, h, Lk, 2S)
        pair = kq.gather(-1, idx.t().expand(*kq.shape[:2], lk, lq)).transpose(-1, -2)  # (B, h, Lq, Lk)
        q = q / math.sqrt(3.0)  # the kernel's 1/sqrt(d_h) then gives 1/sqrt(3 d_h) on c2c and c2p
        return q, k, {"rel_k": rel_k.to(q.dtype), "pair_bias": pair * factor}


class TUPE(nn.Module):
    def __init__(self, cfg, bucket_fn=t5_relative_bucket):
        super().__init__()
        self.bucket_fn = bucket_fn  # the relative bias's bucketing: T5's, unless the caller hands in another
        self.h, self.d_head, self.max_len = cfg.n_heads, cfg.d_head, cfg.max_len
        self.table = nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * INIT_STD)
        self.u_q = nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False)
        self.u_k = nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False)
        self.relative = bool(cfg.tupe_relative)
        if self.relative:
            self.bidirectional = not cfg.causal
            self.num_buckets, self.max_distance = cfg.t5_num_buckets, cfg.t5_max_distance
            self.bias = nn.Parameter(torch.randn(cfg.t5_num_buckets, cfg.n_heads) * INIT_STD)

    def embed(self, x, pos):
        return x  # untied: positions never enter the token representations

    def modify(self, q, k, layer, k_start=0, scale=None):
        lq, lk, h, dh = q.shape[2], k.shape[2], self.h, self.d_head
        k_pos = torch.arange(k_start, k_start + lk, device=q.device)
        if lk and int(k_pos[-1]) >= self.max_len:
            raise ConfigError(
                "max_len",
                self.max_len,
                f"an integer > {int(k_pos[-1])}: tupe's learned position table has max_len rows "
                f"and this call needs positions up to {int(k_pos[-1])}",
            )
        # learned memory tokens sit before position 0: they have no position, so no position term
        p = self.table[k_pos.clamp(min=0)] * (k_pos >= 0)[:, None].to(self.table.dtype)  # (Lk, d)
        a = self.u_q(p[lk - lq :]).view(lq, h, dh).transpose(0, 1)  # (h, Lq, d_h)
        b = self.u_k(p).view(lk, h, dh).transpose(0, 1)  # (h, Lk, d_h)
        pair = (a @ b.transpose(-1, -2)) / math.sqrt(2 * dh)  # (h, Lq, Lk)
        mods = {"pair_bias": pair[None].to(q.dtype)}
        if self.relative:
            rel = torch.arange(-(lk - 1), lk, device=q.device)
            buckets = self.bucket_fn(rel, self.bidirectional, self.num_buckets, self.max_distance)
            mods["rel_bias"] = self.bias[buckets].transpose(0, 1)  # (h, 2Lk-1)
        return q / math.sqrt(2.0), k, mods


# ---------------------------------------------------------------------------- checks and records
def check_deberta(cfg) -> None:
    mid = cfg.deberta_buckets // 2
    if cfg.deberta_max_distance - 1 <= mid:
        raise ConfigError(
            "deberta_max_distance",
            cfg.deberta_max_distance,
            f"an integer > {mid + 1} (half of deberta_buckets={cfg.deberta_buckets}, plus 1): "
            "distances past the exact half are log-spaced up to deberta_max_distance",
        )


def check_tupe(cfg) -> None:
    if cfg.tupe_relative and cfg.t5_max_distance <= (cfg.t5_num_buckets // (1 if cfg.causal else 2)) // 2:
        raise ConfigError(
            "t5_max_distance",
            cfg.t5_max_distance,
            "an integer past the exact range of t5_num_buckets (tupe_relative uses T5's buckets)",
        )


def _tupe_params(cfg) -> int:
    d, hd = cfg.d_model, cfg.n_heads * cfg.d_head
    return cfg.max_len * d + 2 * d * hd + (cfg.t5_num_buckets * cfg.n_heads if cfg.tupe_relative else 0)


VARIANTS = (
    Variant(
        "deberta",
        "He et al. 2021 (DeBERTa)",
        "Disentangled attention: content-to-content, content-to-position and position-to-content "
        "scores over log-bucketed relative positions, scaled by 1/sqrt(3 d_h).",
        build=DeBERTa,
        params=(DEBERTA_BUCKETS, DEBERTA_MAX_DISTANCE),
        check=check_deberta,
        caps=PositionCaps(produces=frozenset({RELATIVE_KV, PAIR_SCORE}), relative=True),
        n_params=lambda c: 2 * c.deberta_buckets * c.d_model + c.n_layers * 2 * c.d_model * c.n_heads * c.d_head,
    ),
    Variant(
        "tupe",
        "Ke et al. 2021 (TUPE)",
        "Untied positions: a separately projected absolute position correlation added to the "
        "scores, never to the embeddings; optional relative bias.",
        build=TUPE,
        params=("max_len", TUPE_RELATIVE, T5_NUM_BUCKETS, T5_MAX_DISTANCE),
        check=check_tupe,
        caps=PositionCaps(produces=frozenset({PAIR_SCORE, SCORE_BIAS})),
        n_params=_tupe_params,
    ),
)
