"""ModelConfig: one small dataclass that names every choice, validated in one place.

Field names and defaults follow docs/catalogue.md. ``validate()`` checks what holds for every
model (types, which it coerces and stores; size caps; head divisibility; the size estimate; the
registry keys; the capability fit of position / attention / memory) and then calls the chosen
variants' own ``check``: a rule that matters to one variant lives on that variant's record, so a
new variant never threads a new flag or rule through this file.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from typing import Any, Optional

from .capabilities import check_combination
from .errors import ConfigError
from .registry import registries

__all__ = ["ModelConfig", "ConfigError", "CATEGORIES", "MAX_PARAMS", "SIZE_RANGES"]

CATEGORIES = ("architecture", "attention", "position", "norm_placement", "norm", "ffn", "memory", "layer")


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
    # issue 11 part 1: axial, sinkhorn, clustered, probsparse, synthesizer_dense / synthesizer_random
    axial_width: int = 32
    sinkhorn_iters: int = 7
    sinkhorn_temperature: float = 0.75
    lloyd_iters: int = 10
    probsparse_factor: int = 5
    synthesizer_fixed: bool = False
    # issue 11 part 2: isab / luna (n_inducing), lite (conv_kernel)
    n_inducing: int = 16
    conv_kernel: int = 7
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
    # issue 11 section 1: architecture (models/architectures.py, models/encdec.py)
    architecture: str = "decoder_only"
    n_encoder_layers: Optional[int] = None  # encoder_decoder only; None = n_layers
    n_decoder_layers: Optional[int] = None  # encoder_decoder only; None = n_layers
    # section 8, issue 11 layer structures: sandwich, funnel
    sandwich_coeff: int = 1
    funnel_blocks: int = 2
    # issue 11 attention: poolingformer
    pool_window: int = 256
    pool_stride: int = 4
    # issue 11 family: floater, powernorm, pkm, knn_lm / spalm, deberta, tupe
    floater_hidden: int = 32
    floater_dt: float = 0.01
    powernorm_alpha: float = 0.9
    pkm_subkeys: int = 32
    pkm_topk: int = 8
    pkm_heads: int = 1
    knn_lambda: float = 0.25
    deberta_buckets: int = 32
    deberta_max_distance: int = 128
    tupe_relative: bool = False

    # ------------------------------------------------------------------ derived
    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def approx_params(self) -> int:
        """Parameter count of the built model, from the registry records (nothing is allocated).

        Embedding + head + final norm are common; each chosen variant's record adds its own
        (``Variant.n_params``), and the layer structure says how many blocks hold them. Unknown
        keys count 0 (``validate`` rejects them right after).
        """
        regs = registries()
        rec = {cat: regs[cat].get(getattr(self, cat)) for cat in CATEGORIES}

        def count(cat, *args) -> int:
            return rec[cat].n_params(self, *args) if rec[cat] is not None and rec[cat].n_params else 0

        d, h, hkv, dh = self.d_model, self.n_heads, self.kv_heads, self.d_head
        norm = count("norm")
        attn = 2 * d * h * dh + 2 * d * hkv * dh + count("attention")  # q, o and k, v projections + core
        has_ffn = rec["ffn"] is not None and rec["ffn"].build is not None
        parts = {"attn": attn, "ffn": count("ffn") if has_ffn else None, "norm": norm,
                 "residual": count("norm_placement", norm)}
        final = rec["norm_placement"] is not None and getattr(rec["norm_placement"].build, "final_norm", False)
        return (2 * self.vocab_size * d + (norm if final else 0) + count("layer", parts)
                + count("position") + count("memory")
                + count("architecture"))  # a second stack / another head: the architecture's own count

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
        """Raise ConfigError for the first invalid value or combination; return self when valid.

        Values of the wrong type but the right meaning (``window="8"``, ``causal="true"``) are
        coerced and stored, so every later check and the model read proper numbers.
        """
        for f in fields(self):
            setattr(self, f.name, _coerce(f.name, getattr(self, f.name), _FIELD_TYPES[f.name]))
        for name, (lo, hi) in SIZE_RANGES.items():
            val = getattr(self, name)
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
        if self.softcap is not None and not (math.isfinite(self.softcap) and self.softcap > 0):
            raise ConfigError("softcap", self.softcap, "None or a finite positive number")
        regs = registries()
        for cat in CATEGORIES:
            key = getattr(self, cat)
            if key not in regs[cat]:
                raise ConfigError(cat, key, f"one of {list(regs[cat])}")
        n_params = self.approx_params()
        if n_params > MAX_PARAMS:
            raise ConfigError("d_model", self.d_model,
                              f"a size whose model fits in memory: this config has ~{n_params:.2g} parameters "
                              f"(limit {MAX_PARAMS:.0e}); lower d_model, n_layers, vocab_size, d_ff, n_experts "
                              "or the chosen variants' sizes")
        check_combination(self, regs)
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

# [lower, upper] of every integer field. The caps are far past any experiment a researcher would run
# and far below what would take gigabytes: beyond them a value is a typo, not an experiment
# (sizes multiplied by the model's width are bounded again by MAX_PARAMS). Caps of a product of
# fields (n_buckets * n_hashes, proj_len <= max_len) are in the variant's own check.
SIZE_RANGES = {
    "vocab_size": (2, 1 << 20), "max_len": (1, 1 << 20), "n_layers": (1, 512), "d_model": (1, 1 << 16),
    "n_heads": (1, 4096), "n_kv_heads": (1, 4096), "d_ff": (1, 1 << 18), "seed": (0, 2**63 - 1),
    # section 1 patterns: sizes of a rule, nothing is allocated per unit
    "window": (1, 1 << 20), "dilation": (1, 1 << 20), "stride": (1, 1 << 20), "n_summary": (1, 1 << 20),
    "block_size": (1, 1 << 20), "n_global": (0, 1 << 20), "n_random": (0, 1 << 20),
    # section 4 positions: learned tables
    "max_relative": (1, 4096), "t5_num_buckets": (2, 1024), "t5_max_distance": (1, 1 << 20),
    # section 2 mechanisms: buffers, parameters and per-forward work grow with these
    "n_buckets": (2, 1024), "n_hashes": (1, 16), "chunk_size": (1, 1024), "n_clusters": (1, 128),
    "n_features": (1, 4096), "proj_len": (1, 4096), "n_landmarks": (1, 1024), "max_span": (1, 1 << 16),
    "span_ramp": (1, 1 << 16),
    # issue 11 part 2: isab / luna learned n_inducing x d tables (per layer), lite kernel width
    "n_inducing": (1, 4096), "conv_kernel": (1, 1024),
    # section 6 experts
    "n_experts": (1, 256), "top_k": (1, 256),
    # section 7 memory: per-layer state, stores and learned slots
    "segment_len": (1, 1 << 20), "mem_len": (1, 1 << 14), "cmem_len": (1, 1 << 14),
    "compression_rate": (1, 1 << 14), "knn_size": (1, 1 << 16), "knn_k": (1, 1024), "n_memory": (1, 1024),
    # issue 11 section 1: the two stacks of an encoder-decoder, capped like n_layers
    "n_encoder_layers": (1, 512), "n_decoder_layers": (1, 512),
    # section 8 layer structures (issue 11): sandwich, funnel; further bounded by n_layers in their checks
    "sandwich_coeff": (0, 512), "funnel_blocks": (1, 512),
    # poolingformer (issue 11): window and group size; pool_window / pool_stride is capped in its check
    "pool_window": (1, 1 << 20), "pool_stride": (1, 1 << 16),
    # issue 11 family: FLOATER width; product-key tables (values grow as subkeys^2); DeBERTa buckets
    "floater_hidden": (1, 4096), "pkm_subkeys": (2, 1024), "pkm_topk": (1, 1024), "pkm_heads": (1, 64),
    "deberta_buckets": (2, 4096), "deberta_max_distance": (3, 1 << 20),
}
# issue 11 part 1 (axial, sinkhorn, clustered, probsparse): row width, iteration counts, Informer's factor c
SIZE_RANGES.update({"axial_width": (1, 1 << 16), "sinkhorn_iters": (1, 64), "lloyd_iters": (1, 100),
                    "probsparse_factor": (1, 1024)})
