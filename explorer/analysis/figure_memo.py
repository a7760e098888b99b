"""Figures of the attention maps, memoised beside the maps: a config drawn before is not drawn again.

Building the attention grid as a Plotly figure and serialising it costs about as much as the
model's forward pass once the maps are cached (~0.3 s of Plotly validation for 16 heatmaps on one
core), and it sits on the path from a click to the redrawn grid. ``figure_json`` keeps the JSON a
figure function made from ``experiments.attention_maps(cfg, text)`` in the experiments' byte-bounded
cache (``explorer.runtime.cache.ByteLRU``, where its bytes count in the budget), under the same things the
maps depend on: the config, the text, the separator and the trained weights in use. ``make`` must
be a pure function of the maps (the figure functions of ``explorer.figures.base`` are). No gradio here.
"""
from __future__ import annotations

from explorer.analysis import experiments as ex
from explorer.analysis import seq2seq as encdec
from explorer.analysis.weights import resolve
from explorer.runtime.configs import as_config


def figure_json(name: str, make, cfg, text: str, separator: str = encdec.DEFAULT_SEPARATOR) -> str:
    """``make(attention_maps(cfg, text, separator=separator)).to_json()``, memoised under ``name``."""
    cfg = as_config(cfg)
    cfg_json = cfg.to_json()
    weights = resolve(cfg_json, None)
    key = ("figure", name, cfg_json, str(text), str(separator), None if weights is None else weights.digest)
    return ex.CACHE.get(key, lambda: compact(make(ex.attention_maps(cfg, text, separator=separator)).to_json()))


def compact(figure_json: str) -> str:
    """Plotly's JSON with ``/`` unescaped: Plotly writes ``\\u002f`` (for HTML pages), which costs 6 bytes
    per slash, about one character in 64 of the base64 arrays; these strings only travel as JSON."""
    return figure_json.replace("\\u002f", "/")
