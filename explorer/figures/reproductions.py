"""The stored reproductions' figures (no torch): one per reproduction of ``explorer.training.reproductions``
(warm-up, extrapolation, induction, efficiency, K/V heads, gated sink), from their JSON results."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, decade_ticks, legend_above
from explorer.figures.gated_sink import gated_sink_figure
from explorer.figures.gradients import PLACEMENT_COLORS, PLACEMENT_MARKERS


def repro_figure(result: dict) -> go.Figure:
    return decade_ticks(
        {
            "warmup": _warmup,
            "extrapolation": _extrapolation,
            "induction": _induction,
            "efficiency": _efficiency,
            "kv_heads": _kv_heads,
            "gated_sink": gated_sink_figure,
        }[result["name"]](result)
    )


def _warmup(result):
    data = []
    for r in result["rows"]:
        c = r["curve"]
        data.append(
            dict(
                type="scatter",
                x=[p["step"] for p in c],
                y=[p["loss"] for p in c],
                mode="lines+markers",
                name=f"{r['norm_placement']}-LN, warm-up {'on' if r['warmup'] else 'off'}",
                line=dict(color=PLACEMENT_COLORS.get(r["norm_placement"]), dash="solid" if r["warmup"] else "dot"),
                marker=dict(symbol=PLACEMENT_MARKERS.get(r["norm_placement"], "circle"), size=7),
            )
        )
    return go.Figure(
        data=data,
        layout=legend_above(
            base_layout(
                "Post-LN needs warm-up, pre-LN does not (held-out loss)",
                420,
                xaxis=dict(title="step"),
                yaxis=dict(title="loss (nats)"),
            ),
            data,
        ),
    )


def _extrapolation(result):
    data = []
    positions = list(dict.fromkeys(r["position"] for r in result["rows"]))
    for k, pos in enumerate(positions):
        rows = [r for r in result["rows"] if r["position"] == pos]
        data.append(
            dict(
                type="scatter",
                x=[r["eval_len"] for r in rows],
                y=[r["loss"] for r in rows],
                name=pos,
                mode="lines+markers",
                line=dict(color=CYCLE[k % len(CYCLE)]),
            )
        )
    s = result["settings"]
    lay = base_layout(
        f"Trained at L={s['train_len']}: loss on the last {s['eval_tokens']} tokens at longer L",
        420,
        xaxis=dict(title="evaluation length", type="log"),
        yaxis=dict(title="loss (nats)"),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


def stripe_of(result: dict) -> int:
    """The stripe the run learned (0: key t-n+1, 1: key t-n+2; older results: 0)."""
    return int(result.get("stripe", 0))


STRIPE_KEY = {0: "t-n+1", 1: "t-n+2"}


def _induction(result):
    rows = result["rows"]
    att = np.asarray(result["attention"], dtype=np.float32)  # (layers, heads, L, L)
    d = stripe_of(result)
    score = np.asarray(result["stripe_score"][str(d)] if "stripe_score" in result else result["induction_score"])
    layer, head = np.unravel_index(int(score.argmax()), score.shape)
    data = [
        dict(
            type="scatter",
            x=[r["step"] for r in rows],
            y=[r["second_half_loss"] for r in rows],
            mode="lines+markers",
            name="second-half loss",
            xaxis="x",
            yaxis="y",
        ),
        dict(
            type="heatmap",
            z=score,
            x=[f"h{h}" for h in range(score.shape[1])],
            y=[f"layer {n}" for n in range(score.shape[0])],
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            xaxis="x2",
            yaxis="y2",
            showscale=False,
            texttemplate="%{z:.2f}",
            name="induction score",
        ),
        dict(
            type="heatmap",
            z=att[layer, head],
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            xaxis="x3",
            yaxis="y3",
            showscale=True,
            name=f"layer {layer} head {head}",
        ),
    ]
    layout = base_layout(
        "Induction heads: loss on the repeated half, per-head score, the best head's map"
        f"<br><sup>score: attention on key {STRIPE_KEY.get(d, d)}, the stripe this run learned</sup>",
        440,
        xaxis=dict(domain=[0, 0.3], title="step"),
        yaxis=dict(title="loss (nats)", type="log"),
        xaxis2=dict(domain=[0.38, 0.58], anchor="y2", title=f"score on {STRIPE_KEY.get(d, d)}"),
        yaxis2=dict(anchor="x2", autorange="reversed"),
        xaxis3=dict(domain=[0.66, 0.96], anchor="y3", title=f"layer {layer} head {head}: key"),
        yaxis3=dict(anchor="x3", autorange="reversed", title="query"),
    )
    return go.Figure(data=data, layout=layout)


def _efficiency(result):
    rows = [r for r in result["rows"] if r["throughput_rel_full"] is not None]
    peak = max((r["peak_bytes"] for r in rows), default=1) or 1
    data = []
    for k, r in enumerate(rows):
        causal = r["objective"] == "next byte"
        data.append(
            dict(
                type="scatter",
                x=[r["throughput_rel_full"]],
                y=[r["quality"]],
                mode="markers+text",
                text=[r["attention"] + ("" if causal else " *")],
                textposition="top center",
                name=r["attention"],
                marker=dict(
                    size=[12 + 48 * (r["peak_bytes"] / peak) ** 0.5],
                    color=CYCLE[k % len(CYCLE)],
                    opacity=0.6,
                    symbol="circle" if causal else "diamond",
                ),
                hovertemplate=f"{r['attention']}<br>throughput ×%{{x:.2f}} of full<br>quality %{{y:.3f}}<br>"
                f"peak {r['peak_bytes'] / 2**20:.1f} MiB<extra></extra>",
            )
        )
    s = result["settings"]
    return go.Figure(
        data=data,
        layout=base_layout(
            f"Quality vs speed vs memory at L={s['seq_len']} (bubble area ∝ peak memory; * masked-byte objective)",
            480,
            xaxis=dict(title="training throughput relative to full", type="log"),
            yaxis=dict(title="held-out accuracy"),
            showlegend=False,
        ),
    )


def _kv_heads(result):
    rows = result["rows"]
    names = [f"{r['kind']} ({r['n_kv_heads']})" for r in rows]
    data, layout = [], {}
    panels = (
        ("kv_cache_bytes", "KV cache (MiB)", 2**-20),
        ("decode_ms_per_token", "decode ms / token", 1),
        ("quality", "held-out accuracy", 1),
    )
    for k, (key, title, scale) in enumerate(panels):
        ax = "" if k == 0 else str(k + 1)
        data.append(
            dict(
                type="bar",
                x=names,
                y=[r[key] * scale for r in rows],
                name=title,
                xaxis=f"x{ax}",
                yaxis=f"y{ax}",
                marker=dict(color=CYCLE[k]),
            )
        )
        layout[f"xaxis{ax}"] = dict(domain=[k * 0.35, k * 0.35 + 0.28], anchor=f"y{ax}", title=title)
        layout[f"yaxis{ax}"] = dict(anchor=f"x{ax}")
    return go.Figure(
        data=data,
        layout=base_layout(
            f"MHA vs GQA vs MQA ({result['settings']['prefill']}-token cache)", 400, showlegend=False, **layout
        ),
    )
