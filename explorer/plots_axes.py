"""Axis helpers shared by the view figures (a leaf module of the plots)."""
from __future__ import annotations

MAX_TICKS = 128  # token labels on an axis: beyond this every n-th token is labelled


def token_axis(tokens: list, **kw) -> dict:
    """A numeric position axis labelled with the token characters (duplicates stay distinct)."""
    step = max(1, -(-len(tokens) // MAX_TICKS))
    idx = list(range(0, len(tokens), step))
    return dict(tickmode="array", tickvals=idx, ticktext=[tokens[i] for i in idx], tickangle=0,
                tickfont=dict(size=12 if step == 1 and len(tokens) > 64 else 14), showgrid=False, **kw)
