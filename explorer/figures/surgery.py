"""Figures of architecture surgery: what a change does to a trained model's maps and loss (Plotly only).

- ``difference_grid(after, before, tokens, ...)``: how much attention every head moved, and (attention
  after the change) minus (the bundled model's own) for the heads that moved most: red = more, blue = less.
- ``moved_sentence(moved)``: the grid of how much each head moved, in words (the tab's reading).
- ``table_figure(table)``: the Surgery table as bars, held-out loss of every change that keeps the weights
  at each length (in tokens, past the trained length or not), the trained model's value as a line; a row
  that could not run is a marked point.
- ``table_markdown(table)``: the same numbers as a Markdown table (the page's text and the export).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, FONT, base_layout, legend_above, message_figure

SHOWN = 4  # the difference view draws the heads the change moved most (the page's bytes stay bounded)
LEVELS = 127  # int8 levels each side of zero
HEIGHT = 420  # px: the difference view (more where its title band needs more)
GRID_SHARE = 0.22  # of the plot area's width: the "moved, per head" grid (the maps share the rest)
# The grid's cells carry their numbers only where these are readable in the smallest side-by-side figure:
# 600 px wide (narrower figures stack their panels, explorer.app.page.phone_js), of which the plot area
# keeps ~390 px beside its colour bar and ~150 px of height once the title has wrapped at presentation
# mode's sizes. The numbers get a fixed size (Plotly's own would fill the cell, "11" and "10" side by
# side reading as "1110"), so that a wider figure never gives them less room than this one.
SMALLEST_PLOT = (390, 150)
MIN_TEXT = 11  # px: the smallest cell text printed; below it the value is on hover only
CELL_GAP = 4  # px kept between the numbers of two neighbouring cells


def moved_fraction(after: np.ndarray, before: np.ndarray) -> np.ndarray:
    """``(layers, heads)``: the mean over queries of the total variation between the two rows (0 = the same
    attention, 1 = disjoint), the share of its attention a head moved."""
    return np.abs(np.nan_to_num(after) - np.nan_to_num(before)).sum(axis=-1).mean(axis=-1) / 2


def cell_font(shape: tuple, chars: int, plot: tuple = SMALLEST_PLOT, share: float = GRID_SHARE) -> int:
    """The largest font size (px, from the figure's own down to ``MIN_TEXT``) at which a ``shape`` =
    (rows, columns) grid in ``share`` of a ``plot`` = (width, height) px plot area holds numbers of
    ``chars`` characters: 0.65 em each (plotly.js's own estimate for cell text), ``CELL_GAP`` px between
    neighbours, a line of 1.3 em per row. 0 where even ``MIN_TEXT`` px do not fit."""
    rows, cols = shape
    width, height = share * plot[0] / max(cols, 1), plot[1] / max(rows, 1)
    for px in range(FONT["size"], MIN_TEXT - 1, -1):
        if max(chars, 1) * 0.65 * px + CELL_GAP <= width and 1.3 * px <= height:
            return px
    return 0


def difference_grid(
    after: np.ndarray,
    before: np.ndarray,
    tokens: list,
    change: str,
    bundle: str,
    what: str = "bundle",
    why_unmoved: str = "",
) -> go.Figure:
    """``after`` and ``before``: ``(layers, heads, L, L)`` attention of the changed and the bundled model.

    Left: how much of its attention every head moved, in % (layers x heads; the cells print their numbers
    at ``cell_font``'s size where that is at least ``MIN_TEXT`` px, else the numbers are on hover only, and
    the tab's reading says them, ``moved_sentence``); right: (after - before) of the ``SHOWN`` heads that
    moved most, on one diverging scale (red = more weight after the change, blue = less), as int8 levels.
    ``why_unmoved``: the sentence saying why every head reads 0% (the title says it instead of the
    legend, so the view is never a blank grid without a reason). The title sits in a band of its own at
    the top (``legend_above``: no legend, room for the title at presentation mode's sizes)."""
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
    percent = np.round(moved * 100, 1)
    chars = max(len(f"{v:.0f}") for v in percent.ravel())
    px = cell_font(moved.shape, chars)
    cell = dict(texttemplate="%{z:.0f}", textfont=dict(size=px)) if px else {}
    data = [
        dict(
            type="heatmap",
            z=percent,
            x=[f"h{h}" for h in range(n_h)],
            y=[f"L{n}" for n in range(n_l)],
            colorscale="Greys",
            zmin=0,
            zmax=100,
            showscale=False,
            xaxis="x",
            yaxis="y",
            name="attention moved",
            hovertemplate="layer %{y} head %{x}: moved %{z:.0f}% of its attention<extra></extra>",
            **cell,
        )
    ]
    layout = {
        "xaxis": dict(domain=[0, GRID_SHARE], title=dict(text="% moved")),
        "yaxis": dict(autorange="reversed", anchor="x"),
    }
    start = GRID_SHARE + 0.07  # room for the maps' gap and the first map's title
    width = (1 - start) / max(len(picks), 1)
    for k, (layer, head) in enumerate(picks):
        s = str(k + 2)
        x0 = start + width * k
        data.append(
            dict(
                type="heatmap",
                z=levels[k],
                x=labels,
                y=labels,
                coloraxis="coloraxis",
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                name=f"layer {layer} head {head}",
                hovertemplate=f"layer {layer} head {head}<br>query %{{y}}<br>key %{{x}}<br>Δp ≈ %{{z}} × "
                f"{step:.3g}<extra></extra>",
            )
        )
        layout[f"xaxis{s}"] = dict(
            domain=[x0, x0 + width * 0.9],
            anchor=f"y{s}",
            showticklabels=False,
            showgrid=False,
            zeroline=False,
            title=dict(text=f"L{layer} h{head}<br>{moved[layer, head]:.0%}"),
        )
        layout[f"yaxis{s}"] = dict(
            anchor=f"x{s}", showticklabels=False, showgrid=False, zeroline=False, autorange="reversed"
        )
    title = (
        f"Difference view: {change} minus {what} '{bundle}' as trained<br><sup>left: % of its attention "
        f"each head moved; right: the {len(picks)} heads that moved most; after minus before: red = more, "
        "blue = less (rows = queries, columns = keys)</sup>"
    )
    if why_unmoved:
        title = f"Difference view: {change} minus {what} '{bundle}' as trained<br><sup>{why_unmoved}</sup>"
    lay = legend_above(base_layout(title, HEIGHT, **layout), rows=0)  # no legend: the title's band alone
    lay["margin"]["b"] = 80  # the maps' titles: two lines, at presentation mode's size too
    # the ends of the scale are labelled inside the bar (a label at an end sticks out past it, into the title)
    ticks = [-0.8 * scale, -0.4 * scale, 0.0, 0.4 * scale, 0.8 * scale]
    lay["coloraxis"] = dict(
        colorscale="RdBu",
        reversescale=True,
        cmin=-LEVELS,
        cmax=LEVELS,
        cmid=0,
        colorbar=dict(
            title=dict(text="Δ attention<br>probability"),
            thickness=14,
            tickvals=[t / step for t in ticks],
            ticktext=[f"{t:+.2g}" for t in ticks],
        ),
    )
    lay["meta"] = {"dp_step": step, "shown": [list(p) for p in picks]}
    return go.Figure(data=data, layout=lay)


def moved_sentence(moved: np.ndarray) -> str:
    """The difference view's "moved, per head" grid in words (the page's reading, which also describes the
    figure to a screen reader): the grid's cells may be too small to print their numbers."""
    percent = np.floor(np.round(np.asarray(moved) * 100, 1) + 0.5).astype(int)  # as the cells print them
    rows = "; ".join(f"L{n}: " + ", ".join(str(v) for v in row) for n, row in enumerate(percent))
    return f"Attention moved, in % of each head's own (per layer, heads h0 to h{moved.shape[1] - 1}): {rows}."


def unmoved(after: np.ndarray, before: np.ndarray, below: float = 0.005) -> bool:
    """True when no head moved ``below`` of its attention or more: the grid would read 0% everywhere."""
    return after.shape == before.shape and float(moved_fraction(after, before).max(initial=0.0)) < below


def _value(row: dict, L) -> float:
    v = row["loss"].get(str(L))
    return math.nan if v is None else float(v)


def length_label(L: int, trained: int) -> str:
    """ "L = 128 tokens (trained length)", "L = 512 tokens (4x past the trained length)"."""
    if L == trained:
        return f"L = {L} tokens (trained length)"
    return f"L = {L} tokens ({L / trained:g}x {'past' if L > trained else 'of'} the trained length)"


def table_figure(table: dict | None) -> go.Figure:
    """The Surgery table (``explorer.analysis.surgery``: the same shape for a bundle and a checkpoint) as bars."""
    if not table or not table.get("rows"):
        return message_figure(
            "No Surgery table stored for this model (python -m explorer.analysis.surgery --write makes it).",
            "Surgery table",
        )
    rows, lengths, trained = table["rows"], table["lengths"], table["trained_length"]
    unit = table["unit"]
    labels = [r["label"] for r in rows]
    data = []
    for i, L in enumerate(lengths):
        ys = [_value(r, L) for r in rows]
        data.append(
            dict(
                type="bar",
                x=labels,
                y=ys,
                name=length_label(L, trained),
                marker_color=CYCLE[i % len(CYCLE)],
                hovertemplate="%{x}<br>L = " + str(L) + " tokens: %{y:.3f} " + unit + "<extra></extra>",
            )
        )
        missing = [lab for lab, y in zip(labels, ys) if math.isnan(y)]
        if missing:
            data.append(
                dict(
                    type="scatter",
                    x=missing,
                    y=[0] * len(missing),
                    mode="markers",
                    name=f"could not run at L = {L}",
                    marker=dict(symbol="x", size=14, color="#d62728"),
                )
            )
    base = next((r for r in rows if r["label"].endswith("(as trained)")), None)
    shapes = []
    if base is not None:
        y0 = _value(base, trained)
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=y0, y1=y0, line=dict(dash="dash", color="#444")))
    title = (
        f"Surgery table: {table['label']} under every change that keeps its weights, windows of "
        f"{table['window']} keys<br><sup>held-out loss, "
        f"{table['scored_tokens']} tokens of the Python documentation it never trained on, in windows of each "
        f"length; windowed patterns keep {table['window']} keys; dashed: as trained at its trained length "
        f"({trained} tokens)</sup>"
    )
    lay = base_layout(
        title,
        560,
        barmode="group",
        shapes=shapes,
        xaxis=dict(title=dict(text="change (weights unchanged)"), tickangle=-35, automargin=True),
        yaxis=dict(title=dict(text=f"held-out loss ({unit})"), rangemode="tozero"),
    )
    legend_above(lay, data)
    return go.Figure(data=data, layout=lay)


def table_markdown(table: dict | None) -> str:
    if not table or not table.get("rows"):
        return ""
    lengths, trained = table["lengths"], table["trained_length"]
    head = (
        f"| change (same weights; windows of {table['window']} keys) | "
        + " | ".join(length_label(L, trained) for L in lengths)
        + " |"
    )
    lines = [head, "| --- | " + " | ".join("---:" for _ in lengths) + " |"]
    for r in table["rows"]:
        cells = ["n/a" if math.isnan(_value(r, L)) else f"{_value(r, L):.3f}" for L in lengths]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines.append(f"\nHeld-out loss of {table['label']} in {table['unit']}: {table['scoring']}.")
    return "\n".join(lines)
