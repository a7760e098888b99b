"""Circuit cards side by side (``explorer.analysis.why.cards``): does every architecture build the same circuit?

- ``cards_figure(cards)``: three stacked panels sharing one colour per model: the second copy's loss against
  the copy distance (where induction fails), the logit-lens loss after each layer on held-out text, and
  each model's heads by grounded role (bars; hover: which heads, and what mean-ablating them costs).

The same cards as a Markdown table: ``explorer.analysis.why.cards.cards_table_md``.

Cards are the stored JSON dicts; a skipped card (a model without per-head intervention points) is left out
of the panels. An encoder-decoder's reversal card (``task: "reverse"``) has no copy curve (its panel leaves it
out); its lens line is its decoder's on the reversal probes (dashed), and its heads are its cross-attention
heads, ``mirror`` when they read the mirrored source position.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, message_figure

NARROW_LEGEND_ROWS = 5  # model legend rows kept free above the plots: seven names wrap to five at 390 px
ROLE_COLOURS = {
    "induction": "#d62728",
    "previous-token": "#1f77b4",
    "local": "#2ca02c",
    "first-token": "#9467bd",
    "delimiter": "#ff7f0e",
    "broad": "#8c564b",
    "mirror": "#17becf",
    "mixed": "#bbbbbb",
}


def _heads_of(card: dict, label: str) -> list:
    return [h for row in card["heads"] for h in row if h["label"] == label]


def _name(h: dict) -> str:
    kind = f"{h['kind']} " if h.get("kind") else ""
    return f"{kind}{h['layer']}.{h['head']}" + ("" if h["confirmed"] else "?")


def _reversal(card: dict) -> bool:
    return card.get("task") == "reverse"


def _axis(domain: list, title: str, **kw) -> dict:
    return dict(domain=domain, title=dict(text=title), automargin=True, **kw)


def cards_figure(cards: list) -> go.Figure:
    """The cards side by side (module docstring): copy curve, logit lens, heads by role."""
    done = [c for c in cards if not c.get("skipped")]
    if not done:
        return message_figure(
            "No circuit card to draw (python -m explorer.analysis.why.cards --write stores them).", "Circuit cards"
        )
    unit = done[0]["unit"]
    data, first = [], []  # first: each model's first trace, which carries its legend entry

    def lens_of(c):
        return c["lens"]["reversal"] if _reversal(c) else c["lens"]["natural"]

    depth = max(len(lens_of(c)) for c in done)
    for i, c in enumerate(done):
        colour = CYCLE[i % len(CYCLE)]
        if not _reversal(c):
            cc = c["copy_curve"]
            data.append(
                dict(
                    type="scatter",
                    x=cc["distances"],
                    y=cc["second_copy"],
                    mode="lines+markers",
                    name=c["model"],
                    legendgroup=c["model"],
                    line=dict(color=colour, width=3),
                    xaxis="x",
                    yaxis="y",
                    hovertemplate=c["model"]
                    + ": distance %{x} tokens, second copy %{y:.2f} "
                    + unit
                    + "<extra></extra>",
                )
            )
            first.append(data[-1])
        where = " (decoder, reversal probes)" if _reversal(c) else ""
        data.append(
            dict(
                type="scatter",
                x=list(range(len(lens_of(c)))),
                y=lens_of(c),
                mode="lines+markers",
                name=c["model"],
                legendgroup=c["model"],
                showlegend=_reversal(c),
                line=dict(color=colour, width=3, dash="dash" if _reversal(c) else "solid"),
                xaxis="x2",
                yaxis="y2",
                customdata=c["lens"]["rows"],
                hovertemplate=c["model"] + where + ", after %{customdata}: %{y:.2f} " + unit + "<extra></extra>",
            )
        )
        if _reversal(c):
            first.append(data[-1])
    models = [c["model"] for c in done]
    for label, colour in ROLE_COLOURS.items():
        counts, hover = [], []
        for c in done:
            heads = _heads_of(c, label)
            counts.append(len(heads))
            hover.append(", ".join(f"{_name(h)} ({h['effect']:+.2f} nats)" for h in heads) or "none")
        if any(counts):
            data.append(
                dict(
                    type="bar",
                    orientation="h",
                    y=models,
                    x=counts,
                    name=label,
                    marker_color=colour,
                    xaxis="x3",
                    yaxis="y3",
                    legend="legend2",
                    customdata=hover,
                    hovertemplate="%{y}: %{x} " + label + " heads: %{customdata}<extra></extra>",
                )
            )
    title = (
        "Circuit cards: every model, same probes<br><sup>top: 2nd-copy loss of 16 random tokens vs distance"
        "</sup><br><sup>middle: logit-lens loss on held-out text per layer (dashed: a decoder on reversals)"
        "</sup><br><sup>bottom: heads by grounded role (? = not confirmed)</sup>"
    )
    lay = base_layout(
        title,
        1020,
        barmode="stack",
        xaxis=_axis([0, 1], "copy distance (tokens)", anchor="y"),
        yaxis=_axis([0.71, 1.0], f"2nd-copy loss ({unit})", type="log", anchor="x"),
        xaxis2=_axis(
            [0, 1],
            "after layer (emb: the embedding)",
            anchor="y2",
            tickmode="array",
            tickvals=list(range(depth)),
            ticktext=["emb"] + [f"L{i}" for i in range(depth - 1)],
        ),
        yaxis2=_axis([0.37, 0.6], f"lens loss ({unit})", anchor="x2", rangemode="tozero"),
        xaxis3=_axis([0, 1], "heads (count)", anchor="y3"),
        yaxis3=_axis([0, 0.26], "", anchor="x3", autorange="reversed"),
        legend2=dict(
            orientation="h", x=0, y=-0.08, xanchor="left", yanchor="top", title=dict(text="role"), traceorder="normal"
        ),
    )
    lay["margin"] = dict(l=70, r=20, t=90, b=120)
    legend_above(lay, first, rows=NARROW_LEGEND_ROWS)
    return go.Figure(data=data, layout=lay)


def roles_table_md(grounded: dict) -> str:
    """The weights on screen's heads by grounded role, one row per layer (``grounded_view.grounded_json``): the
    role, its probe score and what mean-ablating the head costs on the role's probe ("?": the cost is below
    the threshold, so the cause does not confirm the probe's label)."""
    rows = grounded.get("heads") or []
    if not rows:
        return ""
    n_heads = max(len(r) for r in rows)

    def cell(h: dict) -> str:
        if h["label"] == "mixed":
            return f"mixed ({h['effect']:+.2f})"
        return f"{h['label']}{'' if h['confirmed'] else '?'} {h['score']:.2f} ({h['effect']:+.2f})"

    head = "| layer | " + " | ".join(f"head {i}" for i in range(n_heads)) + " |"
    lines = [head, "|" + " --- |" * (n_heads + 1)]
    lines += [f"| {row[0]['layer']} | " + " | ".join(cell(h) for h in row) + " |" for row in rows if row]
    return "\n".join(lines)
