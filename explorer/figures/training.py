"""Training results -> Plotly figures (no torch): live curves, probe attention beside the task's
ideal pattern, per-layer gradient norms; the reproductions' figures (``reproductions``) and the stored runs'
timeline (``timeline``) live in their own modules and are re-exported here for the Train tab.

Inputs are plain data: ``Trainer.history`` (list of dicts), ``Snapshot.attention`` (numpy array
``(layers, heads, Lq, Lk)``), ``Snapshot.grad_norms`` (dict of lists), reproduction results (the
JSON of ``explorer.training.reproductions``). Figures are dict-built with explicit axis domains, like
``explorer.figures.base``, so a redraw on every snapshot stays cheap.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.attention import signed_colorscale
from explorer.figures.base import CYCLE, base_layout, decade_ticks, legend_above, message_figure, subplot_domains
from explorer.figures.reproductions import repro_figure
from explorer.figures.timeline import decode_maps, overlay, snapshot_at, timeline_figure, timeline_steps

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
    # negative weights that matter (a recurrent layer's implicit map, differential attention): the values on the
    # grid's diverging scale, symmetric about 0, instead of probabilities clipped to [0, 1]
    shown = att[:n_l, :n_h]
    finite = shown[np.isfinite(shown)]
    top = float(np.abs(finite).max()) if finite.size else 0.0
    signed = bool(finite.size) and float(finite.min()) < -0.01 * top
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
                    zmin=-top if signed and c < n_h else 0,
                    zmax=top if signed and c < n_h else 1,
                    colorscale="Blues" if c == n_h else (signed_colorscale() if signed else "Viridis"),
                    showscale=k == 0,
                    name=name,
                    hovertemplate=f"{name}<br>query %{{y}} → key %{{x}}<br>%{{z:.3f}}<extra></extra>",
                )
            )
    note = " · right: the pattern that solves the task" if ideal is not None else ""
    if signed:  # what the colours are when they are not probabilities
        note += "<br><sup>signed weights (a recurrent layer's implicit map, or differential attention): "
        note += "not probabilities</sup>"
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


__all__ = [
    "attention_figure",
    "curves_figure",
    "decode_maps",
    "grad_figure",
    "live_curves_figure",
    "overlay",
    "repro_figure",
    "snapshot_at",
    "timeline_figure",
    "timeline_steps",
]
