"""Patterns and providers of ``python -m benchmarks.kernel_speed`` (the CLI is benchmarks/kernel_speed.py).

A *provider* is one way of computing causal attention over a pattern. ``prepare(name, pattern, q)``
builds everything that does not belong in the timing (block masks, dense reference masks,
compiled functions) and returns a :class:`Prepared` whose ``fn(q, k, v)`` is the timed work.

FLOP counts follow the FlashAttention convention ``4 * B * h * L^2 * d``
forward, halved for causal, for the dense providers (SDPA, the reference). Block-sparse providers
count the work they do: the area of the tiles their block mask visits (``n_visited * bq * bk``,
64 x 64 tiles for ours, 128 x 128 for FlexAttention) times ``4 * B * h * d``; partial (diagonal,
window-edge) tiles count whole, as they are computed whole. Backward counts 2.5x forward.

The catalogue patterns (the structured patterns of docs/catalogue.md) come from ``models.attention``,
which is why this benchmark lives in ``models`` and not in ``kernels`` (``kernels`` imports nothing
from ``models``). The model imports stay inside the functions: ``import models`` does not load
the benchmark, and the benchmark does not load the whole catalogue until a pattern needs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Parameters of each benchmarked pattern; all are causal.
PATTERNS = {
    "full": {},
    "sliding_window": {"window": 256},
    "bigbird": {"window": 256, "n_global": 2, "n_random": 2, "block_size": 64, "seed": 0},
    "longformer": {"window": 256, "n_global": 2},
}
PROVIDERS = ("ours", "sdpa", "flex", "ref")
BWD_FACTOR = 2.5  # backward FLOPs / forward FLOPs (FlashAttention convention)


class Unavailable(Exception):
    """The provider cannot run on this machine at all (e.g. torch.compile has no compiler)."""


@dataclass
class Prepared:
    fn: Callable  # fn(q, k, v) -> out [B, h, L, d]
    backend: str  # what actually runs, for the table
    flops_fwd: float  # forward FLOPs by the convention above
    status: str | None = None  # set when the cell must not run: "skipped", "n/a"
    compiles: bool = False  # first call compiles: run once more before timing
    backward: bool = True  # False: fwd+bwd cells are "n/a"
    same_pattern: bool = True  # computes exactly the pattern (so its output is checked against ours)


def pattern_config(pattern: str):
    """The catalogue ``ModelConfig`` of a benchmarked pattern (always causal)."""
    from models import ModelConfig

    cfg = ModelConfig(attention=pattern, causal=True, **PATTERNS[pattern])
    cfg.validate()
    return cfg


def dense_causal_flops(B, h, L, d) -> float:
    return 4.0 * B * h * L * L * d / 2


def tile_flops(n_visited, bq, bk, B, h, d) -> float:
    return 4.0 * n_visited * bq * bk * B * h * d


def _prepare_ours(pattern, q):
    import kernels

    B, h, L, d = q.shape
    if pattern == "full":  # what models.attention runs for `full`: no layout, dense causal kernel
        return Prepared(
            lambda q, k, v: kernels.attention(q, k, v, causal=True),
            kernels.attention_backend(q.device),
            dense_causal_flops(B, h, L, d),
        )
    from models.attention.sparse import pattern_block_mask

    bm = pattern_block_mask(pattern_config(pattern), L).to(q.device)  # holds the causal AND
    return Prepared(
        lambda q, k, v: kernels.attention(q, k, v, block_mask=bm),
        kernels.attention_backend(q.device, block_mask=bm),
        tile_flops(bm.n_visited, bm.block_q, bm.block_k, B, h, d),
    )


def _prepare_sdpa(pattern, q):
    """Dense causal SDPA; on CUDA forced to the flash backend (the FlashAttention-2 yardstick), so
    the table never compares against whichever backend SDPA happened to pick."""
    B, h, L, d = q.shape
    label = "sdpa causal (dense)" if pattern == "full" else "sdpa causal (dense baseline, not the pattern)"
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    if q.device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def fn(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        label = label.replace("sdpa", "sdpa flash backend")
    return Prepared(fn, label, dense_causal_flops(B, h, L, d), same_pattern=pattern == "full")


def flex_mask_mod(pattern: str, L: int):
    """``mask_mod(b, h, q_idx, kv_idx)`` of the catalogue pattern ANDed with causality."""
    if pattern == "full":
        return lambda b, h, q_idx, kv_idx: kv_idx <= q_idx
    from models.attention.layout import full_rule

    rule, _ = full_rule(pattern_config(pattern), L)  # bigbird: window + global + its random table
    return lambda b, h, q_idx, kv_idx: rule(q_idx, kv_idx) & (kv_idx <= q_idx)


def flex_block_mask(pattern: str, L: int, device):
    """FlexAttention ``BlockMask`` of the pattern (default BLOCK_SIZE 128)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(flex_mask_mod(pattern, L), None, None, L, L, device=device)


@functools.lru_cache(maxsize=1)
def compiled_flex():
    """``torch.compile(flex_attention, dynamic=False)``, built once (compilation itself happens at the
    first call of each shape): static shapes, as FlexAttention's own benchmarks compile it; a
    dynamic-shape kernel would be slower and not the yardstick."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError as e:
        raise Unavailable(f"no flex_attention in torch {torch.__version__}: {e}") from e
    return torch.compile(flex_attention, dynamic=False)


def _prepare_flex(pattern, q):
    B, h, L, d = q.shape
    flex = compiled_flex()
    fbm = flex_block_mask(pattern, L, q.device)
    n_visited = int(fbm.kv_num_blocks.sum())
    if fbm.full_kv_num_blocks is not None:
        n_visited += int(fbm.full_kv_num_blocks.sum())
    bq, bk = fbm.BLOCK_SIZE
    return Prepared(
        lambda q, k, v: flex(q, k, v, block_mask=fbm),
        f"flex_attention (compiled, {q.device.type})",
        tile_flops(n_visited, bq, bk, B, h, d),
        compiles=True,
        backward=q.device.type != "cpu",
    )  # FlexAttention has no CPU backward


def _prepare_ref(pattern, q, ref_max_bytes):
    import kernels

    B, h, L, d = q.shape
    flops = dense_causal_flops(B, h, L, d)
    if B * h * L * L * 4 > ref_max_bytes:  # one fp32 score matrix; the reference keeps several
        return Prepared(None, "reference (dense)", flops, status="skipped")
    mask = None
    if pattern != "full":
        from models.attention import pattern_mask

        mask = pattern_mask(pattern_config(pattern), L).to(q.device)
    return Prepared(
        lambda q, k, v: kernels.attention_ref(q, k, v, causal=True, mask=mask)[0], "reference (dense)", flops
    )


def prepare(provider: str, pattern: str, q: torch.Tensor, ref_max_bytes: float = 1 << 30) -> Prepared:
    """Set up ``provider`` for ``pattern`` at ``q``'s shape and device (not timed)."""
    if provider == "ours":
        return _prepare_ours(pattern, q)
    if provider == "sdpa":
        return _prepare_sdpa(pattern, q)
    if provider == "flex":
        return _prepare_flex(pattern, q)
    if provider == "ref":
        return _prepare_ref(pattern, q, ref_max_bytes)
    raise ValueError(f"unknown provider {provider!r}; valid: {list(PROVIDERS)}")
