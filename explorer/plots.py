"""Results -> Plotly figures (no torch here): styled to be projected in a talk.

Figures are built from plain dicts (``go.Figure(data=[...], layout={...})``) with explicit subplot
domains, which is several times faster than ``make_subplots`` + ``add_trace`` for a grid of 16+
heatmaps; the explorer redraws on every control change. Inputs are the results of
``explorer.experiments`` (duck-typed: numpy arrays, dicts and lists).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from .plots_axes import legend_above
from .plots_notes import coincidence_notes, failure_y, same_curve

FONT = dict(family="DejaVu Sans, Inter, Arial, sans-serif", size=15, color="#1f2933")
PLACEMENT_COLORS = {"post": "#d62728", "pre": "#1f77b4", "sandwich": "#2ca02c", "rezero": "#9467bd",
                    "none": "#7f7f7f"}
CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MAX_GRID = 8  # at most 8 layers x 8 heads of heatmaps (64 panels; explorer.grid_pick picks which)


def _layout(title: str, height: int, **kw) -> dict:
    return dict(template="plotly_white", font=FONT, height=height,
                title=dict(text=title, x=0.01, xanchor="left", font=dict(size=19)),
                margin=dict(l=70, r=30, t=90, b=60), **kw)


def _grid(rows: int, cols: int, hgap: float = 0.02, vgap: float = 0.04) -> list:
    """Axis domains of a rows x cols grid, row 0 at the top: ``[(xdomain, ydomain), ...]`` row-major."""
    w = (1 - hgap * (cols - 1)) / cols
    h = (1 - vgap * (rows - 1)) / rows
    out = []
    for r in range(rows):
        for c in range(cols):
            x0 = c * (w + hgap)
            y1 = 1 - r * (h + vgap)
            out.append(([round(x0, 6), min(1.0, round(x0 + w, 6))], [max(0.0, round(y1 - h, 6)), min(1.0, round(y1, 6))]))
    return out


def message_figure(text: str, title: str = "") -> go.Figure:
    """An empty figure carrying a message (e.g. before the first sweep)."""
    return go.Figure(layout=_layout(title, 360, annotations=[dict(
        text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=17))],
        xaxis=dict(visible=False), yaxis=dict(visible=False)))


# ---------------------------------------------------------------------------- attention
LEVELS = 255  # colour levels of the attention heatmaps (uint8 on the wire; 0 = blank)
BLANK = "#eef0f3"


def quantise(att: np.ndarray, step: float) -> np.ndarray:
    """Probabilities -> uint8 colour levels: ``round(p / step)`` clipped to ``[1, LEVELS]`` where
    ``p > 0``, ``0`` where the pair is not allowed (probability exactly 0, or NaN: no weights).

    Why: 16 heatmaps of 100 x 100 float32 are ~0.9 MB of base64 per redraw; one byte per cell is
    a quarter of that, and 255 levels of one colour scale are more than the eye can tell apart.
    A probability below ``step / 2`` still gets level 1, so an allowed pair is never blank.
    """
    p = np.nan_to_num(np.asarray(att, dtype=np.float64), nan=0.0)
    q = np.clip(np.rint(p / step), 1, LEVELS)
    return np.where(p > 0, q, 0).astype(np.uint8)


def _level_colorscale() -> list:
    """Level 0 is the background (blank = not allowed); levels 1..255 run through Viridis."""
    import plotly.colors as pc

    lo = 0.5 / LEVELS
    stops = pc.sequential.Viridis
    scale = [[0.0, BLANK], [lo, BLANK]]
    scale += [[lo + (1.0 - lo) * i / (len(stops) - 1), c] for i, c in enumerate(stops)]
    return scale


GRID_MAX_HEIGHT = 640  # px: the grid, title and head labels fit a 1280x720 screen in presentation mode
GRID_MARGIN = dict(l=70, r=30, t=100, b=50)
NARROW_EXTRA = 24  # px more title band for the narrow grid's three-line title
PANEL_MAX = 150  # px: the height of one panel when few rows are shown


def grid_height(rows: int) -> tuple:
    """(figure height, panel height) in px for ``rows`` rows of panels: panels of at most
    ``PANEL_MAX`` px, shrunk so the whole figure stays within ``GRID_MAX_HEIGHT``."""
    rows = max(1, int(rows))
    chrome = GRID_MARGIN["t"] + GRID_MARGIN["b"]
    gap = 8  # px between rows
    panel = min(PANEL_MAX, (GRID_MAX_HEIGHT - chrome - gap * (rows - 1)) // rows)
    return chrome + rows * panel + gap * (rows - 1), panel


def _span(idx: list, n: int, what: str) -> str:
    """``"all 4 layers"`` or ``"layers 0-3, 6 of 12"`` (consecutive indices as ranges)."""
    if idx == list(range(n)):
        return f"all {n} {what}"
    parts, start = [], None
    for i, v in enumerate(idx):
        start = v if start is None else start
        if i + 1 == len(idx) or idx[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return f"{what} {', '.join(parts)} of {n}"


def attention_grid(maps, layers=None, heads=None, narrow: bool = False) -> go.Figure:
    """Layers x heads heatmaps of the effective attention; disallowed pairs (exactly 0) are blank.

    ``layers`` / ``heads``: the indices to draw (default the first ``MAX_GRID`` of each; at most
    ``MAX_GRID`` are drawn). Each trace's ``meta`` is its ``[layer, head]`` (the page's click-to-zoom
    reads it). The values travel as uint8 colour levels (``quantise``): level ``k`` is probability
    ``k * step`` with ``step = cmax / 255`` (``layout.meta["p_step"]``), ``cmax`` the 99th
    percentile of the shown probabilities; larger probabilities are clipped to the top colour, and
    then the colour bar's title says so ("clipped at p99 = ...") and the hover names the top level.
    ``narrow``: for half a screen (A/B side by side): the title in three short lines, smaller head labels.
    """
    att = maps.attention
    layers = list(range(min(att.shape[0], MAX_GRID))) if layers is None else [int(i) for i in layers][:MAX_GRID]
    heads = list(range(min(att.shape[1], MAX_GRID))) if heads is None else [int(i) for i in heads][:MAX_GRID]
    n_l, n_h = len(layers), len(heads)
    qlab = [f"{i} {t}" for i, t in enumerate(maps.tokens)]
    prefix = len(maps.key_tokens) - len(maps.tokens)
    klab = [f"{j - prefix} {t}" if j >= prefix else t for j, t in enumerate(maps.key_tokens)]
    qlab = qlab[len(qlab) - att.shape[2]:]
    shown_att = att[np.ix_(layers, heads)]  # (n_l, n_h, L, Lk)
    finite = shown_att[np.isfinite(shown_att)]
    positive = finite[finite > 0]
    cmax = max(float(np.quantile(positive, 0.99)) if positive.size else 1.0, 1e-6)
    pmax = float(positive.max()) if positive.size else 0.0
    clipped = pmax > cmax * (1 + 1e-6)
    step = cmax / LEVELS
    levels = quantise(shown_att, step)  # (n_l, n_h, L, Lk) uint8
    height, _ = grid_height(n_l)
    vgap = 8 / max(1, height - GRID_MARGIN["t"] - GRID_MARGIN["b"])
    top_note = f"<br>level {LEVELS} = p ≥ {cmax:.3g} (clipped)" if clipped else ""
    data, layout = [], {}
    for k, (xd, yd) in enumerate(_grid(n_l, n_h, vgap=vgap)):
        r, c = divmod(k, n_h)
        layer, head = layers[r], heads[c]
        s = "" if k == 0 else str(k + 1)
        data.append(dict(type="heatmap", z=levels[r, c], x=klab, y=qlab, coloraxis="coloraxis",
                         xaxis=f"x{s}", yaxis=f"y{s}", name=f"layer {layer} head {head}", hoverongaps=False,
                         meta=[layer, head],
                         hovertemplate=f"layer {layer} head {head}<br>query %{{y}}<br>key %{{x}}"
                                       f"<br>p ≈ %{{z}} × {step:.3g}{top_note}<br>click: zoom into this head"
                                       "<extra></extra>"))
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", showticklabels=False, showgrid=False,
                                   zeroline=False, title=dict(text=f"head {head}" if r == n_l - 1 else "",
                                                              font=dict(size=12) if narrow else None))
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", showticklabels=False, showgrid=False,
                                   zeroline=False, autorange="reversed",
                                   title=dict(text=f"layer {layer}" if c == 0 else ""))
    shown = f"{_span(layers, att.shape[0], 'layers')}, {_span(heads, att.shape[1], 'heads')}"
    if narrow:
        title = (f"Attention maps: {maps.config['attention']}<br><sup>{len(maps.tokens)} byte tokens ({shown})"
                 "</sup><br><sup>rows = queries, columns = keys; blank = not allowed (p = 0)</sup>")
    else:
        title = (f"Attention maps: {maps.config['attention']}, {len(maps.tokens)} byte tokens ({shown})"
                 "<br><sup>rows = queries, columns = keys; blank = not allowed (p = 0); click a panel to zoom</sup>")
    lay = _layout(title, height, **layout)
    lay["margin"] = dict(GRID_MARGIN)
    if narrow:  # a third title line: the band grows, and the figure with it (the panels keep their size)
        lay["margin"]["t"] += NARROW_EXTRA
        lay["height"] += NARROW_EXTRA
    ticks = [cmax * f for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    ticktext = [f"{t:.2g}" if t else "0" for t in ticks]
    bar_title = "attention<br>probability"
    if clipped:  # the top colour also stands for every larger probability
        bar_title += f"<br>clipped at<br>p99 = {cmax:.2g}<br>(max {pmax:.2g})"
    lay["coloraxis"] = dict(colorscale=_level_colorscale(), cmin=0, cmax=LEVELS, colorbar=dict(
        title=dict(text=bar_title), thickness=14, tickvals=[max(1.0, t / step) for t in ticks], ticktext=ticktext))
    lay["plot_bgcolor"] = BLANK
    lay["meta"] = {"p_step": step, "p_max": cmax, "clipped": clipped, "layers": layers, "heads": heads}
    return go.Figure(data=data, layout=lay)


def attention_stats(maps) -> go.Figure:
    """Pattern mask | per-head entropy (nats) | per-head mean attention distance (tokens).

    With a memory (Transformer-XL and the rest) the maps hold what the memory let each query see
    (its segment and the remembered keys), which the section-1 pattern alone does not describe: the
    left panel then shows where the maps put weight, and its title says so."""
    n_l, n_h = maps.entropy.shape
    (xd0, yd0), (xd1, yd1), (xd2, yd2) = _grid(1, 3, hgap=0.09)
    heads = [f"H{h}" for h in range(n_h)]
    layers = [f"L{i}" for i in range(n_l)]
    what = "Pattern mask" if maps.mask_kind == "pattern" else "Support of the attention"
    mask, fraction, key_title = maps.mask, maps.allowed_fraction, "key position"
    memory = (maps.config or {}).get("memory", "none")
    if memory not in (None, "none"):
        support = np.nan_to_num(maps.attention).max(axis=(0, 1)) > 0  # (L, Lk): what the maps show
        what = (f"Where the maps put weight (memory {memory!r}: each query sees its segment and the memory; "
                f"the {maps.config['attention']} pattern alone allows {100 * fraction:.1f}%)")
        mask, fraction = support, float(support.mean())
        if len(maps.key_tokens) > len(maps.tokens):
            key_title = f"key position (first {len(maps.key_tokens) - len(maps.tokens)} = memory slots)"
    data = [
        dict(type="heatmap", z=mask.astype(np.uint8), colorscale=[[0, "#ffffff"], [1, "#2b4c7e"]],
             showscale=False, xaxis="x", yaxis="y", hovertemplate="query %{y}, key %{x}: %{z}<extra></extra>"),
        dict(type="heatmap", z=np.round(maps.entropy, 3), x=heads, y=layers, xaxis="x2", yaxis="y2",
             colorscale="Magma", texttemplate="%{z:.2f}", colorbar=dict(x=0.64, thickness=10, len=0.8),
             hovertemplate="%{y} %{x}: entropy %{z:.3f} nats<extra></extra>"),
        dict(type="heatmap", z=np.round(maps.distance, 2), x=heads, y=layers, xaxis="x3", yaxis="y3",
             colorscale="Cividis", texttemplate="%{z:.1f}", colorbar=dict(x=1.0, thickness=10, len=0.8),
             hovertemplate="%{y} %{x}: mean distance %{z:.2f} tokens<extra></extra>"),
    ]
    if memory not in (None, "none"):
        title = f"{100 * fraction:.1f}% of (query, key) pairs carry weight<br><sup>{what}</sup>"
    else:
        title = f"{what}: {100 * fraction:.1f}% of (query, key) pairs allowed"
    lay = _layout(title, 420,
                  xaxis=dict(domain=xd0, title=dict(text=key_title), constrain="domain"),
                  yaxis=dict(domain=yd0, title=dict(text="query position"), autorange="reversed",
                             scaleanchor="x"),
                  xaxis2=dict(domain=xd1, anchor="y2", title=dict(text="entropy per head (nats)")),
                  yaxis2=dict(domain=yd1, anchor="x2", autorange="reversed"),
                  xaxis3=dict(domain=xd2, anchor="y3", title=dict(text="mean |i - j| per head (tokens)")),
                  yaxis3=dict(domain=yd2, anchor="x3", autorange="reversed"))
    return go.Figure(data=data, layout=lay)


# ---------------------------------------------------------------------------- gradients
GRAD_PANELS = (("attn_out", "attention out-proj ‖∇W‖"), ("ffn_out", "FFN out-proj ‖∇W‖"),
               ("residual", "layer input ‖∇x‖"))


def gradient_figure(results: dict, current: str) -> go.Figure:
    """Per-layer gradient norms of every placement overlaid, log scale, ``current`` highlighted.

    ``results``: ``{placement: gradient_norms dict}``. Exact zeros cannot sit on a log axis; such
    a placement is drawn on the bottom edge and named "= 0" in the legend. Curves that would hide
    each other are said: placements with the same norms in a panel (``coinciding``) and the exact
    zeros are listed under the title with the reason.
    """
    domains = _grid(1, 3, hgap=0.07)
    data, layout = [], {}
    positive = [v for r in results.values() for key, _ in GRAD_PANELS for v in r[key] if v is not None and v > 0]
    floor = min(positive) / 10 if positive else 1e-6
    for p, (key, label) in enumerate(GRAD_PANELS):
        s = "" if p == 0 else str(p + 1)
        for n, (placement, r) in enumerate(results.items()):
            vals = r[key]
            if not vals:
                continue
            zero = all(v == 0 for v in vals if v is not None)
            is_cur = placement == current
            color = PLACEMENT_COLORS.get(placement, CYCLE[n % len(CYCLE)])
            name = placement + (" (current)" if is_cur else "")
            data.append(dict(
                type="scatter", mode="lines+markers", x=list(range(len(vals))),
                y=[None if v is None else (v if v > 0 else floor) for v in vals], name=name + (" = 0" if zero else ""),
                legendgroup=placement, showlegend=p == 0, xaxis=f"x{s}", yaxis=f"y{s}",
                line=dict(color=color, width=5 if is_cur else 2, dash="dot" if zero else "solid"),
                marker=dict(size=11 if is_cur else 7), opacity=1.0 if is_cur else 0.6,
                customdata=vals, hovertemplate=f"{placement}, layer %{{x}}: %{{customdata:.3g}}<extra></extra>"))
        xd, yd = domains[p]
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", title=dict(text="layer"), dtick=1)
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", type="log", exponentformat="power",
                                   title=dict(text="gradient norm (Frobenius)" if p == 0 else ""))
        layout.setdefault("annotations", []).append(dict(
            text=f"<b>{label}</b>", x=(xd[0] + xd[1]) / 2, y=1.02, xref="paper", yref="paper",
            showarrow=False, xanchor="center", yanchor="bottom", font=dict(size=15)))
    notes = coincidence_notes(results, GRAD_PANELS)
    title = "Gradient norms at initialisation by norm placement (Xiong et al. 2020)"
    if notes:
        title += "<br><sup>" + "; ".join(notes) + "</sup>"
    lay = _layout(title, 440, **layout)
    lay["legend"] = dict(title=dict(text="placement: "))
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data, gap=26))


# ---------------------------------------------------------------------------- latency / memory
def fitted_slope(records: list, key: str) -> float | None:
    """Least-squares slope of log(value) against log(L) over the ``ok`` records (None if < 2)."""
    pts = [(r["seq_len"], r[key]) for r in records if r["status"] == "ok" and r.get(key) and r[key] > 0]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def _curve(records, key, scale, name, color, dash, axis) -> list:
    ok = [r for r in records if r["status"] == "ok" and r.get(key)]
    slope = fitted_slope(records, key)
    label = f"{name} (slope {slope:.2f})" if slope is not None else name
    traces = [dict(type="scatter", mode="lines+markers", x=[r["seq_len"] for r in ok],
                   y=[r[key] * scale for r in ok], name=label, legendgroup=name, showlegend=axis == "",
                   xaxis=f"x{axis}", yaxis=f"y{axis}", line=dict(color=color, width=4, dash=dash),
                   marker=dict(size=9), customdata=[r["backend"] for r in ok],
                   hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}}<br>%{{customdata}}<extra></extra>")]
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        ys = [failure_y(ok, key, scale, slope, r["seq_len"]) for r in bad]
        status = [r["status"].upper() for r in bad]
        if ok:  # a dotted continuation from the curve's last point to its failures
            last = max(ok, key=lambda r: r["seq_len"])
            pts = sorted([(last["seq_len"], last[key] * scale)] + list(zip([r["seq_len"] for r in bad], ys)))
            traces.append(dict(type="scatter", mode="lines", x=[p[0] for p in pts], y=[p[1] for p in pts],
                               legendgroup=name, showlegend=False, hoverinfo="skip", xaxis=f"x{axis}",
                               yaxis=f"y{axis}", line=dict(color=color, width=2, dash="dot")))
        traces.append(dict(type="scatter", mode="markers+text", x=[r["seq_len"] for r in bad], y=ys,
                           text=status, textposition="top center", textfont=dict(color=color, size=14),
                           name=f"{name}: {' / '.join(sorted(set(status)))}", legendgroup=name, showlegend=False,
                           xaxis=f"x{axis}", yaxis=f"y{axis}",
                           marker=dict(symbol="x", size=15, color=color, line=dict(color="#c62828", width=2)),
                           customdata=[[st, r.get("reason") or ""] for st, r in zip(status, bad)],
                           hovertemplate=f"{name}<br>L=%{{x}}: %{{customdata[0]}}<br>%{{customdata[1]}}<extra></extra>"))
    return traces


def _guides(records, key, scale, axis) -> list:
    ok = [r for r in records if r["status"] == "ok" and r.get(key)]
    if len(ok) < 2:
        return []
    l0, v0 = ok[0]["seq_len"], ok[0][key] * scale
    xs = [r["seq_len"] for r in ok]
    out = []
    for power, label, dash in ((1, "O(L)", "dot"), (2, "O(L²)", "dash")):
        out.append(dict(type="scatter", mode="lines", x=xs, y=[v0 * (x / l0) ** power for x in xs],
                        name=label, legendgroup=label, showlegend=axis == "", xaxis=f"x{axis}", yaxis=f"y{axis}",
                        line=dict(color="#9aa5b1", width=1.5, dash=dash), hoverinfo="skip"))
    return out


def sweep_figure(current: list, baseline: list | None, attention: str, baseline_name: str = "full") -> go.Figure:
    """Log-log time and measured peak memory against L, current config vs its baseline
    (``full`` attention, or standard layers for a reversible stack)."""
    (xd0, yd0), (xd1, yd1) = _grid(1, 2, hgap=0.1)
    data = []
    for key, scale, axis in (("ms", 1.0, ""), ("peak_bytes", 1 / 2**20, "2")):
        data += _guides(current, key, scale, axis)
        data += _curve(current, key, scale, attention, "#1f77b4", "solid", axis)
        if baseline:
            data += _curve(baseline, key, scale, f"{baseline_name} (baseline)", "#ff7f0e", "dash", axis)
    mode = (current[0].get("mode", "forward") if current else "forward").replace("_", " + ")
    backends = sorted({r["backend"] for r in current if r["status"] == "ok"}) or ["-"]
    base = sorted({r["backend"] for r in baseline or [] if r["status"] == "ok"})
    title = f"{mode.capitalize()} time and memory vs length"
    ran = f"{attention}: {', '.join(backends)}" + (f" | {baseline_name}: {', '.join(base)}" if base else "")
    method = current[0].get("memory_method", "measured") if current else "measured"
    threads = current[0].get("threads") if current else None
    if threads:
        method += f"; {threads} CPU thread{'s' if threads != 1 else ''}" if current[0].get("device") == "cpu" else ""
    lens = sorted({r["seq_len"] for r in current + (baseline or [])})
    ticks = dict(tickvals=lens, ticktext=[str(n) for n in lens])
    note = ""
    if not baseline:
        note = (f"; no {baseline_name} curve: this config is its own baseline" if attention == baseline_name
                else f"; no {baseline_name} baseline for this config")
    elif same_curve(current, baseline):
        note = f"; the two curves coincide: {attention} and {baseline_name} measured within 5% at every length"
    if any(r["status"] != "ok" for r in current + (baseline or [])):
        note += "; × on a curve: that length of that attention failed (hover: why)"
    lay = _layout(title + f"<br><sup>{ran}; median of timed runs after warm-up; memory {method}{note}</sup>", 460,
                  xaxis=dict(domain=xd0, type="log", title=dict(text="sequence length L (tokens)"), **ticks),
                  yaxis=dict(domain=yd0, type="log", title=dict(text="time per batch (ms)")),
                  xaxis2=dict(domain=xd1, anchor="y2", type="log", title=dict(text="sequence length L (tokens)"),
                              **ticks),
                  yaxis2=dict(domain=yd1, anchor="x2", type="log", title=dict(text="peak memory (MiB)")))
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data, rows=2))


def kv_cache_figure(kv: dict) -> go.Figure:
    """KV-cache bytes for decoding against L: current ``n_kv_heads`` next to MHA and MQA."""
    mib = 1 / 2**20
    lines = [("mha", f"MHA ({kv['n_heads']} K/V heads)", "#7f7f7f", "dash"),
             ("mqa", "MQA (1 K/V head)", "#2ca02c", "dot"),
             ("current", f"current ({kv['kv_heads']} K/V heads)", "#1f77b4", "solid")]
    data = [dict(type="scatter", mode="lines+markers", x=kv["seq_len"], y=[b * mib for b in kv[key]], name=name,
                 line=dict(color=color, width=4 if key == "current" else 2.5, dash=dash),
                 hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}} MiB<extra></extra>")
            for key, name, color, dash in lines]
    same = [name for key, name, _, _ in lines[:2] if kv[key] == kv["current"]]
    note = f"; current = {same[0].split(' (')[0]}: the curves coincide" if same else ""
    lay = _layout("KV cache for decoding<br><sup>computed: 2 · layers · K/V heads · d_head · L values, "
                  f"{8 * kv['bytes_per_value']}-bit{note}</sup>", 400,
                  xaxis=dict(type="log", title=dict(text="context length L (tokens)")),
                  yaxis=dict(type="log", title=dict(text="KV cache (MiB)")))
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data))


def human_bytes(n: float) -> str:
    if n is None or not math.isfinite(n):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
