"""Figures of ``explorer.analysis.views.family`` (no torch): ISAB / Luna's two attention steps and their
product, Lite Transformer's convolution taps and branch share, kNN-LM / SPALM retrieval, the
Feedback Transformer's layer weights and the sandwich sublayer order, styled like
``explorer.figures.views`` so they project well."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import token_axis as _token_axis
from explorer.figures.base import CYCLE, base_layout
from explorer.runtime.tokens import token_label

MAX_INDUCED_LAYERS = 4  # rows of the induced figure (layers 0..3, head 0)
SUBLAYER_COLORS = {"a": "#1f4e8c", "f": "#e07b00"}


def _note(text: str, xd, y: float) -> dict:
    return dict(text=f"<b>{text}</b>", x=(xd[0] + xd[1]) / 2, y=y, xref="paper", yref="paper", showarrow=False,
                xanchor="center", yanchor="bottom", font=dict(size=15))


def _bar(title: str, x: float, y: float, length: float) -> dict:
    return dict(title=dict(text=title, side="top"), thickness=10, x=x, xanchor="left", y=y, yanchor="middle", len=length)


# ---------------------------------------------------------------------------- isab / luna
def induced_figure(view, tokens: list, head: int = 0) -> go.Figure:
    """Per layer (rows, head ``head``): step 1 [m x L] | step 2 [L x m] | effective = step 2 · step 1 [L x L]."""
    n_l, n_h, m, L = view.pack.shape
    head = int(np.clip(head, 0, n_h - 1))
    rows = min(n_l, MAX_INDUCED_LAYERS)
    eff = view.effective
    # step 1 wide (m x L), step 2 narrow (L x m), the product square-ish; each colorbar in the gap after its column
    cols = (([0.0, 0.27], "coloraxis"), ([0.41, 0.52], "coloraxis2"), ([0.66, 0.91], "coloraxis3"))
    gap = 0.12 / rows
    hgt = (1 - gap * (rows - 1)) / rows
    point = "packed position" if view.mechanism == "luna" else "inducing point"
    names = (f"step 1: {point}s read the tokens", f"step 2: tokens read the {point}s", "effective token map")
    data, layout, notes = [], {}, []
    for i in range(rows):
        yd = [round(1 - i * (hgt + gap) - hgt, 6), round(1 - i * (hgt + gap), 6)]
        mats = (view.pack[i, head], view.unpack[i, head], eff[i, head])
        labels = ((f"{point} %{{y}} ← token %{{x}}"), (f"token %{{y}} ← {point} %{{x}}"), "query %{y} ← key %{x}")
        for c, ((xd, axis), z, hover) in enumerate(zip(cols, mats, labels)):
            p = i * 3 + c
            s = "" if p == 0 else str(p + 1)
            data.append(dict(type="heatmap", z=z.astype(np.float32), xaxis=f"x{s}", yaxis=f"y{s}", coloraxis=axis,
                             hovertemplate=f"layer {i}, head {head}<br>{hover}<br>weight %{{z:.4f}}<extra></extra>"))
            xtitle = ("token position", point, "key position")[c] if i == rows - 1 else ""
            ytitle = ((f"layer {i}<br>{point}" if c == 0 else "token position" if c == 1 else "query position"))
            layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", showgrid=False, zeroline=False,
                                       title=dict(text=xtitle))
            layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", autorange="reversed", showgrid=False, zeroline=False,
                                       title=dict(text=ytitle))
            if i == 0:
                notes.append(_note(names[c], xd, yd[1]))
    s = view.summary()
    title = (f"{view.mechanism}: attention through {m} {point}s — layer by layer, head {head} of {n_h}"
             + (f" (first {rows} of {n_l} layers)" if rows < n_l else "")
             + f"<br><sup>effective = step 2 · step 1 (L×m · m×L), the matrix applied to V: rows sum to 1 "
             f"(max |row sum − 1| {s['max_row_sum_error']:.1e}); max |product − the layer's reported map| "
             f"{s['max_product_error']:.1e}</sup>")
    lay = base_layout(title, 180 + 300 * rows, annotations=notes, **layout)
    for (xd, axis), name in zip(cols, ("step 1", "step 2", "effective")):
        z = {"coloraxis": view.pack, "coloraxis2": view.unpack, "coloraxis3": eff}[axis][:rows, head]
        lay[axis] = dict(colorscale="Viridis", cmin=0.0, cmax=max(float(np.quantile(z, 0.99)), 1e-6),
                         colorbar=_bar(name, xd[1] + 0.008, 0.5, 0.6))
    lay["margin"] = dict(l=90, r=70, t=130, b=60)
    return go.Figure(data=data, layout=lay)


# ---------------------------------------------------------------------------- lite
def lite_figure(view, tokens: list) -> go.Figure:
    """Left: softmax taps of every convolution head (rows) by offset; right: the convolution share per position."""
    n_l, hc, K = view.taps.shape
    rows = [f"L{i} conv head {c}" for i in range(n_l) for c in range(hc)]
    z = view.taps.reshape(n_l * hc, K)
    data = [dict(type="heatmap", z=z.astype(np.float32), x=view.offsets, y=rows, colorscale="Viridis", zmin=0.0,
                 zmax=max(float(z.max()), 1e-6), xgap=2, ygap=2, text=np.round(z, 2).astype(str).tolist() if K <= 15 else None,
                 texttemplate="%{text}", textfont=dict(size=12),
                 colorbar=dict(title=dict(text="tap weight", side="top"), thickness=10, x=0.43, xanchor="left"),
                 hovertemplate="%{y}: offset %{x}<br>weight %{z:.4f}<extra></extra>")]
    L = view.conv_share.shape[1]
    for i in range(n_l):
        data.append(dict(type="scatter", mode="lines+markers", x=list(range(L)), y=view.conv_share[i].tolist(),
                         xaxis="x2", yaxis="y2", name=f"layer {i}", customdata=tokens[:L], marker=dict(size=5),
                         line=dict(width=3, color=CYCLE[i % len(CYCLE)]),
                         hovertemplate=f"layer {i}, token %{{x}} '%{{customdata}}'<br>convolution share %{{y:.3f}}<extra></extra>"))
    band = ("causal: taps at offsets −(K−1)..0" if view.causal else f"bidirectional: taps at offsets {view.offsets[0]}..{view.offsets[-1]}")
    mean = view.conv_share.mean()
    title = (f"Lite Transformer (LSRA): {view.n_heads - hc} attention heads + {hc} convolution heads of width {K}"
             f" — mean convolution share {mean:.0%}<br><sup>left: softmax of each head's kernel ({band}; edge rows "
             "renormalised)<br>right: share of each position's squared output norm (before the output projection) "
             "from the convolution heads; the attention heads hold the rest</sup>")
    lay = base_layout(title, max(440, 30 * len(rows) + 240),
                  xaxis=dict(domain=[0.0, 0.42], anchor="y", dtick=1, title=dict(text="tap offset (key − query position)")),
                  yaxis=dict(domain=[0.0, 1.0], anchor="x", autorange="reversed", title=dict(text="layer, head")),
                  xaxis2=dict(_token_axis(tokens[:L], title=dict(text="token (byte) position")), domain=[0.56, 1.0], anchor="y2"),
                  yaxis2=dict(domain=[0.0, 1.0], anchor="x2", range=[0, 1.02],
                              title=dict(text="convolution share of |out|² (0–1)")))
    lay["legend"] = dict(orientation="h", y=-0.22, x=0.78, xanchor="center")
    lay["margin"] = dict(l=130, r=30, t=140, b=110)
    return go.Figure(data=data, layout=lay)


# ---------------------------------------------------------------------------- knn_lm / spalm
def retrieval_figure(view, tokens: list) -> go.Figure:
    """Top: the neighbours of each position (rank x position; colour = distance, text = stored next token);
    bottom: probability of the output's top token under the model, the memory and the mix, and the memory weight."""
    L, k = view.next.shape
    labels = [[token_label(int(t)) if t >= 0 else "" for t in row] for row in view.next.T]  # (k, L)
    hover = [[(f"stored next '{labels[r][j]}' (context at position {int(view.pos[j, r])})" if view.next[j, r] >= 0
               else "no entry") for j in range(L)] for r in range(k)]
    dist = np.where(np.isfinite(view.dist), view.dist, np.nan).T  # (k, L)
    finite = dist[np.isfinite(dist)]
    trace = dict(type="heatmap", z=dist.astype(np.float32), x=list(range(L)), y=[f"#{r + 1}" for r in range(k)],
                 colorscale="Viridis_r", zmin=float(finite.min()) if finite.size else 0.0,
                 zmax=float(finite.max()) if finite.size else 1.0, hoverongaps=False, xgap=1, ygap=1, customdata=hover,
                 colorbar=dict(title=dict(text="squared<br>distance", side="top"), thickness=10, y=0.78, len=0.42),
                 hovertemplate="query %{x}, neighbour %{y}: distance %{z:.3f}<br>%{customdata}<extra></extra>")
    if L <= 128:  # one character per cell still reads at this width
        trace.update(text=labels, texttemplate="%{text}", textfont=dict(size=11 if L <= 80 else 9, color="white"))
    data = [trace]
    probs = view.top_probs()
    styles = {"model": ("model alone", "#1f77b4", "solid"), "memory": ("memory alone", "#2ca02c", "dot"),
              "mixed": ("mixed (output)", "#1f2933", "solid")}
    top = [token_label(int(t)) for t in view.top]
    for name, (label, color, dash) in styles.items():
        y = [None if not np.isfinite(v) else float(v) for v in probs[name]]
        data.append(dict(type="scatter", mode="lines", x=list(range(L)), y=y, xaxis="x2", yaxis="y2", name=label,
                         line=dict(color=color, dash=dash, width=3), customdata=top,
                         hovertemplate=f"position %{{x}}: P('%{{customdata}}') {label} %{{y:.3f}}<extra></extra>"))
    weight = "λ = knn_lambda" if view.memory == "knn_lm" else "1 − g (learned gate)"
    data.append(dict(type="scatter", mode="lines", x=list(range(L)), y=view.mix.tolist(), xaxis="x2", yaxis="y2",
                     name=f"memory weight {weight}", line=dict(color="#c62828", dash="dash", width=2.5),
                     hovertemplate="position %{x}: memory weight %{y:.3f}<extra></extra>"))
    s = view.summary()
    rule = ("p = λ·p_kNN + (1 − λ)·p_LM, p_kNN = Σ softmax(−distance) over the neighbours' stored next tokens"
            if view.memory == "knn_lm" else
            "z = g·h + (1 − g)·m, m = attention of h over the neighbours' next-token embeddings; memory alone = g = 0")
    title = (f"{view.memory}: the {k} nearest stored contexts of each position — {s['positions_with_neighbours']} of {L} "
             f"positions retrieve, the top token changes at {s['top_changed']}<br><sup>{rule}; the store fills after "
             f"each segment of {view.segment_len} tokens, so the first segment has no neighbours</sup>")
    lay = base_layout(title, 620,
                  xaxis=dict(_token_axis(tokens[:L]), domain=[0, 1], anchor="y", title=dict(text="")),
                  yaxis=dict(domain=[0.6, 1.0], anchor="x", autorange="reversed", title=dict(text="neighbour rank")),
                  xaxis2=dict(_token_axis(tokens[:L], title=dict(text="query (byte) position")), domain=[0, 1],
                              anchor="y2", matches="x"),
                  yaxis2=dict(domain=[0.0, 0.44], anchor="x2", range=[0, 1.02],
                              title=dict(text="probability (0–1)")))
    lay["annotations"] = [_note("neighbours of each query: text = stored next token, colour = distance", [0, 1], 1.0),
                          _note("probability of the output's most likely next token; dashed red: the memory's weight",
                                [0, 1], 0.445)]
    lay["legend"] = dict(orientation="h", y=-0.16, x=0.5, xanchor="center")
    lay["margin"] = dict(l=90, r=30, t=140, b=110)
    return go.Figure(data=data, layout=lay)


# ---------------------------------------------------------------------------- feedback
def feedback_figure(view) -> go.Figure:
    """One bar per merged state (embedding, layer 1..N): its weight softmax(w) in the memory vector."""
    n = view.weights.shape[0]
    names = ["embedding"] + [f"layer {i}" for i in range(1, n)]
    data = [dict(type="bar", x=names, y=view.weights.tolist(), marker=dict(color=CYCLE[0]),
                 text=[f"{w:.3f}" for w in view.weights], textposition="outside", textfont=dict(size=14),
                 hovertemplate="%{x}: weight %{y:.4f}<extra></extra>")]
    uniform = 1.0 / n
    title = (f"Feedback Transformer: how the memory merges the {n} states of a step (softmax over layers, sums to "
             f"{view.weights.sum():.3f})<br><sup>m_t = Σ_l softmax(w)_l · x_t^l; every layer at step t attends to "
             "m_0 .. m_(t−1); uniform (dashed) at initialisation</sup>")
    lay = base_layout(title, 440, xaxis=dict(title=dict(text="state merged into the memory (x^0 = embedding)")),
                  yaxis=dict(title=dict(text="weight softmax(w) (0–1)"), range=[0, max(float(view.weights.max()), uniform) * 1.25]),
                  shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=uniform, y1=uniform,
                               line=dict(color="#c62828", dash="dash", width=2))],
                  annotations=[dict(text=f"uniform 1/{n}", xref="paper", x=1, y=uniform, xanchor="right",
                                    yanchor="bottom", showarrow=False, font=dict(color="#c62828"))])
    return go.Figure(data=data, layout=lay)


# ---------------------------------------------------------------------------- sandwich
def sandwich_figure(view) -> go.Figure:
    """A strip of the 2n sublayers bottom (left) to top (right): attention or FFN, and whose weights."""
    n2 = len(view.order)
    z = [[0 if c == "a" else 1 for c in view.order]]
    text = [[f"{c}{j}" for c, j in zip(view.order, view.layer_of)]]
    trace = dict(type="heatmap", z=z, x=list(range(n2)), y=["sublayer"], zmin=0, zmax=1, xgap=3,
                 colorscale=[[0, SUBLAYER_COLORS["a"]], [0.5, SUBLAYER_COLORS["a"]], [0.5, SUBLAYER_COLORS["f"]],
                             [1, SUBLAYER_COLORS["f"]]],
                 text=text, texttemplate="%{text}", textfont=dict(size=18 if n2 <= 24 else 11, color="white"),
                 colorbar=dict(tickvals=[0.25, 0.75], ticktext=["attention (a)", "FFN (f)"], thickness=14),
                 hovertemplate="depth %{x}: %{text}<extra></extra>")
    n, s = n2 // 2, view.coeff
    title = (f"Sandwich transformer: sublayer order {view.order} (n = {n}, s = sandwich_coeff = {s})"
             f"<br><sup>a^s (a f)^(n−s) f^s, bottom (left) to top (right): {s} attention sublayer(s) first, {s} FFN "
             "sublayer(s) last; label = sublayer and whose weights it uses (s = 0: the standard interleaving)</sup>")
    lay = base_layout(title, 300, xaxis=dict(title=dict(text="depth (sublayer position, input → output)"), dtick=1),
                  yaxis=dict(showticklabels=False, title=dict(text="")))
    return go.Figure(data=[trace], layout=lay)


def family_figures(views) -> dict:
    """``{plot name: figure}`` for the views of this module present in ``views``."""
    figs = {}
    items, tokens = views.items, views.tokens
    if "induced" in items:
        figs["induced"] = induced_figure(items["induced"], tokens)
    if "lite" in items:
        figs["lite"] = lite_figure(items["lite"], tokens)
    if "retrieval" in items:
        figs["retrieval"] = retrieval_figure(items["retrieval"], tokens)
    if "feedback" in items:
        figs["feedback"] = feedback_figure(items["feedback"])
    if "sandwich" in items:
        figs["sandwich"] = sandwich_figure(items["sandwich"])
    return figs


FAMILY_PLOTS = ("induced", "lite", "retrieval", "feedback", "sandwich")
