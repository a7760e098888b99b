"""Long-context results -> figures: the pooled grid, the per-token loss, per-head statistics, one exact cell.

Inputs are ``explorer.analysis.long_context.view`` results read duck-typed (numpy arrays on ``sides``; no
torch here). The grid travels as uint8 colour levels on a log scale (``log_levels``): level 0 is a cell
no query reaches (mass exactly 0), levels 1..255 run from ``floor`` to the largest mass in log10. A
display holds at most ``PAYLOAD_CELLS`` cells over all its panels: a model with more heads or a longer
passage has its cells merged by whole factors (``coarsen``), so a redraw stays near 300 kB whatever the
length (16 heads x 128 x 128 cells at 16384 tokens).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.attention import BLANK, LEVELS, level_colorscale, signed_colorscale
from explorer.figures.base import CYCLE, base_layout, subplot_domains

PAYLOAD_CELLS = 300_000  # uint8 cells of one grid, all panels together (base64 adds a third on the wire)
FLOOR = 1e-5  # masses below this share the lowest colour
MAX_PANELS = 64  # at most 8 layers x 8 heads
STAT_TITLES = {
    "entropy": "entropy (nats)",
    "distance": "mean attention distance (tokens)",
    "sink": "sink mass (first {sink_k} keys + any learned sink)",
    "local": "mass within {window} keys (local)",
}


def log_levels(mass: np.ndarray, floor: float = FLOOR) -> tuple:
    """``(levels uint8, lo, hi)``: ``log10`` of each mass mapped to ``[1, 255]`` between ``lo = log10(floor)``
    and ``hi = log10(max)``; exactly-zero cells are level 0 (blank)."""
    m = np.nan_to_num(np.asarray(mass, dtype=np.float64), nan=0.0)
    top = float(m.max()) if m.size and m.max() > 0 else 1.0
    lo, hi = np.log10(floor), np.log10(max(top, floor * 10))
    with np.errstate(divide="ignore"):
        lv = np.rint(1 + (LEVELS - 1) * (np.log10(np.maximum(m, floor)) - lo) / (hi - lo))
    return np.where(m > 0, np.clip(lv, 1, LEVELS), 0).astype(np.uint8), lo, hi


def signed_levels(mass: np.ndarray, floor: float = FLOOR) -> tuple:
    """Signed masses (a recurrent layer's implicit map) -> ``(levels uint8, lo, hi)`` on a symmetric log scale:
    level 128 is ``|m| <= floor``, ``128 +- 127`` the largest ``|m|``, the sign picking the side; exactly-zero
    cells (no query reaches them) are level 0 (blank)."""
    m = np.nan_to_num(np.asarray(mass, dtype=np.float64), nan=0.0)
    top = float(np.abs(m).max()) if m.size else 1.0
    lo, hi = np.log10(floor), np.log10(max(top, floor * 10))
    with np.errstate(divide="ignore"):
        t = np.clip((np.log10(np.maximum(np.abs(m), floor)) - lo) / (hi - lo), 0, 1)
    lv = np.rint(128 + np.sign(m) * 127 * t)
    return np.where(m != 0, np.clip(lv, 1, LEVELS), 0).astype(np.uint8), lo, hi


def signed_level_colorscale() -> list:
    """Level 0 is the background (blank); 1..255 run blue (negative) - white (near 0, level 128) - red."""
    lo = 0.5 / LEVELS
    stops = signed_colorscale()
    return [[0.0, BLANK], [lo, BLANK]] + [[lo + (1.0 - lo) * x, c] for x, c in stops]


def coarsen(mass: np.ndarray, factor: int, q_len: int, block_q: int) -> np.ndarray:
    """Cells of ``factor x factor`` merged: a merged cell's mass is the row-weighted mean over its query
    blocks of their summed masses (the pooled definition at ``factor`` times the block)."""
    if factor <= 1:
        return mass
    *lead, nq, nk = mass.shape
    rows = np.clip(q_len - np.arange(nq) * block_q, 0, block_q).astype(np.float64)  # rows of each query block
    pq, pk = -(-nq // factor) * factor - nq, -(-nk // factor) * factor - nk
    m = np.pad(mass.astype(np.float64) * rows[:, None], [(0, 0)] * len(lead) + [(0, pq), (0, pk)])
    w = np.pad(rows, (0, pq)).reshape(-1, factor).sum(-1)
    m = m.reshape(*lead, m.shape[-2] // factor, factor, m.shape[-1] // factor, factor).sum(axis=(-3, -1))
    return (m / np.maximum(w, 1)[:, None]).astype(np.float32)


def display_factor(n_panels: int, n_cells: int, budget: int = PAYLOAD_CELLS) -> int:
    """The smallest whole factor that keeps ``n_panels`` panels of ``n_cells``-square grids within ``budget``."""
    f = 1
    while n_panels * (-(-n_cells // f)) ** 2 > budget:
        f += 1
    return f


def _trained_note(result) -> str:
    t = result.trained_length
    return f"trained at {t} {result.unit}s ({result.length / t:.0f}x past it)" if t else "no trained length"


def pooled_grid(result, side: int = 0) -> go.Figure:
    """Layers x heads of the pooled attention mass of ``result.sides[side]`` (log colour scale)."""
    s = result.sides[side]
    n_l, n_h, n_q, n_k = s.mass.shape
    n_l, n_h = min(n_l, 8), min(n_h, 8)
    f = display_factor(n_l * n_h, max(n_q, n_k))
    mass = coarsen(s.mass[:n_l, :n_h], f, result.length, s.block_q)
    bq, bk = s.block_q * f, s.block_k * f
    signed = bool(mass.size) and float(mass.min()) < 0  # a recurrent layer's implicit map
    levels, lo, hi = signed_levels(mass) if signed else log_levels(mass)
    ys, xs = np.arange(mass.shape[-2]) * bq, np.arange(mass.shape[-1]) * bk
    height = 110 + n_l * min(180, 560 // n_l)
    data, layout = [], {}
    for k, (xd, yd) in enumerate(subplot_domains(n_l, n_h, vgap=0.03)):
        r, c = divmod(k, n_h)
        a = "" if k == 0 else str(k + 1)
        data.append(
            dict(
                type="heatmap",
                z=levels[r, c],
                x=xs,
                y=ys,
                coloraxis="coloraxis",
                xaxis=f"x{a}",
                yaxis=f"y{a}",
                meta=[r, c],
                hoverongaps=False,
                hovertemplate=f"layer {r} head {c}<br>queries %{{y}}..+{bq}<br>keys %{{x}}..+{bk}"
                f"<br>colour level %{{z}} ({'signed ' if signed else ''}log scale)<br>click: the exact map of this"
                " cell<extra></extra>",
            )
        )
        layout[f"xaxis{a}"] = dict(
            domain=xd,
            anchor=f"y{a}",
            showticklabels=r == n_l - 1,
            showgrid=False,
            constrain="domain",
            zeroline=False,
            title=dict(text=f"head {c}" if r == n_l - 1 else ""),
        )
        layout[f"yaxis{a}"] = dict(
            domain=yd,
            anchor=f"x{a}",
            showticklabels=c == 0,
            showgrid=False,
            zeroline=False,
            autorange="reversed",
            scaleanchor=f"x{a}",
            constrain="domain",
            title=dict(text=f"layer {r}" if c == 0 else ""),
        )
    what = (
        "the summed implicit weights (signed: not probabilities) the query block puts on the key block "
        "(signed log colour: blue negative, red positive"
        if signed
        else "the mass the query block puts on the key block (log colour"
    )
    title = (
        f"Pooled attention, {s.name}: {result.length} {result.unit}s, {_trained_note(result)}"
        f"<br><sup>rows: query position, columns: key position ({result.unit}s); cell = {bq} x {bk}: {what}; "
        f"blank = none; click a cell to zoom); {s.backend}</sup>"
    )
    lay = base_layout(title, height, **layout)
    lay["margin"] = dict(l=90, r=30, t=100, b=60)
    ticks = [t for t in range(int(np.floor(lo)), int(np.ceil(hi)) + 1)]
    if signed:
        inside = [t for t in ticks if lo <= t <= hi][::2]
        vals = [128 + sign * 127 * (t - lo) / (hi - lo) for sign in (-1, 1) for t in inside]
        text = [f"{'-' if sign < 0 else ''}1e{t}" for sign in (-1, 1) for t in inside]
        lay["coloraxis"] = dict(
            colorscale=signed_level_colorscale(),
            cmin=0,
            cmax=LEVELS,
            colorbar=dict(
                title=dict(text="summed<br>weight per<br>cell (signed log)"), thickness=14, tickvals=vals, ticktext=text
            ),
        )
    else:
        lay["coloraxis"] = dict(
            colorscale=level_colorscale(),
            cmin=0,
            cmax=LEVELS,
            colorbar=dict(
                title=dict(text="mass per<br>cell (log)"),
                thickness=14,
                tickvals=[1 + (LEVELS - 1) * (t - lo) / (hi - lo) for t in ticks if lo <= t <= hi],
                ticktext=[f"1e{t}" for t in ticks if lo <= t <= hi],
            ),
        )
    lay["plot_bgcolor"] = BLANK
    lay["meta"] = {
        "block_q": bq,
        "block_k": bk,
        "factor": f,
        "log10_range": [lo, hi],
        "side": s.name,
        "signed": signed,
    }
    return go.Figure(data=data, layout=lay)


def _vmarks(result) -> tuple:
    shapes, notes = [], []
    if result.trained_length and result.trained_length < result.length:
        shapes.append(
            dict(
                type="line",
                xref="x",
                yref="paper",
                x0=result.trained_length,
                x1=result.trained_length,
                y0=0,
                y1=1,
                line=dict(color="#444", dash="dot", width=2),
            )
        )
        notes.append(
            dict(
                text=f"trained length {result.trained_length}",
                x=result.trained_length,
                xref="x",
                y=1.0,
                yref="paper",
                showarrow=False,
                xanchor="left",
                yanchor="bottom",
                font=dict(size=13),
            )
        )
    rep = result.passage.repeat
    if rep:
        first, second, n = rep
        for x0, what in ((first, "paragraph"), (second, "its repeat")):
            shapes.append(
                dict(
                    type="rect",
                    xref="x",
                    yref="paper",
                    x0=x0,
                    x1=x0 + n,
                    y0=0,
                    y1=1,
                    line=dict(width=0),
                    fillcolor="rgba(255,160,0,0.18)",
                )
            )
            notes.append(
                dict(
                    text=what, x=x0, xref="x", y=0.92, yref="paper", showarrow=False, xanchor="left", font=dict(size=12)
                )
            )
    return shapes, notes


def loss_figure(result, n_bins: int = 64) -> go.Figure:
    """Binned per-token loss against position, each side one line, the trained length marked."""
    centres, bins = result.loss_bins(n_bins)
    data = []
    for k, (s, b) in enumerate(zip(result.sides, bins)):
        if b is None:
            continue
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                x=centres.astype(np.float32),
                y=np.asarray(b, dtype=np.float32),
                name=s.name,
                line=dict(color=CYCLE[k], width=3),
                marker=dict(size=5),
                hovertemplate=f"{s.name}<br>position %{{x:.0f}}: %{{y:.3f}} nats<extra></extra>",
            )
        )
    shapes, notes = _vmarks(result)
    means = ", ".join(f"{s.name} {np.nanmean(s.loss):.3f}" for s in result.sides if s.loss is not None)
    title = (
        f"Next-{result.unit} loss against position ({result.length} {result.unit}s)<br><sup>mean over "
        f"{result.length // max(1, len(centres))} positions per point; mean: {means} nats per {result.unit}</sup>"
    )
    if not data:
        title = "Next-token loss: not defined for this model (not a causal language model)"
    return go.Figure(
        data=data,
        layout=base_layout(
            title,
            420,
            shapes=shapes,
            annotations=notes,
            legend=dict(orientation="h", y=-0.22),
            xaxis=dict(title=dict(text=f"position ({result.unit}s)"), range=[0, result.length]),
            yaxis=dict(title=dict(text=f"loss (nats per {result.unit})"), rangemode="tozero"),
        ),
    )


def stats_figure(result, layer: int = 0, n_bins: int = 64) -> go.Figure:
    """Per-head statistics of one layer against position: entropy, distance, sink and local mass; a line per
    head, solid as trained and dashed after the change (values as float32 arrays: binary on the wire)."""
    centres, bins = result.stats_bins(n_bins)
    s0 = result.sides[0]
    layer = int(min(max(0, layer), s0.mass.shape[0] - 1))
    stats = list(STAT_TITLES)
    doms = subplot_domains(2, 2, hgap=0.1, vgap=0.2)
    data, layout = [], {}
    for i, name in enumerate(stats):
        a = "" if i == 0 else str(i + 1)
        for k, (s, b) in enumerate(zip(result.sides, bins)):
            for h in range(b[name].shape[1]):
                data.append(
                    dict(
                        type="scatter",
                        mode="lines",
                        x=centres.astype(np.float32),
                        y=np.asarray(b[name][layer, h], dtype=np.float32),
                        xaxis=f"x{a}",
                        yaxis=f"y{a}",
                        name=f"head {h}, {s.name}",
                        legendgroup=f"{k}-{h}",
                        showlegend=i == 0,
                        line=dict(color=CYCLE[h % len(CYCLE)], dash="solid" if k == 0 else "dash"),
                        hovertemplate=f"head {h}, {s.name}<br>position %{{x:.0f}}: %{{y:.3f}}<extra></extra>",
                    )
                )
        xd, yd = doms[i]
        label = STAT_TITLES[name].format(sink_k=4, window=64)
        layout[f"xaxis{a}"] = dict(domain=xd, anchor=f"y{a}", title=dict(text="query position" if i >= 2 else ""))
        layout[f"yaxis{a}"] = dict(domain=yd, anchor=f"x{a}", title=dict(text=label, font=dict(size=12)))
    shapes, _ = _vmarks(result)
    shapes = [{**sh, "xref": f"x{'' if i == 0 else i + 1}"} for i in range(4) for sh in shapes if sh["type"] == "line"]
    notes = []
    undefined = all(not np.isfinite(np.asarray(b["entropy"][layer], dtype=np.float64)).any() for b in bins)
    if undefined:  # a recurrent layer's implicit map: signed weights, no distribution to take the entropy of
        notes.append(
            dict(
                text="entropy undefined: this layer's implicit<br>map has signed weights, not probabilities",
                xref="x domain",
                yref="y domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font=dict(size=13),
            )
        )
    title = (
        f"Per-head statistics of layer {layer} against position<br><sup>solid: {s0.name}"
        + (f"; dashed: {result.sides[1].name}" if len(result.sides) > 1 else "")
        + f"; dotted line: the trained length; mean over {result.length // max(1, len(centres))} "
        "queries per point"
        + ("; implicit map: sums of signed weights (distance: sum of weight x distance)" if undefined else "")
        + "</sup>"
    )
    return go.Figure(
        data=data,
        layout=base_layout(title, 640, shapes=shapes, annotations=notes, legend=dict(font=dict(size=11)), **layout),
    )


def zoom_figure(z, labels=None) -> go.Figure:
    """One cell's exact token-level map (rows: queries, columns: keys), log colour scale."""
    r0, r1 = z.rows
    c0, c1 = z.keys
    ys = [f"{i} {labels[i]}" if labels else str(i) for i in range(r0, r1)]
    xs = [f"{j} {labels[j]}" if labels else str(j) for j in range(c0, c1)]
    p = np.asarray(z.probs, dtype=np.float64)
    if p.size and float(p.min()) < 0:  # a recurrent mixer's implicit weights: signed, drawn on a diverging scale
        return _signed_zoom(z, p, xs, ys)
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log10(np.maximum(p, 1e-12)), np.nan)
    title = (
        f"Exact attention of layer {z.layer} head {z.head} ({z.side}): queries {r0}-{r1 - 1}, keys {c0}-{c1 - 1}"
        f"<br><sup>log10 probability, blank = not allowed; the cell's mass: exact {z.exact:.4f}, "
        f"pooled map {z.pooled:.4f}</sup>"
    )
    return go.Figure(
        data=[
            dict(
                type="heatmap",
                z=logp.astype(np.float32),
                x=xs,
                y=ys,
                colorscale="Viridis",
                hoverongaps=False,
                colorbar=dict(title=dict(text="log10 p")),
                hovertemplate="query %{y}<br>key %{x}<br>log10 p = %{z:.2f}<extra></extra>",
            )
        ],
        layout=_zoom_layout(title),
    )


def _zoom_layout(title: str) -> dict:
    """The layout of a zoomed cell, probabilities or signed weights: queries down, keys across."""
    return base_layout(
        title,
        560,
        plot_bgcolor=BLANK,
        xaxis=dict(title=dict(text="key (position, token)"), showticklabels=False),
        yaxis=dict(title=dict(text="query (position, token)"), autorange="reversed", showticklabels=False),
    )


def _signed_zoom(z, w, xs, ys) -> go.Figure:
    """One cell of an implicit attention map (weights of either sign): white at 0, blue below, red above."""
    r0, r1 = z.rows
    c0, c1 = z.keys
    top = float(np.abs(w).max()) or 1.0
    title = (
        f"Implicit attention of layer {z.layer} head {z.head} ({z.side}): queries {r0}-{r1 - 1}, keys {c0}-{c1 - 1}"
        f"<br><sup>signed weights of a recurrent layer (not probabilities); the cell's sum per row: exact "
        f"{z.exact:.4g}, pooled map {z.pooled:.4g}</sup>"
    )
    return go.Figure(
        data=[
            dict(
                type="heatmap",
                z=w.astype(np.float32),
                x=xs,
                y=ys,
                colorscale=signed_colorscale(),
                zmin=-top,
                zmax=top,
                zmid=0,
                colorbar=dict(title=dict(text="weight<br>(signed)")),
                hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3g}<extra></extra>",
            )
        ],
        layout=_zoom_layout(title),
    )
