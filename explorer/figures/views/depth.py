"""Figure of the ``exit`` and ``act`` views (no torch): one bar per token, its exit layer (early
exit) or its number of ACT steps (Universal Transformer), against ``n_layers``."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis


def depth_figure(view, tokens: list) -> go.Figure:
    """One bar per token: its exit layer (early exit) or its number of ACT steps (Universal Transformer)."""
    L = view.depth.shape[0]
    is_exit = view.key == "exit_depth"
    what = "exit layer" if is_exit else "ACT steps"
    data = [
        dict(
            type="bar",
            x=list(range(L)),
            y=view.depth.tolist(),
            customdata=tokens[:L],
            name=what,
            marker=dict(
                color=view.depth.tolist(),
                colorscale="Viridis",
                cmin=0,
                cmax=view.n_layers,
                colorbar=dict(title=dict(text=what), thickness=12),
            ),
            hovertemplate=f"token %{{x}} '%{{customdata}}': {what} %{{y:.0f}}<extra></extra>",
        )
    ]
    mean = float(view.depth.mean())
    if is_exit:
        title = (
            f"Early exit: exit layer per token (confidence threshold {view.threshold:g}) — mean {mean:.2f} of "
            f"{view.n_layers} layers<br><sup>a token stops at the first layer whose top-1 softmax probability "
            f"exceeds the threshold; tokens that never do run all {view.n_layers} layers</sup>"
        )
    else:
        title = (
            f"Universal Transformer ACT: steps per token (halting threshold {view.threshold:g}) — mean "
            f"{mean:.2f} of at most {view.n_layers}<br><sup>a token halts once its cumulative halting "
            "probability passes the threshold; the ponder cost goes to aux_loss</sup>"
        )
    lay = base_layout(
        title,
        440,
        xaxis=token_axis(tokens[:L], title=dict(text="token (byte) position")),
        yaxis=dict(
            title=dict(text="exit layer (1-based)" if is_exit else "steps (block applications)"),
            range=[0, view.n_layers + 0.4],
            dtick=1,
        ),
        shapes=[
            dict(
                type="line",
                xref="paper",
                x0=0,
                x1=1,
                y0=view.n_layers,
                y1=view.n_layers,
                line=dict(color="#c62828", dash="dash", width=2),
            )
        ],
        bargap=0.15,
        annotations=[
            dict(
                text=f"n_layers = {view.n_layers}",
                xref="paper",
                x=1,
                y=view.n_layers,
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(color="#c62828"),
            )
        ],
    )
    return go.Figure(data=data, layout=lay)


def exit_reading(s: dict, view) -> str:
    """The tab's line: the mean exit layer."""
    return f"**exit layer**: mean {s['mean']:.2f} of {s['n_layers']}."


def act_reading(s: dict, view) -> str:
    """The tab's line: the mean number of ACT steps."""
    return f"**ACT steps**: mean {s['mean']:.2f} of {s['n_layers']}."
