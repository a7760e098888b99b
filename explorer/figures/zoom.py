"""One attention head, large, with every token on its axes: the zoom under the attention grid.

The grid's panels are too small for token labels; this figure shows one (layer, head) with query
and key tokens written out and the exact probabilities (float, not the grid's colour levels) in the
hover. Its colour scale runs from 0 to the head's own maximum, so the title says so; a signed map (a recurrent
layer's implicit map: ``maps.implicit``; differential attention's) runs on the grid's diverging scale from
``-max |a|`` to ``+max |a|`` instead, and the title says what it is.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.attention import BLANK, IMPLICIT_NOTE, head_labels, implicit_layer, signed_colorscale
from explorer.figures.base import base_layout


def head_figure(maps, layer: int, head: int, title: str | None = None) -> go.Figure:
    """One head of ``maps`` (any stack's: a cross-attention's keys are the other input's tokens, its
    axes say which, ``maps.sides``); ``title``: what the maps are (default: the config's attention)."""
    att = maps.attention
    layer = min(max(int(layer), 0), att.shape[0] - 1)
    head = min(max(int(head), 0), att.shape[1] - 1)
    a = att[layer, head].astype(np.float64)  # (L, Lk)
    # a recurrent layer's implicit map, or a map with negative weights that matter (differential attention):
    # the values themselves on the grid's diverging scale, centred on 0; otherwise probabilities from 0
    finite = a[np.isfinite(a)]
    signed = implicit_layer(maps, layer) or (
        bool(finite.size) and float(finite.min()) < -0.01 * float(np.abs(finite).max())
    )
    # exactly 0 = not allowed (or no weight): blank; float32 on the wire (half the bytes of float64)
    z = np.where((a != 0 if signed else a > 0) & np.isfinite(a), a, np.nan).astype(np.float32)
    cross = maps.mask_kind == "full"  # keys from another input: no memory slots before them
    prefix = 0 if cross else len(maps.key_tokens) - len(maps.tokens)
    q_side, k_side = (f" ({side})" for side in maps.sides) if cross else ("", "")
    qlab = [f"{i} {t}" for i, t in enumerate(maps.tokens)][len(maps.tokens) - a.shape[0] :]
    klab = [f"{j - prefix} {t}" if j >= prefix else t for j, t in enumerate(maps.key_tokens)]
    top = float(np.nanmax(np.abs(z) if signed else z)) if np.isfinite(z).any() else 1.0
    tick = dict(tickfont=dict(size=12, family="DejaVu Sans Mono, monospace"), showgrid=False, zeroline=False)
    size = max(520, 14 * a.shape[0] + 220)
    kinds = head_labels(maps)
    unit = "weight" if signed else "p"
    if implicit_layer(maps, layer):
        scale_note = f"{IMPLICIT_NOTE}: colour from -{top:.3g} to +{top:.3g}, 0 white; blank = no weight"
    elif signed:
        scale_note = f"signed weights: colour from -{top:.3g} to +{top:.3g}, 0 white; blank = not allowed"
    else:
        scale_note = f"colour from 0 to this head's largest probability ({top:.3g}); blank = not allowed"
    kind = f"<br><sup>{kinds[layer][head].sentence()}</sup>" if kinds is not None else ""
    lay = base_layout(
        f"Layer {layer}, head {head}: {title or maps.config['attention']}{kind}<br><sup>{scale_note}</sup>",
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
                zmin=-top if signed else 0,
                zmax=top,
                colorscale=signed_colorscale() if signed else "Viridis",
                hoverongaps=False,
                colorbar=dict(title=dict(text=unit)),
                hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{unit} = %{{z:.4f}}<extra></extra>",
            )
        ],
        layout=lay,
    )
