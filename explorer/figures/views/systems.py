"""Figures of ``explorer.analysis.views.systems`` (no torch): the Sinkhorn sorting matrices, ProbSparse's
active queries, the talking-heads mixing matrices, the residual-attention share, product-key memory usage and funnel lengths, styled like ``explorer.figures.views`` so they project well."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import legend_above
from explorer.figures.base import token_axis as _token_axis
from explorer.figures.base import CYCLE, subplot_domains, base_layout


def sinkhorn_figure(view) -> go.Figure:
    """One [nb, nb] heatmap per (layer, head): query block (rows) x key block sorted next to it (columns)."""
    n_l, n_h, nb, _ = view.P.shape
    doms = subplot_domains(n_l, n_h, hgap=0.06, vgap=0.14)
    data, layout, notes = [], {}, []
    for i in range(n_l):
        for h in range(n_h):
            p = i * n_h + h
            s = "" if p == 0 else str(p + 1)
            xd, yd = doms[p]
            data.append(dict(type="heatmap", z=view.P[i, h].astype(np.float32), x=list(range(nb)), y=list(range(nb)),
                             xaxis=f"x{s}", yaxis=f"y{s}", coloraxis="coloraxis", xgap=1, ygap=1,
                             hovertemplate=(f"layer {i}, head {h}<br>query block %{{y}} ← key block %{{x}}"
                                            "<br>weight %{z:.3f}<extra></extra>")))
            layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", dtick=1, showgrid=False, constrain="domain",
                                       title=dict(text="key block (sorted in)" if i == n_l - 1 else ""))
            layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", dtick=1, autorange="reversed", showgrid=False,
                                       scaleanchor=f"x{s}", constrain="domain",
                                       title=dict(text="query block" if h == 0 else ""))
            notes.append(dict(text=f"<b>layer {i}, head {h}</b>", x=(xd[0] + xd[1]) / 2, y=yd[1], xref="paper",
                              yref="paper", showarrow=False, xanchor="center", yanchor="bottom", font=dict(size=15)))
    s = view.summary()
    rule = ("causal: only strictly earlier blocks; every row after block 0 sums to 1" if view.causal else
            f"rows sum to 1; columns to 1 up to convergence (max |column sum − 1| = {s['max_col_sum_error']:.3g})")
    title = (f"Sinkhorn attention: learned block sorting P ({nb} blocks of {view.block_size} tokens, "
             f"{view.iters} Sinkhorn iterations)<br><sup>row a: how much of each key block is soft-sorted next to "
             f"query block a; {rule}</sup>")
    lay = base_layout(title, max(420, 300 * n_l + 140), annotations=notes, **layout)
    # scaled to the largest weight: an untrained P is near uniform (1 / nb) and would be one colour on [0, 1]
    lay["coloraxis"] = dict(colorscale="Viridis", cmin=0.0, cmax=max(float(view.P.max()), 1e-6),
                            colorbar=dict(title=dict(text="weight", side="top"), thickness=12))
    lay["margin"] = dict(l=70, r=70, t=120, b=60)
    return go.Figure(data=data, layout=lay)


def probsparse_figure(view, tokens: list) -> go.Figure:
    """Rows = (layer, head), columns = queries: dark = active (full softmax), light = mean of V."""
    n_l, n_h, L = view.active.shape
    rows = [f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    z = view.active.reshape(n_l * n_h, L).astype(int)
    counts = z.sum(-1)
    trace = dict(type="heatmap", z=z, y=rows, x=list(range(L)), zmin=0, zmax=1, xgap=1, ygap=2,
                 colorscale=[[0, "#d9dee4"], [0.5, "#d9dee4"], [0.5, "#1f4e8c"], [1, "#1f4e8c"]],
                 customdata=[list(tokens[:L])] * len(rows),
                 colorbar=dict(title=dict(text="query"), tickvals=[0.25, 0.75], ticktext=["mean of V", "active"],
                               thickness=14),
                 hovertemplate="%{y}, query %{x} '%{customdata}'<br>active: %{z}<extra></extra>")
    rule = ("running top-u: active when its max − mean score is among the u largest of the queries so far"
            if view.causal else "top-u of max − mean score over the whole sequence")
    title = (f"ProbSparse: which queries attend (u = {view.u} of {L}; active per row "
             f"{int(counts.min())}–{int(counts.max())})<br><sup>{rule}; the others output the "
             f"{'running ' if view.causal else ''}mean of V</sup>")
    lay = base_layout(title, max(340, 34 * len(rows) + 200),
                  xaxis=_token_axis(list(tokens[:L]), title=dict(text="query (byte) position")),
                  yaxis=dict(autorange="reversed", title=dict(text="layer, head"), tickfont=dict(size=13)))
    return go.Figure(data=[trace], layout=lay)


def head_mix_figure(view) -> go.Figure:
    """Per layer: the pre-softmax and post-softmax [h, h] mixing matrices side by side (diverging colours)."""
    n_l, h, _ = view.pre.shape
    doms = subplot_domains(n_l, 2, hgap=0.12, vgap=0.16)
    lim = max(1.0, float(np.abs(view.pre).max()), float(np.abs(view.post).max()))
    data, layout, notes = [], {}, []
    for i in range(n_l):
        for c, (m, name) in enumerate(((view.pre[i], "scores, before softmax"), (view.post[i], "weights, after softmax"))):
            p = 2 * i + c
            s = "" if p == 0 else str(p + 1)
            xd, yd = doms[p]
            data.append(dict(type="heatmap", z=m.astype(np.float32), x=list(range(h)), y=list(range(h)),
                             xaxis=f"x{s}", yaxis=f"y{s}", coloraxis="coloraxis", xgap=2, ygap=2,
                             text=np.round(m, 2).astype(str).tolist() if h <= 8 else None, texttemplate="%{text}",
                             textfont=dict(size=14),
                             hovertemplate=(f"layer {i}, {name}<br>new head %{{y}} ← old head %{{x}}: %{{z:.3f}}"
                                            "<extra></extra>")))
            layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", dtick=1, showgrid=False, constrain="domain",
                                       title=dict(text="old head (mixed in)" if i == n_l - 1 else ""))
            layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", dtick=1, autorange="reversed", showgrid=False,
                                       scaleanchor=f"x{s}", constrain="domain",
                                       title=dict(text="new head" if c == 0 else ""))
            notes.append(dict(text=f"<b>layer {i}: {name}</b>", x=(xd[0] + xd[1]) / 2, y=yd[1], xref="paper",
                              yref="paper", showarrow=False, xanchor="center", yanchor="bottom", font=dict(size=15)))
    off = view.summary()["max_off_identity"]
    title = (f"Talking heads: learned [{h}, {h}] head-mixing matrices per layer — max |W − I| = {off:.3g}"
             "<br><sup>row n: how much of each head's scores (left) / attention weights (right) head n uses; "
             "identity at initialisation = plain full attention</sup>")
    lay = base_layout(title, max(420, 320 * n_l + 140), annotations=notes, **layout)
    lay["coloraxis"] = dict(colorscale="RdBu", cmid=0.0, cmin=-lim, cmax=lim, reversescale=True,
                            colorbar=dict(title=dict(text="weight", side="top"), thickness=12))
    lay["margin"] = dict(l=70, r=70, t=120, b=60)
    return go.Figure(data=data, layout=lay)


def prior_figure(view) -> go.Figure:
    """Bars per layer (one per head): the previous layer's share of the scores; predictive's alpha as a line."""
    n_l, h = view.share.shape
    layers = [f"layer {i}" for i in range(n_l)]
    data = [dict(type="bar", x=layers, y=view.share[:, j].tolist(), name=f"head {j}",
                 marker=dict(color=CYCLE[j % len(CYCLE)]),
                 hovertemplate=f"%{{x}}, head {j}: prior share %{{y:.3f}}<extra></extra>") for j in range(h)]
    if np.isfinite(view.alpha).any():
        data.append(dict(type="scatter", mode="lines+markers", x=layers, y=[None if not np.isfinite(a) else float(a)
                         for a in view.alpha], name="alpha = sigmoid(a)", line=dict(color="#c62828", width=3, dash="dash"),
                         marker=dict(size=10), hovertemplate="%{x}: alpha %{y:.3f}<extra></extra>"))
    what = ("previous layer's accumulated scores S_(l−1)" if view.attention == "realformer" else
            "alpha · Conv(previous layer's attention maps)")
    title = (f"{view.attention}: share of each layer's pre-softmax scores that comes from the previous layer"
             f"<br><sup>share = |prior| / (|prior| + |own|), Frobenius norms over the allowed pairs; prior = {what}; "
             "layer 0 has no previous layer</sup>")
    lay = base_layout(title, 440, barmode="group", xaxis=dict(title=dict(text="layer")),
                  yaxis=dict(title=dict(text="share of the scores (0–1)"), range=[0, 1.05]))
    return go.Figure(data=data, layout=legend_above(lay, data))


def slot_figure(view) -> go.Figure:
    """Reads per memory row, sorted from most to least read, one line per layer (rows never read: the tail)."""
    n_l, n = view.counts.shape
    data = []
    for i in range(n_l):
        c = np.sort(view.counts[i])[::-1]
        data.append(dict(type="scatter", mode="lines", x=list(range(1, n + 1)), y=c.tolist(),
                         name=f"layer {i}: {int(view.used[i])} of {n} rows read", line=dict(width=3, color=CYCLE[i % len(CYCLE)]),
                         hovertemplate=f"layer {i}: rank %{{x}} row read %{{y}} times<extra></extra>"))
    reads = int(view.counts[0].sum())
    title = (f"Product-key memory: how many of the {n} value rows each layer read ({reads} reads per layer)"
             f"<br><sup>each token reads its top-{view.topk} rows per head ({view.heads} head(s)); rows sorted by reads, "
             "most-read first; a long flat tail at 0 = memory never used</sup>")
    lay = base_layout(title, 440, xaxis=dict(title=dict(text="memory row, ranked by reads"), type="log"),
                  yaxis=dict(title=dict(text="reads (tokens × top-k × heads)"), rangemode="tozero"))
    return go.Figure(data=data, layout=legend_above(lay, data))


def funnel_figure(view) -> go.Figure:
    """Query and key positions of every layer's attention: the funnel halves the sequence per block."""
    layers = [f"layer {i}" for i in range(len(view.queries))]
    data = [dict(type="bar", x=layers, y=view.queries.tolist(), name="queries", marker=dict(color=CYCLE[0]),
                 hovertemplate="%{x}: %{y} query positions<extra></extra>"),
            dict(type="bar", x=layers, y=view.keys.tolist(), name="keys", marker=dict(color=CYCLE[1]),
                 hovertemplate="%{x}: %{y} key positions<extra></extra>")]
    title = (f"Funnel: sequence length per layer ({view.blocks} blocks, mean-pooled by 2 between blocks)"
             "<br><sup>the first layer of a pooled block attends from the pooled queries to the unpooled keys; "
             "attention cost ∝ queries × keys</sup>")
    lay = base_layout(title, 440, barmode="group", xaxis=dict(title=dict(text="layer")),
                  yaxis=dict(title=dict(text="positions (tokens or pooled groups)"), rangemode="tozero"))
    return go.Figure(data=data, layout=legend_above(lay, data))
