"""Figures of architecture surgery: what a change does to a trained model's maps and loss (Plotly only).

- ``difference_grid(after, before, tokens, ...)``: layers x heads of (attention after the change) minus
  (the bundled model's own attention), on one diverging scale: red = more weight, blue = less.
- ``table_figure(table)``: the Surgery table as bars, held-out nats/byte of every surgery-safe attention
  at each length, the trained model's value as a line; a row that could not run is a marked point.
- ``table_markdown(table)``: the same numbers as a Markdown table (the page's text and the export).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, message_figure, subplot_domains

MAX_PANELS = 4  # layers and heads each: a difference grid of at most 4 x 4 panels


def difference_grid(after: np.ndarray, before: np.ndarray, tokens: list, change: str, bundle: str) -> go.Figure:
    """``after`` and ``before``: ``(layers, heads, L, L)`` attention of the changed and the bundled model."""
    if after.shape != before.shape:
        return message_figure("The change alters the maps' shape: no difference to draw.", "Difference view")
    diff = np.nan_to_num(after - before)[:MAX_PANELS, :MAX_PANELS]
    n_l, n_h = diff.shape[:2]
    scale = float(np.quantile(np.abs(diff), 0.995)) if diff.size else 0.0
    scale = max(scale, 1e-3)
    labels = [f"{i} {t}" for i, t in enumerate(tokens)]
    data, layout = [], {}
    for k, (xd, yd) in enumerate(subplot_domains(n_l, n_h, vgap=0.03)):
        r, c = divmod(k, n_h)
        s = "" if k == 0 else str(k + 1)
        moved = float(np.abs(diff[r, c]).sum(axis=-1).mean() / 2)  # mean total variation per query
        data.append(dict(type="heatmap", z=diff[r, c].round(4), x=labels, y=labels, coloraxis="coloraxis",
                         xaxis=f"x{s}", yaxis=f"y{s}", name=f"layer {r} head {c}",
                         hovertemplate=f"layer {r} head {c}<br>query %{{y}}<br>key %{{x}}<br>Δp = %{{z:.3f}}"
                                       f"<br>this head moved {moved:.0%} of its attention<extra></extra>"))
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", showticklabels=False, showgrid=False, zeroline=False,
                                   title=dict(text=f"head {c}" if r == n_l - 1 else ""))
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", showticklabels=False, showgrid=False, zeroline=False,
                                   autorange="reversed", title=dict(text=f"layer {r}" if c == 0 else ""))
    title = (f"Difference view: {change} minus bundle '{bundle}' as trained"
             "<br><sup>rows = queries, columns = keys; red = more attention after the change, blue = less</sup>")
    lay = base_layout(title, 170 * n_l + 150, **layout)
    lay["coloraxis"] = dict(colorscale="RdBu", reversescale=True, cmin=-scale, cmax=scale, cmid=0,
                            colorbar=dict(title=dict(text="Δ attention<br>probability"), thickness=14))
    return go.Figure(data=data, layout=lay)


def _value(row: dict, L) -> float:
    v = row["loss"].get(str(L))
    return math.nan if v is None else float(v)


def table_figure(table: dict | None) -> go.Figure:
    if not table or not table.get("rows"):
        return message_figure("No Surgery table for this bundle (python -m explorer.analysis.surgery --write "
                              "makes it).", "Surgery table")
    rows, lengths = table["rows"], table["lengths"]
    labels = [r["label"] for r in rows]
    data = []
    for i, L in enumerate(lengths):
        ys = [_value(r, L) for r in rows]
        data.append(dict(type="bar", x=labels, y=ys, name=f"L = {L}" + (" (trained length)" if L == table["trained_length"]
                                                               else f" ({L // table['trained_length']}x)"),
                           marker_color=CYCLE[i % len(CYCLE)],
                           hovertemplate="%{x}<br>L = " + str(L) + ": %{y:.3f} nats/byte<extra></extra>"))
        missing = [lab for lab, y in zip(labels, ys) if math.isnan(y)]
        if missing:
            data.append(dict(type="scatter", x=missing, y=[0] * len(missing), mode="markers",
                             name=f"could not run at L = {L}",
                                   marker=dict(symbol="x", size=14, color="#d62728")))
    base = next((r for r in rows if r["label"].endswith("(as trained)")), None)
    shapes = []
    if base is not None:
        y0 = _value(base, table["trained_length"])
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=y0, y1=y0, line=dict(dash="dash", color="#444")))
    title = (f"Surgery table: bundle '{table['bundle']}' under every attention that reads its weights"
             f"<br><sup>held-out loss, {table['scored_bytes']} bytes of the Python documentation the model never "
             f"trained on; dashed: as trained at L = {table['trained_length']}</sup>")
    lay = base_layout(title, 560, barmode="group", shapes=shapes,
                      xaxis=dict(title=dict(text="attention (weights unchanged)"), tickangle=-35, automargin=True),
                      yaxis=dict(title=dict(text="held-out loss (nats/byte)"), rangemode="tozero"))
    legend_above(lay, data)
    return go.Figure(data=data, layout=lay)


def table_markdown(table: dict | None) -> str:
    if not table or not table.get("rows"):
        return ""
    lengths = table["lengths"]
    head = "| attention (same weights) | " + " | ".join(f"L = {L}" for L in lengths) + " |"
    lines = [head, "| --- | " + " | ".join("---:" for _ in lengths) + " |"]
    for r in table["rows"]:
        cells = ["n/a" if math.isnan(_value(r, L)) else f"{_value(r, L):.3f}" for L in lengths]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines.append(f"\nHeld-out loss in nats/byte: {table['scoring']}.")
    return "\n".join(lines)
