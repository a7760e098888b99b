"""Size limits of the hosted explorer, so one visitor cannot stall the queue for everyone.

The library accepts any size; the app and its API refuse configs past these bounds with a
``ConfigError`` that names the field, like every other invalid choice.
"""
from __future__ import annotations

from models import ConfigError, ModelConfig

MAX_TEXT_BYTES = 256          # attention maps: byte-level tokens drawn as L x L heatmaps
MAX_SWEEP_LEN = 8192          # latency sweep: longest sequence
MAX_SWEEP_POINTS = 8          # latency sweep: number of lengths
SIZE_LIMITS = {"n_layers": 12, "d_model": 512, "n_heads": 16, "d_ff": 4096, "max_len": 16384,
               "n_experts": 16, "n_features": 1024, "knn_size": 65536}


def check_limits(cfg: ModelConfig) -> ModelConfig:
    """Validate ``cfg`` and refuse sizes past the app's limits (ConfigError); return ``cfg``."""
    cfg.validate()
    for name, top in SIZE_LIMITS.items():
        value = getattr(cfg, name, None)
        if value is not None and value > top:
            raise ConfigError(name, value, f"at most {top} in the explorer (keeps every request interactive)")
    return cfg


def parse_lengths(text: str) -> list:
    """``"128, 256,512"`` -> ``[128, 256, 512]``; ConfigError for anything else or past the limits."""
    parts = [p.strip() for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        lens = [int(p) for p in parts]
    except ValueError:
        raise ConfigError("seq_lens", text, "comma-separated positive integers, e.g. 128,256,512") from None
    if not lens:
        raise ConfigError("seq_lens", text, "at least one length, e.g. 128,256,512")
    if len(lens) > MAX_SWEEP_POINTS:
        raise ConfigError("seq_lens", text, f"at most {MAX_SWEEP_POINTS} lengths")
    bad = [n for n in lens if not 1 <= n <= MAX_SWEEP_LEN]
    if bad:
        raise ConfigError("seq_lens", bad[0], f"lengths between 1 and {MAX_SWEEP_LEN}")
    return sorted(set(lens))
