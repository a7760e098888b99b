"""Figure of the ``induced`` view (no torch): ISAB / Luna's two attention steps and their product,
the effective token map, layer by layer for one head."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import base_layout
from explorer.figures.views.common import panel_title

MAX_INDUCED_LAYERS = 4  # rows of the induced figure (layers 0..3, head 0)


def _colorbar(title: str, x: float, y: float, length: float) -> dict:
    return dict(
        title=dict(text=title, side="top"), thickness=10, x=x, xanchor="left", y=y, yanchor="middle", len=length
    )


def induced_figure(view, tokens: list, head: int = 0) -> go.Figure:
    """Per layer (rows, head ``head``): step 1 [m x L] | step 2 [L x m] | effective = step 2 · step 1 [L x L]."""
    n_l, n_h, m, L = view.pack.shape
    head = int(np.clip(head, 0, n_h - 1))
    rows = min(n_l, MAX_INDUCED_LAYERS)
    eff = view.effective
    # step 1 wide (m x L), step 2 narrow (L x m), the product square-ish; each colorbar in the gap after its column
    cols = (([0.0, 0.27], "coloraxis"), ([0.41, 0.52], "coloraxis2"), ([0.66, 0.91], "coloraxis3"))
    gap = 0.12 / rows
    hgt = (1 - gap * (rows - 1)) / rows
    point = "packed position" if view.mechanism == "luna" else "inducing point"
    names = (f"step 1: {point}s read the tokens", f"step 2: tokens read the {point}s", "effective token map")
    data, layout, notes = [], {}, []
    for i in range(rows):
        yd = [round(1 - i * (hgt + gap) - hgt, 6), round(1 - i * (hgt + gap), 6)]
        mats = (view.pack[i, head], view.unpack[i, head], eff[i, head])
        labels = ((f"{point} %{{y}} ← token %{{x}}"), (f"token %{{y}} ← {point} %{{x}}"), "query %{y} ← key %{x}")
        for c, ((xd, axis), z, hover) in enumerate(zip(cols, mats, labels)):
            p = i * 3 + c
            s = "" if p == 0 else str(p + 1)
            data.append(
                dict(
                    type="heatmap",
                    z=z.astype(np.float32),
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    coloraxis=axis,
                    hovertemplate=f"layer {i}, head {head}<br>{hover}<br>weight %{{z:.4f}}<extra></extra>",
                )
            )
            xtitle = ("token position", point, "key position")[c] if i == rows - 1 else ""
            ytitle = f"layer {i}<br>{point}" if c == 0 else "token position" if c == 1 else "query position"
            layout[f"xaxis{s}"] = dict(
                domain=xd, anchor=f"y{s}", showgrid=False, zeroline=False, title=dict(text=xtitle)
            )
            layout[f"yaxis{s}"] = dict(
                domain=yd, anchor=f"x{s}", autorange="reversed", showgrid=False, zeroline=False, title=dict(text=ytitle)
            )
            if i == 0:
                notes.append(panel_title(names[c], xd, yd[1]))
    s = view.summary()
    title = (
        f"{view.mechanism}: attention through {m} {point}s — layer by layer, head {head} of {n_h}"
        + (f" (first {rows} of {n_l} layers)" if rows < n_l else "")
        + f"<br><sup>effective = step 2 · step 1 (L×m · m×L), the matrix applied to V: rows sum to 1 "
        f"(max |row sum − 1| {s['max_row_sum_error']:.1e}); max |product − the layer's reported map| "
        f"{s['max_product_error']:.1e}</sup>"
    )
    lay = base_layout(title, 180 + 300 * rows, annotations=notes, **layout)
    for (xd, axis), name in zip(cols, ("step 1", "step 2", "effective")):
        z = {"coloraxis": view.pack, "coloraxis2": view.unpack, "coloraxis3": eff}[axis][:rows, head]
        lay[axis] = dict(
            colorscale="Viridis",
            cmin=0.0,
            cmax=max(float(np.quantile(z, 0.99)), 1e-6),
            colorbar=_colorbar(name, xd[1] + 0.008, 0.5, 0.6),
        )
    lay["margin"] = dict(l=90, r=70, t=130, b=60)
    return go.Figure(data=data, layout=lay)


def induced_reading(s: dict, view) -> str:
    """The tab's line: the two steps through the inducing points."""
    return (
        f"**{s['mechanism']}**: tokens → {s['n_inducing']} points → tokens; the effective map is the "
        f"product of the two steps (rows sum to 1 within {s['max_row_sum_error']:.1g})."
    )
