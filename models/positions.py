"""Position encodings (catalogue section 4): one registry entry per way of telling token order.

Every build class is an ``nn.Module(cfg)`` with two hooks the model calls:

- ``embed(x, pos) -> x``: absolute encodings add to the token embeddings here
  (``sinusoidal``: Vaswani et al. 2017, "Attention Is All You Need";
  ``learned``: Gehring et al. 2017, "Convolutional Sequence to Sequence Learning").
- ``modify(q, k, layer, k_start=0, scale=None) -> (q, k, mods)``: relative encodings act inside
  attention. ``mods`` are keyword arguments of ``kernels.attention`` (see kernels/reference.py for
  the score convention): ``rope`` rotates q and k (Su et al. 2021, RoFormer), ``alibi`` returns
  per-head slopes (Press et al. 2022, "Train Short, Test Long"), ``t5`` a learned bucketed bias
  (Raffel et al. 2020, T5), ``shaw`` clipped relative key / value vectors (Shaw et al. 2018,
  "Self-Attention with Relative Position Representations"), ``xl`` Transformer-XL's
  ``(q + u) . k + (q + v) . W_R r`` score (Dai et al. 2019).
  ``none`` (NoPE, Kazemnejad et al. 2023) does nothing and relies on the causal mask.

Keys sit at absolute positions ``k_start .. k_start + Lk - 1``; queries are the last ``Lq`` of
them, so ``rel = j - i_abs`` and relative tables of ``2 Lk - 1`` rows are indexed by
``rel + Lk - 1``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from kernels.rope import apply_rope as _kernel_rope
from kernels.rope import apply_rope_ref as _rope_ref

from .capabilities import RELATIVE_KV, ROTARY, SCORE_BIAS, PositionCaps
from .errors import ConfigError
from .variant import Variant, register
from .positions_floater import VARIANT as _FLOATER
from .positions_untied import variants as _untied

POSITION: dict = {}

_INIT_STD = 0.02  # small normal init of learned tables (GPT-2 / T5-style)


# ---------------------------------------------------------------------------- public helpers
def _sinusoid(positions: torch.Tensor, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``PE[p, 2k] = sin(p / 10000^(2k/dim))``, ``PE[p, 2k+1] = cos(...)`` for float ``positions``.

    Computed in float64 and returned in ``dtype`` (float32 by default; a float64 model asks for
    float64, so its table is not rounded through float32)."""
    pos = positions.to(torch.float64)[:, None]
    two_k = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)
    angle = pos / torch.pow(10000.0, two_k / dim)  # (P, ceil(dim/2))
    pe = torch.empty(positions.shape[0], dim, dtype=torch.float64, device=positions.device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])  # odd dim: the last sin column has no cos partner
    return pe.to(dtype)


def _table_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 activations, else the activations' own dtype (added in it anyway)."""
    return dtype if dtype.is_floating_point else torch.float32


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    """The Vaswani 2017 table ``[length, dim]`` (float32); ``dim`` may be odd."""
    return _sinusoid(torch.arange(length), dim)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate ``x [..., L, d_h]`` by ``positions [L]``; dim ``k`` pairs with ``k + d_h/2``.

    The pair ``(x_k, x_{k+d_h/2})`` turns by angle ``pos * base^(-2k/d_h)`` (LLaMA's rotate-half).
    Runs ``kernels.rope.apply_rope``: the fused Triton kernel on CUDA, PyTorch on the CPU.
    """
    if x.shape[-1] % 2:
        raise ValueError(f"apply_rope needs an even head width, got d_h={x.shape[-1]}")
    positions = torch.as_tensor(positions, device=x.device)
    if positions.dim() == 1:
        return _kernel_rope(x, positions, base)
    # Per-sequence positions, e.g. [B, L] for x [B, h, L, d_h] (HF's position_ids): broadcast them.
    if positions.dim() == 2 and x.dim() == 4 and positions.shape[0] == x.shape[0]:
        positions = positions[:, None, :]
    return _rope_ref(x, positions, base)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi head slopes ``[n_heads]`` (Press 2022, reference / BLOOM rule for any ``n_heads``).

    ``n`` a power of two: ``m_h = 2^(-8h/n)``, ``h = 1..n``. Otherwise the largest power of two
    ``n' < n`` gives its ``n'`` slopes and the other heads take the ``2n'``-head slopes at 0-based
    indices 0, 2, 4, ...
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    n_pow = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    slopes = power_of_two(n_pow)
    if n_pow != n_heads:
        slopes += power_of_two(2 * n_pow)[0::2][: n_heads - n_pow]
    return torch.tensor(slopes, dtype=torch.float32)


def t5_relative_bucket(relative_position: torch.Tensor, bidirectional: bool = True,
                       num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
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
    large = max_exact + (
        torch.log(dist.clamp(min=1).float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
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
        raise ValueError(f"t5 buckets: num_buckets={num_buckets} leaves no exact bucket "
                         f"({'bidirectional: ' if bidirectional else ''}need num_buckets >= {need})")
    if max_distance <= max_exact:
        raise ValueError(f"t5 buckets: max_distance={max_distance} must exceed the exact range "
                         f"max_exact={max_exact} (num_buckets={num_buckets}, bidirectional={bidirectional})")


def _relative_range(lk: int, device=None) -> torch.Tensor:
    """``rel = j - i`` for rows ``0 .. 2Lk - 2`` of a relative table (row ``rel + Lk - 1``)."""
    return torch.arange(-(lk - 1), lk, device=device)


# ---------------------------------------------------------------------------- build classes
class NoPosition(nn.Module):
    """Base class: no absolute term, no attention modification."""

    def __init__(self, cfg):
        super().__init__()

    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return x

    def modify(self, q, k, layer: int, k_start: int = 0, scale=None):
        return q, k, {}


class Sinusoidal(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.d_model = cfg.d_model

    def embed(self, x, pos):
        return x + _sinusoid(pos, self.d_model, _table_dtype(x.dtype))  # (L, d) broadcast over B


class Learned(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.max_len = cfg.max_len
        self.table = nn.Embedding(cfg.max_len, cfg.d_model)
        nn.init.normal_(self.table.weight, std=_INIT_STD)

    def embed(self, x, pos):
        last = int(pos.max()) if pos.numel() else -1
        if last >= self.max_len:
            raise ConfigError(
                "max_len", self.max_len,
                f"the learned position table has max_len={self.max_len} rows (positions 0..{self.max_len - 1}) "
                f"but the input needs position {last} (sequence length L={x.shape[1]}); "
                f"set max_len >= {last + 1}, shorten the input, or use a relative position encoding")
        return x + self.table(pos).to(x.dtype)


class Shaw(NoPosition):
    """Clipped relative key/value vectors, width d_h, shared by heads, one pair of tables per layer."""

    def __init__(self, cfg):
        super().__init__(cfg)
        rows = 2 * cfg.max_relative + 1  # rel in [-max_relative, max_relative]
        self.rel_k = nn.ParameterList(
            [nn.Parameter(torch.randn(1, rows, cfg.d_head) * _INIT_STD) for _ in range(cfg.n_layers)])
        self.rel_v = nn.ParameterList(
            [nn.Parameter(torch.randn(1, rows, cfg.d_head) * _INIT_STD) for _ in range(cfg.n_layers)])

    def modify(self, q, k, layer, k_start=0, scale=None):
        # the kernel's clipped index with R = 2*max_relative+1 rows is exactly clip(j-i) + max_relative
        return q, k, {"rel_k": self.rel_k[layer], "rel_v": self.rel_v[layer]}


class T5Bias(NoPosition):
    """One learned scalar per (bucket, head), shared by all layers, added to the scaled scores."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.bidirectional = not cfg.causal
        self.num_buckets = cfg.t5_num_buckets
        self.max_distance = cfg.t5_max_distance
        self.bias = nn.Embedding(cfg.t5_num_buckets, cfg.n_heads)
        nn.init.normal_(self.bias.weight, std=_INIT_STD)

    def modify(self, q, k, layer, k_start=0, scale=None):
        rel = _relative_range(k.shape[2], q.device)
        buckets = t5_relative_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        rel_bias = self.bias(buckets).transpose(0, 1)  # (2Lk-1, h) -> (h, 2Lk-1)
        return q, k, {"rel_bias": rel_bias}


class TransformerXL(NoPosition):
    """``(q_i + u) . k_j + (q_i + v) . W_R r_(i-j)``, all times the attention scale.

    Written for the kernel as ``q' = q + u``, ``rel_k[h, rel + Lk - 1] = (W_R r_(-rel))_h`` and
    ``rel_bias = scale * (v - u)_h . rel_k``, since ``(q+u).R + (v-u).R = (q+v).R``.
    ``u, v`` are shared by all layers (as in the paper); ``W_R`` is per layer.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.d_model, self.n_heads, self.d_head = cfg.d_model, cfg.n_heads, cfg.d_head
        self.u = nn.Parameter(torch.randn(cfg.n_heads, cfg.d_head) * _INIT_STD)
        self.v = nn.Parameter(torch.randn(cfg.n_heads, cfg.d_head) * _INIT_STD)
        self.w_r = nn.ModuleList(
            [nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=False) for _ in range(cfg.n_layers)])

    def modify(self, q, k, layer, k_start=0, scale=None):
        lk, d_h = k.shape[2], q.shape[-1]
        scale = 1.0 / math.sqrt(d_h) if scale is None else scale
        w = self.w_r[layer].weight
        dist = -_relative_range(lk, q.device)  # i - j for each table row
        r = _sinusoid(dist, self.d_model, w.dtype)  # (2Lk-1, d)
        rel_k = self.w_r[layer](r).view(2 * lk - 1, self.n_heads, self.d_head).transpose(0, 1)  # (h, 2Lk-1, d_h)
        rel_bias = scale * torch.einsum("hd,hrd->hr", self.v - self.u, rel_k)  # (h, 2Lk-1)
        q = q + self.u[None, :, None, :].to(q.dtype)  # (B, h, Lq, d_h)
        return q, k, {"rel_k": rel_k, "rel_bias": rel_bias}


class Rope(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.base = cfg.rope_base

    def modify(self, q, k, layer, k_start=0, scale=None):
        lq, lk = q.shape[2], k.shape[2]
        k_pos = torch.arange(k_start, k_start + lk, device=q.device)
        return apply_rope(q, k_pos[lk - lq:], self.base), apply_rope(k, k_pos, self.base), {}


class Alibi(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)  # fixed, not learned

    def modify(self, q, k, layer, k_start=0, scale=None):
        return q, k, {"alibi_slopes": self.slopes}


# ---------------------------------------------------------------------------- checks
def _check_none(cfg) -> None:
    if not cfg.causal:
        raise ConfigError(
            "position", "none",
            "only meaningful with causal=True: a bidirectional model without positions is "
            "permutation-equivariant and cannot tell token order; choose another position or set causal=True")


def _check_t5(cfg) -> None:
    bidirectional = not cfg.causal
    max_exact = t5_exact_range(bidirectional, cfg.t5_num_buckets)
    if max_exact < 1:
        need = 4 if bidirectional else 2
        raise ConfigError("t5_num_buckets", cfg.t5_num_buckets,
                          f"an integer >= {need} with causal={cfg.causal}: half the buckets"
                          f"{' of each direction' if bidirectional else ''} are exact distances, and there "
                          "must be at least one")
    if cfg.t5_max_distance <= max_exact:
        raise ConfigError("t5_max_distance", cfg.t5_max_distance,
                          f"an integer > {max_exact} (the exact range of t5_num_buckets={cfg.t5_num_buckets}, "
                          f"causal={cfg.causal}): distances past the exact range are log-spaced up to "
                          "t5_max_distance")


def _check_rope(cfg) -> None:
    if cfg.d_head % 2:
        raise ConfigError(
            "d_model", cfg.d_model,
            f"rope rotates pairs of dimensions, so the head width d_model / n_heads = "
            f"{cfg.d_model} / {cfg.n_heads} = {cfg.d_head} must be even; change d_model or n_heads")
    if not (math.isfinite(cfg.rope_base) and cfg.rope_base > 0):
        raise ConfigError("rope_base", cfg.rope_base, "a finite positive number (the angles are pos * base^(-2k/d_h))")


# ---------------------------------------------------------------------------- registry
_ABS = PositionCaps(absolute=True)
_REL = lambda *kinds: PositionCaps(produces=frozenset(kinds), relative=True)  # noqa: E731

register(POSITION, Variant(
    "none", "Kazemnejad et al. 2023 (NoPE)",
    "No position information: a causal model can still infer order from the causal mask.",
    build=NoPosition, params=("causal",), check=_check_none, caps=PositionCaps()))
register(POSITION, Variant(
    "sinusoidal", "Vaswani et al. 2017",
    "Fixed sine/cosine waves of geometric wavelengths added to the token embeddings.",
    build=Sinusoidal, caps=_ABS))
register(POSITION, Variant(
    "learned", "Gehring et al. 2017",
    "A learned vector per absolute position added to the token embeddings; cannot go past max_len.",
    build=Learned, params=("max_len",), caps=_ABS, n_params=lambda c: c.max_len * c.d_model))
register(POSITION, Variant(
    "shaw", "Shaw et al. 2018",
    "Learned vectors for each clipped distance j - i added to keys and values inside attention.",
    build=Shaw, params=("max_relative",), caps=_REL(RELATIVE_KV),
    n_params=lambda c: 2 * c.n_layers * (2 * c.max_relative + 1) * c.d_head))
register(POSITION, Variant(
    "t5", "Raffel et al. 2020 (T5)",
    "A learned per-head bias for log-spaced distance buckets added to the attention scores.",
    build=T5Bias, params=("t5_num_buckets", "t5_max_distance", "causal"), check=_check_t5,
    caps=_REL(SCORE_BIAS), n_params=lambda c: c.t5_num_buckets * c.n_heads))
register(POSITION, Variant(
    "xl", "Dai et al. 2019 (Transformer-XL)",
    "Relative sinusoids projected per layer, with learned global content and position biases u, v.",
    build=TransformerXL, caps=_REL(SCORE_BIAS, RELATIVE_KV),
    n_params=lambda c: 2 * c.n_heads * c.d_head + c.n_layers * c.d_model * c.n_heads * c.d_head))
register(POSITION, Variant(
    "rope", "Su et al. 2021 (RoFormer)",
    "Rotates queries and keys by position-dependent angles so scores depend only on distance.",
    build=Rope, params=("rope_base",), check=_check_rope, caps=_REL(ROTARY)))
register(POSITION, Variant(
    "alibi", "Press et al. 2022 (ALiBi)",
    "Subtracts a fixed per-head slope times the distance from the scores; no learned parameters.",
    build=Alibi, caps=_REL(SCORE_BIAS)))

# issue 11: FLOATER (its own module: a neural-ODE position trajectory)

register(POSITION, _FLOATER)

# issue 11: DeBERTa and TUPE (a pair_bias term per (query, key))

for _v in _untied(t5_relative_bucket):
    register(POSITION, _v)
