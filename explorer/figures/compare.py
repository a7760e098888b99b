"""A/B comparison -> figures: the gradient norms of A and B overlaid, and the A/B sweep (latency in ms
and peak memory in MiB against length).

No torch here. The records are ``explorer.analysis.cost.sweep.latency_memory_sweep`` results for A (pinned) and
B (the controls). A failed length (OOM, time-out, ...) is a cross in its config's colour placed on
that config's curve, continued (dotted) to the failed length at the slope of its last two points, so a
reader sees whose run failed and roughly where the curve was heading.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorer.figures.base import base_layout, decade_ticks, subplot_domains
from explorer.figures.gradients import GRAD_PANELS, layer_axis, placement_color

# A and B stay apart for every reader: blue against orange (distinct under deuteranopia and protanopia),
# and each side its own line (A solid and wider, B dashed) and marker (A circle, B diamond)
COLORS = {"A": "#3949ab", "B": "#e65100"}
MARKERS = {"A": "circle", "B": "diamond"}
DASHES = {"A": "solid", "B": "dash"}
PANELS = (("ms", 1.0, "time per batch (ms)"), ("peak_bytes", 1 / 2**20, "peak memory (MiB)"))


def _ok(records: list, key: str) -> list:
    return [r for r in records if r["status"] == "ok" and r.get(key)]


def _on_curve(records: list, key: str, scale: float, L: int, fallback: float) -> float:
    """The y of length ``L`` on the curve of ``records``: the last point continued at the slope of
    the last two points (1 with a single point); ``fallback`` without any point."""
    ok = _ok(records, key)
    if not ok:
        return fallback
    l1, v1 = ok[-1]["seq_len"], ok[-1][key] * scale
    slope = 1.0
    if len(ok) >= 2:
        l0, v0 = ok[-2]["seq_len"], ok[-2][key] * scale
        if v0 > 0 and v1 > 0 and l1 > l0:
            slope = max(0.0, math.log(v1 / v0) / math.log(l1 / l0))
    return v1 * (L / l1) ** slope


def _series(records: list, label: str, side: str, key: str, scale: float, axis: str, fallback: float) -> list:
    ok = _ok(records, key)
    color = COLORS[side]
    traces = [
        dict(
            type="scatter",
            mode="lines+markers",
            x=[r["seq_len"] for r in ok],
            y=[r[key] * scale for r in ok],
            name=label,
            legendgroup=side,
            showlegend=axis == "",
            xaxis=f"x{axis}",
            yaxis=f"y{axis}",
            line=dict(color=color, width=4 if side == "A" else 3, dash=DASHES[side]),
            marker=dict(size=9, symbol=MARKERS[side]),
            customdata=[r["backend"] for r in ok],
            hovertemplate=f"{side}, L=%{{x}}: %{{y:.3g}}<br>%{{customdata}}<extra></extra>",
        )
    ]
    bad = [r for r in records if r["status"] != "ok"]
    if bad and ok:  # a dotted continuation from the last measured point to the first failure
        first = bad[0]["seq_len"]
        if first > ok[-1]["seq_len"]:
            traces.append(
                dict(
                    type="scatter",
                    mode="lines",
                    x=[ok[-1]["seq_len"], first],
                    y=[ok[-1][key] * scale, _on_curve(records, key, scale, first, fallback)],
                    line=dict(color=color, width=2, dash="dot"),
                    showlegend=False,
                    legendgroup=side,
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    hoverinfo="skip",
                )
            )
    if bad:
        traces.append(
            dict(
                type="scatter",
                mode="markers+text",
                x=[r["seq_len"] for r in bad],
                y=[_on_curve(records, key, scale, r["seq_len"], fallback) for r in bad],
                text=[f"{side}: {r['status'].upper()}" for r in bad],
                textposition="top center" if side == "A" else "bottom center",
                textfont=dict(color=color, size=14),
                name=f"{side}: OOM / timeout",
                legendgroup=side,
                showlegend=False,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                marker=dict(symbol="x", size=15, color=color, line=dict(width=2, color=color)),
                customdata=[r.get("reason", "") for r in bad],
                hovertemplate=f"{side}, L=%{{x}}: %{{text}}<br>%{{customdata}}<extra></extra>",
            )
        )
    return traces


def ab_sweep_figure(a: list, b: list, name_a: str, name_b: str) -> go.Figure:
    """Log-log latency and peak memory of A and B against L (both lists of sweep records)."""
    domains = subplot_domains(1, 2, hgap=0.1)
    data, layout = [], {}
    for p, (key, scale, label) in enumerate(PANELS):
        axis = "" if p == 0 else str(p + 1)
        values = [r[key] * scale for r in _ok(a, key) + _ok(b, key)]
        fallback = max(values, default=1.0)
        data += _series(a, f"A (pinned): {name_a}", "A", key, scale, axis, fallback)
        data += _series(b, f"B (now): {name_b}", "B", key, scale, axis, fallback)
        (xd, yd) = domains[p]
        layout[f"xaxis{axis}"] = dict(
            domain=xd, anchor=f"y{axis}", type="log", title=dict(text="sequence length L (tokens)")
        )
        layout[f"yaxis{axis}"] = dict(domain=yd, anchor=f"x{axis}", type="log", title=dict(text=label))
    lens = sorted({r["seq_len"] for r in a + b})
    for p in ("", "2"):
        layout[f"xaxis{p}"].update(tickvals=lens, ticktext=[str(n) for n in lens])
    mode = (a or b or [{}])[0].get("mode", "forward").replace("_", " + ")
    method = (a or b or [{}])[0].get("memory_method", "measured")
    lay = base_layout(
        f"A/B: {mode} time and memory vs length<br><sup>median of timed runs after warm-up; "
        f"memory {method}; ✕ = a length that ran out of memory or time</sup>",
        500,
        **layout,
    )
    lay["legend"] = dict(orientation="h", y=-0.22, x=0.5, xanchor="center")
    lay["margin"] = dict(l=80, r=30, t=100, b=120)
    return decade_ticks(go.Figure(data=data, layout=lay))


def gradient_compare_figure(grad_a: dict, grad_b: dict) -> go.Figure:
    """Per-layer gradient norms of A and B overlaid (``analysis.gradient_norms`` results), log scale.

    Zeros cannot sit on a log axis: they are drawn at a floor a decade below the smallest positive
    value and the legend says "= 0". Identical curves are said to be identical (B drawn dashed on A).
    """
    domains = subplot_domains(1, 3, hgap=0.07)
    positive = [v for r in (grad_a, grad_b) for key, _ in GRAD_PANELS for v in r[key] if v is not None and v > 0]
    floor = min(positive) / 10 if positive else 1e-6
    same = all(grad_a[key] == grad_b[key] for key, _ in GRAD_PANELS)
    n_layers = max([len(r[key]) for r in (grad_a, grad_b) for key, _ in GRAD_PANELS] + [1])
    # sides that differ in norm placement wear the placement's colour of the Gradients tab (post red,
    # pre blue, ...), so a post-vs-pre comparison reads the same on both tabs; otherwise A / B colours
    placements = (grad_a.get("norm_placement"), grad_b.get("norm_placement"))
    by_placement = placements[0] != placements[1] and all(placements)
    colors = {
        name: placement_color(pl, COLORS[name]) if by_placement else COLORS[name] for name, pl in zip("AB", placements)
    }
    data, layout = [], {"annotations": []}
    for p, (key, label) in enumerate(GRAD_PANELS):
        s = "" if p == 0 else str(p + 1)
        for name, r in (("A", grad_a), ("B", grad_b)):
            vals = r[key]
            if not vals:
                continue
            zero = all(v == 0 for v in vals if v is not None)
            data.append(
                dict(
                    type="scatter",
                    mode="lines+markers",
                    x=list(range(len(vals))),
                    y=[None if v is None else (v if v > 0 else floor) for v in vals],
                    name=f"{name} ({r.get('norm_placement', '')})" + (" = 0" if zero else ""),
                    legendgroup=name,
                    showlegend=p == 0,
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    line=dict(color=colors[name], width=4 if name == "A" else 2, dash=DASHES[name]),
                    marker=dict(size=8, symbol=MARKERS[name]),
                    customdata=vals,
                    hovertemplate=f"{name}, layer %{{x}}: %{{customdata:.3g}}<extra></extra>",
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
        layout["annotations"].append(
            dict(
                text=f"<b>{label}</b>",
                x=(xd[0] + xd[1]) / 2,
                y=1.02,
                xref="paper",
                yref="paper",
                showarrow=False,
                xanchor="center",
                yanchor="bottom",
            )
        )
    title = "Gradient norms at initialisation: A (pinned) vs B (now)"
    if same:
        title += "<br><sup>the curves coincide: A and B have identical gradient norms (B dashed on A)</sup>"
    lay = base_layout(title, 470, **layout)
    lay["legend"] = dict(orientation="h", y=-0.22, x=0.5, xanchor="center")
    lay["margin"] = dict(l=80, r=30, t=110, b=110)
    return decade_ticks(go.Figure(data=data, layout=lay))
