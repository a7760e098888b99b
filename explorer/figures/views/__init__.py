"""Variant views -> Plotly figures (no torch): approximation error, buckets / clusters, adaptive
span, expert load, memory reach, exit depth and ACT steps. Inputs are ``explorer.analysis.views`` results
(numpy arrays), styled like ``explorer.figures.base`` so they project well.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import legend_above
from explorer.figures.base import token_axis as _token_axis
from explorer.figures.base import CYCLE, subplot_domains, base_layout
from explorer.figures.views.family import FAMILY_PLOTS, family_figures
from explorer.figures.views.systems import (
    funnel_figure,
    head_mix_figure,
    prior_figure,
    probsparse_figure,
    sinkhorn_figure,
    slot_figure,
)

GROUP_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def _discrete(n: int) -> list:
    """A stepped colorscale of ``n`` categorical colours for integer z in ``[0, n - 1]``."""
    if n <= 1:
        return [[0, GROUP_COLORS[0]], [1, GROUP_COLORS[0]]]
    out = []
    for g in range(n):
        c = GROUP_COLORS[g % len(GROUP_COLORS)]
        out += [[g / n, c], [(g + 1) / n, c]]
    return out


def _panel_title(text: str, xd, y: float = 1.0) -> dict:
    return dict(text=f"<b>{text}</b>", x=(xd[0] + xd[1]) / 2, y=y, xref="paper", yref="paper", showarrow=False,
                xanchor="center", yanchor="bottom", font=dict(size=15))


# ---------------------------------------------------------------------------- approximation
GROUP_WORD = {"lsh": "bucket", "routing": "cluster", "clustered": "cluster"}
WHY_LARGE = {"lsh": "expected for LSH at initialisation: random rotations of untrained queries pick the "
                    "buckets, not the exact attention; a query alone in its bucket attends only to itself"}


def disjoint_rows(view, layer=None, head=None) -> tuple:
    """(rows whose exact attention mass lies entirely on keys the mechanism gives 0, rows) over all
    layers and heads, or one (layer, head)."""
    eff, exact = view.effective, view.exact
    if layer is not None:
        eff, exact = eff[layer, head], exact[layer, head]
    outside = np.where(np.nan_to_num(eff) == 0, np.nan_to_num(exact), 0.0).sum(-1)  # exact mass off the support
    return int((outside > 0.999).sum()), int(outside.size)


def error_note(view, layer=None, head=None) -> list:
    """What a large max |error| means, as short sentences (none below 0.5): a cell's |error| is 1
    when one map puts a row's whole mass on a key the other gives 0, e.g. a row whose exact
    attention lies entirely on keys outside the query's bucket."""
    mx = float(view.max_error.max() if layer is None else view.max_error[layer, head])
    if mx < 0.5:
        return []
    n, rows = disjoint_rows(view, layer, head)
    where = GROUP_WORD.get(view.mechanism, "keys it keeps")
    where = f"the query's {where}" if where != "keys it keeps" else f"the keys {view.mechanism} keeps"
    note = [f"max |error| near 1 = a query row whose exact attention mass lies entirely on keys outside {where} "
            f"({n} of {rows} rows here)"]
    why = WHY_LARGE.get(view.mechanism)
    return note + [why[0].upper() + why[1:]] if why else note


def approximation_figure(view, tokens: list, layer: int = 0, head: int = 0) -> go.Figure:
    """Effective map | exact softmax | |error| of one (layer, head); max / mean error in the title."""
    layer = int(np.clip(layer, 0, view.effective.shape[0] - 1))
    head = int(np.clip(head, 0, view.effective.shape[1] - 1))
    eff, exact, err = view.effective[layer, head], view.exact[layer, head], view.error[layer, head]
    lq, lk = eff.shape
    allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq) if view.causal else np.ones((lq, lk), bool)
    blank = lambda a: np.where(allowed, a, np.nan)  # noqa: E731  pairs the causal mask forbids show the background
    both = np.concatenate([eff[allowed], exact[allowed]])
    cmax = float(np.quantile(both[both > 0], 0.99)) if (both > 0).any() else 1.0
    # three square panels; each colorbar sits in the gap to the right of the panels it colours
    doms = [([0.0, 0.26], [0.0, 1.0]), ([0.33, 0.59], [0.0, 1.0]), ([0.69, 0.95], [0.0, 1.0])]
    names = (f"effective ({view.mechanism})", "exact softmax", "|effective − exact|")
    data, layout, notes = [], {}, []
    for p, (z, name) in enumerate(zip((eff, exact, err), names)):
        s = "" if p == 0 else str(p + 1)
        data.append(dict(type="heatmap", z=blank(z).astype(np.float32), xaxis=f"x{s}", yaxis=f"y{s}", name=name,
                         coloraxis="coloraxis2" if p == 2 else "coloraxis", hoverongaps=False,
                         hovertemplate=f"{name}<br>query %{{y}}, key %{{x}}<br>%{{z:.4f}}<extra></extra>"))
        xd, yd = doms[p]
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", title=dict(text="key position"), showgrid=False,
                                   zeroline=False, constrain="domain")
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", autorange="reversed", showgrid=False, zeroline=False,
                                   title=dict(text="query position" if p == 0 else ""), scaleanchor=f"x{s}",
                                   constrain="domain")
        notes.append(_panel_title(name, xd))
    mx, mean = float(view.max_error[layer, head]), float(view.mean_error[layer, head])
    title = (f"{view.mechanism} attention vs exact softmax — layer {layer}, head {head}: "
             f"max |error| {mx:.3f}, mean |error| {mean:.4f}<br><sup>exact: {view.reference}; mean over the "
             f"allowed (query, key) pairs; blank = masked</sup>")
    note = error_note(view, layer, head)
    title += "".join(f"<br><sup>{line}</sup>" for line in note)
    lay = base_layout(title, 500 + 22 * len(note), annotations=notes, **layout)
    lay["coloraxis"] = dict(colorscale="Viridis", cmin=0.0, cmax=max(cmax, 1e-6), colorbar=dict(
        title=dict(text="prob.", side="top"), thickness=12, x=0.6, xanchor="left", len=0.8))
    lay["coloraxis2"] = dict(colorscale="Reds", cmin=0.0, cmax=max(float(err[allowed].max()), 1e-6), colorbar=dict(
        title=dict(text="|error|", side="top"), thickness=12, x=0.96, xanchor="left", len=0.8))
    lay["plot_bgcolor"] = "#eef0f3"
    lay["margin"] = dict(l=70, r=70, t=120 + 22 * len(note), b=60)
    return go.Figure(data=data, layout=lay)


def approximation_table(view) -> go.Figure:
    """Mean |error| per (layer, head), max |error| in the cell text: every layer and head at a glance."""
    n_l, n_h = view.mean_error.shape
    text = [[f"{view.mean_error[i, h]:.4f}<br>(max {view.max_error[i, h]:.2f})" for h in range(n_h)] for i in range(n_l)]
    data = [dict(type="heatmap", z=view.mean_error.astype(np.float64), x=[f"head {h}" for h in range(n_h)],
                 y=[f"layer {i}" for i in range(n_l)], text=text, texttemplate="%{text}", textfont=dict(size=14),
                 colorscale="Reds", zmin=0.0, colorbar=dict(title=dict(text="mean |error|"), thickness=12),
                 hovertemplate="%{y}, %{x}<br>mean |error| %{z:.5f}<extra></extra>")]
    title = (f"Approximation error of {view.mechanism} per layer and head — overall max "
             f"{view.max_error.max():.3f}, mean {view.mean_error.mean():.4f}<br><sup>cell: mean |effective − exact| "
             "over allowed pairs (max in brackets)</sup>")
    return go.Figure(data=data, layout=base_layout(title, max(300, 70 * n_l + 170), xaxis=dict(side="bottom"),
                                               yaxis=dict(autorange="reversed", title=dict(text="layer"))))


# ---------------------------------------------------------------------------- buckets / clusters
def groups_figure(view, tokens: list) -> go.Figure:
    """Rows = (layer, head), columns = tokens, colour = the token's bucket / cluster."""
    n_l, n_h, L = view.labels.shape
    z = view.labels.reshape(n_l * n_h, L)
    rows = [f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    text = [[tokens[j] for j in range(L)] for _ in rows] if L <= 128 else None
    G = view.n_groups
    trace = dict(type="heatmap", z=z, y=rows, x=list(range(L)), colorscale=_discrete(G), zmin=-0.5, zmax=G - 0.5,
                 xgap=1, ygap=2, customdata=[[tokens[j] for j in range(L)] for _ in rows],
                 colorbar=dict(title=dict(text=view.what), tickvals=list(range(G)), ticktext=[str(g) for g in range(G)],
                               thickness=14),
                 hovertemplate="%{y}, token %{x} '%{customdata}'<br>" + view.what + " %{z}<extra></extra>")
    if text is not None:
        trace.update(text=text, texttemplate="%{text}", textfont=dict(size=11, color="white"))
    title = (f"Tokens coloured by {view.what} (each layer and head; {G} {view.what.split()[-1]}s)"
             f"<br><sup>{group_rule(view)}</sup>")
    lay = base_layout(title, max(360, 34 * len(rows) + 200),
                  xaxis=_token_axis(tokens, title=dict(text="token (byte) position")),
                  yaxis=dict(autorange="reversed", title=dict(text="layer, head"), tickfont=dict(size=13)))
    return go.Figure(data=[trace], layout=lay)


def group_rule(view) -> str:
    """What a token's group means for its attention (LSH and routing: the keys it may attend;
    clustered attention: whose softmax row it takes)."""
    if view.what == "k-means query cluster":
        return "each query takes its k-means cluster's attention row: the centroid's softmax over all keys"
    if view.key == "buckets":
        return "a query attends only keys of its own bucket (first hash round shown)"
    return f"a query attends only keys of its own {view.what} (query assignment)"


# ---------------------------------------------------------------------------- adaptive span
def span_figure(view) -> go.Figure:
    """Learned span z per head (bars grouped by layer) against max_span."""
    n_l, n_h = view.span.shape
    layers = [f"layer {i}" for i in range(n_l)]
    data = [dict(type="bar", x=layers, y=view.span[:, h].tolist(), name=f"head {h}", marker=dict(color=CYCLE[h % len(CYCLE)]),
                 hovertemplate=f"%{{x}}, head {h}: span %{{y:.1f}} tokens<extra></extra>") for h in range(n_h)]
    title = (f"Adaptive span: learned span z per head (max_span = {view.max_span})<br><sup>a key at distance d "
             f"gets weight clamp((R + z − d) / R, 0, 1), R = span_ramp = {view.ramp}; an L1 penalty on z is added "
             "to aux_loss</sup>")
    lay = base_layout(title, 440, barmode="group", xaxis=dict(title=dict(text="layer")),
                  yaxis=dict(title=dict(text="span z (tokens)"), range=[0, view.max_span * 1.12]),
                  shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=view.max_span, y1=view.max_span,
                               line=dict(color="#c62828", dash="dash", width=2))],
                  annotations=[dict(text=f"max_span = {view.max_span}", xref="paper", x=1, y=view.max_span,
                                    xanchor="right", yanchor="bottom", showarrow=False, font=dict(color="#c62828"))])
    return go.Figure(data=data, layout=legend_above(lay, data))


# ---------------------------------------------------------------------------- experts
def experts_figure(view, tokens: list) -> go.Figure:
    """One expert-load histogram per layer (colour = expert, capacity dashed, dropped count in the panel
    title) above each token's top-1 expert in the same colours."""
    n_l, E = view.counts.shape
    cols = min(n_l, 4)
    rows = -(-n_l // cols)
    top = 0.42  # the histograms live above this fraction of the figure, the token strip below
    hist_h = (1 - top) / rows
    colors = [GROUP_COLORS[e % len(GROUP_COLORS)] for e in range(E)]
    cap = view.capacity[0]
    n_seq = max(1, view.n_tokens // view.assignment.shape[1])
    data, layout, notes, shapes = [], {}, [], []
    for i in range(n_l):
        r, c = divmod(i, cols)
        s = "" if i == 0 else str(i + 1)
        xd = [c / cols + 0.012, (c + 1) / cols - 0.012]
        yd = [1 - (r + 1) * hist_h + 0.06, 1 - r * hist_h - 0.035]
        data.append(dict(type="bar", x=list(range(E)), y=view.counts[i].tolist(), marker=dict(color=colors),
                         xaxis=f"x{s}", yaxis=f"y{s}", name=f"layer {i}", showlegend=False,
                         hovertemplate=f"layer {i}, expert %{{x}}: %{{y}} assignments<extra></extra>"))
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", dtick=1, title=dict(text="expert", standoff=2))
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", matches="y" if i else None, rangemode="tozero",
                                   showticklabels=c == 0, title=dict(text="tokens" if c == 0 else ""))
        notes.append(_panel_title(f"layer {i}: {int(view.dropped[i])} dropped", xd, yd[1]))
        if cap is not None:
            shapes.append(dict(type="line", xref=f"x{s} domain", yref=f"y{s}", x0=0, x1=1, y0=cap * n_seq,
                               y1=cap * n_seq, line=dict(color="#c62828", dash="dash", width=2)))
    L = view.assignment.shape[1]
    s = str(n_l + 1)
    data.append(dict(type="heatmap", z=view.assignment, x=list(range(L)), y=[f"layer {i}" for i in range(n_l)],
                     xaxis=f"x{s}", yaxis=f"y{s}", colorscale=_discrete(E), zmin=-0.5, zmax=E - 0.5, xgap=1, ygap=2,
                     customdata=[tokens[:L]] * n_l,
                     colorbar=dict(title=dict(text="top-1<br>expert"), tickvals=list(range(E)), thickness=12,
                                   y=top / 2 - 0.04, len=top - 0.1),
                     hovertemplate="%{y}, token %{x} '%{customdata}'<br>expert %{z}<extra></extra>"))
    layout[f"xaxis{s}"] = dict(_token_axis(tokens[:L], title=dict(text="token (byte) position")), domain=[0, 1],
                               anchor=f"y{s}")
    layout[f"yaxis{s}"] = dict(domain=[0.0, top - 0.12], anchor=f"x{s}", autorange="reversed")
    notes.append(_panel_title("top-1 expert of each token", [0, 1], top - 0.11))
    total = int(view.dropped.sum())
    cap_text = (f"capacity {cap} per expert per sequence (dashed); a dropped token skips the FFN through the "
                "residual" if cap is not None else "a fixed hash of the token id: no router, no capacity")
    title = (f"{view.ffn}: expert load per layer — {total} of {view.n_tokens * view.top_k * n_l} assignments dropped"
             f"<br><sup>top-{view.top_k} routing of {view.n_tokens} tokens per layer; {cap_text}</sup>")
    return go.Figure(data=data, layout=base_layout(title, 460 + 240 * rows, annotations=notes, shapes=shapes, **layout))


# ---------------------------------------------------------------------------- memory
def memory_figure(view, tokens: list) -> go.Figure:
    """Memory slots per layer and segment | how far back each query can see."""
    n_l, S = view.memory_len.shape
    (xd0, yd0), (xd1, yd1) = subplot_domains(1, 2, hgap=0.1)
    layers = [f"layer {i}" for i in range(n_l)]
    data = []
    for s, (start, n) in enumerate(view.segments):
        shade = 0.35 + 0.65 * (s + 1) / len(view.segments)  # later segments darker: time runs left to right
        color = f"rgba(43, 76, 126, {shade:.2f})"
        hover = [", ".join(f"{k} {v}" for k, v in view.breakdown[i][s].items()) for i in range(n_l)]
        data.append(dict(type="bar", x=layers, y=view.memory_len[:, s].tolist(), name=f"segment {s}: {start}–{start + n - 1}",
                         marker=dict(color=color), customdata=hover, legendgroup="seg",
                         hovertemplate=f"%{{x}}, segment {s}: %{{y}} slots<br>%{{customdata}}<extra></extra>"))
    L = view.reach.shape[1]
    same = bool((view.reach == view.reach[0]).all())
    for i in range(1 if same else n_l):
        data.append(dict(type="scatter", mode="lines", x=list(range(L)), y=view.reach[i].tolist(), xaxis="x2", yaxis="y2",
                         name="reach (all layers)" if same else f"reach, layer {i}", line=dict(width=4 if same else 3,
                         color="#1f2933" if same else CYCLE[i % len(CYCLE)]),
                         customdata=tokens[:L], hovertemplate="query %{x} '%{customdata}': sees %{y} tokens back<extra></extra>"))
    data.append(dict(type="scatter", mode="lines", x=list(range(L)), y=view.local.tolist(), xaxis="x2", yaxis="y2",
                     name="within its own segment only", line=dict(color="#9aa5b1", dash="dot", width=2.5), hoverinfo="skip"))
    bounds = [dict(type="line", xref="x2", yref="y2 domain", x0=s - 0.5, x1=s - 0.5, y0=0, y1=1,
                   line=dict(color="#c0c6cc", width=1, dash="dash")) for s, _ in view.segments[1:]]
    seg = view.segments[0][1]
    title = (f"{view.memory} memory: {len(view.segments)} segment{'s' if len(view.segments) != 1 else ''}"
             f"{f' of {seg} tokens' if len(view.segments) > 1 else ''} — memory length per layer and reach per query"
             "<br><sup>slots a layer's attention (or kNN store) holds when each segment runs; reach = distance from a "
             "query to the oldest token it can attend</sup>")
    lay = base_layout(title, 500, barmode="group", shapes=bounds,
                  xaxis=dict(domain=xd0, anchor="y", title=dict(text="layer")),
                  yaxis=dict(domain=yd0, anchor="x", title=dict(text="memory length (slots)")),
                  xaxis2=dict(domain=xd1, anchor="y2", title=dict(text="query position (token index)"), rangemode="tozero"),
                  yaxis2=dict(domain=yd1, anchor="x2", title=dict(text="reach (tokens back)"), rangemode="tozero"))
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data))


# ---------------------------------------------------------------------------- exit depth / ACT steps
def depth_figure(view, tokens: list) -> go.Figure:
    """One bar per token: its exit layer (early exit) or its number of ACT steps (Universal Transformer)."""
    L = view.depth.shape[0]
    is_exit = view.key == "exit_depth"
    what = "exit layer" if is_exit else "ACT steps"
    data = [dict(type="bar", x=list(range(L)), y=view.depth.tolist(), customdata=tokens[:L], name=what,
                 marker=dict(color=view.depth.tolist(), colorscale="Viridis", cmin=0, cmax=view.n_layers,
                             colorbar=dict(title=dict(text=what), thickness=12)),
                 hovertemplate=f"token %{{x}} '%{{customdata}}': {what} %{{y:.0f}}<extra></extra>")]
    mean = float(view.depth.mean())
    if is_exit:
        title = (f"Early exit: exit layer per token (confidence threshold {view.threshold:g}) — mean {mean:.2f} of "
                 f"{view.n_layers} layers<br><sup>a token stops at the first layer whose top-1 softmax probability "
                 f"exceeds the threshold; tokens that never do run all {view.n_layers} layers</sup>")
    else:
        title = (f"Universal Transformer ACT: steps per token (halting threshold {view.threshold:g}) — mean "
                 f"{mean:.2f} of at most {view.n_layers}<br><sup>a token halts once its cumulative halting "
                 "probability passes the threshold; the ponder cost goes to aux_loss</sup>")
    lay = base_layout(title, 440, xaxis=_token_axis(tokens[:L], title=dict(text="token (byte) position")),
                  yaxis=dict(title=dict(text="exit layer (1-based)" if is_exit else "steps (block applications)"),
                             range=[0, view.n_layers + 0.4], dtick=1),
                  shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=view.n_layers, y1=view.n_layers,
                               line=dict(color="#c62828", dash="dash", width=2))], bargap=0.15,
                  annotations=[dict(text=f"n_layers = {view.n_layers}", xref="paper", x=1, y=view.n_layers,
                                    xanchor="right", yanchor="bottom", showarrow=False, font=dict(color="#c62828"))])
    return go.Figure(data=data, layout=lay)


def view_figures(views, layer: int = 0, head: int = 0) -> dict:

    """``{plot name: figure}`` for every view present (the approximation gives two figures)."""
    figs = {}
    for name, view in views.items.items():
        if name == "approximation":
            figs["approximation"] = approximation_figure(view, views.tokens, layer, head)
            figs["approximation_table"] = approximation_table(view)
        elif name == "groups":
            figs["groups"] = groups_figure(view, views.tokens)
        elif name == "span":
            figs["span"] = span_figure(view)
        elif name == "experts":
            figs["experts"] = experts_figure(view, views.tokens)
        elif name == "memory":
            figs["memory"] = memory_figure(view, views.tokens)
        elif name in ("exit", "act"):
            figs[name] = depth_figure(view, views.tokens)
        elif name == "sinkhorn":
            figs["sinkhorn"] = sinkhorn_figure(view)
        elif name == "probsparse":
            figs["probsparse"] = probsparse_figure(view, views.tokens)
        elif name == "talking_heads":
            figs["talking_heads"] = head_mix_figure(view)
        elif name == "residual":
            figs["residual"] = prior_figure(view)
        elif name == "pkm":
            figs["pkm"] = slot_figure(view)
        elif name == "funnel":
            figs["funnel"] = funnel_figure(view)
    figs.update(family_figures(views))
    return figs


PLOT_NAMES = ("approximation", "approximation_table", "groups", "span", "experts", "memory", "exit", "act",
              "sinkhorn", "probsparse", "talking_heads", "residual", "pkm", "funnel", *FAMILY_PLOTS)
