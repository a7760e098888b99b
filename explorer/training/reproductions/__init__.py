"""The source texts' claims about trained models, reproduced on this machine in a minute or two.

``REPRODUCTIONS`` maps a name to its module; each module has ``TITLE``, ``COST`` (its measured wall
time and peak memory, ``explorer.training.reproductions.cost``), ``COLUMNS``,
``run(quick, threads, progress) -> dict``, ``reading(result)``, ``table_rows(result)`` and
``extra_lines(result)``. ``progress`` receives lines of text; a line that is also a point of a live
curve (held-out loss at a step) is a ``Point`` (a ``str`` carrying ``series``, ``step``, ``value``), so
the Train tab draws partial curves while a run goes on. ``run(name)`` runs one and returns
``{"name", "settings", "wall_s", "reading", "rows": [...]}`` (plus extra top-level keys some reproductions add). The
command line is ``python -m explorer.reproduce NAME``; the Train tab's Reproductions panel calls ``run`` too.

- ``warmup``: post-LN vs pre-LN, with and without learning-rate warm-up (Xiong et al. 2020).
- ``extrapolation``: train at one length, evaluate longer (ALiBi, Press et al. 2022).
- ``induction``: a two-layer attention-only model learns induction heads (Olsson et al. 2022).
- ``efficiency``: every attention of the catalogue, quality vs throughput vs memory (Long Range Arena).
- ``kv_heads``: MHA vs GQA vs MQA: KV-cache bytes, decode latency, quality (Shazeer 2019; Ainslie 2023).
- ``gated_sink``: the shipped gated-attention and learned-sink models against the default one: first-token
  mass per layer and loss past the trained length (Qiu et al. 2025). It trains nothing: it reads the bundles.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from explorer.training.reproductions import efficiency, extrapolation, gated_sink, induction, kv_heads, warmup
from explorer.training.reproductions.point import Point

__all__ = ["REPRODUCTIONS", "Point", "run"]

REPRODUCTIONS: dict = {
    "warmup": warmup,
    "extrapolation": extrapolation,
    "induction": induction,
    "efficiency": efficiency,
    "kv_heads": kv_heads,
    "gated_sink": gated_sink,
}


def run(name: str, quick: bool = False, threads: int = 1, progress: Callable[[str], None] | None = None) -> dict:
    """Run one reproduction; the result dict of the JSON schema above."""
    from models import ConfigError

    if name not in REPRODUCTIONS:
        raise ConfigError("reproduction", name, f"one of {list(REPRODUCTIONS)}")
    mod = REPRODUCTIONS[name]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        result = mod.run(quick=quick, threads=threads, progress=progress or (lambda _msg: None))
    finally:
        torch.set_num_threads(old)
    result = {"name": name, **result, "wall_s": round(time.perf_counter() - t0, 2)}
    result["settings"] = {**result["settings"], "threads": threads, "quick": quick}
    result["reading"] = mod.reading(result)
    return result
