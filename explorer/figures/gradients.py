"""Gradient norms -> figure: per layer, every norm placement overlaid (Xiong et al. 2020)."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, decade_ticks, legend_above, subplot_domains
from explorer.figures.notes import coincidence_notes

# Okabe-Ito colours (distinguishable with every common colour-vision deficiency), and a marker and a dash
# per placement as well, so the curves stay apart in grey print and on a washed-out projector
PLACEMENT_COLORS = {
    "post": "#D55E00",
    "pre": "#0072B2",
    "sandwich": "#009E73",
    "rezero": "#CC79A7",
    "none": "#000000",
    "res_post": "#56B4E9",
}
PLACEMENT_MARKERS = {
    "post": "circle",
    "pre": "square",
    "sandwich": "diamond",
    "rezero": "triangle-up",
    "none": "x",
    "res_post": "star",
}
PLACEMENT_DASHES = {
    "post": "solid",
    "pre": "dash",
    "sandwich": "dot",
    "rezero": "dashdot",
    "none": "longdash",
    "res_post": "longdashdot",
}


# ---------------------------------------------------------------------------- gradients
def layer_axis(n_layers: int) -> dict:
    """The x axis of a per-layer plot: exactly the layers 0 .. n-1 (no -1 or n from autorange
    padding), at most about eight tick labels so 12 or 24 layers stay readable on a projector."""
    n = max(1, int(n_layers))
    step = max(1, -(-n // 8))
    return dict(range=[-0.5, n - 0.5], tickmode="linear", tick0=0, dtick=step, title=dict(text="layer"))


def placement_color(placement: str, fallback: str) -> str:
    """One colour per norm placement, the same in every figure (Gradients and Compare)."""
    return PLACEMENT_COLORS.get(placement, fallback)


GRAD_PANELS = (
    ("attn_out", "attention out-proj ‖∇W‖"),
    ("ffn_out", "FFN out-proj ‖∇W‖"),
    ("residual", "layer input ‖∇x‖"),
)


def placement_style(placement: str, n: int = 0) -> dict:
    """Colour, marker symbol and dash of a placement's curve (the same in every figure)."""
    return dict(
        color=placement_color(placement, CYCLE[n % len(CYCLE)]),
        symbol=PLACEMENT_MARKERS.get(placement, "circle"),
        dash=PLACEMENT_DASHES.get(placement, "solid"),
    )


def gradient_figure(results: dict, current: str, title: str | None = None) -> go.Figure:
    """Per-layer gradient norms of every placement overlaid, log scale, ``current`` highlighted.

    ``results``: ``{placement: gradient_norms dict}``. Exact zeros cannot sit on a log axis; such
    a placement is drawn on the bottom edge and named "= 0" in the legend. Curves that would hide
    each other are said: placements with the same norms in a panel (``coinciding``) and the exact
    zeros are listed under the title with the reason.
    """
    data, layout = gradient_panels(results, current, subplot_domains(1, 3, hgap=0.07))
    notes = coincidence_notes(results, GRAD_PANELS)
    title = title or "Gradient norms at initialisation by norm placement (Xiong et al. 2020)"
    if notes:
        title += "<br><sup>" + "; ".join(notes) + "</sup>"
    lay = base_layout(title, 440, **layout)
    lay["legend"] = dict(title=dict(text="placement: "))
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return decade_ticks(go.Figure(data=data, layout=legend_above(lay, data, gap=26)))


def gradient_panels(results: dict, current: str, domains: list, first_axis: int = 1, show_legend: bool = True) -> tuple:
    """``(traces, layout)`` of the three per-layer panels on axes ``first_axis`` .. ``first_axis + 2``
    placed at ``domains`` (three ``(xdomain, ydomain)``), their titles as paper annotations."""
    data, layout = [], {}
    positive = [v for r in results.values() for key, _ in GRAD_PANELS for v in r[key] if v is not None and v > 0]
    floor = min(positive) / 10 if positive else 1e-6
    n_layers = max([len(r[key]) for r in results.values() for key, _ in GRAD_PANELS] + [1])
    for p, (key, label) in enumerate(GRAD_PANELS):
        s = "" if p + first_axis == 1 else str(p + first_axis)
        for n, (placement, r) in enumerate(results.items()):
            vals = r[key]
            if not vals:
                continue
            zero = all(v == 0 for v in vals if v is not None)
            is_cur = placement == current
            style = placement_style(placement, n)
            name = placement + (" (current)" if is_cur else "")
            data.append(
                dict(
                    type="scatter",
                    mode="lines+markers",
                    x=list(range(len(vals))),
                    y=[None if v is None else (v if v > 0 else floor) for v in vals],
                    name=name + (" = 0" if zero else ""),
                    legendgroup=placement,
                    showlegend=show_legend and p == 0,
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    line=dict(color=style["color"], width=5 if is_cur else 2, dash="dot" if zero else style["dash"]),
                    marker=dict(size=11 if is_cur else 7, symbol=style["symbol"]),
                    opacity=1.0 if is_cur else 0.6,
                    customdata=vals,
                    hovertemplate=f"{placement}, layer %{{x}}: %{{customdata:.3g}}<extra></extra>",
                )
            )
        xd, yd = domains[p]
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", **layer_axis(n_layers))
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            type="log",
            exponentformat="power",
            title=dict(text="gradient norm (Frobenius)" if p == 0 else ""),
        )
        layout.setdefault("annotations", []).append(
            dict(
                text=f"<b>{label}</b>",
                x=(xd[0] + xd[1]) / 2,
                y=yd[1] + 0.02 * (yd[1] - yd[0]),
                xref="paper",
                yref="paper",
                showarrow=False,
                xanchor="center",
                yanchor="bottom",
                font=dict(size=15),
            )
        )
    return data, layout
