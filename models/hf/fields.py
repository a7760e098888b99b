"""Typed reads of ``config.json`` values: every value is hostile until it has the type it must have.

``Fields(hf)`` wraps the JSON object; ``integer(key)``, ``number(key)``, ``flag(key)``, ``text(key)``
return the value (or the default when the key is absent or null) and raise ``ConfigError`` naming
``config.json: key`` otherwise. ``refuse(key, value, why)`` is the one way a family says a value
cannot be expressed in the catalogue: by name, never approximated. ``rope(fields)`` reads RoPE's base
and scaling from either spelling (``rope_theta`` + ``rope_scaling``, or transformers 5's
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


def rope(f: Fields) -> dict:
    """``{"rope_base": theta, "rope_scale": s}`` from the config's RoPE settings.

    Position interpolation (``"linear"``: positions divided by ``factor``) is the catalogue's
    ``rope_scale``; every other scaling type (dynamic NTK, YaRN, LongRoPE, Llama 3's) changes the
    frequencies in a way the catalogue does not express, and is refused by name."""
    params = f.hf.get("rope_parameters")
    scaling = f.hf.get("rope_scaling")
    if params is not None:
        if not isinstance(params, dict) or "rope_type" not in params and "type" not in params:
            f.refuse(
                "rope_parameters",
                str(params)[:80],
                "one object with rope_type and rope_theta (per-layer-type RoPE settings are not supported)",
            )
        theta = params.get("rope_theta", f.hf.get("rope_theta", 10000.0))
        scaling = params
    else:
        theta = f.hf.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (math.isfinite(theta) and theta > 0):
        f.refuse("rope_theta", theta, "a finite positive number (RoPE's base)")
    scale = 1.0
    if scaling is not None:
        if not isinstance(scaling, dict):
            f.refuse("rope_scaling", str(scaling)[:80], "null or an object with a type")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "linear":
            factor = scaling.get("factor")
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0.01 <= factor <= 1000:
                f.refuse("rope_scaling", factor, "a linear factor from 0.01 to 1000 (positions are divided by it)")
            scale = float(factor)
        elif kind != "default":
            f.refuse(
                "rope_scaling",
                kind,
                f"rope_scaling type {kind!r} is not supported: the catalogue's RoPE "
                "takes no scaling ('default') or position interpolation ('linear' -> rope_scale)",
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
    return {"rope_base": float(theta), "rope_scale": scale}
