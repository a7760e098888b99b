"""Size limits of the hosted explorer, so one visitor cannot stall the queue or exhaust the memory.

The library accepts any size; the app and its API refuse configs past these bounds with a
``ConfigError`` that names the field, like every other invalid choice, through the one door
(``explorer.runtime.configs.app_config``, which applies both checks here). Two layers: every size
field has a cap (``SIZE_LIMITS``: what an interactive explorer needs, a little more than the
largest preset), and the combination must fit the per-request memory budget (``explorer.runtime.budget``)
for the requests the app makes of every config: the attention maps of the longest text and the
gradient norms of the default batch. A cap alone cannot do the second: each field of the
Linformer config ``proj_len=65536, max_len=8192, n_layers=12`` is modest, their product is not.
"""

from __future__ import annotations

from explorer.runtime import budget
from models import ConfigError, ModelConfig
from models.config import FIELDS

MAX_TEXT_BYTES = 256  # attention maps: byte-level tokens drawn as L x L heatmaps
MAX_SWEEP_LEN = 16384  # latency sweep: longest sequence (where sparse patterns pull away on a CPU)
MAX_SWEEP_POINTS = 8  # latency sweep: number of lengths
SWEEP_BUDGET_S = 3.0  # latency sweep: seconds one timed run may take before it is a time-out
GRADIENT_REQUEST = (64, 8)  # the (seq_len, batch) the app's gradient norms run on
# The largest value of each size the app accepts: the ``cap`` of its record (``models.config.FIELDS``).
SIZE_LIMITS = {name: p.cap for name, p in FIELDS.items() if p.cap is not None}


def check_caps(cfg: ModelConfig) -> ModelConfig:
    """Refuse a size past the explorer's cap (checked before the library's validation, so a size past
    its cap is named as such)."""
    for name, top in SIZE_LIMITS.items():
        value = getattr(cfg, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > top:
            raise ConfigError(name, value, f"at most {top} in the explorer (keeps every request interactive)")
    return cfg


def check_budget(cfg: ModelConfig) -> ModelConfig:
    """Refuse a valid config whose attention maps of the longest text or gradient norms of the app's
    batch would not fit the per-request memory budget."""
    budget.check(cfg, "attention", MAX_TEXT_BYTES, 1)
    budget.check(cfg, "gradients", *GRADIENT_REQUEST)
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
