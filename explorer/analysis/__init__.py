"""What a config does, computed: no gradio, no plotly. One folder per question, the weights door above them.

The use cases the app, its API and the export call (each validates its config, checks the memory
budget before allocating, and memoises its result in ``common.memo.CACHE``):
``attention_maps`` (``maps/attention.py``), ``gradient_norms`` and ``placement_results``
(``gradients/norms.py``), ``latency_memory_sweep`` (``cost/sweep.py``), ``model_summary`` and
``kv_cache_bytes`` (``cost/summary.py``), ``config_diff`` (``compare.py``). The folders:

- ``weights/``: the weights the analyses draw (a session's run, the bundles, the checkpoints) as
  ``TrainedWeights`` records; ``source.py`` resolves a request's Weights choice once into a ``WeightsSource``;
- ``maps/``, ``gradients/``, ``cost/``, ``long_context/``: attention maps and head labels, gradient norms,
  latency, memory and FLOPs, the long-context view;
- ``views/``: the variant views of a forward pass; ``why/``: the Why tab's analyses (lens, attribution,
  patching, circuits), grounded head labels and circuit cards; ``surgery/``: trained weights under another
  architecture;
- ``common/``: the one memo of models and results, and a forward pass that is not finite said by name.

Every function walks the config's arrangement (``models.architectures``) rather than asking for an
architecture. What runs on the GPU is a GPU call (``explorer.runtime.device.gpu``) with picklable arguments:
``compute_maps``, ``compute_gradients``, ``compute_summary``, ``memo.compute_batch`` (several misses at
once) and ``sweep.measure_length``; the use cases above memoise on the caller's side of them.
"""

from explorer.analysis.common.memo import CACHE, clear_caches
from explorer.analysis.compare import config_diff
from explorer.analysis.cost.summary import kv_cache_bytes, model_summary
from explorer.analysis.cost.sweep import latency_memory_sweep
from explorer.analysis.gradients.norms import gradient_norms, input_batch, next_token_loss, placement_results
from explorer.analysis.maps.attention import AttentionMaps, attention_maps

__all__ = [
    "AttentionMaps",
    "attention_maps",
    "gradient_norms",
    "placement_results",
    "input_batch",
    "next_token_loss",
    "latency_memory_sweep",
    "model_summary",
    "kv_cache_bytes",
    "config_diff",
    "CACHE",
    "clear_caches",
]
