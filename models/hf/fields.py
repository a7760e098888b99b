"""Typed reads of ``config.json`` values: every value is hostile until it has the type it must have.

``Fields(hf)`` wraps the JSON object; ``integer(key)``, ``number(key)``, ``flag(key)``, ``text(key)``
return the value (or the default when the key is absent or null) and raise ``ConfigError`` naming
``config.json: key`` otherwise. ``refuse(key, value, why)`` is the one way a family says a value
cannot be expressed in the catalogue: by name, never approximated. ``rope(fields)`` reads RoPE's base
and scaling (none, linear, YaRN) from either spelling (``rope_theta`` + ``rope_scaling``, or transformers 5's
``rope_parameters``).
"""

from __future__ import annotations

import math

from ..errors import ConfigError

MISSING = object()


class Fields:
    """``hf``: the JSON object of config.json; ``names``: the checkpoint's tensor names (from the headers)."""

    def __init__(self, hf: dict, names=frozenset()):
        self.hf, self.names = hf, frozenset(names)

    def name(self, key: str) -> str:
        return f"config.json: {key}"

    def _get(self, key, default):
        value = self.hf.get(key)
        if value is None:
            if default is MISSING:
                raise ConfigError(self.name(key), None, "a value (this key is required)")
            return default
        return value

    def integer(self, key: str, default=MISSING, lo: int = 0, hi: int = 1 << 20) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(self.name(key), value, f"an integer in [{lo}, {hi}]")
        return value

    def number(self, key: str, default=MISSING) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(self.name(key), value, "a finite number")
        return float(value)

    def flag(self, key: str, default=MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(self.name(key), value, "true or false")
        return value

    def text(self, key: str, default=MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise ConfigError(self.name(key), value, "a string")
        return value

    def refuse(self, key: str, value, why: str):
        raise ConfigError(self.name(key), value, why)

    def require(self, key: str, expected, default=MISSING, why: str = "") -> None:
        """Refuse any value of ``key`` but ``expected`` (absent counts as ``default``)."""
        value = self.hf.get(key, default)
        if value is MISSING:
            value = None
        if value != expected:
            self.refuse(key, value, f"{expected!r}: {why}" if why else f"{expected!r} (other values are not supported)")


def rope(f: Fields, theta: float = 10000.0, scaling: dict | None = None) -> dict:
    """``{"rope_base": theta, "rope_scale": s}`` (and the ``yarn_*`` fields under YaRN) from the config's RoPE
    settings; ``theta`` / ``scaling``: the config class's defaults when config.json has none (gpt-oss: 150000
    and YaRN).

    Position interpolation (``"linear"``: positions divided by ``factor``) is the catalogue's ``rope_scale``;
    YaRN (``"yarn"``) its ``yarn_*`` fields (``yarn``); every other scaling type (dynamic NTK, LongRoPE, Llama
    3's) changes the frequencies in a way the catalogue does not express, and is refused by name."""
    params = f.hf.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict) or "rope_type" not in params and "type" not in params:
            f.refuse(
                "rope_parameters",
                str(params)[:80],
                "one object with rope_type and rope_theta (per-layer-type RoPE settings are not supported)",
            )
        theta = params.get("rope_theta", f.hf.get("rope_theta", theta))
        scaling = params
    else:
        theta = f.hf.get("rope_theta", theta)
        scaling = f.hf.get("rope_scaling", scaling)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (math.isfinite(theta) and theta > 0):
        f.refuse("rope_theta", theta, "a finite positive number (RoPE's base)")
    out = {"rope_base": float(theta), "rope_scale": 1.0}
    if scaling is not None:
        if not isinstance(scaling, dict):
            f.refuse("rope_scaling", str(scaling)[:80], "null or an object with a type")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "linear":
            factor = scaling.get("factor")
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0.01 <= factor <= 1000:
                f.refuse("rope_scaling", factor, "a linear factor from 0.01 to 1000 (positions are divided by it)")
            out["rope_scale"] = float(factor)
        elif kind == "yarn":
            out.update(yarn(f, scaling))
        elif kind != "default":
            f.refuse(
                "rope_scaling",
                kind,
                f"rope_scaling type {kind!r} is not supported: the catalogue's RoPE "
                "takes no scaling ('default'), position interpolation ('linear' -> rope_scale) or YaRN ('yarn')",
            )
        if scaling.get("partial_rotary_factor", 1.0) != 1.0:
            f.refuse(
                "partial_rotary_factor",
                scaling.get("partial_rotary_factor"),
                "1.0 (these families rotate every dimension of a head: transformers' model of them has no partial "
                "rotation, so the checkpoint computes nothing else; the catalogue's own is rope_fraction)",
            )
    if f.hf.get("partial_rotary_factor", 1.0) != 1.0:
        f.refuse(
            "partial_rotary_factor",
            f.hf.get("partial_rotary_factor"),
            "1.0 (these families rotate every dimension of a head: transformers' model of them has no partial "
            "rotation, so the checkpoint computes nothing else; the catalogue's own is rope_fraction)",
        )
    return out


def _positive(f: Fields, key: str, value, lo: float, hi: float, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and lo <= value <= hi)
    ):
        f.refuse(key, value, f"{what}: a number from {lo:g} to {hi:g}")
    return float(value)


def yarn(f: Fields, scaling: dict) -> dict:
    """YaRN's settings (``rope_type: "yarn"``) as transformers' ``_compute_yarn_parameters`` reads them:
    ``factor`` (null: ``max_position_embeddings / original_max_position_embeddings``), the pretraining length
    ``original_max_position_embeddings`` (a top-level key of that name wins, as ``standardize_rope_params``
    does; absent: ``max_position_embeddings``), ``beta_fast`` / ``beta_slow`` (absent, null or 0: 32 / 1),
    ``truncate`` (absent: true), and the attention factor: ``attention_factor``, else DeepSeek's
    ``mscale / mscale_all_dim`` ratio of ``0.1 m ln s + 1`` when both are set, else the catalogue's default
    ``0.1 ln s + 1``."""
    key = "rope_scaling"
    max_len = f.hf.get("max_position_embeddings")
    original = f.hf.get("original_max_position_embeddings")
    if original is None:
        original = scaling.get("original_max_position_embeddings", max_len)
    if isinstance(original, bool) or not isinstance(original, int) or not 1 <= original <= 1 << 20:
        f.refuse(
            key, original, "original_max_position_embeddings: an integer in [1, 1048576] (YaRN's pretraining length)"
        )
    factor = scaling.get("factor")
    if factor is None and isinstance(max_len, int) and not isinstance(max_len, bool):
        factor = max_len / original
    factor = _positive(f, key, factor, 1.0, 1000.0, "the YaRN factor")
    fast = _positive(f, key, scaling.get("beta_fast") or 32, 1e-6, 1e6, "beta_fast")
    slow = _positive(f, key, scaling.get("beta_slow") or 1, 1e-6, 1e6, "beta_slow")
    if not fast > slow:
        f.refuse(
            key,
            f"beta_fast={fast:g}, beta_slow={slow:g}",
            "beta_fast > beta_slow (the ramp runs from one to the other)",
        )
    truncate = scaling.get("truncate", True)
    if not isinstance(truncate, bool):
        f.refuse(key, truncate, "truncate: true or false")
    attention = scaling.get("attention_factor")
    mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention is not None:
        attention = _positive(f, key, attention, 1e-6, 100.0, "attention_factor")
    elif mscale and mscale_all:
        m = _positive(f, key, mscale, 1e-6, 1e6, "mscale")
        m_all = _positive(f, key, mscale_all, 1e-6, 1e6, "mscale_all_dim")

        def get(m):
            return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

        attention = get(m) / get(m_all)
    return {
        "yarn_factor": factor,
        "yarn_original_max_len": original,
        "yarn_beta_fast": fast,
        "yarn_beta_slow": slow,
        "yarn_truncate": truncate,
        "yarn_attention_factor": attention,
    }
