"""ModelConfig: one small dataclass that names every choice, validated in one place.

Field names and defaults follow ../shared/CATALOGUE.md. Each registry entry (a ``Variant``) lists
the config fields it reads (``params``) and may add its own combination check (``check``), so a new
variant never threads a new flag through this file.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Optional


class ConfigError(ValueError):
    """An invalid configuration: the message names the field, the value and what is allowed."""

    def __init__(self, field_name: str, value: Any, allowed: str):
        self.field = field_name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field_name}={value!r} is not valid: {allowed}")


CATEGORIES = ("attention", "position", "norm_placement", "norm", "ffn", "memory", "layer")


@dataclass
class ModelConfig:
    # size
    vocab_size: int = 256
    max_len: int = 1024
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: Optional[int] = None
    d_ff: Optional[int] = None
    causal: bool = True
    # the seven choices (registry keys)
    attention: str = "full"
    position: str = "rope"
    norm_placement: str = "pre"
    norm: str = "layernorm"
    ffn: str = "gelu"
    memory: str = "none"
    layer: str = "standard"
    seed: int = 0
    dropout: float = 0.0
    # section 1: structured sparse patterns
    window: int = 64
    dilation: int = 2
    stride: int = 16
    n_summary: int = 1
    block_size: int = 16
    n_global: int = 2
    n_random: int = 2
    # section 4: positions
    max_relative: int = 16
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    rope_base: float = 10000.0
    # section 2: content-based, linearized, low-rank attention
    n_buckets: int = 8
    n_hashes: int = 2
    chunk_size: int = 32
    n_clusters: int = 4
    cluster_decay: float = 0.999
    n_features: int = 64
    feature_map: str = "positive"
    proj_len: int = 64
    n_landmarks: int = 16
    max_span: int = 64
    span_ramp: int = 16
    softcap: Optional[float] = None
    # section 6: mixture of experts
    n_experts: int = 4
    top_k: int = 2
    capacity_factor: float = 1.25
    # section 7: memory
    segment_len: int = 64
    mem_len: int = 64
    cmem_len: int = 32
    compression_rate: int = 2
    compression: str = "mean"
    knn_size: int = 1024
    knn_k: int = 8
    n_memory: int = 4
    # section 8: layer structure
    exit_threshold: float = 0.9
    act: bool = False
    act_threshold: float = 0.99
    ponder_weight: float = 0.01

    # ------------------------------------------------------------------ derived
    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def approx_params(self) -> int:
        """Rough parameter count (embeddings, head, attention, FFN experts), for size limits."""
        d = self.d_model
        ff = self.d_ff or 4 * d
        experts = self.n_experts if self.ffn in ("moe", "switch", "hash") else 1
        per_layer = 4 * d * d + 3 * d * ff * experts
        return 2 * self.vocab_size * d + self.n_layers * per_layer + self.max_len * (d + 2 * self.proj_len)

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """Build from a JSON-like dict; unknown keys and untypable values raise ConfigError.

        Strings are accepted for numeric and boolean fields (URL query strings carry only text).
        """
        if not isinstance(d, dict):
            raise ConfigError("config", type(d).__name__, "a JSON object (dict) of ModelConfig fields")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(unknown[0], d[unknown[0]], f"unknown field; valid fields: {', '.join(known)}")
        kwargs = {k: _coerce(k, v, _FIELD_TYPES[k]) for k, v in d.items()}
        return cls(**kwargs)

    def replace(self, **changes) -> "ModelConfig":
        return ModelConfig.from_dict({**self.to_dict(), **changes})

    # ------------------------------------------------------------------ validation
    def validate(self) -> "ModelConfig":
        """Raise ConfigError for the first invalid value or combination; return self when valid."""
        for f in fields(self):
            _coerce(f.name, getattr(self, f.name), _FIELD_TYPES[f.name])  # types
        for name, lo in _POSITIVE.items():
            val = getattr(self, name)
            hi = _UPPER.get(name, 1 << 20)
            if val is not None and not lo <= val <= hi:
                raise ConfigError(name, val, f"an integer in [{lo}, {hi}]")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", self.dropout, "a float in [0, 1)")
        if self.d_model % self.n_heads:
            raise ConfigError("d_model", self.d_model,
                              f"a multiple of n_heads={self.n_heads} (each head gets d_model / n_heads dims)")
        kv = self.kv_heads
        if not 1 <= kv <= self.n_heads or self.n_heads % kv:
            divisors = [x for x in range(1, self.n_heads + 1) if self.n_heads % x == 0]
            raise ConfigError("n_kv_heads", self.n_kv_heads,
                              f"None (MHA) or a divisor of n_heads={self.n_heads}: {divisors}")
        if not 1 <= self.n_summary <= self.stride:
            raise ConfigError("n_summary", self.n_summary, f"an integer with 1 <= n_summary <= stride={self.stride}")
        if self.top_k > self.n_experts:
            raise ConfigError("top_k", self.top_k, f"an integer <= n_experts={self.n_experts}")
        for name in ("rope_base", "cluster_decay", "capacity_factor", "exit_threshold", "act_threshold"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(name, getattr(self, name), "a finite positive number")
        for name, top in (("cluster_decay", "1)"), ("act_threshold", "1)"), ("exit_threshold", "1]")):
            val = getattr(self, name)
            if val > 1.0 or (val == 1.0 and top == "1)"):
                raise ConfigError(name, val, f"a number in (0, {top}")
        if self.softcap is not None and not (math.isfinite(self.softcap) and self.softcap > 0):
            raise ConfigError("softcap", self.softcap, "None or a finite positive number")
        if self.ponder_weight < 0 or not math.isfinite(self.ponder_weight):
            raise ConfigError("ponder_weight", self.ponder_weight, "a finite number >= 0")
        if self.feature_map not in ("positive", "trig"):
            raise ConfigError("feature_map", self.feature_map, "one of ['positive', 'trig']")
        if self.compression not in ("mean", "conv"):
            raise ConfigError("compression", self.compression, "one of ['mean', 'conv']")
        n_params = self.approx_params()
        if n_params > MAX_PARAMS:
            raise ConfigError("d_model", self.d_model,
                              f"a size whose model fits in memory: this config has ~{n_params:.2g} parameters "
                              f"(limit {MAX_PARAMS:.0e}); lower d_model, n_layers, vocab_size, d_ff or n_experts")
        from .registry import registries  # late: the registries import this module
        regs = registries()
        for cat in CATEGORIES:
            key = getattr(self, cat)
            if key not in regs[cat]:
                raise ConfigError(cat, key, f"one of {list(regs[cat])}")
        for cat in CATEGORIES:
            variant = regs[cat][getattr(self, cat)]
            if variant.check is not None:
                variant.check(self)
        return self


def _coerce(name: str, value: Any, typ: tuple) -> Any:
    """Check ``value`` against the field type ``typ`` = (base type, optional?)."""
    base, optional = typ
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        if optional:
            return None
        raise ConfigError(name, value, f"a value of type {base.__name__} (None is not allowed)")
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise ConfigError(name, value, "true or false")
    if base is int:
        if isinstance(value, bool):
            raise ConfigError(name, value, "an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(name, value, "an integer")
    if base is float:
        if isinstance(value, bool):
            raise ConfigError(name, value, "a number")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(name, value, "a number")
    if base is str:
        if isinstance(value, str):
            return value
        raise ConfigError(name, value, "a string")
    return value


def _field_types() -> dict:
    out = {}
    for f in fields(ModelConfig):
        t = f.type if isinstance(f.type, str) else f.type.__name__
        optional = t.startswith("Optional[")
        base = {"int": int, "float": float, "bool": bool, "str": str}[t.removeprefix("Optional[").rstrip("]")]
        out[f.name] = (base, optional)
    return out


_FIELD_TYPES = _field_types()

MAX_PARAMS = 2_000_000_000

# Upper bounds of the integer sizes: beyond these a config is a typo, not an experiment
# (anything else is capped at 2**20).
_UPPER = {"n_layers": 512, "n_heads": 4096, "n_kv_heads": 4096, "d_model": 1 << 16, "d_ff": 1 << 18,
          "seed": 2**63 - 1, "n_hashes": 64, "n_features": 1 << 14, "n_experts": 4096, "top_k": 4096,
          "n_buckets": 1 << 16, "n_clusters": 1 << 16, "n_landmarks": 1 << 16, "proj_len": 1 << 16,
          "t5_num_buckets": 1 << 16, "n_memory": 1 << 16}

# Lower bounds of the integer sizes (None allowed where the field is optional).
_POSITIVE = {
    "vocab_size": 2, "max_len": 1, "n_layers": 1, "d_model": 1, "n_heads": 1, "n_kv_heads": 1,
    "d_ff": 1, "seed": 0, "window": 1, "dilation": 1, "stride": 1, "n_summary": 1, "block_size": 1,
    "n_global": 0, "n_random": 0, "max_relative": 1, "t5_num_buckets": 2, "t5_max_distance": 1,
    "n_buckets": 2, "n_hashes": 1, "chunk_size": 1, "n_clusters": 1, "n_features": 1, "proj_len": 1,
    "n_landmarks": 1, "max_span": 1, "span_ramp": 1, "n_experts": 1, "top_k": 1, "segment_len": 1,
    "mem_len": 1, "cmem_len": 1, "compression_rate": 1, "knn_size": 1, "knn_k": 1, "n_memory": 1,
}
