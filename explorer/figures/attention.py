"""Attention maps -> figures: the grid of heads (one heatmap per layer x head) and the pattern / per-head statistics."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import base_layout, subplot_domains

MAX_GRID = 8  # at most 8 layers x 8 heads of heatmaps (64 panels; explorer.app.controls.grid_pick picks which)


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


def level_colorscale() -> list:
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


def layer_kind_label(token: str) -> str:
    """A layer kind of a schedule as the grid's row title shows it: ``"sliding_window"`` -> ``"sliding"``,
    ``"full:nope"`` -> ``"full, NoPE"``."""
    key, _, mods = token.partition(":")
    short = {"sliding_window": "sliding", "dilated_window": "dilated", "block_local": "block"}.get(key, key)
    return short + (", NoPE" if "nope" in mods.split(":") else "")


def signed_colorscale() -> list:
    """Blue (negative) - white (0) - red (positive), for effective attention with negative weights
    (Differential attention's ``A1 - lambda A2``); NaN cells (not allowed) show the background."""
    return [[0.0, "#2166ac"], [0.25, "#92c5de"], [0.5, "#f7f7f7"], [0.75, "#f4a582"], [1.0, "#b2182b"]]


IMPLICIT_NOTE = "implicit maps of a recurrent layer (signed weights, not probabilities)"


def implicit_layer(maps, layer: int) -> bool:
    """Whether map ``layer`` is a recurrent mixer's implicit attention matrix (``maps.implicit``: Mamba-2, Gated
    DeltaNet): signed, rows of no fixed sum, drawn on the diverging scale."""
    flags = getattr(maps, "implicit", None)
    return bool(flags) and 0 <= layer < len(flags) and bool(flags[layer])


def implicit_shown(maps, layers) -> bool:
    """Whether any of ``layers`` draws an implicit map (then the whole grid is drawn as signed weights)."""
    return any(implicit_layer(maps, int(n)) for n in layers)


def _mechanism(maps) -> str:
    """The title's name of the attention: the key, or a layer schedule's pattern."""
    cfg = maps.config or {}
    schedule = cfg.get("layer_schedule")
    return f"layers {schedule}" if schedule else str(cfg.get("attention"))


def _row_title(layer: int, row_kinds) -> str:
    """``"layer 3"``, or under a layer schedule ``"L3 sliding"`` (the row's layer kind)."""
    if row_kinds is None or layer >= len(row_kinds):
        return f"layer {layer}"
    return f"L{layer} {layer_kind_label(row_kinds[layer])}"


def head_labels(maps):
    """The maps' head labels (``maps.heads()``: a self-attention on bytes), or None."""
    heads = getattr(maps, "heads", None)
    return heads() if callable(heads) else None


def _unit(maps) -> str:
    """What one token is: a byte, or a piece of a pretrained checkpoint's tokenizer."""
    return "tokenizer tokens" if getattr(maps, "vocabulary", "bytes") == "tokenizer" else "byte tokens"


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
    qlab = qlab[len(qlab) - att.shape[2] :]
    shown_att = att[np.ix_(layers, heads)]  # (n_l, n_h, L, Lk)
    finite = shown_att[np.isfinite(shown_att)]
    positive = finite[finite > 0]
    cmax = max(float(np.quantile(positive, 0.99)) if positive.size else 1.0, 1e-6)
    pmax = float(positive.max()) if positive.size else 0.0
    clipped = pmax > cmax * (1 + 1e-6)
    step = cmax / LEVELS
    # negative weights that matter (Differential attention's A1 - lambda A2): a diverging scale of the values
    # themselves, NaN where a pair is not allowed; otherwise uint8 levels of the probabilities
    signed = bool(finite.size) and float(finite.min()) < -0.01 * float(np.abs(finite).max())
    implicit = implicit_shown(maps, layers)  # a recurrent layer's implicit map: signed weights whatever its values
    signed = signed or (implicit and bool(finite.size))
    if signed:
        nonzero = np.abs(finite[finite != 0])
        cmax = pmax = max(float(np.quantile(nonzero, 0.99)), 1e-6)
        clipped, step = False, None
        levels = np.where(np.isfinite(shown_att) & (shown_att != 0), np.round(shown_att, 4), np.nan)
        levels = levels.astype(np.float32)
    else:
        levels = quantise(shown_att, step)  # (n_l, n_h, L, Lk) uint8
    row_kinds = getattr(maps, "layer_kinds", None)  # a layer schedule: each layer's kind in its row title
    height, _ = grid_height(n_l)
    vgap = 8 / max(1, height - GRID_MARGIN["t"] - GRID_MARGIN["b"])
    top_note = f"<br>level {LEVELS} = p ≥ {cmax:.3g} (clipped)" if clipped else ""
    kinds = head_labels(maps)
    data, layout, notes = [], {}, []
    for k, (xd, yd) in enumerate(subplot_domains(n_l, n_h, vgap=vgap)):
        r, c = divmod(k, n_h)
        layer, head = layers[r], heads[c]
        s = "" if k == 0 else str(k + 1)
        kind = kinds[layer][head].short() if kinds is not None else ""
        row_kind = f" ({row_kinds[layer]})" if row_kinds is not None and layer < len(row_kinds) else ""
        value = "weight %{z:.3g}" if signed else f"p ≈ %{{z}} × {step:.3g}{top_note}"
        data.append(
            dict(
                type="heatmap",
                z=levels[r, c],
                x=klab,
                y=qlab,
                coloraxis="coloraxis",
                xaxis=f"x{s}",
                yaxis=f"y{s}",
                name=f"layer {layer} head {head}",
                hoverongaps=False,
                meta=[layer, head],
                hovertemplate=f"layer {layer}{row_kind} head {head}{': ' + kind if kind else ''}<br>query %{{y}}"
                f"<br>key %{{x}}<br>{value}<br>click: zoom into "
                "this head<extra></extra>",
            )
        )
        if kind:  # the head's type on this text, in the panel's top right corner (above the causal blank)
            notes.append(
                dict(
                    text=kind,
                    xref=f"x{s} domain",
                    yref=f"y{s} domain",
                    x=0.98,
                    y=0.98,
                    xanchor="right",
                    yanchor="top",
                    showarrow=False,
                    font=dict(size=10 if narrow else 12),
                    bgcolor="rgba(255,255,255,0.8)",
                )
            )
        # square cells at any width (a wide screen otherwise stretches each map ~3:1): the axis with
        # room to spare gives it up (constrain="domain"), the panel stays centred in its slot
        layout[f"xaxis{s}"] = dict(
            domain=xd,
            anchor=f"y{s}",
            showticklabels=False,
            showgrid=False,
            constrain="domain",
            zeroline=False,
            title=dict(text=f"head {head}" if r == n_l - 1 else "", font=dict(size=12) if narrow else None),
        )
        layout[f"yaxis{s}"] = dict(
            domain=yd,
            anchor=f"x{s}",
            showticklabels=False,
            showgrid=False,
            zeroline=False,
            autorange="reversed",
            scaleanchor=f"x{s}",
            constrain="domain",
            title=dict(text=_row_title(layer, row_kinds) if c == 0 else ""),
        )
    shown = f"{_span(layers, att.shape[0], 'layers')}, {_span(heads, att.shape[1], 'heads')}"
    # a map with negative weights (differential attention subtracts two maps; Nystrom's approximation)
    negative = float((finite < 0).mean()) if finite.size and not signed else 0.0  # signed: drawn, not blank
    blank = "blank = not allowed (p = 0)" + (f" or negative ({negative:.0%} of the pairs)" if negative else "")
    if implicit:  # the rows are not distributions: say so where the title describes them
        blank = f"{IMPLICIT_NOTE}; blank = no weight"
    if narrow:
        title = (
            f"Attention maps: {_mechanism(maps)}<br><sup>{len(maps.tokens)} {_unit(maps)} ({shown})"
            f"</sup><br><sup>rows = queries, columns = keys; {blank}</sup>"
        )
    else:
        title = (
            f"Attention maps: {_mechanism(maps)}, {len(maps.tokens)} {_unit(maps)} ({shown})"
            f"<br><sup>rows = queries, columns = keys; {blank}; click a panel to zoom</sup>"
        )
    lay = base_layout(title, height, **layout)
    lay["margin"] = dict(GRID_MARGIN)
    if notes:
        lay["annotations"] = list(lay.get("annotations", [])) + notes
    if narrow:  # a third title line: the band grows, and the figure with it (the panels keep their size)
        lay["margin"]["t"] += NARROW_EXTRA
        lay["height"] += NARROW_EXTRA
    if signed:
        lay["coloraxis"] = dict(
            colorscale=signed_colorscale(),
            cmin=-cmax,
            cmax=cmax,
            colorbar=dict(
                title=dict(text="implicit<br>weight<br>(signed)" if implicit else "attention<br>weight<br>(signed)"),
                thickness=14,
            ),
        )
        lay["plot_bgcolor"] = BLANK
        lay["meta"] = {"p_step": None, "p_max": cmax, "clipped": False, "signed": True, "layers": layers}
        lay["meta"]["implicit"] = implicit
        lay["meta"]["heads"] = heads
        return go.Figure(data=data, layout=lay)
    ticks = [cmax * f for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    ticktext = [f"{t:.2g}" if t else "0" for t in ticks]
    bar_title = "attention<br>probability"
    if clipped:  # the top colour also stands for every larger probability
        bar_title += f"<br>clipped at<br>p99 = {cmax:.2g}<br>(max {pmax:.2g})"
    # tick labels under their ticks: the top one otherwise touches the last line of a title of five
    lay["coloraxis"] = dict(
        colorscale=level_colorscale(),
        cmin=0,
        cmax=LEVELS,
        colorbar=dict(
            title=dict(text=bar_title),
            thickness=14,
            tickvals=[max(1.0, t / step) for t in ticks],
            ticktext=ticktext,
            ticklabelposition="outside bottom",
        ),
    )
    lay["plot_bgcolor"] = BLANK
    lay["meta"] = {"p_step": step, "p_max": cmax, "clipped": clipped, "layers": layers, "heads": heads}
    return go.Figure(data=data, layout=lay)


def attention_stats(maps) -> go.Figure:
    """Pattern mask | per-head entropy (nats) | per-head mean attention distance (tokens).

    With a memory (Transformer-XL and the rest) the maps hold what the memory let each query see
    (its segment and the remembered keys), which the section-1 pattern alone does not describe: the
    left panel then shows where the maps put weight, and its title says so."""
    n_l, n_h = maps.entropy.shape
    (xd0, yd0), (xd1, yd1), (xd2, yd2) = subplot_domains(1, 3, hgap=0.09)
    heads = [f"H{h}" for h in range(n_h)]
    layers = [f"L{i}" for i in range(n_l)]
    what = "Pattern mask" if maps.mask_kind == "pattern" else "Support of the attention"
    mask, fraction, key_title = maps.mask, maps.allowed_fraction, "key position"
    memory = (maps.config or {}).get("memory", "none")
    if memory not in (None, "none"):
        support = np.nan_to_num(maps.attention).max(axis=(0, 1)) > 0  # (L, Lk): what the maps show
        what = (
            f"Where the maps put weight (memory {memory!r}: each query sees its segment and the memory; "
            f"the {maps.config['attention']} pattern alone allows {100 * fraction:.1f}%)"
        )
        mask, fraction = support, float(support.mean())
        if len(maps.key_tokens) > len(maps.tokens):
            key_title = f"key position (first {len(maps.key_tokens) - len(maps.tokens)} = memory slots)"
    data = [
        dict(
            type="heatmap",
            z=mask.astype(np.uint8),
            colorscale=[[0, "#ffffff"], [1, "#2b4c7e"]],
            showscale=False,
            xaxis="x",
            yaxis="y",
            hovertemplate="query %{y}, key %{x}: %{z}<extra></extra>",
        ),
        dict(
            type="heatmap",
            z=np.round(maps.entropy, 3),
            x=heads,
            y=layers,
            xaxis="x2",
            yaxis="y2",
            colorscale="Magma",
            texttemplate="%{z:.2f}",
            colorbar=dict(x=0.64, thickness=10, len=0.8),
            hovertemplate="%{y} %{x}: entropy %{z:.3f} nats<extra></extra>",
        ),
        dict(
            type="heatmap",
            z=np.round(maps.distance, 2),
            x=heads,
            y=layers,
            xaxis="x3",
            yaxis="y3",
            colorscale="Cividis",
            texttemplate="%{z:.1f}",
            colorbar=dict(x=1.0, thickness=10, len=0.8),
            hovertemplate="%{y} %{x}: mean distance %{z:.2f} tokens<extra></extra>",
        ),
    ]
    if memory not in (None, "none"):
        title = f"{100 * fraction:.1f}% of (query, key) pairs carry weight<br><sup>{what}</sup>"
    else:
        title = f"{what}: {100 * fraction:.1f}% of (query, key) pairs allowed"
    if implicit_shown(maps, range(n_l)):  # signed rows: no distribution to take the entropy of (blank there)
        title += f"<br><sup>{IMPLICIT_NOTE}: entropy undefined (blank); distance = sum of weight x |i - j|</sup>"
    lay = base_layout(
        title,
        420,
        xaxis=dict(domain=xd0, title=dict(text=key_title), constrain="domain"),
        yaxis=dict(domain=yd0, title=dict(text="query position"), autorange="reversed", scaleanchor="x"),
        xaxis2=dict(domain=xd1, anchor="y2", title=dict(text="entropy per head (nats)")),
        yaxis2=dict(domain=yd1, anchor="x2", autorange="reversed"),
        xaxis3=dict(domain=xd2, anchor="y3", title=dict(text="mean |i - j| per head (tokens)")),
        yaxis3=dict(domain=yd2, anchor="x3", autorange="reversed"),
    )
    return go.Figure(data=data, layout=lay)
