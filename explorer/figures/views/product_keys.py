"""Figure of the ``pkm`` view (no torch): reads per product-key memory row, most-read first, per layer."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above


def slot_figure(view) -> go.Figure:
    """Reads per memory row, sorted from most to least read, one line per layer (rows never read: the tail)."""
    n_l, n = view.counts.shape
    data = []
    for i in range(n_l):
        c = np.sort(view.counts[i])[::-1]
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=list(range(1, n + 1)),
                y=c.tolist(),
                name=f"layer {i}: {int(view.used[i])} of {n} rows read",
                line=dict(width=3, color=CYCLE[i % len(CYCLE)]),
                hovertemplate=f"layer {i}: rank %{{x}} row read %{{y}} times<extra></extra>",
            )
        )
    reads = int(view.counts[0].sum())
    title = (
        f"Product-key memory: how many of the {n} value rows each layer read ({reads} reads per layer)"
        f"<br><sup>each token reads its top-{view.topk} rows per head ({view.heads} head(s)); rows sorted by reads, "
        "most-read first; a long flat tail at 0 = memory never used</sup>"
    )
    lay = base_layout(
        title,
        440,
        xaxis=dict(title=dict(text="memory row, ranked by reads"), type="log"),
        yaxis=dict(title=dict(text="reads (tokens × top-k × heads)"), rangemode="tozero"),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


def slot_reading(s: dict, view) -> str:
    """The tab's line: memory rows read per layer."""
    return f"**pkm**: {min(s['used'])}–{max(s['used'])} of {s['n_slots']} memory rows read per layer."
