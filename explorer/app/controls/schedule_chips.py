"""The layer schedule at a glance: one chip per layer under the schedule box, coloured by its kind.

``chips_html(schedule, n_layers)`` draws the layers of the schedule the box holds as a row of chips,
``L3 full · NoPE``, one colour per distinct kind, and a legend of the kinds with their layer counts (none
without a schedule: every layer is then the Attention choice); a schedule the grammar refuses shows the refusal
instead (the commit warns too). Every value comes from the page, so it is parsed by the library's own grammar,
bounded and escaped.
"""

from __future__ import annotations

import html

from models import ConfigError
from models.schedule import MAX_LAYERS, LayerKind, parse

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
SHOWN = 48  # chips drawn at most; the rest are counted


def _layers(value) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, min(n, MAX_LAYERS))


def _label(kind: LayerKind) -> str:
    return kind.attention + (" · NoPE" if kind.nope else "") + (" · dense FFN" if kind.dense else "")


def chips_html(schedule, n_layers) -> str:
    """The chips of ``schedule`` cycled over ``n_layers`` (see the module docstring); ``""`` without a schedule
    (every layer is the Attention choice, which its own dropdown shows)."""
    n = _layers(n_layers)
    text = schedule if isinstance(schedule, str) else ""
    try:
        period = parse(text)
    except ConfigError as e:
        return (
            f'<div class="schedule-chips invalid">⚠️ {html.escape(str(e.value)[:40])}: not a schedule (entries are '
            "key[:nope][:dense][*count] with an attention key, e.g. sliding_window*5,full)</div>"
        )
    if n == 0 or not period:
        return ""
    kinds = [period[i % len(period)] for i in range(n)]
    colours = {k: PALETTE[j % len(PALETTE)] for j, k in enumerate(dict.fromkeys(kinds))}
    chips = "".join(
        f'<span class="chip" style="border-color:{colours[k]};color:{colours[k]}" '
        f'title="layer {i}: {html.escape(_label(k))}">L{i}</span>'
        for i, k in enumerate(kinds[:SHOWN])
    )
    more = f'<span class="more">… {n - SHOWN} more</span>' if n > SHOWN else ""
    legend = " ".join(
        f'<span class="kind" style="color:{c}">■ {html.escape(_label(k))} × {kinds.count(k)}</span>'
        for k, c in colours.items()
    )
    title = f"{len(period)}-layer period cycled over {n} layers"
    return (
        f'<div class="schedule-chips" aria-label="layer schedule: {html.escape(title)}">'
        f'<div class="chips">{chips}{more}</div><div class="legend">{legend} <i>({html.escape(title)})</i></div></div>'
    )
