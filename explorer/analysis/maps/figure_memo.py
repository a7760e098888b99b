"""Figures of the attention maps, memoised beside the maps: a config drawn before is not drawn again.

Building the attention grid as a Plotly figure and serialising it costs about as much as the
model's forward pass once the maps are cached (~0.3 s of Plotly validation for 16 heatmaps on one
core), and it sits on the path from a click to the redrawn grid. ``figure_json`` keeps the JSON a
figure function made from ``attention_maps(cfg, text)`` in the analyses' byte-bounded cache
(``memo.CACHE``, where its bytes count in the budget), under the same things the maps depend on: the
config, the ids read from the text, and the trained weights in use. ``make`` must be a pure function
of the maps (the figure functions of ``explorer.figures`` are). No gradio, no plotly here.
"""

from __future__ import annotations

from explorer.analysis.common.memo import CACHE
from explorer.analysis.maps.attention import fetch_maps, maps_request


def figure_json(name: str, make, cfg, text: str, separator: str | None = None, weights=None) -> str:
    """``make(attention_maps(cfg, text, separator=separator, weights=weights)).to_json()``, memoised
    under ``name``; the weights are checked against ``cfg`` once (``maps_request``) for the figure and the
    maps both."""
    req = maps_request(cfg, text, separator=separator, weights=weights)
    key = ("figure", name, *req.key[1:])  # the config, the ids read from the text, the weights' key
    return CACHE.get(key, lambda: compact(make(fetch_maps(req)).to_json()))


def compact(figure_json: str) -> str:
    """Plotly's JSON with ``/`` unescaped: Plotly writes ``\\u002f`` (for HTML pages), which costs 6 bytes
    per slash, about one character in 64 of the base64 arrays; these strings only travel as JSON."""
    return figure_json.replace("\\u002f", "/")
