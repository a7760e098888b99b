"""Stored runs beside live ones (``overlay``) and the reproductions' timeline: a run as it was at one of
its snapshots (induction: each head's score and the best head's map; warm-up: the per-layer gradient norms)."""

from __future__ import annotations

import base64

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, decade_ticks, legend_above, message_figure
from explorer.figures.gradients import PLACEMENT_COLORS, PLACEMENT_MARKERS
from explorer.figures.reproductions import STRIPE_KEY, stripe_of


def overlay(live: go.Figure, stored: go.Figure) -> go.Figure:
    """``live`` with the stored run's curves drawn under it (dashed, faded, "stored: ..." in the legend);
    heatmaps are the live run's only (two maps cannot share a panel)."""
    fig = go.Figure(live)
    under = []
    for t in stored.data:
        if t.type not in ("scatter", "bar"):
            continue
        d = t.to_plotly_json()
        d["name"] = f"stored: {d.get('name') or ''}".strip()
        d["opacity"] = 0.45
        d["showlegend"] = True
        if t.type == "scatter":
            d["line"] = {**(d.get("line") or {}), "dash": "dash"}
            d["marker"] = {**(d.get("marker") or {}), "symbol": "circle-open"}
        else:
            d["offsetgroup"] = "stored"
        under.append(d)
    fig.add_traces(under)
    fig.data = tuple(list(fig.data[-len(under) :]) + list(fig.data[: -len(under)])) if under else fig.data
    if stored.layout.title.text and under:
        fig.update_layout(
            title=dict(
                text=f"{fig.layout.title.text}<br><sup>dashed, faded: the stored run; solid: this machine, now</sup>"
            )
        )
    return fig


def snapshot_at(timeline: list, step: int) -> dict:
    """The last snapshot at or before ``step`` (the first one when ``step`` is before all)."""
    best = timeline[0]
    for t in timeline:
        if t["step"] <= step:
            best = t
    return best


def timeline_steps(result: dict | None) -> list:
    """The steps the timeline of ``result`` can show ([] when it has none)."""
    if not result:
        return []
    if result["name"] == "induction" and result.get("timeline") and "stripes" in result["timeline"][0]:
        return [t["step"] for t in result["timeline"]]
    if result["name"] == "warmup" and result["rows"] and result["rows"][0].get("grad_norms"):
        return [g["step"] for g in result["rows"][0]["grad_norms"]]
    return []


def _vline(step: int, xref: str = "x") -> dict:
    return dict(type="line", xref=xref, yref="paper", x0=step, x1=step, y0=0, y1=1, line=dict(color="#d62728", width=2))


def timeline_figure(result: dict | None, step: int) -> go.Figure:
    """``result`` (a reproduction, stored or live) as it was at ``step``: the curves with the step marked,
    and what the run recorded at that snapshot (induction: each head's score and the best head's map,
    the phase change marked; warmup: the per-layer gradient norms of the four runs)."""
    if not timeline_steps(result):
        return message_figure(
            "This reproduction records no snapshots to step through (the timeline is for induction and warmup).",
            "Timeline",
        )
    if result["name"] == "induction":
        return decade_ticks(_induction_timeline(result, int(step)))
    return decade_ticks(_warmup_timeline(result, int(step)))


def decode_maps(text: str, shape) -> np.ndarray:
    """The maps a run stored as base64 uint8 levels (``reproductions.induction.encode_maps``): p = level / 255."""
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape).astype(np.float32) / 255


def _induction_timeline(result: dict, step: int) -> go.Figure:
    tl, d = result["timeline"], str(stripe_of(result))
    snap = snapshot_at(tl, step)
    steps = [t["step"] for t in tl]
    best = [max(max(r) for r in t["stripes"][d]) for t in tl]
    final = np.asarray(tl[-1]["stripes"][d])
    layer, head = np.unravel_index(int(final.argmax()), final.shape)
    maps = decode_maps(snap["maps"], result["maps_shape"])
    score = np.asarray(snap["stripes"][d])
    data = [
        dict(
            type="scatter",
            x=steps,
            y=[t["second_half_loss"] for t in tl],
            name="second-half loss (nats)",
            mode="lines+markers",
            line=dict(color=CYCLE[1]),
            xaxis="x",
            yaxis="y",
        ),
        dict(
            type="scatter",
            x=steps,
            y=best,
            name="best head's score",
            mode="lines+markers",
            line=dict(color=CYCLE[2]),
            xaxis="x",
            yaxis="y4",
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
            z=maps[layer, head],
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            xaxis="x3",
            yaxis="y3",
            colorbar=dict(title=dict(text="attention"), x=1.0),
            name=f"layer {layer} head {head}",
        ),
    ]
    shapes = [_vline(snap["step"])]
    notes = []
    phase = result.get("phase_change")
    if phase is not None:
        shapes.append(
            dict(
                type="line", xref="x", yref="paper", x0=phase, x1=phase, y0=0, y1=1, line=dict(color="#444", dash="dot")
            )
        )
        notes.append(
            dict(
                text=f"phase change, step {phase}",
                x=phase,
                xref="x",
                y=1.02,
                yref="paper",
                showarrow=False,
                font=dict(size=13),
                xanchor="left",
            )
        )
    title = (
        f"Induction heads at step {snap['step']} of {steps[-1]}: loss, each head's score, layer {layer} head "
        f"{head}'s map<br><sup>score: attention on key {STRIPE_KEY.get(int(d), d)}, the stripe this run "
        "learned</sup>"
    )
    lay = base_layout(
        title,
        440,
        shapes=shapes,
        annotations=notes,
        xaxis=dict(domain=[0, 0.3], title="step"),
        yaxis=dict(title="loss (nats)", type="log"),
        yaxis4=dict(overlaying="y", side="right", range=[0, 1], title="score", showgrid=False),
        xaxis2=dict(domain=[0.4, 0.58], anchor="y2", title="induction score"),
        yaxis2=dict(anchor="x2", autorange="reversed"),
        xaxis3=dict(domain=[0.66, 0.94], anchor="y3", title="key"),
        yaxis3=dict(anchor="x3", autorange="reversed", title="query"),
    )
    return go.Figure(data=data, layout=legend_above(lay, data[:2]))


def _warmup_timeline(result: dict, step: int) -> go.Figure:
    data = []
    at = None
    for r in result["rows"]:
        name = f"{r['norm_placement']}-LN, warm-up {'on' if r['warmup'] else 'off'}"
        color, dash = PLACEMENT_COLORS.get(r["norm_placement"]), "solid" if r["warmup"] else "dot"
        c = r["curve"]
        data.append(
            dict(
                type="scatter",
                x=[p["step"] for p in c],
                y=[p["loss"] for p in c],
                mode="lines",
                name=name,
                line=dict(color=color, dash=dash),
                xaxis="x",
                yaxis="y",
                legendgroup=name,
            )
        )
        g = snapshot_at(r["grad_norms"], step)
        at = g["step"]
        data.append(
            dict(
                type="scatter",
                x=list(range(len(g["residual"]))),
                y=g["residual"],
                mode="lines+markers",
                name=name,
                line=dict(color=color, dash=dash),
                xaxis="x2",
                yaxis="y2",
                legendgroup=name,
                marker=dict(symbol=PLACEMENT_MARKERS.get(r["norm_placement"], "circle"), size=7),
                showlegend=False,
            )
        )
    lay = base_layout(
        f"Warm-up at step {at}: held-out loss, and each layer's gradient norm at that step",
        440,
        shapes=[_vline(at)],
        xaxis=dict(domain=[0, 0.45], title="step"),
        yaxis=dict(title="held-out loss (nats)"),
        xaxis2=dict(domain=[0.55, 1], anchor="y2", title="layer", dtick=1),
        yaxis2=dict(anchor="x2", type="log", title="residual gradient norm"),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))
