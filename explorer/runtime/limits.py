"""Size limits of the hosted explorer, so one visitor cannot stall the queue or exhaust the memory.

The library accepts any size; the app and its API refuse configs past these bounds with a
``ConfigError`` that names the field, like every other invalid choice. Two layers: every size
field has a cap (``SIZE_LIMITS``: what an interactive explorer needs, a little more than the
largest preset), and the combination must fit the per-request memory budget (``explorer.runtime.budget``)
for the requests the app makes of every config: the attention maps of the longest text and the
gradient norms of the default batch. A cap alone cannot do the second: each field of the
Linformer config ``proj_len=65536, max_len=8192, n_layers=12`` is modest, their product is not.
"""
from __future__ import annotations

from explorer.runtime import budget
from models import ConfigError, ModelConfig

MAX_TEXT_BYTES = 256          # attention maps: byte-level tokens drawn as L x L heatmaps
MAX_SWEEP_LEN = 8192          # latency sweep: longest sequence
MAX_SWEEP_POINTS = 8          # latency sweep: number of lengths
GRADIENT_REQUEST = (64, 8)     # the (seq_len, batch) the app's gradient norms run on
SIZE_LIMITS = {
    # model size
    "vocab_size": 4096, "max_len": 16384, "n_layers": 12, "d_model": 512, "n_heads": 16, "n_kv_heads": 16,
    "d_ff": 4096,
    # section 1 patterns and section 4 positions
    "window": 8192, "dilation": 64, "stride": 1024, "n_summary": 1024, "block_size": 1024, "n_global": 256,
    "n_random": 256, "max_relative": 1024, "t5_num_buckets": 256, "t5_max_distance": 16384,
    # section 2 mechanisms
    "n_buckets": 256, "n_hashes": 8, "chunk_size": 1024, "n_clusters": 256, "n_features": 1024,
    "proj_len": 1024, "n_landmarks": 256, "max_span": 16384, "span_ramp": 1024,
    # section 6 experts, section 7 memory
    "n_experts": 16, "top_k": 16, "capacity_factor": 8.0, "segment_len": 8192, "mem_len": 4096,
    "cmem_len": 4096, "compression_rate": 64, "knn_size": 65536, "knn_k": 256, "n_memory": 256,
    # architectures and the systems added with them
    "n_encoder_layers": 12, "n_decoder_layers": 12, "axial_width": 1024, "sinkhorn_iters": 20, "lloyd_iters": 20,
    "probsparse_factor": 64, "n_inducing": 256, "conv_kernel": 63, "sandwich_coeff": 12, "funnel_blocks": 12,
    "pool_window": 8192, "pool_stride": 64, "floater_hidden": 256, "pkm_subkeys": 256, "pkm_topk": 64,
    "pkm_heads": 8, "deberta_buckets": 256, "deberta_max_distance": 16384,
}


def check_limits(cfg: ModelConfig) -> ModelConfig:
    """Validate ``cfg``, refuse sizes past the app's caps and configs whose attention maps or
    gradient norms would not fit the per-request memory budget (ConfigError); return ``cfg``."""
    for name, top in SIZE_LIMITS.items():  # caps first: a size past its cap is named as such
        value = getattr(cfg, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > top:
            raise ConfigError(name, value, f"at most {top} in the explorer (keeps every request interactive)")
    cfg.validate()
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
