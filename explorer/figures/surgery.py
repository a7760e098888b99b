"""Figures of architecture surgery: what a change does to a trained model's maps and loss (Plotly only).

- ``difference_grid(after, before, tokens, ...)``: how much attention every head moved, and (attention
  after the change) minus (the bundled model's own) for the heads that moved most: red = more, blue = less.
- ``table_figure(table)``: the Surgery table as bars, held-out loss of every change that keeps the weights
  at each length (in tokens, past the trained length or not), the trained model's value as a line; a row
  that could not run is a marked point.
- ``table_markdown(table)``: the same numbers as a Markdown table (the page's text and the export).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, message_figure

SHOWN = 4       # the difference view draws the heads the change moved most (the page's bytes stay bounded)
LEVELS = 127    # int8 levels each side of zero


def moved_fraction(after: np.ndarray, before: np.ndarray) -> np.ndarray:
    """``(layers, heads)``: the mean over queries of the total variation between the two rows (0 = the same
    attention, 1 = disjoint), the share of its attention a head moved."""
    return np.abs(np.nan_to_num(after) - np.nan_to_num(before)).sum(axis=-1).mean(axis=-1) / 2


def difference_grid(after: np.ndarray, before: np.ndarray, tokens: list, change: str, bundle: str,
                    what: str = "bundle", why_unmoved: str = "") -> go.Figure:
    """``after`` and ``before``: ``(layers, heads, L, L)`` attention of the changed and the bundled model.

    Left: how much of its attention every head moved (layers x heads); right: (after - before) of the
    ``SHOWN`` heads that moved most, on one diverging scale (red = more weight after the change, blue =
    less), sent as int8 levels. ``why_unmoved``: the sentence saying why every head reads 0% (the title
    says it instead of the legend, so the view is never a blank grid without a reason)."""
    if after.shape != before.shape:
        return message_figure("The change alters the maps' shape: no difference to draw.", "Difference view")
    moved = moved_fraction(after, before)
    n_l, n_h = moved.shape
    order = np.argsort(-moved, axis=None)[:SHOWN]
    picks = [tuple(int(v) for v in np.unravel_index(k, moved.shape)) for k in order]
    diff = np.stack([np.nan_to_num(after[p] - before[p]) for p in picks])  # (SHOWN, L, L)
    scale = max(float(np.quantile(np.abs(diff), 0.995)) if diff.size else 0.0, 1e-3)
    step = scale / LEVELS
    levels = np.clip(np.rint(diff / step), -LEVELS, LEVELS).astype(np.int8)
    labels = [f"{i} {t}" for i, t in enumerate(tokens)]
    width = 0.8 / (len(picks) + 1)
    data = [dict(type="heatmap", z=moved.round(3), x=[f"h{h}" for h in range(n_h)], y=[f"L{n}" for n in range(n_l)],
                 colorscale="Greys", zmin=0, zmax=1, showscale=False, texttemplate="%{z:.0%}", xaxis="x", yaxis="y",
                 name="attention moved", hovertemplate="layer %{y} head %{x}: moved %{z:.0%} of its attention"
                                                       "<extra></extra>")]
    layout = {"xaxis": dict(domain=[0, width * 0.9], title=dict(text="moved, per head")),
              "yaxis": dict(autorange="reversed", anchor="x")}
    for k, (layer, head) in enumerate(picks):
        s = str(k + 2)
        x0 = width * (k + 1) + 0.02
        data.append(dict(type="heatmap", z=levels[k], x=labels, y=labels, coloraxis="coloraxis", xaxis=f"x{s}",
                         yaxis=f"y{s}", name=f"layer {layer} head {head}",
                         hovertemplate=f"layer {layer} head {head}<br>query %{{y}}<br>key %{{x}}<br>Δp ≈ %{{z}} × "
                                       f"{step:.3g}<extra></extra>"))
        layout[f"xaxis{s}"] = dict(domain=[x0, x0 + width * 0.92], anchor=f"y{s}", showticklabels=False,
                                   showgrid=False, zeroline=False,
                                   title=dict(text=f"L{layer} h{head}: {moved[layer, head]:.0%}"))
        layout[f"yaxis{s}"] = dict(anchor=f"x{s}", showticklabels=False, showgrid=False, zeroline=False,
                                   autorange="reversed")
    title = (f"Difference view: {change} minus {what} '{bundle}' as trained<br><sup>left: share of its attention "
             f"each head moved; right: the {len(picks)} heads that moved most, after minus before (rows = queries, "
             "columns = keys; red = more, blue = less)</sup>")
    if why_unmoved:
        title = f"Difference view: {change} minus {what} '{bundle}' as trained<br><sup>{why_unmoved}</sup>"
    lay = base_layout(title, 380, **layout)
    ticks = [-scale, -scale / 2, 0.0, scale / 2, scale]
    lay["coloraxis"] = dict(colorscale="RdBu", reversescale=True, cmin=-LEVELS, cmax=LEVELS, cmid=0,
                            colorbar=dict(title=dict(text="Δ attention<br>probability"), thickness=14,
                                          tickvals=[t / step for t in ticks], ticktext=[f"{t:+.2g}" for t in ticks]))
    lay["meta"] = {"dp_step": step, "shown": [list(p) for p in picks]}
    return go.Figure(data=data, layout=lay)


def unmoved(after: np.ndarray, before: np.ndarray, below: float = 0.005) -> bool:
    """True when no head moved ``below`` of its attention or more: the grid would read 0% everywhere."""
    return after.shape == before.shape and float(moved_fraction(after, before).max(initial=0.0)) < below


def _value(row: dict, L) -> float:
    v = row["loss"].get(str(L))
    return math.nan if v is None else float(v)


def length_label(L: int, trained: int) -> str:
    """"L = 128 tokens (trained length)", "L = 512 tokens (4x past the trained length)"."""
    if L == trained:
        return f"L = {L} tokens (trained length)"
    return f"L = {L} tokens ({L / trained:g}x {'past' if L > trained else 'of'} the trained length)"


def table_figure(table: dict | None) -> go.Figure:
    """The Surgery table (``explorer.analysis.surgery``: the same shape for a bundle and a checkpoint) as bars."""
    if not table or not table.get("rows"):
        return message_figure("No Surgery table stored for this model (python -m explorer.analysis.surgery "
                              "--write makes it).", "Surgery table")
    rows, lengths, trained = table["rows"], table["lengths"], table["trained_length"]
    unit = table["unit"]
    labels = [r["label"] for r in rows]
    data = []
    for i, L in enumerate(lengths):
        ys = [_value(r, L) for r in rows]
        data.append(dict(type="bar", x=labels, y=ys, name=length_label(L, trained), marker_color=CYCLE[i % len(CYCLE)],
                         hovertemplate="%{x}<br>L = " + str(L) + " tokens: %{y:.3f} " + unit + "<extra></extra>"))
        missing = [lab for lab, y in zip(labels, ys) if math.isnan(y)]
        if missing:
            data.append(dict(type="scatter", x=missing, y=[0] * len(missing), mode="markers",
                             name=f"could not run at L = {L}", marker=dict(symbol="x", size=14, color="#d62728")))
    base = next((r for r in rows if r["label"].endswith("(as trained)")), None)
    shapes = []
    if base is not None:
        y0 = _value(base, trained)
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=y0, y1=y0, line=dict(dash="dash", color="#444")))
    title = (f"Surgery table: {table['label']} under every change that keeps its weights, windows of "
             f"{table['window']} keys<br><sup>held-out loss, "
             f"{table['scored_tokens']} tokens of the Python documentation it never trained on, in windows of each "
             f"length; windowed patterns keep {table['window']} keys; dashed: as trained at its trained length "
             f"({trained} tokens)</sup>")
    lay = base_layout(title, 560, barmode="group", shapes=shapes,
                      xaxis=dict(title=dict(text="change (weights unchanged)"), tickangle=-35, automargin=True),
                      yaxis=dict(title=dict(text=f"held-out loss ({unit})"), rangemode="tozero"))
    legend_above(lay, data)
    return go.Figure(data=data, layout=lay)


def table_markdown(table: dict | None) -> str:
    if not table or not table.get("rows"):
        return ""
    lengths, trained = table["lengths"], table["trained_length"]
    head = (f"| change (same weights; windows of {table['window']} keys) | "
            + " | ".join(length_label(L, trained) for L in lengths) + " |")
    lines = [head, "| --- | " + " | ".join("---:" for _ in lengths) + " |"]
    for r in table["rows"]:
        cells = ["n/a" if math.isnan(_value(r, L)) else f"{_value(r, L):.3f}" for L in lengths]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines.append(f"\nHeld-out loss of {table['label']} in {table['unit']}: {table['scoring']}.")
    return "\n".join(lines)
