"""One attention head, large, with every token on its axes: the zoom under the attention grid.

The grid's panels are too small for token labels; this figure shows one (layer, head) with query
and key tokens written out and the exact probabilities (float, not the grid's colour levels) in the
hover. Its colour scale runs from 0 to the head's own maximum, so the title says so.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.attention import BLANK, head_labels
from explorer.figures.base import base_layout


def head_figure(maps, layer: int, head: int, title: str | None = None) -> go.Figure:
    """One head of ``maps`` (any stack's: a cross-attention's keys are the other input's tokens, its
    axes say which, ``maps.sides``); ``title``: what the maps are (default: the config's attention)."""
    att = maps.attention
    layer = min(max(int(layer), 0), att.shape[0] - 1)
    head = min(max(int(head), 0), att.shape[1] - 1)
    a = att[layer, head].astype(np.float64)  # (L, Lk)
    # exactly 0 = not allowed: blank; float32 on the wire (half the bytes of float64, finer than the eye)
    z = np.where(a > 0, a, np.nan).astype(np.float32)
    cross = maps.mask_kind == "full"  # keys from another input: no memory slots before them
    prefix = 0 if cross else len(maps.key_tokens) - len(maps.tokens)
    q_side, k_side = (f" ({side})" for side in maps.sides) if cross else ("", "")
    qlab = [f"{i} {t}" for i, t in enumerate(maps.tokens)][len(maps.tokens) - a.shape[0] :]
    klab = [f"{j - prefix} {t}" if j >= prefix else t for j, t in enumerate(maps.key_tokens)]
    top = float(np.nanmax(z)) if np.isfinite(z).any() else 1.0
    tick = dict(tickfont=dict(size=12, family="DejaVu Sans Mono, monospace"), showgrid=False, zeroline=False)
    size = max(520, 14 * a.shape[0] + 220)
    kinds = head_labels(maps)
    kind = f"<br><sup>{kinds[layer][head].sentence()}</sup>" if kinds is not None else ""
    lay = base_layout(
        f"Layer {layer}, head {head}: {title or maps.config['attention']}{kind}"
        f"<br><sup>colour from 0 to this head's largest probability ({top:.3g}); blank = not allowed</sup>",
        size,
        xaxis=dict(
            title=dict(text=f"key{k_side}"),
            tickmode="array",
            tickvals=klab,
            ticktext=klab,
            side="bottom",
            tickangle=-90,
            **tick,
        ),
        yaxis=dict(
            title=dict(text=f"query{q_side}"),
            autorange="reversed",
            tickmode="array",
            tickvals=qlab,
            ticktext=qlab,
            **tick,
        ),
    )
    lay["margin"] = dict(l=90, r=30, t=130 if kind else 90, b=90)  # the head's sentence: a line more on a phone
    lay["plot_bgcolor"] = BLANK
    return go.Figure(
        data=[
            dict(
                type="heatmap",
                z=z,
                x=klab,
                y=qlab,
                zmin=0,
                zmax=top,
                colorscale="Viridis",
                hoverongaps=False,
                colorbar=dict(title=dict(text="p")),
                hovertemplate="query %{y}<br>key %{x}<br>p = %{z:.4f}<extra></extra>",
            )
        ],
        layout=lay,
    )
