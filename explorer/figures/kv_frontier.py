"""The KV-cache frontier figure (no torch): cache bytes per token against held-out loss for every way to
shrink a trained model's cache, measured on its own weights (``explorer.analysis.surgery.frontier`` makes the points).

One panel per scored length (the trained length, then 4x it): x is the bytes the decoder holds after ``L``
tokens divided by ``L`` (fp16, log axis), y the held-out loss; one colour and marker per way of shrinking, the
model as trained a black star, and the points no other beats on both axes joined by a grey line.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, message_figure

STYLE = {
    "as trained": ("#111111", "star", 16),
    "fewer K/V heads": (CYCLE[0], "diamond", 11),
    "latent (joint K/V SVD)": (CYCLE[1], "circle", 10),
    "window": (CYCLE[2], "triangle-up", 11),
    "window + sinks": (CYCLE[3], "triangle-down", 11),
    "per-layer schedule": (CYCLE[4], "square", 10),
}
TITLE = "KV-cache frontier"


def pareto(pts: list) -> list:
    """The points no other point beats on both cache and loss, by increasing cache."""
    best, out = float("inf"), []
    for p in sorted(pts, key=lambda p: (p["bytes"], p["loss"])):
        if p["loss"] < best:
            out.append(p)
            best = p["loss"]
    return out


def frontier_figure(table: dict | None, pts: list) -> go.Figure:
    """The frontier of a stored Surgery table from its points (``explorer.analysis.surgery.frontier.points``:
    ``{label, family, length, bytes, loss}``); a message when there are none (an older table without cache
    sizes)."""
    if not table or not pts:
        return message_figure(
            "No KV-cache frontier for this model: its Surgery table has no cache sizes "
            "(python -m explorer.analysis.surgery NAME --write makes one that has).",
            TITLE,
        )
    lengths = table["lengths"]
    n = len(lengths)
    gap = 0.08
    width = (1 - gap * (n - 1)) / n
    data, layout = [], {}
    for k, L in enumerate(lengths):
        s = "" if k == 0 else str(k + 1)
        here = [p for p in pts if p["length"] == L]
        for fam in STYLE:
            mine = [p for p in here if p["family"] == fam]
            if not mine:
                continue
            color, symbol, size = STYLE[fam]
            data.append(
                dict(
                    type="scatter",
                    mode="markers",
                    x=[p["bytes"] for p in mine],
                    y=[p["loss"] for p in mine],
                    text=[p["label"] for p in mine],
                    name=fam,
                    legendgroup=fam,
                    showlegend=k == 0,
                    marker=dict(color=color, symbol=symbol, size=size, line=dict(width=1, color="#ffffff")),
                    xaxis=f"x{s}",
                    yaxis=f"y{s}",
                    hovertemplate=f"%{{text}}<br>L={L}: %{{x:,.0f}} bytes/token, loss %{{y:.3f}}<extra>{fam}</extra>",
                )
            )
        best = pareto(here)
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=[p["bytes"] for p in best],
                y=[p["loss"] for p in best],
                name="frontier (nothing beats these on both)",
                legendgroup="frontier",
                showlegend=k == 0,
                line=dict(color="#888888", dash="dot", width=2, shape="hv"),
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                hoverinfo="skip",
            )
        )
        trained = L == table["trained_length"]
        lo, hi = min(p["bytes"] for p in here), max(p["bytes"] for p in here)
        ticks = [2**e for e in range(max(0, math.floor(math.log2(lo))), math.ceil(math.log2(hi)) + 1)]
        ticks = ticks[::-2][::-1] if len(ticks) > 4 else ticks  # every other power of two: room on a phone
        layout[f"xaxis{s}"] = dict(
            tickmode="array",  # said outright: the phone layout keeps an array's ticks
            tickvals=ticks,
            ticktext=[f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks],
            domain=[k * (width + gap), k * (width + gap) + width],
            anchor=f"y{s}",
            type="log",
            title=dict(text=f"bytes/token at L={L}{' (trained)' if trained else ''}"),
        )
        layout[f"yaxis{s}"] = dict(
            anchor=f"x{s}", title=dict(text=f"held-out loss ({table['unit']})" if k == 0 else "")
        )
    title = (
        f"{TITLE}: cache per token vs held-out loss"
        f"<br><sup>{table['label']}, its trained weights, no fine-tuning; loss on {table['scored_tokens']} held-out "
        "tokens in windows of L<br>x (log): the fp16 keys and values a decoder keeps after L tokens, per token</sup>"
    )
    fig = go.Figure(data=data, layout=legend_above(base_layout(title, 480, **layout), data))
    return fig


def frontier_reading(table: dict | None, pts: list) -> str:
    """One line: at the trained length, the cheapest point within 0.05 of the model's loss."""
    L = table["trained_length"] if table else None
    here = [p for p in pts if p["length"] == L]
    own = next((p for p in here if p["family"] == "as trained"), None)
    if own is None:
        return ""
    near = min((p for p in here if p["loss"] <= own["loss"] + 0.05), key=lambda p: p["bytes"])
    if near is own:
        return f"At L={L} nothing caches less within 0.05 of the model's loss ({own['loss']:.3f})."
    return (
        f"At L={L}, **{near['label']}** caches {near['bytes']:,.0f} bytes per token instead of "
        f"{own['bytes']:,.0f} ({own['bytes'] / near['bytes']:.1f}x less) for a loss of {near['loss']:.3f} "
        f"against {own['loss']:.3f}, with no fine-tuning."
    )
