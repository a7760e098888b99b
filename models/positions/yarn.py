"""YaRN scaling of RoPE (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
Models"): the ``rope`` encoding's frequencies when ``yarn_factor`` is set (gpt-oss, Qwen2.5 long context).

RoPE turns the pair ``k`` (of ``dim`` rotated dims) by ``theta_k = base^(-2k/dim)``, one turn every
``lambda_k = 2 pi / theta_k`` positions. A model pretrained on ``L = yarn_original_max_len`` positions saw
``r_k = L / lambda_k`` turns of pair ``k``. YaRN ("NTK-by-parts" with an attention temperature) stretches the
context by ``s = yarn_factor``:

- pairs that turned many times in ``L`` (``r_k > beta_fast``, high frequencies) keep ``theta_k``
  (extrapolation); pairs that turned less than ``beta_slow`` times are interpolated, ``theta_k / s`` (position
  interpolation); between the two a linear ramp mixes them:
  ``theta'_k = (1 - gamma_k) theta_k / s + gamma_k theta_k``.
- The ramp is linear in the pair index ``k``, between the indices where ``r_k`` crosses ``beta_fast`` and
  ``beta_slow``: ``k(r) = dim ln(L / (2 pi r)) / (2 ln base)`` (the paper's reference code and transformers'
  ``_compute_yarn_parameters``, which this reproduces exactly): ``low = k(beta_fast)``, ``high = k(beta_slow)``,
  rounded outward (``floor`` / ``ceil``) when ``yarn_truncate``, clipped to ``[0, dim - 1]``;
  ``gamma_k = 1 - clamp((k - low) / (high - low), 0, 1)`` (``high`` moved by 0.001 if it equals ``low``).
- Attention temperature: queries and keys are both multiplied by ``m = 0.1 ln s + 1`` (``sqrt(1/t)`` of the
  paper, section 3.4; 1 when ``s <= 1``), i.e. every score by ``m^2``. ``yarn_attention_factor`` replaces ``m``
  when set (a checkpoint's ``attention_factor``, or DeepSeek's ``mscale`` ratio computed by its reader).
- DeepSeek's softmax temperature (``yarn_mscale_all_dim``, DeepSeek-V2/V3's ``mscale_all_dim``; ``attention='mla'``
  only): the attention's scale ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)`` is multiplied by ``m_all^2``,
  ``m_all = 0.1 mscale_all_dim ln s + 1`` (1 when ``s <= 1``), so the position-free part of every score gets the
  paper's temperature too (transformers' ``yarn_apply_mscale`` in ``modeling_deepseek_v3.py``). DeepSeek's
  checkpoints set ``mscale = mscale_all_dim = 1``: the cos / sin factor is then ``m / m_all = 1`` and every
  score, the rotated part included, is multiplied by ``(0.1 ln s + 1)^2`` once. None (the default): no change.

Defaults are gpt-oss's published settings (``factor 32``, ``original_max_position_embeddings 4096``,
``beta_fast 32``, ``beta_slow 1``), with ``yarn_truncate=True`` as transformers reads a config without
``truncate`` (gpt-oss's own config sets it false). The rotation runs in plain PyTorch (not the fused
kernel, whose angles come from ``base`` alone); it is rotate-half, as ``rope``'s.
"""

from __future__ import annotations

import math

import torch

from ..errors import ConfigError
from ..variant import Param

# None: plain RoPE; a number >= 1: YaRN's context-extension factor s
YARN_FACTOR = Param("yarn_factor", float, None, optional=True, label="YaRN factor s (0 = off)", surgery=True)
YARN_ORIGINAL = Param(
    "yarn_original_max_len", int, 4096, range=(1, 1 << 20), cap=1 << 20, label="YaRN original context L"
)  # a length in a formula, allocating nothing: capped only by its range
YARN_BETA_FAST = Param("yarn_beta_fast", float, 32.0, label="YaRN beta_fast (turns: extrapolate above)")
YARN_BETA_SLOW = Param("yarn_beta_slow", float, 1.0, label="YaRN beta_slow (turns: interpolate below)")
YARN_TRUNCATE = Param("yarn_truncate", bool, True, label="YaRN ramp bounds rounded outward")
YARN_ATTENTION = Param(
    "yarn_attention_factor", float, None, optional=True, label="YaRN attention factor (0 = 0.1 ln s + 1)"
)
YARN_MSCALE_ALL_DIM = Param(
    "yarn_mscale_all_dim", float, None, optional=True, label="YaRN mscale_all_dim (MLA scale x m^2; 0 = off)"
)
YARN_PARAMS = (
    YARN_FACTOR,
    YARN_ORIGINAL,
    YARN_BETA_FAST,
    YARN_BETA_SLOW,
    YARN_TRUNCATE,
    YARN_ATTENTION,
    YARN_MSCALE_ALL_DIM,
)
YARN_FIELDS = tuple(p.name for p in YARN_PARAMS)


def correction_dim(turns: float, dim: int, base: float, original: int) -> float:
    """The pair index ``k`` at which RoPE's pair turns ``turns`` times in ``original`` positions."""
    return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))


def yarn_inv_freq(
    dim: int, base: float, factor: float, original: int, beta_fast: float, beta_slow: float, truncate: bool
) -> torch.Tensor:
    """YaRN's angle per position of each of the ``dim // 2`` pairs, float64 ``(dim // 2,)``."""
    low, high = correction_dim(beta_fast, dim, base, original), correction_dim(beta_slow, dim, base, original)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # the reference code's guard against a zero-width ramp
    k = torch.arange(dim // 2, dtype=torch.float64, device="cpu")  # real values, also while a model is built on meta
    theta = base ** (-2 * k / dim)  # (dim/2,) plain RoPE
    ramp = ((k - low) / (high - low)).clamp(0, 1)  # 0: extrapolate (keep theta), 1: interpolate (theta / s)
    return theta / factor * ramp + theta * (1 - ramp)


def yarn_mscale(factor: float, attention_factor: float | None = None) -> float:
    """What queries and keys are each multiplied by: ``attention_factor``, else ``0.1 ln s + 1`` (1 for s <= 1)."""
    if attention_factor is not None:
        return float(attention_factor)
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def softmax_scale_mult(cfg) -> float:
    """What ``attention='mla'`` multiplies its softmax scale by: ``m_all^2`` with ``m_all = 0.1 mscale_all_dim ln s
    + 1`` (1 for ``s <= 1``) when ``yarn_mscale_all_dim`` is set, else 1."""
    if cfg.yarn_mscale_all_dim is None or cfg.yarn_factor is None:
        return 1.0
    m = 1.0 if cfg.yarn_factor <= 1 else 0.1 * cfg.yarn_mscale_all_dim * math.log(cfg.yarn_factor) + 1.0
    return m * m


def config_inv_freq(cfg, dim: int) -> torch.Tensor:
    """``yarn_inv_freq`` of a config's fields for heads rotating ``dim`` dims."""
    return yarn_inv_freq(
        dim,
        cfg.rope_base,
        cfg.yarn_factor,
        cfg.yarn_original_max_len,
        cfg.yarn_beta_fast,
        cfg.yarn_beta_slow,
        cfg.yarn_truncate,
    )


def rotate(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, mscale: float) -> torch.Tensor:
    """Rotate-half ``x (..., L, d)`` by ``positions (L,)`` times ``inv_freq (d/2,)``, times ``mscale``; computed
    in float32 (or the input's wider dtype) as transformers' rotary embedding computes its cos / sin."""
    d = x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32)
    ang = positions.to(device=x.device, dtype=work)[:, None] * inv_freq.to(device=x.device, dtype=work)  # (L, d/2)
    c, s = torch.cos(ang) * mscale, torch.sin(ang) * mscale
    x1, x2 = x[..., : d // 2].to(work), x[..., d // 2 :].to(work)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def check_yarn(cfg) -> None:
    """The YaRN fields' ranges and combinations (called from ``rope``'s check)."""
    if cfg.yarn_factor is None:
        return
    if not (math.isfinite(cfg.yarn_factor) and 1 <= cfg.yarn_factor <= 1000):
        raise ConfigError(
            "yarn_factor", cfg.yarn_factor, "None (no YaRN) or a number from 1 to 1000 (the context extension s)"
        )
    if cfg.rope_scale != 1.0:
        raise ConfigError(
            "rope_scale",
            cfg.rope_scale,
            "1.0 with yarn_factor set (YaRN interpolates the low frequencies itself; both would scale twice)",
        )
    if cfg.rope_local_base is not None:
        raise ConfigError(
            "rope_local_base",
            cfg.rope_local_base,
            "None with yarn_factor set (YaRN's frequencies are computed from one base)",
        )
    fast, slow = cfg.yarn_beta_fast, cfg.yarn_beta_slow
    if not (math.isfinite(fast) and math.isfinite(slow) and fast > slow > 0):
        raise ConfigError(
            "yarn_beta_fast",
            fast,
            f"finite numbers beta_fast > beta_slow > 0 (turns in the original context; beta_slow={slow})",
        )
    mscale = cfg.yarn_attention_factor
    if mscale is not None and not (math.isfinite(mscale) and 0 < mscale <= 100):
        raise ConfigError("yarn_attention_factor", mscale, "None (0.1 ln s + 1) or a number in (0, 100]")


def check_mscale_all_dim(cfg) -> None:
    """``yarn_mscale_all_dim``: a positive number, with YaRN on and every layer's attention ``mla`` (called from
    ``ModelConfig.validate``, which validates a schedule's layer kinds one by one)."""
    value = cfg.yarn_mscale_all_dim
    if value is None:
        return
    if not (math.isfinite(value) and 0 < value <= 1000):
        raise ConfigError("yarn_mscale_all_dim", value, "None (no change) or a number in (0, 1000]")
    if cfg.yarn_factor is None:
        raise ConfigError(
            "yarn_mscale_all_dim", value, "None without yarn_factor (it is YaRN's temperature for factor s)"
        )
    if cfg.attention != "mla":
        raise ConfigError(
            "yarn_mscale_all_dim",
            value,
            f"None with attention={cfg.attention!r}: only 'mla' multiplies its softmax scale by DeepSeek's "
            "m_all^2 (transformers' DeepseekV3Attention); other attentions take YaRN's factor on q and k only",
        )
