"""Figures of the ``approximation`` view (no torch): one (layer, head)'s effective map, exact softmax
and ``|error|`` side by side, the error of every layer and head as a table, and ``error_note``, the
sentences that explain a large error (also read by the tab's text)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import NOTE_LINE, base_layout, wrap_notes
from explorer.figures.views.common import panel_title

GROUP_WORD = {"lsh": "bucket", "routing": "cluster", "clustered": "cluster"}
WHY_LARGE = {
    "lsh": "expected for LSH at initialisation: random rotations of untrained queries pick the "
    "buckets, not the exact attention; a query alone in its bucket attends only to itself"
}


def disjoint_rows(view, layer=None, head=None) -> tuple:
    """(rows whose exact attention mass lies entirely on keys the mechanism gives 0, rows) over all
    layers and heads, or one (layer, head)."""
    eff, exact = view.effective, view.exact
    if layer is not None:
        eff, exact = eff[layer, head], exact[layer, head]
    outside = np.where(np.nan_to_num(eff) == 0, np.nan_to_num(exact), 0.0).sum(-1)  # exact mass off the support
    return int((outside > 0.999).sum()), int(outside.size)


def error_note(view, layer=None, head=None) -> list:
    """What a large max |error| means, as short sentences (none below 0.5): a cell's |error| is 1
    when one map puts a row's whole mass on a key the other gives 0, e.g. a row whose exact
    attention lies entirely on keys outside the query's bucket."""
    mx = float(view.max_error.max() if layer is None else view.max_error[layer, head])
    if mx < 0.5:
        return []
    n, rows = disjoint_rows(view, layer, head)
    where = GROUP_WORD.get(view.mechanism, "keys it keeps")
    where = f"the query's {where}" if where != "keys it keeps" else f"the keys {view.mechanism} keeps"
    note = [
        f"max |error| near 1 = a query row whose exact attention mass lies entirely on keys outside {where} "
        f"({n} of {rows} rows here)"
    ]
    why = WHY_LARGE.get(view.mechanism)
    return note + [why[0].upper() + why[1:]] if why else note


def approximation_figure(view, tokens: list, layer: int = 0, head: int = 0) -> go.Figure:
    """Effective map | exact softmax | |error| of one (layer, head); max / mean error in the title."""
    layer = int(np.clip(layer, 0, view.effective.shape[0] - 1))
    head = int(np.clip(head, 0, view.effective.shape[1] - 1))
    eff, exact, err = view.effective[layer, head], view.exact[layer, head], view.error[layer, head]
    lq, lk = eff.shape
    allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq) if view.causal else np.ones((lq, lk), bool)
    blank = lambda a: np.where(allowed, a, np.nan)  # noqa: E731  pairs the causal mask forbids show the background
    both = np.concatenate([eff[allowed], exact[allowed]])
    cmax = float(np.quantile(both[both > 0], 0.99)) if (both > 0).any() else 1.0
    # three square panels; each colorbar sits in the gap to the right of the panels it colours
    doms = [([0.0, 0.26], [0.0, 1.0]), ([0.33, 0.59], [0.0, 1.0]), ([0.69, 0.95], [0.0, 1.0])]
    names = (f"effective ({view.mechanism})", "exact softmax", "|effective − exact|")
    data, layout, notes = [], {}, []
    for p, (z, name) in enumerate(zip((eff, exact, err), names)):
        s = "" if p == 0 else str(p + 1)
        data.append(
            dict(
                type="heatmap",
                z=blank(z).astype(np.float32),
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                name=name,
                coloraxis="coloraxis2" if p == 2 else "coloraxis",
                hoverongaps=False,
                hovertemplate=f"{name}<br>query %{{y}}, key %{{x}}<br>%{{z:.4f}}<extra></extra>",
            )
        )
        xd, yd = doms[p]
        layout[f"xaxis{s}"] = dict(
            domain=xd,
            anchor=f"y{s}",
            title=dict(text="key position"),
            showgrid=False,
            zeroline=False,
            constrain="domain",
        )
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            autorange="reversed",
            showgrid=False,
            zeroline=False,
            title=dict(text="query position" if p == 0 else ""),
            scaleanchor=f"x{s}",
            constrain="domain",
        )
        notes.append(panel_title(name, xd))
    mx, mean = float(view.max_error[layer, head]), float(view.mean_error[layer, head])
    # a short headline and the rest as wrapped small print: the notes run to 190 characters, which
    # Plotly would clip at the figure's edge (it never wraps a title)
    title = wrap_notes(
        f"{view.mechanism} vs exact softmax — layer {layer}, head {head}<br><sup>max |error| "
        f"{mx:.3f}, mean |error| {mean:.4f}; exact: {view.reference}; mean over the allowed "
        "(query, key) pairs; blank = masked</sup>"
        + "".join(f"<br><sup>{line}</sup>" for line in error_note(view, layer, head))
    )
    notes_px = NOTE_LINE * max(0, title.count("<br>") - 1)
    lay = base_layout(title, 500 + notes_px, annotations=notes, **layout)
    lay["coloraxis"] = dict(
        colorscale="Viridis",
        cmin=0.0,
        cmax=max(cmax, 1e-6),
        colorbar=dict(title=dict(text="prob.", side="top"), thickness=12, x=0.6, xanchor="left", len=0.8),
    )
    lay["coloraxis2"] = dict(
        colorscale="Reds",
        cmin=0.0,
        cmax=max(float(err[allowed].max()), 1e-6),
        colorbar=dict(title=dict(text="|error|", side="top"), thickness=12, x=0.96, xanchor="left", len=0.8),
    )
    lay["plot_bgcolor"] = "#eef0f3"
    lay["margin"] = dict(l=70, r=70, t=120 + notes_px, b=60)
    return go.Figure(data=data, layout=lay)


def approximation_table(view) -> go.Figure:
    """Mean |error| per (layer, head), max |error| in the cell text: every layer and head at a glance."""
    n_l, n_h = view.mean_error.shape
    text = [
        [f"{view.mean_error[i, h]:.4f}<br>(max {view.max_error[i, h]:.2f})" for h in range(n_h)] for i in range(n_l)
    ]
    data = [
        dict(
            type="heatmap",
            z=view.mean_error.astype(np.float64),
            x=[f"head {h}" for h in range(n_h)],
            y=[f"layer {i}" for i in range(n_l)],
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=14),
            colorscale="Reds",
            zmin=0.0,
            colorbar=dict(title=dict(text="mean |error|"), thickness=12),
            hovertemplate="%{y}, %{x}<br>mean |error| %{z:.5f}<extra></extra>",
        )
    ]
    title = (
        f"Approximation error of {view.mechanism} per layer and head — overall max "
        f"{view.max_error.max():.3f}, mean {view.mean_error.mean():.4f}<br><sup>cell: mean |effective − exact| "
        "over allowed pairs (max in brackets)</sup>"
    )
    return go.Figure(
        data=data,
        layout=base_layout(
            title,
            max(300, 70 * n_l + 170),
            xaxis=dict(side="bottom"),
            yaxis=dict(autorange="reversed", title=dict(text="layer")),
        ),
    )


def approximation_reading(s: dict, view) -> str:
    """The tab's line: the mechanism's largest and mean error against exact softmax, with ``error_note``."""
    line = (
        f"**{s['mechanism']}** vs exact softmax: max |error| {s['overall_max_abs_error']:.3f}, "
        f"mean {s['overall_mean_abs_error']:.4f} over all layers and heads."
    )
    return line + "".join(f" {n[0].upper()}{n[1:]}." for n in error_note(view))
