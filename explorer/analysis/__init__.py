"""What a config does, computed: no gradio, no plotly.

The use cases the app, its API and the export call (each validates its config, checks the memory
budget before allocating, and memoises its result in ``memo.CACHE``):
``attention_maps`` (``maps.py``), ``gradient_norms`` and ``placement_results`` (``gradients.py``),
``latency_memory_sweep`` (``sweep.py``), ``model_summary`` and ``kv_cache_bytes`` (``summary.py``),
``config_diff`` (``compare.py``); the variant views of a forward pass are in ``views/``, trained
weights in ``weights.py``, figures memoised beside the maps in ``figure_memo.py``. Every function
walks the config's arrangement (``models.architectures``) rather than asking for an architecture.
What runs on the GPU is a GPU call (``explorer.runtime.device.gpu``) with picklable arguments:
``compute_maps``, ``compute_gradients``, ``compute_summary``, ``memo.compute_batch`` (several misses at
once) and ``sweep.measure_length``; the use cases above memoise on the caller's side of them.
"""
from explorer.analysis.compare import config_diff
from explorer.analysis.gradients import gradient_norms, input_batch, next_token_loss, placement_results
from explorer.analysis.maps import AttentionMaps, attention_maps
from explorer.analysis.memo import CACHE, clear_caches
from explorer.analysis.summary import kv_cache_bytes, model_summary
from explorer.analysis.sweep import latency_memory_sweep

__all__ = ["AttentionMaps", "attention_maps", "gradient_norms", "placement_results", "input_batch",
           "next_token_loss", "latency_memory_sweep", "model_summary", "kv_cache_bytes", "config_diff", "CACHE",
           "clear_caches"]
