"""Training results -> Plotly figures (no torch): live curves, probe attention beside the task's
ideal pattern, per-layer gradient norms, and one figure per reproduction.

Inputs are plain data: ``Trainer.history`` (list of dicts), ``Snapshot.attention`` (numpy array
``(layers, heads, Lq, Lk)``), ``Snapshot.grad_norms`` (dict of lists), reproduction results (the
JSON of ``explorer.training.reproductions``). Figures are dict-built with explicit axis domains, like
``explorer.figures.base``, so a redraw on every snapshot stays cheap.
"""

from __future__ import annotations

import base64

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, decade_ticks, legend_above, message_figure, subplot_domains
from explorer.figures.gated_sink import gated_sink_figure
from explorer.figures.gradients import PLACEMENT_COLORS, PLACEMENT_MARKERS

MAX_LAYERS, MAX_HEADS = 4, 4  # live maps: at most 4 x 4 panels (+ the ideal pattern)


def curves_figure(history: list, chance: str = "") -> go.Figure:
    """Loss (train, held-out) and held-out accuracy against the step."""
    if not history:
        return message_figure("Press ▶ Play to start training.", "Loss and accuracy")
    steps = [h["step"] for h in history]
    train = [(h["step"], h["train_loss"]) for h in history if h["train_loss"] is not None]
    data = [
        dict(
            type="scatter",
            x=[s for s, _ in train],
            y=[v for _, v in train],
            name="train loss",
            mode="lines+markers",
            line=dict(color=CYCLE[0]),
            xaxis="x",
            yaxis="y",
        ),
        dict(
            type="scatter",
            x=steps,
            y=[h["heldout_loss"] for h in history],
            name="held-out loss",
            mode="lines+markers",
            line=dict(color=CYCLE[1]),
            xaxis="x",
            yaxis="y",
        ),
        dict(
            type="scatter",
            x=steps,
            y=[h["heldout_acc"] for h in history],
            name="held-out accuracy",
            mode="lines+markers",
            line=dict(color=CYCLE[2]),
            xaxis="x2",
            yaxis="y2",
        ),
    ]
    title = f"Loss and accuracy (step {steps[-1]})" + (f" · chance: {chance}" if chance else "")
    layout = base_layout(
        title,
        380,
        xaxis=dict(domain=[0, 0.6], title="step"),
        yaxis=dict(title="loss (nats)"),
        xaxis2=dict(domain=[0.7, 1], title="step", anchor="y2"),
        yaxis2=dict(title="accuracy", range=[0, 1.02], anchor="x2"),
    )
    return go.Figure(data=data, layout=legend_above(layout, data))


def attention_figure(attention, ideal=None, labels=None, step: int = 0) -> go.Figure:
    """Layers x heads probe attention (at most 4 x 4), and the task's ideal pattern in the last column."""
    if attention is None:
        return message_figure("This model returns no attention weights.", "Probe attention")
    att = np.asarray(attention)
    n_l, n_h = min(att.shape[0], MAX_LAYERS), min(att.shape[1], MAX_HEADS)
    cols = n_h + (1 if ideal is not None else 0)
    domains = subplot_domains(n_l, cols, hgap=0.015, vgap=0.03)
    data, layout = [], {}
    for r in range(n_l):
        for c in range(cols):
            k = r * cols + c
            ax = "" if k == 0 else str(k + 1)
            if c < n_h:
                z, name = att[r, c], f"layer {r} head {c}"
            elif r == 0:
                z, name = ideal, "ideal pattern"
            else:
                z, name = None, ""
            xd, yd = domains[k]
            layout[f"xaxis{ax}"] = dict(
                domain=xd,
                anchor=f"y{ax}",
                showticklabels=False,
                showgrid=False,
                title=dict(text=name, font=dict(size=12)) if r == n_l - 1 or c == n_h else None,
            )
            layout[f"yaxis{ax}"] = dict(
                domain=yd,
                anchor=f"x{ax}",
                autorange="reversed",
                showticklabels=False,
                showgrid=False,
                title=dict(text=f"layer {r}", font=dict(size=12)) if c == 0 else None,
            )
            if z is None:
                layout[f"xaxis{ax}"]["visible"] = False
                layout[f"yaxis{ax}"]["visible"] = False
                continue
            z = np.where(np.isfinite(z), z, np.nan)
            data.append(
                dict(
                    type="heatmap",
                    z=z.astype(np.float32),
                    x=list(range(z.shape[1])),
                    y=list(range(z.shape[0])),
                    xaxis=f"x{ax}",
                    yaxis=f"y{ax}",
                    zmin=0,
                    zmax=1,
                    colorscale="Blues" if c == n_h else "Viridis",
                    showscale=k == 0,
                    name=name,
                    hovertemplate=f"{name}<br>query %{{y}} → key %{{x}}<br>%{{z:.3f}}<extra></extra>",
                )
            )
    note = " · right: the pattern that solves the task" if ideal is not None else ""
    return go.Figure(
        data=data, layout=base_layout(f"Probe attention at step {step}{note}", max(300, 150 + 170 * n_l), **layout)
    )


def grad_figure(grad_norms) -> go.Figure:
    """Per-layer gradient norms (Xiong et al. 2020's three quantities) on the held-out batch."""
    if not grad_norms:
        return message_figure("Gradient norms appear after the first snapshot.", "Gradient norms per layer")
    data = []
    for key, label, color in (
        ("attn_out", "‖∇W‖ attention out-proj", CYCLE[0]),
        ("ffn_out", "‖∇W‖ FFN out-proj", CYCLE[1]),
        ("residual", "‖∇x‖ layer input", CYCLE[3]),
    ):
        vals = grad_norms.get(key) or []
        if vals:
            data.append(
                dict(
                    type="scatter",
                    x=list(range(len(vals))),
                    y=[np.nan if v is None else v for v in vals],
                    name=label,
                    mode="lines+markers",
                    line=dict(color=color),
                )
            )
    layout = base_layout(
        "Gradient norms per layer (current weights)",
        340,
        xaxis=dict(title="layer", dtick=1),
        yaxis=dict(title="norm", type="log"),
    )
    return decade_ticks(go.Figure(data=data, layout=legend_above(layout, data)))


# ---------------------------------------------------------------------------- reproductions
def live_curves_figure(points: dict, name: str, colors: dict | None = None) -> go.Figure:
    """A reproduction's held-out loss so far while it runs: ``points`` is ``{series: [(step, loss), ...]}``
    in arrival order (``explorer.training.reproductions.Point``)."""
    data = []
    for n, (series, pts) in enumerate(points.items()):
        color = (colors or {}).get(series.split("-LN")[0], CYCLE[n % len(CYCLE)])
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                name=series,
                line=dict(color=color, width=3, dash="dot" if series.endswith(" off") else "solid"),
                marker=dict(size=7),
            )
        )
    last = max((p[0] for pts in points.values() for p in pts), default=0)
    lay = base_layout(
        f"{name}: live run in progress (held-out loss so far, step {last})<br><sup>the full "
        "figure replaces this when the run ends</sup>",
        420,
        xaxis=dict(title=dict(text="step")),
        yaxis=dict(title=dict(text="loss (nats)")),
    )
    return go.Figure(data=data, layout=legend_above(lay, data))


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


def _stripe(result: dict) -> int:
    """The stripe the run learned (0: key t-n+1, 1: key t-n+2; older results: 0)."""
    return int(result.get("stripe", 0))


STRIPE_KEY = {0: "t-n+1", 1: "t-n+2"}


def _induction(result):
    rows = result["rows"]
    att = np.asarray(result["attention"], dtype=np.float32)  # (layers, heads, L, L)
    d = _stripe(result)
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


# ---------------------------------------------------------------------------- stored runs and the timeline
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
    tl, d = result["timeline"], str(_stripe(result))
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
