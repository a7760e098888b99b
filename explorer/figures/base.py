"""Results -> Plotly figures (no torch here): styled to be projected in a talk.

Figures are built from plain dicts (``go.Figure(data=[...], layout={...})``) with explicit subplot
domains, which is several times faster than ``make_subplots`` + ``add_trace`` for a grid of 16+
heatmaps; the explorer redraws on every control change. Inputs are the results of
``explorer.analysis`` (duck-typed: numpy arrays, dicts and lists).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import plotly.io as pio

FONT = dict(family="DejaVu Sans, Inter, Arial, sans-serif", size=15, color="#1f2933")
CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
# Every figure's template. It is made Plotly's default rather than named in each layout: Plotly gives
# a figure that names none a copy of the default without validating it again, where a named one is
# validated per figure (~13 ms each on one core: the page builds about ten at start-up and several
# per redraw). The figure's JSON is the same either way.
TEMPLATE = "plotly_white"


def base_layout(title: str, height: int, **kw) -> dict:
    if pio.templates.default != TEMPLATE:  # the first figure (or someone changed the default)
        pio.templates.default = TEMPLATE
    return dict(
        font=FONT,
        height=height,
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=19)),
        margin=dict(l=70, r=30, t=90, b=60),
        **kw,
    )


def subplot_domains(rows: int, cols: int, hgap: float = 0.02, vgap: float = 0.04) -> list:
    """Axis domains of a rows x cols grid, row 0 at the top: ``[(xdomain, ydomain), ...]`` row-major."""
    w = (1 - hgap * (cols - 1)) / cols
    h = (1 - vgap * (rows - 1)) / rows
    out = []
    for r in range(rows):
        for c in range(cols):
            x0 = c * (w + hgap)
            y1 = 1 - r * (h + vgap)
            out.append(
                ([round(x0, 6), min(1.0, round(x0 + w, 6))], [max(0.0, round(y1 - h, 6)), min(1.0, round(y1, 6))])
            )
    return out


def message_figure(text: str, title: str = "") -> go.Figure:
    """An empty figure carrying a message (e.g. before the first sweep)."""
    return go.Figure(
        layout=base_layout(
            title,
            360,
            annotations=[
                dict(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=17))
            ],
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
        )
    )


def human_bytes(n: float) -> str:
    if n is None or not math.isfinite(n):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


MAX_TICKS = 128  # token labels on an axis: beyond this every n-th token is labelled


def token_axis(tokens: list, **kw) -> dict:
    """A numeric position axis labelled with the token characters (duplicates stay distinct)."""
    step = max(1, -(-len(tokens) // MAX_TICKS))
    idx = list(range(0, len(tokens), step))
    return dict(
        tickmode="array",
        tickvals=idx,
        ticktext=[tokens[i] for i in idx],
        tickangle=0,
        tickfont=dict(size=12 if step == 1 and len(tokens) > 64 else 14),
        showgrid=False,
        **kw,
    )


TITLE_BAND = 78  # px at the top of a figure for its title (two lines, presentation-mode sizes)


LEGEND_ROW = 28  # px per row of a horizontal legend


LEGEND_WIDTH = 900  # px a legend row is assumed to have (a figure in the app's figure column)


NOTE_CHARS = 95  # characters per line of a title's small-print note (<sup>) before it wraps


NOTE_LINE = 20  # px each further line of a wrapped note adds to the title band


def legend_rows(data: list) -> int:
    """Rows a horizontal legend of ``data``'s entries needs at ``LEGEND_WIDTH`` (about 8.5 px per
    character at the legend's font size plus the symbol)."""
    names = [
        str(d.get("name") or "")
        for d in data
        if d.get("name") and d.get("showlegend", d.get("type") in ("scatter", "bar", None))
    ]
    width = sum(50 + 8.5 * len(n) for n in names)
    return max(1, -(-int(width) // LEGEND_WIDTH))


def _title_pad(title: dict) -> int:
    """px from the figure's top edge to a top-anchored title. Plotly drops a top-anchored title by
    its cap height (0.7 em) when it is one line, but sets a title of several lines (``<br>``) on its
    first baseline, so its first line would stick out of the figure: those get the font size more."""
    size = ((title.get("font") or {}).get("size")) or 19
    return 12 + (size if "<br>" in str(title.get("text") or "") else 0)


def wrap_notes(text: str, width: int = NOTE_CHARS) -> str:
    """``text`` (a Plotly title) with each long ``<sup>`` note of plain text broken into lines of at
    most ``width`` characters where it can be: between its clauses ("; "), a clause longer than a
    line between its words. Plotly never wraps a title, it clips it at the figure's edge."""
    parts = []
    for part in text.split("<br>"):
        inner = part[5:-6] if part.startswith("<sup>") and part.endswith("</sup>") else None
        if inner is not None and "<" not in inner and len(inner) > width:
            lines = [""]
            for clause in inner.split("; "):
                if lines[-1] and len(lines[-1]) + 2 + len(clause) > width:
                    lines.append("")
                lines[-1] = f"{lines[-1]}; {clause}" if lines[-1] else clause
                while len(lines[-1]) > width and " " in lines[-1][:width]:  # a clause longer than a line
                    cut = lines[-1].rfind(" ", 0, width)
                    lines[-1:] = [lines[-1][:cut], lines[-1][cut + 1 :]]
            part = "<br>".join(f"<sup>{line}</sup>" for line in lines)
        parts.append(part)
    return "<br>".join(parts)


def legend_above(lay: dict, data: list | None = None, rows: int = 1, gap: int = 0) -> dict:
    """Put ``lay``'s legend in a band between the title and the plot area (horizontal, left-aligned)
    so it can never cover an axis title. ``rows``: legend rows to make room for (at least what
    ``data``'s entries need, ``legend_rows``); ``gap``: px kept free just above the plot area
    (subplot titles). The title is pinned to the top of the figure; the top margin grows to hold
    title, legend and gap, and the figure grows by as much, so the plot area keeps its height."""
    rows = max(rows, legend_rows(data)) if data is not None else rows
    title = lay.get("title") or {}
    title = dict(text=title) if isinstance(title, str) else dict(title)
    title["text"] = wrap_notes(str(title.get("text") or ""))
    title.update(y=1, yref="container", yanchor="top", pad=dict(t=_title_pad(title)))
    extra_lines = max(0, title["text"].count("<br>") - 1)  # the band holds a title and one note line
    margin = dict(lay.get("margin") or {})
    margin.setdefault("b", 60)
    old_t = margin.get("t", 90)
    margin["t"] = TITLE_BAND + extra_lines * NOTE_LINE + rows * LEGEND_ROW + gap
    height = lay["height"] + max(0, margin["t"] - old_t)
    plot_px = max(1, height - margin["t"] - margin["b"])
    keep = {
        k: v for k, v in (lay.get("legend") or {}).items() if k not in ("x", "y", "xanchor", "yanchor", "orientation")
    }
    lay.update(
        height=height,
        title=title,
        margin=margin,
        legend=dict(orientation="h", x=0, xanchor="left", y=1 + (gap + 4) / plot_px, yanchor="bottom", **keep),
    )
    return lay


def decade_ticks(fig: go.Figure) -> go.Figure:
    """Log axes labelled at whole decades only (1, 10, 100 written as powers of ten), the digits between
    them as unlabelled minor ticks with their grid lines: Plotly's default labels the 2s and 5s too,
    which read as "2, 1, 5, 2, 10^-1" down an axis. An axis whose traces' values hold fewer than two
    whole decades (it would show one label or none) and an axis with its own ticks are left as they are."""
    lay = fig.layout
    spans: dict = {}
    for trace in fig.data:
        for letter in ("x", "y"):
            values = getattr(trace, letter, None)
            if values is None:
                continue
            name = (getattr(trace, f"{letter}axis", None) or letter).replace(letter, f"{letter}axis", 1)
            try:
                positive = [float(v) for v in values if v is not None and float(v) > 0 and math.isfinite(float(v))]
            except (TypeError, ValueError):  # categories, dates: not a log axis's values
                continue
            if positive:
                lo, hi = spans.get(name, (math.inf, 0.0))
                spans[name] = (min(lo, min(positive)), max(hi, max(positive)))
    for name, (lo, hi) in spans.items():
        axis = lay[name] if name in lay else None
        if axis is None or axis.type != "log" or axis.tickvals is not None or axis.dtick is not None:
            continue
        if math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) < 1:  # fewer than two decades to label
            continue
        axis.update(
            dtick=1,
            exponentformat="power",
            minor=dict(dtick="D1", ticks="outside", ticklen=3, showgrid=True, gridcolor="rgba(0,0,0,0.04)"),
        )
    return fig
