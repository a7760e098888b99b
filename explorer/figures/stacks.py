"""Figures of a model of several stacks: the other stacks' and the cross-attention maps, gradient
norms per stack.

The head stack's self-attention is drawn by ``figures.attention.attention_grid`` like any stack; the
others come from ``AttentionMaps.stacks``, each map set naming its stack and the inputs its queries and
keys are positions of (``sides``: a cross-attention has target positions as queries and source
positions as keys, two label sets, so its grid labels each axis with its own tokens).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.attention import BLANK, LEVELS, MAX_GRID, level_colorscale, quantise
from explorer.figures.base import base_layout, decade_ticks, legend_above, subplot_domains


def stack_grid(maps, title: str, query_side: str, key_side: str) -> go.Figure:
    """Layers x heads heatmaps of one stack's ``AttentionMaps``; rows = ``query_side`` tokens,
    columns = ``key_side`` tokens (the hover names both), blank = probability exactly 0.

    The outer panels label their tokens (the first column its queries, the bottom row its keys; Plotly
    writes every n-th where all would overlap). Each trace's ``meta`` is its ``[layer, head]``: a click
    on a panel zooms into it (``explorer.app.tabs.parts.stack_zoom``)."""
    att = maps.attention
    n_l, n_h = min(att.shape[0], MAX_GRID), min(att.shape[1], MAX_GRID)
    qlab = [f"{i} {t}" for i, t in enumerate(maps.tokens)]
    klab = [f"{j} {t}" for j, t in enumerate(maps.key_tokens)]
    finite = att[:n_l, :n_h][np.isfinite(att[:n_l, :n_h])]
    positive = finite[finite > 0]
    cmax = max(float(np.quantile(positive, 0.99)) if positive.size else 1.0, 1e-6)
    step = cmax / LEVELS
    levels = quantise(att[:n_l, :n_h], step)  # (n_l, n_h, Lq, Lk) uint8
    data, layout = [], {}
    for k, (xd, yd) in enumerate(subplot_domains(n_l, n_h)):
        layer, head = divmod(k, n_h)
        s = "" if k == 0 else str(k + 1)
        data.append(
            dict(
                type="heatmap",
                z=levels[layer, head],
                x=klab,
                y=qlab,
                coloraxis="coloraxis",
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                name=f"layer {layer} head {head}",
                hoverongaps=False,
                meta=[layer, head],
                hovertemplate=f"layer {layer} head {head}<br>{query_side} %{{y}}<br>{key_side} %{{x}}"
                f"<br>p ≈ %{{z}} × {step:.3g}<br>click: zoom into this head<extra></extra>",
            )
        )
        last, first = layer == n_l - 1, head == 0
        layout[f"xaxis{s}"] = dict(
            domain=xd,
            anchor=f"y{s}",
            showgrid=False,
            zeroline=False,
            showticklabels=last,
            tickfont=dict(size=9),
            title=dict(text=f"head {head} ({key_side})" if last else ""),
        )
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            showgrid=False,
            zeroline=False,
            autorange="reversed",
            showticklabels=first,
            tickfont=dict(size=9),
            title=dict(text=f"layer {layer} ({query_side})" if first else ""),
        )
    shown = ""
    if n_l < att.shape[0] or n_h < att.shape[1]:
        shown = f" (showing {n_l} of {att.shape[0]} layers, {n_h} of {att.shape[1]} heads)"
    full = (
        f"{title}: {len(maps.tokens)} {query_side} x {len(maps.key_tokens)} {key_side} tokens{shown}"
        f"<br><sup>rows = {query_side} positions (queries), columns = {key_side} positions (keys); "
        "click a panel to zoom</sup>"
    )
    lay = base_layout(full, max(420, 150 * n_l + 150), **layout)
    ticks = [cmax * f for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    lay["coloraxis"] = dict(
        colorscale=level_colorscale(),
        cmin=0,
        cmax=LEVELS,
        colorbar=dict(
            title=dict(text="attention<br>probability"),
            thickness=14,
            tickvals=[max(1.0, t / step) for t in ticks],
            ticktext=[f"{t:.2g}" if t else "0" for t in ticks],
        ),
    )
    lay["plot_bgcolor"] = BLANK
    lay["meta"] = {"p_step": step, "p_max": cmax, "query_side": query_side, "key_side": key_side}
    return go.Figure(data=data, layout=lay)


def map_title(maps) -> str:
    """ "Cross-attention (decoder reads the source)", "Encoder self-attention (bidirectional)"."""
    if maps.mask_kind == "full":
        return f"Cross-attention ({maps.stack} reads the {maps.sides[1]})"
    return f"{maps.stack.capitalize()} self-attention" + ("" if maps.config.get("causal") else " (bidirectional)")


def extra_grid(maps) -> go.Figure:
    """The grid of one map set of ``AttentionMaps.stacks``, titled and labelled from its own record."""
    return stack_grid(maps, map_title(maps), *maps.sides)


GRAD_KEYS = (
    ("attn_out", "self-attention out-proj"),
    ("cross_out", "cross-attention out-proj"),
    ("ffn_out", "FFN out-proj"),
    ("residual", "layer input ‖∇x‖"),
)


def stack_gradient_figure(result: dict) -> go.Figure:
    """Per-layer gradient norms of a model of several stacks (``analysis.gradient_norms``: its results
    carry ``stack`` and ``stack_layer``), one panel per stack in the order they run, log scale."""
    data, layout = [], {}
    stacks = list(dict.fromkeys(result["stack"]))
    domains = subplot_domains(1, len(stacks), hgap=0.08)
    for p, stack in enumerate(stacks):
        s = "" if p == 0 else str(p + 1)
        idx = [i for i, st in enumerate(result["stack"]) if st == stack]
        for _n, (key, label) in enumerate(GRAD_KEYS):
            vals = result.get(key) or []
            ys = [vals[i] if i < len(vals) else None for i in idx]
            if all(v is None for v in ys):
                continue
            shown = {t["legendgroup"] for t in data}
            data.append(
                dict(
                    type="scatter",
                    mode="lines+markers",
                    x=[result["stack_layer"][i] for i in idx],
                    y=[v if v is None or v > 0 else None for v in ys],
                    name=label,
                    legendgroup=key,
                    showlegend=key not in shown,
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    hovertemplate=f"{stack} layer %{{x}}, {label}: %{{y:.3g}}<extra></extra>",
                )
            )
        xd, yd = domains[p]
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", dtick=1, title=dict(text=f"{stack} layer"))
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            type="log",
            exponentformat="power",
            title=dict(text="gradient norm (Frobenius)" if p == 0 else ""),
        )
    lay = base_layout(
        f"Gradient norms per stack at initialisation ({result.get('norm_placement', '')}-norm; "
        f"{stacks[-1]}'s next-token loss)",
        420,
        **layout,
    )
    return decade_ticks(go.Figure(data=data, layout=legend_above(lay, data)))
