"""Rotary position embedding: ``rope`` (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding").

Queries and keys are rotated by position-dependent angles before the mechanism sees them, so
``q . k`` depends only on the distance; any mechanism that forms ``q . k`` honours it. ``apply_rope``
runs ``kernels.rope`` (the fused Triton kernel on CUDA, PyTorch on the CPU).

Partial rotary embeddings (``rope_fraction`` < 1; GPT-NeoX's ``rotary_pct``, Black et al. 2022, transformers'
``partial_rotary_factor``): only the first ``rot = rotary_dims(cfg)`` dims of each head (``int(d_h *
rope_fraction)`` rounded down to even) are rotated, with rotate-half pairing *within* them (dim ``k`` with
``k + rot/2``) and ``theta_k = base^(-2k/rot)``; dims ``rot .. d_h - 1`` pass through unchanged, as
transformers' GPT-NeoX ``apply_rotary_pos_emb`` (``q[..., :rotary_dim]`` rotated, ``q[..., rotary_dim:]``
concatenated back) with its frequencies computed over ``dim = int(head_dim * partial_rotary_factor)``.

YaRN (Peng et al. 2023; ``yarn_factor`` and the ``yarn_*`` fields, ``models/positions/yarn.py``): the pairs'
angles per position are YaRN's mix of ``theta_k`` and ``theta_k / s``, and queries and keys are multiplied by
its attention factor after the rotation (transformers multiplies cos and sin by it).
"""

from __future__ import annotations

import math

import torch

from kernels.cpu.rope import apply_rope_ref as _rope_ref
from kernels.rope import apply_rope as _kernel_rope

from ..capabilities import ROTARY, PositionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import NoPosition
from .yarn import YARN_PARAMS, check_yarn, config_inv_freq, yarn_mscale
from .yarn import rotate as yarn_rotate

ROPE_BASE = Param("rope_base", float, 10000.0, surgery=True)
# Position interpolation (Chen et al. 2023): positions are divided by rope_scale, so a model trained on
# L positions reads rope_scale * L at the angles it knows; 1 = plain RoPE.
# RoPE base of a layer schedule's local layers (Gemma 3: 10k local, 1M global; models/schedule.py); None: rope_base
ROPE_LOCAL_BASE = Param(
    "rope_local_base", float, None, optional=True, label="RoPE base of local layers (0 = rope_base)", surgery=True
)
ROPE_SCALE = Param("rope_scale", float, 1.0, label="RoPE position scale (interpolation)", surgery=True)
# Partial rotation (GPT-NeoX rotary_pct): the share of each head's dims that is rotated; 1 = every dim.
ROPE_FRACTION = Param("rope_fraction", float, 1.0, label="RoPE fraction of head dims rotated", surgery=True)


def rotary_dims(cfg) -> int:
    """The rotated dims of a head: ``int(d_h * rope_fraction)`` rounded down to even."""
    return int(cfg.d_head * cfg.rope_fraction) // 2 * 2


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


class Rope(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.base = cfg.rope_base
        self.pos_scale = cfg.rope_scale
        self.rot = rotary_dims(cfg)
        self.whole = cfg.rope_fraction == 1.0  # every dim of what modify is given rotates (MLA: its qk_rope part)
        # YaRN (models/positions/yarn.py): its own angles per pair for each rotated width (float64, not a buffer:
        # recomputed from the config; MLA rotates qk_rope_head_dim numbers, not d_head) and the factor queries and
        # keys are multiplied by
        self.yarn = None
        if cfg.yarn_factor is not None:
            self.yarn = (cfg, {}, yarn_mscale(cfg.yarn_factor, cfg.yarn_attention_factor))

    def modify(self, q, k, layer, k_start=0, scale=None):
        lq, lk = q.shape[2], k.shape[2]
        k_pos = torch.arange(k_start, k_start + lk, device=q.device)
        if self.yarn is not None:
            cfg, inv_freqs, mscale = self.yarn

            def rotate(x, pos, base):
                dim = x.shape[-1]
                if dim not in inv_freqs:
                    inv_freqs[dim] = config_inv_freq(cfg, dim)
                return yarn_rotate(x, pos, inv_freqs[dim], mscale)

        elif self.pos_scale != 1:  # interpolated (fractional) positions: the reference rotation
            k_pos = k_pos.to(torch.float32) / self.pos_scale
            rotate = _rope_ref
        else:
            rotate = apply_rope
        return self._partial(rotate, q, k_pos[lk - lq :]), self._partial(rotate, k, k_pos), {}

    def _partial(self, rotate, x, pos):
        """``rotate`` the first ``rot`` dims of each head of ``x (B, n, L, d_h)``; the rest pass through. With
        ``rope_fraction = 1`` every dim of ``x`` rotates, whatever its width (MLA's ``qk_rope_head_dim`` part may
        be wider than ``d_model / n_heads``: DeepSeek-V3's 64 against 7168 / 128 = 56)."""
        if self.whole or self.rot == x.shape[-1]:
            return rotate(x, pos, self.base)
        return torch.cat([rotate(x[..., : self.rot], pos, self.base), x[..., self.rot :]], dim=-1)


def check_rope(cfg) -> None:
    if cfg.d_head % 2:
        if cfg.head_dim is not None:
            raise ConfigError(
                "head_dim", cfg.head_dim, "an even head width with position='rope' (rope rotates pairs of dimensions)"
            )
        raise ConfigError(
            "d_model",
            cfg.d_model,
            f"rope rotates pairs of dimensions, so the head width d_model / n_heads = "
            f"{cfg.d_model} / {cfg.n_heads} = {cfg.d_head} must be even; change d_model or n_heads (or set head_dim)",
        )
    if not (math.isfinite(cfg.rope_base) and cfg.rope_base > 0):
        raise ConfigError("rope_base", cfg.rope_base, "a finite positive number (the angles are pos * base^(-2k/d_h))")
    if not (math.isfinite(cfg.rope_fraction) and 0 < cfg.rope_fraction <= 1):
        raise ConfigError(
            "rope_fraction", cfg.rope_fraction, "a number in (0, 1]: the share of each head's dims that is rotated"
        )
    if rotary_dims(cfg) == 0:
        raise ConfigError(
            "rope_fraction",
            cfg.rope_fraction,
            f"at least 2 / d_h = 2 / {cfg.d_head}: int(d_h * rope_fraction) rounded down to even rotates "
            "no dimension at all (use position='none' for no positions)",
        )
    if not (math.isfinite(cfg.rope_scale) and 0.01 <= cfg.rope_scale <= 1000):
        raise ConfigError(
            "rope_scale", cfg.rope_scale, "a number from 0.01 to 1000 (positions are divided by it; 1 = plain RoPE)"
        )
    check_yarn(cfg)


VARIANTS = (
    Variant(
        "rope",
        "Su et al. 2021 (RoFormer)",
        "Rotates queries and keys by position-dependent angles so scores depend only on distance.",
        build=Rope,
        params=(ROPE_BASE, ROPE_SCALE, ROPE_FRACTION, ROPE_LOCAL_BASE, *YARN_PARAMS),
        check=check_rope,
        caps=PositionCaps(produces=frozenset({ROTARY}), relative=True),
    ),
)
