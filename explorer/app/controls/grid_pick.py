"""Which layers and heads the attention grid shows: "all", "2", "0-3", "0,2,5-7" (no gradio here).

A spec is parsed against the model's size: indices must exist, at most ``MAX_GRID`` are drawn (the
first ones in order; the figure's title says which are shown). Specs come from a text box or a
share link, so they are hostile: bounded in length, only digits, commas, dashes and spaces, and a
bad one raises a ``ConfigError`` naming the field and the valid forms.

The share link carries a non-default pick as ``grid_layers=`` / ``grid_heads=`` (``grid_query`` /
``grid_from_params``); ``explorer.app.controls.share`` must ignore these keys (they are not ModelConfig fields).
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from explorer.figures.attention import MAX_GRID
from models import ConfigError

MAX_SPEC_CHARS = 64
ALL = "all"
FIELDS = {"grid_layers": "Layers shown", "grid_heads": "Heads shown"}
_SPEC = re.compile(r"^\s*\d{1,3}\s*(-\s*\d{1,3}\s*)?(,\s*\d{1,3}\s*(-\s*\d{1,3}\s*)?)*$")


def _allowed(n: int) -> str:
    return f'"all", an index in 0..{n - 1}, a range like "0-3", or a list like "0,2,5-7"'


def parse_pick(spec, n: int, field: str = "grid_layers", strict: bool = True) -> list:
    """``spec`` against ``n`` layers (or heads) -> the sorted distinct indices to draw (at most
    ``MAX_GRID``: the first ones). Empty or "all": ``range(min(n, MAX_GRID))``. ``strict=False``
    (the config changed under a kept pick): indices past ``n - 1`` are dropped, and if none is
    left every index is drawn; a malformed spec still raises."""
    text = "" if spec is None else str(spec)
    if len(text) > MAX_SPEC_CHARS:
        raise ConfigError(field, text[:MAX_SPEC_CHARS] + "…", f"at most {MAX_SPEC_CHARS} characters: {_allowed(n)}")
    text = text.strip().lower()
    if text in ("", ALL):
        return list(range(min(n, MAX_GRID)))
    if not _SPEC.match(text):
        raise ConfigError(field, text, _allowed(n))
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi) if hi.strip() else int(lo)
        if a > b or (strict and b >= n):
            raise ConfigError(field, part.strip(), _allowed(n))
        out.update(range(a, min(b, n - 1) + 1))
    return sorted(out)[:MAX_GRID] or list(range(min(n, MAX_GRID)))


def normalise(spec) -> str:
    """The spec as stored in a link: lower case without spaces; "" for all."""
    text = re.sub(r"\s+", "", "" if spec is None else str(spec)).lower()
    return "" if text == ALL else text


def grid_query(layers=None, heads=None) -> str:
    """``"grid_layers=0-3&grid_heads=1"``: the non-default picks, to append to a share query."""
    items = {k: normalise(v) for k, v in (("grid_layers", layers), ("grid_heads", heads))}
    return urlencode({k: v for k, v in items.items() if v and len(v) <= MAX_SPEC_CHARS})


def with_grid(query: str, layers=None, heads=None) -> str:
    """A share query with the grid picks appended (``query`` from ``explorer.app.controls.share.to_query``)."""
    extra = grid_query(layers, heads)
    return "&".join(q for q in (query, extra) if q)


def grid_from_params(params: dict) -> tuple:
    """``({"grid_layers": spec, "grid_heads": spec}, notice)`` from a link's query parameters: a
    spec that is too long or malformed falls back to "all" and the notice names the field. (Indices
    are checked against the model when the grid is drawn.)"""
    out, bad = {}, []
    for key, label in FIELDS.items():
        raw = str((params or {}).get(key, "") or "")
        spec = normalise(raw)
        if spec and (len(raw) > MAX_SPEC_CHARS or not _SPEC.match(spec)):
            bad.append(label)
            spec = ""
        out[key] = spec or ALL
    notice = None
    if bad:
        notice = f"The link's {' and '.join(bad)} could not be read ({_allowed(MAX_GRID)}); showing all."
    return out, notice
