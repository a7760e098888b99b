"""LSH attention: Kitaev, Kaiser & Levskaya 2020, "Reformer: The Efficient Transformer".

Shared-QK: the keys are the unit-normalised queries (``k_j = q_j / |q_j|``; the K projection is
not used), so similar vectors hash together. Per hash round ``r`` a fixed random rotation
``R_r [d_h, n_buckets/2]`` (drawn once from ``cfg.seed``, a buffer) gives the angular LSH bucket
``h(x) = argmax([xR; -xR])``. Positions are sorted by ``(bucket, position)`` and each bucket's run
is cut into chunks of ``chunk_size``; a query attends the keys of its own and the previous chunk
that share its bucket (and ``j <= i`` when causal). A position attends itself only when it has no
other target (Reformer masks self with logit -1e5; here such a row puts probability 1 on itself
and its round gets log-sum-exp weight ``SELF_LOGIT``, so it only matters when every round is a
fallback).

Chunking convention: the paper chunks the one sorted sequence, so chunk boundaries move when a
*later* token changes bucket, which leaks the future into a causal model. Here every bucket's run
starts a fresh chunk (the sorted sequence with each bucket padded to a multiple of
``chunk_size``): a query's chunk depends only on how many earlier positions share its bucket, so
the causal model leaks nothing. Pairs in different buckets never attend in either scheme.

Rounds are combined by their log-sum-exp weights: ``out_i = sum_r softmax_r(lse_r,i) out_r,i``
(no correction for pairs found by several rounds). The effective attention is the same
combination of the rounds' sparse softmax matrices, so its rows sum to 1. Work and memory per
round are ``O(L * 2 * chunk_size)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, SCORE_BIAS, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG, check_no_memory, expand_kv, gather_rows, group_ranks, pair_bias, scatter_dense

# the rotations drawn, the hash rounds and the chunk of each sorted bucket: buffers and per-forward
# work grow with these (their product is capped in the check)
N_BUCKETS = Param("n_buckets", int, 8, range=(2, 1024), cap=256)
N_HASHES = Param("n_hashes", int, 2, range=(1, 16), cap=8)
CHUNK_SIZE = Param("chunk_size", int, 32, range=(1, 1024), cap=1024)

SELF_LOGIT = -1e5  # Reformer's logit for the "attend yourself" fallback
_SALT = 0x5EF  # separates this family's random stream from the others seeded by cfg.seed


def lsh_buckets(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular LSH: ``x [B, h, L, d]``, ``rotations [d, nb/2]`` -> bucket ids ``[B, h, L]`` in ``[0, nb)``."""
    xr = x.float() @ rotations  # (B, h, L, nb/2)
    return torch.cat([xr, -xr], dim=-1).argmax(-1)


class LSHAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT)
        rot = torch.randn(cfg.n_hashes, cfg.d_head, cfg.n_buckets // 2, generator=gen)
        self.register_buffer("rotations", rot)  # fixed per model, saved with it

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        if k.shape[2] != L:
            raise ConfigError("memory", cfg.memory, "'none': lsh attention keys are the queries (shared-QK)")
        v = expand_kv(v, h)
        kn = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6)  # shared-QK keys (B, h, L, d_h)
        outs, lses, denses, first = [], [], [], None
        for r in range(cfg.n_hashes):
            buckets = lsh_buckets(q, self.rotations[r])
            first = buckets if first is None else first
            out, lse, dense = self._round(q, kn, v, buckets, mods, ctx.need_weights)
            outs.append(out)
            lses.append(lse)
            denses.append(dense)
        w = torch.softmax(torch.stack(lses), dim=0)  # (n_hashes, B, h, L) round weights per query
        out = (w.unsqueeze(-1) * torch.stack(outs)).sum(0)
        probs = None
        if ctx.need_weights:
            probs = (w.unsqueeze(-1) * torch.stack(denses)).sum(0).to(q.dtype)  # (B, h, L, L)
        return out.to(q.dtype), probs, {"buckets": first}

    def _round(self, q, kn, v, buckets, mods, need_weights):
        """One hash round: ``(out [B, h, L, d], lse [B, h, L], dense probs or None)``."""
        cfg = self.cfg
        B, h, L, d = q.shape
        c, nb = cfg.chunk_size, cfg.n_buckets
        rank, counts = group_ranks(buckets, nb)
        padded = (counts + c - 1) // c * c  # every bucket's run padded to whole chunks
        offset = padded.cumsum(-1) - padded
        slot_of = offset.gather(-1, buckets) + rank  # (B, h, L) slot of each position
        n_slots = int(padded.sum(-1).max())
        nc = n_slots // c
        slot_pos = torch.full((B, h, n_slots), -1, dtype=torch.long, device=q.device)
        slot_pos.scatter_(-1, slot_of, torch.arange(L, device=q.device).expand(B, h, L))
        valid = slot_pos >= 0
        src = slot_pos.clamp(min=0)
        qs = gather_rows(q, src).view(B, h, nc, c, d)  # (B, h, nc, c, d_h)
        ks, vs = gather_rows(kn, src), gather_rows(v, src)
        bs = torch.where(valid, buckets.gather(-1, src), -1)

        def look_back(x):  # keys of the previous chunk, then of the own chunk: (B, h, nc, 2c, ...)
            x = x.view(B, h, nc, c, *x.shape[3:])
            return torch.cat([x.roll(1, dims=2), x], dim=3)

        k2, v2 = look_back(ks), look_back(vs)
        pos_q, pos_k = slot_pos.view(B, h, nc, c), look_back(slot_pos)
        b_q, b_k = bs.view(B, h, nc, c), look_back(bs)
        slot_q = torch.arange(n_slots, device=q.device).view(nc, c)
        slot_k = torch.cat([slot_q.roll(1, dims=0), slot_q], dim=1)  # (nc, 2c)
        k_ok = look_back(valid)
        k_ok[:, :, 0, :c] = False  # the first chunk has no previous chunk (no wrap-around)

        s = torch.einsum("bhncd,bhnkd->bhnck", qs.float(), k2.float()) / math.sqrt(d)  # (B, h, nc, c, 2c)
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        rel = pos_k.unsqueeze(-2) - pos_q.unsqueeze(-1)
        bias = pair_bias(mods, rel, L, h)
        if bias is not None:
            s = s + bias
        # with a single chunk the look-back half is the chunk itself: k_ok keeps one copy of self
        is_self = (slot_k.unsqueeze(-2) == slot_q.unsqueeze(-1)) & k_ok.unsqueeze(-2)  # (B, h, nc, c, 2c)
        allowed = k_ok.unsqueeze(-2) & (b_k.unsqueeze(-2) == b_q.unsqueeze(-1)) & ~is_self
        if cfg.causal:
            allowed = allowed & (rel <= 0)
        has_other = allowed.any(-1)  # (B, h, nc, c)
        logits = torch.where(allowed, s, NEG)
        lse = torch.logsumexp(logits, dim=-1)
        p = torch.exp(logits - lse.unsqueeze(-1))
        p = torch.where(has_other.unsqueeze(-1), p, is_self.to(p.dtype))  # fallback: attend yourself
        lse = torch.where(has_other, lse, SELF_LOGIT)
        out = (p @ v2.float()).view(B, h, n_slots, d)
        out = gather_rows(out, slot_of)  # back to position order (B, h, L, d_h)
        lse = lse.view(B, h, n_slots).gather(-1, slot_of)
        dense = None
        if need_weights:
            ok = valid.view(B, h, nc, c, 1) & k_ok.unsqueeze(-2)
            dense = scatter_dense(
                p,
                pos_q.unsqueeze(-1).expand_as(p).clamp(min=0),
                pos_k.unsqueeze(-2).expand_as(p).clamp(min=0),
                L,
                L,
                ok,
            )
        return out, lse, dense


MAX_HASH_UNITS = 4096  # n_buckets * n_hashes: rotation columns drawn and argmax-ed per query
MAX_PADDED_SLOTS = 1 << 14  # n_buckets * chunk_size: each non-empty bucket is padded to whole chunks


def check(cfg) -> None:
    if cfg.n_buckets % 2:
        raise ConfigError("n_buckets", cfg.n_buckets, "an even integer >= 2 (buckets come from argmax([xR; -xR]))")
    if cfg.n_buckets * cfg.n_hashes > MAX_HASH_UNITS:
        raise ConfigError(
            "n_buckets",
            cfg.n_buckets,
            f"an even integer with n_buckets * n_hashes <= {MAX_HASH_UNITS} (n_hashes={cfg.n_hashes}): "
            "each round draws n_buckets/2 rotations and sorts every query by its bucket",
        )
    if cfg.n_buckets * cfg.chunk_size > MAX_PADDED_SLOTS:
        raise ConfigError(
            "chunk_size",
            cfg.chunk_size,
            f"an integer with n_buckets * chunk_size <= {MAX_PADDED_SLOTS} (n_buckets={cfg.n_buckets}): "
            "every non-empty bucket is padded to whole chunks, and each slot scores 2 * chunk_size keys",
        )
    check_no_memory(
        cfg,
        "lsh",
        "shared-QK LSH attention uses the queries as keys, so there are no "
        "queries (hence no keys) for prepended memory positions",
    )


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY, SCORE_BIAS}),
    memory_keys=False,
    shared_qk=True,
    refuses_because=(
        "adds no relative key/value vectors inside its hashed chunks (scalar biases such as t5 / alibi work)"
    ),
)

VARIANTS = (
    Variant(
        "lsh",
        "Kitaev et al. 2020 (Reformer)",
        "Shared-QK attention inside hash buckets: similar vectors land in the same bucket and attend within "
        "sorted chunks.",
        build=LSHAttention,
        params=(N_BUCKETS, N_HASHES, CHUNK_SIZE),
        check=check,
        caps=CAPS,
    ),
)
