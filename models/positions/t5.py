"""A learned bias per distance bucket: ``t5`` (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer").

One learned scalar per (bucket, head), shared by all layers, is added to the scaled scores
(``rel_bias``). Half the buckets (per direction when bidirectional) are exact distances, the rest
log-spaced up to ``t5_max_distance``; ``t5_relative_bucket`` is T5's formula bit for bit, also used
by TUPE-R's relative bias (``untied.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import SCORE_BIAS, PositionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import INIT_STD, NoPosition, relative_range

# rows of a learned table, and a distance (nothing is allocated per unit)
T5_NUM_BUCKETS = Param("t5_num_buckets", int, 32, range=(2, 1024), cap=256)
T5_MAX_DISTANCE = Param("t5_max_distance", int, 128, range=(1, 1 << 20), cap=16384)


def t5_relative_bucket(
    relative_position: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of ``relative_position = j - i`` (memory position minus query position).

    Half the buckets (per direction when bidirectional) are exact distances, the rest are
    log-spaced up to ``max_distance``; farther distances share the last bucket. In the
    unidirectional case keys after the query (``j > i``) all land in bucket 0.
    """
    t5_bucket_check(bidirectional, num_buckets, max_distance)
    rel = torch.as_tensor(relative_position).long()
    bucket = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (rel > 0).long() * num_buckets
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = dist < max_exact
    # float32 arithmetic as in T5 / HF, so bucket edges agree bit for bit; clamp avoids log(0)
    large = (
        max_exact
        + (
            torch.log(dist.clamp(min=1).float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(is_small, dist, large)


def t5_exact_range(bidirectional: bool, num_buckets: int) -> int:
    """Distances ``0 .. max_exact - 1`` get a bucket each; ``max_exact = num_buckets (/2 if
    bidirectional) / 2``."""
    return (num_buckets // 2 if bidirectional else num_buckets) // 2


def t5_bucket_check(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    """``ValueError`` for settings T5's formula cannot evaluate: it needs at least one exact bucket
    (``max_exact >= 1``, it divides by it) and ``max_distance > max_exact`` (it divides by
    ``log(max_distance / max_exact)``; at or below the exact range the log-spaced buckets would be
    infinite or negative)."""
    max_exact = t5_exact_range(bidirectional, num_buckets)
    if max_exact < 1:
        need = 4 if bidirectional else 2
        raise ValueError(
            f"t5 buckets: num_buckets={num_buckets} leaves no exact bucket "
            f"({'bidirectional: ' if bidirectional else ''}need num_buckets >= {need})"
        )
    if max_distance <= max_exact:
        raise ValueError(
            f"t5 buckets: max_distance={max_distance} must exceed the exact range "
            f"max_exact={max_exact} (num_buckets={num_buckets}, bidirectional={bidirectional})"
        )


class T5Bias(NoPosition):
    """One learned scalar per (bucket, head), shared by all layers, added to the scaled scores."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.bidirectional = not cfg.causal
        self.num_buckets = cfg.t5_num_buckets
        self.max_distance = cfg.t5_max_distance
        self.bias = nn.Embedding(cfg.t5_num_buckets, cfg.n_heads)
        nn.init.normal_(self.bias.weight, std=INIT_STD)

    def modify(self, q, k, layer, k_start=0, scale=None):
        rel = relative_range(k.shape[2], q.device)
        buckets = t5_relative_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        rel_bias = self.bias(buckets).transpose(0, 1)  # (2Lk-1, h) -> (h, 2Lk-1)
        return q, k, {"rel_bias": rel_bias}


def check_t5(cfg) -> None:
    bidirectional = not cfg.causal
    max_exact = t5_exact_range(bidirectional, cfg.t5_num_buckets)
    if max_exact < 1:
        need = 4 if bidirectional else 2
        raise ConfigError(
            "t5_num_buckets",
            cfg.t5_num_buckets,
            f"an integer >= {need} with causal={cfg.causal}: half the buckets"
            f"{' of each direction' if bidirectional else ''} are exact distances, and there "
            "must be at least one",
        )
    if cfg.t5_max_distance <= max_exact:
        raise ConfigError(
            "t5_max_distance",
            cfg.t5_max_distance,
            f"an integer > {max_exact} (the exact range of t5_num_buckets={cfg.t5_num_buckets}, "
            f"causal={cfg.causal}): distances past the exact range are log-spaced up to "
            "t5_max_distance",
        )


VARIANTS = (
    Variant(
        "t5",
        "Raffel et al. 2020 (T5)",
        "A learned per-head bias for log-spaced distance buckets added to the attention scores.",
        build=T5Bias,
        params=(T5_NUM_BUCKETS, T5_MAX_DISTANCE, "causal"),
        check=check_t5,
        caps=PositionCaps(produces=frozenset({SCORE_BIAS}), relative=True),
        n_params=lambda c: c.t5_num_buckets * c.n_heads,
    ),
)
