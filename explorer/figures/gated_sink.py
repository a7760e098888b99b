"""Figure of the ``gated_sink`` reproduction (no torch): Qiu et al. 2025's two claims on the shipped models.

Left, the first-token attention mass per layer (mean over heads and queries ``t >= 1``; open markers: the
layer's head with the most), one line per model; right, the loss on the last bytes of held-out windows
against the evaluation length (log axis), the trained length marked.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above

LABELS = {
    "default": "no gate (default)",
    "gated_attention": "gated output (G1, elementwise)",
    "gpt_oss_style": "learned sinks (gpt-oss style)",
}


def _series(result: dict, measure: str) -> dict:
    out = {}
    for r in result["rows"]:
        if r["measure"] == measure:
            out.setdefault(r["model"], []).append((r["at"], r["value"]))
    return out


def gated_sink_figure(result: dict) -> go.Figure:
    s = result["settings"]
    mean, top, loss = (_series(result, m) for m in ("first-token mass", "first-token mass, top head", "loss"))
    data = []
    for k, name in enumerate(s["models"]):
        color, label = CYCLE[k % len(CYCLE)], LABELS.get(name, name)
        for series, dash, symbol, suffix, show in (
            (mean, "solid", "circle", "", True),
            (top, "dot", "circle-open", " (top head)", False),
        ):
            pts = series.get(name, [])
            data.append(
                dict(
                    type="scatter",
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    mode="lines+markers",
                    name=label + suffix,
                    legendgroup=name,
                    showlegend=show,
                    line=dict(color=color, dash=dash),
                    marker=dict(symbol=symbol, size=8),
                    xaxis="x",
                    yaxis="y",
                    hovertemplate=f"{label}{suffix}<br>layer %{{x}}: %{{y:.3f}} of each row on the first token"
                    "<extra></extra>",
                )
            )
        pts = loss.get(name, [])
        data.append(
            dict(
                type="scatter",
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="lines+markers",
                name=label,
                legendgroup=name,
                showlegend=False,
                line=dict(color=color),
                marker=dict(size=8),
                xaxis="x2",
                yaxis="y2",
                hovertemplate=f"{label}<br>L=%{{x}}: %{{y:.3f}} nats/byte<extra></extra>",
            )
        )
    trained = s["trained_len"]
    uniform = sum(1 / (t + 1) for t in range(1, trained)) / (trained - 1)  # causal rows spread evenly
    layers = sorted({p[0] for pts in mean.values() for p in pts})
    if layers:
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=[layers[0], layers[-1]],
                y=[uniform, uniform],
                name=f"rows spread evenly ({uniform:.3f}): a sink lies above",
                line=dict(color="#777777", dash="dash", width=1.5),
                xaxis="x",
                yaxis="y",
                hoverinfo="skip",
            )
        )
    layout = base_layout(
        "Does the output gate remove the attention sink? (Qiu et al. 2025, on the bundles trained here)"
        f"<br><sup>left: attention on the first token per layer (dotted: the layer's top head); right: loss on the "
        f"last {s['eval_tokens']} bytes of {s['eval_seqs']} held-out windows, trained at {trained} bytes</sup>",
        460,
        xaxis=dict(domain=[0, 0.44], title=dict(text="layer"), dtick=1),
        yaxis=dict(title=dict(text="first-token attention (fraction of a row)"), rangemode="tozero"),
        xaxis2=dict(
            domain=[0.56, 1],
            anchor="y2",
            type="log",
            tickmode="array",
            tickvals=s["eval_lens"],
            ticktext=[str(L) for L in s["eval_lens"]],
            title=dict(text="evaluation length (bytes, log)"),
        ),
        yaxis2=dict(anchor="x2", title=dict(text="loss (nats/byte)")),
        shapes=[
            dict(
                type="line",
                xref="x2",
                yref="y2 domain",
                x0=trained,
                x1=trained,
                y0=0,
                y1=1,
                line=dict(color="#777", dash="dash", width=1.5),
            )
        ],
    )
    return go.Figure(data=data, layout=legend_above(layout, data))
