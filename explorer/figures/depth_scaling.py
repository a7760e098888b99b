"""Depth scaling -> figure and reading: Xiong et al. 2020's Theorem 1 above the per-layer profile.

Panel 1 (log-log): the last layer's FFN output gradient norm against depth, one line per norm
placement (Okabe-Ito colour, a marker and a dash each), a dashed ``1/sqrt(L)`` reference through
pre-LN's first point, and a star for a trained model of the config at its own depth. Panel 2 is the
per-layer profile of the visitor's config (``figures.gradients.gradient_panels``), as before. The
placement without a norm grows by orders of magnitude with depth; the y range is that of the other
placements (it would squeeze them into a sliver), its curve leaves the plot and the legend says
where it goes. Input: ``explorer.analysis.gradients.depth_scaling.depth_scaling``'s result (plain dicts).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorer.figures.base import base_layout, legend_rows, subplot_domains, wrap_notes
from explorer.figures.gradients import GRAD_PANELS, gradient_panels, placement_style
from explorer.figures.notes import coincidence_notes

CLAIM = (
    "post-LN's last-layer gradient does not shrink with depth; pre-LN's shrinks like 1/√L: "
    "why post-LN needs learning-rate warm-up"
)
REFERENCE = "#595959"  # the 1/sqrt(L) guide: dark grey, dashed, no marker
TOP_PX, BOTTOM_PX, GAP_PX = 380, 250, 150  # plot heights and the band between them (axis title, row title)


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.3g}"


def what_is_measured(depth: dict) -> str:
    """One sentence naming the parameter, the loss, the init, the seeds and the width."""
    what = "FFN output matrix" if depth["quantity"] == "ffn_out" else "attention output projection (no FFN)"
    return (
        f"‖∇W2‖ = Frobenius norm of the gradient of the last layer's {what} ({depth['parameter']}) of the "
        f"{depth['loss']} ({depth['batch']} × {depth['seq_len']} tokens), at {depth['init']}, mean of "
        f"{depth['seeds']} seeds, d_model {depth['d_model']}"
    )


def _short_measured(depth: dict) -> str:
    """The title's version of ``what_is_measured``: clauses a narrow figure can break between."""
    return (
        f"‖∇W2‖ of {depth['parameter']}; next-token loss, random tokens; Xavier init, "
        f"{depth['seeds']} seeds; d_model {depth['d_model']}"
    )


def _zero(values: list) -> bool:
    return bool(values) and all(v == 0 for v in values if v is not None)


def _y_range(depth: dict) -> list | None:
    """log10 range of the placements that have a norm (and the trained points), padded."""
    vals = [v for p, r in depth["placements"].items() if p != "none" for v in r["last"] if v is not None and v > 0]
    vals += [t["last"] for t in depth["trained"].values() if t["last"] > 0]
    if not vals:
        return None
    lo, hi = math.log10(min(vals)), math.log10(max(vals))
    pad = max(0.15, 0.12 * (hi - lo))
    return [lo - pad, hi + pad]


def depth_traces(depth: dict, current: str) -> list:
    """Traces of panel 1 on axes x/y: placements, the 1/sqrt(L) reference, the trained points."""
    data, span = [], _y_range(depth)
    for n, (placement, r) in enumerate(depth["placements"].items()):
        style, is_cur, vals = placement_style(placement, n), placement == current, r["last"]
        name = placement + (" (current)" if is_cur else "")
        if _zero(vals):  # nothing to draw on a log axis: a legend entry with no point says so
            name += ": exactly 0 (α = 0)"
            vals = [None] * len(vals)
        elif r.get("slope") is not None:
            name += f": slope {r['slope']:+.2f}"
        if span and vals and any(v is not None and math.log10(max(v, 1e-300)) > span[1] for v in vals):
            name += f", off the axis (to {_fmt(max(v for v in vals if v is not None))})"
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                x=r["depths"],
                y=vals,
                name=name,
                legendgroup=placement,
                line=dict(color=style["color"], dash=style["dash"], width=4.5 if is_cur else 2.5),
                marker=dict(symbol=style["symbol"], size=12 if is_cur else 9, color=style["color"]),
                hovertemplate=f"{placement}, %{{x}} layers: %{{y:.3g}}<extra></extra>",
            )
        )
    pre = depth["placements"].get("pre")
    first = next(((d, v) for d, v in zip(pre["depths"], pre["last"]) if v), None) if pre else None
    if first:
        d0, v0 = first
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=pre["depths"],
                y=[v0 * math.sqrt(d0 / d) for d in pre["depths"]],
                name=f"1/√L through pre-LN at L={d0}",
                line=dict(color=REFERENCE, dash="dash", width=2),
                hoverinfo="skip",
            )
        )
    for n, (placement, t) in enumerate(depth["trained"].items()):
        style = placement_style(placement, n)
        data.append(
            dict(
                type="scatter",
                mode="markers",
                x=[t["depth"]],
                y=[t["last"]],
                legendgroup=placement,
                name=f"{placement}, trained ({t.get('label', 'trained weights')})",
                marker=dict(symbol="star", size=20, color=style["color"], line=dict(color="#000000", width=1.5)),
                hovertemplate=f"{placement}, trained, %{{x}} layers: %{{y:.3g}}<extra></extra>",
            )
        )
    return data


def depth_figure(
    depth: dict, current: str, per_layer: dict | None = None, per_layer_title: str | None = None
) -> go.Figure:
    """Panel 1: Theorem 1's depth scaling; panel 2 (when ``per_layer``: ``{placement: gradient_norms}``):
    the per-layer profile of the visitor's config. Legend below the plots."""
    data = depth_traces(depth, current)
    span = _y_range(depth)
    rows_below = bool(per_layer)
    plot_px = TOP_PX + (GAP_PX + BOTTOM_PX if rows_below else 0)
    top_lo = 1 - TOP_PX / plot_px
    depths = depth["depths"]
    layout = {
        "xaxis": dict(
            type="log",
            domain=[0, 1],
            anchor="y",
            tickmode="array",
            tickvals=depths,
            ticktext=[str(d) for d in depths],
            title=dict(text="depth L (layers, log scale)"),
        ),
        "yaxis": dict(
            type="log",
            domain=[top_lo, 1],
            anchor="x",
            exponentformat="power",
            dtick="D2",
            title=dict(text="last-layer ‖∇W2‖ (nats/weight)"),
            **({"range": span} if span else {}),
        ),
    }
    notes = []
    if rows_below:
        domains = [(xd, [0, BOTTOM_PX / plot_px]) for xd, _ in subplot_domains(1, 3, hgap=0.07)]
        lower, lower_layout = gradient_panels(per_layer, current, domains, first_axis=2, show_legend=False)
        data += lower
        layout.update(lower_layout)
        n_layers = max([len(r[k]) for r in per_layer.values() for k, _ in GRAD_PANELS] + [1])
        heading = per_layer_title or f"Per layer, your config's {n_layers} layers"
        layout["annotations"] = lower_layout.get("annotations", []) + [
            dict(
                text=f"<b>{heading}</b>",
                x=0,
                y=BOTTOM_PX / plot_px,
                yshift=34,
                xref="paper",
                yref="paper",
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=16),
            )
        ]
        notes = coincidence_notes(per_layer, GRAD_PANELS)
    title = (
        "Theorem 1 (Xiong et al. 2020): last-layer gradient vs depth"
        f"<br><sup>paper: {CLAIM}</sup><br><sup>measured at init: {_short_measured(depth)}</sup>"
    )
    if notes:
        title += "<br><sup>per layer: " + "; ".join(notes) + "</sup>"
    title = wrap_notes(title)
    lines = title.count("<br>")
    rows = legend_rows(data)
    top, bottom = 60 + 20 * lines, 80 + 30 * rows
    lay = base_layout(title, plot_px + top + bottom, **layout)
    lay["margin"] = dict(l=80, r=30, t=top, b=bottom)
    lay["title"].update(y=1, yref="container", yanchor="top", pad=dict(t=12 + 19))
    lay["legend"] = dict(orientation="h", x=0, xanchor="left", y=-70 / plot_px, yanchor="top", font=dict(size=14))
    return go.Figure(data=data, layout=lay)


def depth_reading(depth: dict, current: str) -> str:
    """What the figure shows, computed from its numbers: the claim, what is measured, each placement's
    change from the shallowest to the deepest model and its log-log slope, the trained points."""
    first, last = depth["depths"][0], depth["depths"][-1]
    parts = []
    for placement, r in depth["placements"].items():
        vals = r["last"]
        if _zero(vals):
            parts.append(
                f"{placement}: exactly 0 at every depth (each branch is multiplied by α = 0 at "
                "initialisation, so W2 gets no gradient)"
            )
            continue
        a, b = vals[0], vals[-1]
        ratio = f"×{b / a:.3g}" if a and b else "not finite"
        text = f"{placement} {_fmt(a)} → {_fmt(b)} ({ratio}"
        text += f", slope {r['slope']:+.2f})" if r.get("slope") is not None else ")"
        parts.append(f"**{text}**" if placement == current else text)
    line = (
        f"**Theorem 1 (Xiong et al. 2020)**: {CLAIM}. Measured here: {what_is_measured(depth)}. "
        f"From {first} to {last} layers: " + " · ".join(parts) + f". A slope of 0 is flat, −0.5 is "
        f"1/√L (the dashed line, ×{math.sqrt(first / last):.2f} over this range)."
    )
    if depth["trained"]:
        line += (
            " Stars: "
            + "; ".join(
                f"{p} trained ({t.get('label', 'trained weights')}, {t['depth']} layers) "
                f"{_fmt(t['last'])} on the same batch"
                for p, t in depth["trained"].items()
            )
            + "."
        )
    for note in depth["notes"]:
        line += f" Note: {note}."
    skipped = {
        **depth["skipped"],
        **{f"{p} at L={d}": why for p, r in depth["placements"].items() for d, why in r.get("skipped", {}).items()},
    }
    if skipped:
        line += " Not measured: " + "; ".join(f"{k} ({why})" for k, why in skipped.items()) + "."
    return line
