"""Circuit cards side by side (``explorer.analysis.cards``): does every architecture build the same circuit?

- ``cards_figure(cards)``: three stacked panels sharing one colour per model: the second copy's loss against
  the copy distance (where induction fails), the logit-lens loss after each layer on held-out text, and
  each model's heads by grounded role (bars; hover: which heads, and what mean-ablating them costs).
- ``cards_table_md(cards)``: the same cards as one Markdown table, a row per model.

Cards are the stored JSON dicts; a skipped card (a model without per-head intervention points) is a table
row saying why and is left out of the panels.
"""
from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import CYCLE, base_layout, legend_above, message_figure

ROLE_COLOURS = {"induction": "#d62728", "previous-token": "#1f77b4", "local": "#2ca02c", "first-token": "#9467bd",
                "delimiter": "#ff7f0e", "broad": "#8c564b", "mixed": "#bbbbbb"}
SHOWN_DISTANCES = (16, 32, 64, 112)  # the table's copy-curve columns (tokens)


def architecture_text(arch: dict) -> str:
    """"sliding_window (64), rope, pre-LN layernorm, gelu, 4 x 4 heads (2 K/V)"."""
    attn = arch["attention"] + (f" ({arch['window']})" if "window" in arch else "")
    kv = f" ({arch['n_kv_heads']} K/V)" if arch["n_kv_heads"] != arch["n_heads"] else ""
    return (f"{attn}, {arch['position']}, {arch['norm_placement']}-LN {arch['norm']}, {arch['ffn']}, "
            f"{arch['n_layers']} x {arch['n_heads']} heads{kv}")


def _heads_of(card: dict, label: str) -> list:
    return [h for row in card["heads"] for h in row if h["label"] == label]


def _name(h: dict) -> str:
    return f"{h['layer']}.{h['head']}" + ("" if h["confirmed"] else "?")


def role_text(card: dict, label: str) -> str:
    """"1.0 1.1 1.2 1.3 (score 0.91-0.92; together +4.99 nats)" ("-" without such heads; "?": unconfirmed)."""
    heads = _heads_of(card, label)
    if not heads:
        return "-"
    lo, hi = min(h["score"] for h in heads), max(h["score"] for h in heads)
    score = f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}"
    group = card["groups"].get(label)
    together = f"; together {group['effect']:+.2f} nats" if group and len(heads) > 1 else ""
    return " ".join(_name(h) for h in heads) + f" (score {score}{together})"


def circuit_text(card: dict, n: int = 5) -> str:
    parts = [f"{c['head'][0]}.{c['head'][1]} {c['label']} {c['effect']:+.2f}" for c in card["circuit"][:n]]
    more = len(card["circuit"]) - n
    return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "") if parts else "-"


def curve_cells(card: dict) -> list:
    c = card["copy_curve"]
    curve = dict(zip(c["distances"], zip(c["second_copy"], c["accuracy"])))
    return [f"{curve[d][0]:.2f} ({curve[d][1]:.0%})" if d in curve else "-" for d in SHOWN_DISTANCES]


def fails_text(card: dict) -> str:
    c = card["copy_curve"]
    return f"{c['fails_at']}" if c["fails_at"] is not None else f"> {c['distances'][-1]}"


def cards_table_md(cards: list) -> str:
    """One Markdown row per card (module docstring), with a note saying what each column measures."""
    if not cards:
        return ""
    head = ("| model | architecture | induction heads | previous-token heads | copying circuit (second-copy loss "
            "change when mean-ablated, nats) | logit-lens loss per layer, held-out text (emb, 0, 1, ...) | "
            "second-copy loss (top-1 accuracy) at distance " + " / ".join(map(str, SHOWN_DISTANCES)) + " | induction fails at |")
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for c in cards:
        if c.get("skipped"):
            lines.append(f"| {c['model']} | {architecture_text(c['architecture'])} | skipped: {c['skipped']} "
                         "| | | | | |")
            continue
        lens = " ".join(f"{v:.2f}" for v in c["lens"]["natural"])
        lines.append(f"| {c['model']} | {architecture_text(c['architecture'])} | {role_text(c, 'induction')} | "
                     f"{role_text(c, 'previous-token')} | {circuit_text(c)} | {lens} | {' / '.join(curve_cells(c))} "
                     f"| {fails_text(c)} |")
    done = next((c for c in cards if not c.get("skipped")), None)
    if done is not None:
        lines.append(f"\nLosses in {done['unit']} on fixed probes: heads labelled on repeated random tokens "
                     "(induction: prefix-matching score, layer >= 1) and held-out text (the rest), each confirmed "
                     f"when mean-ablating it changes the loss its role predicts by at least {done['min_effect']} nats "
                     "(\"?\": not confirmed); the copy curve is the second copy's loss of "
                     f"{done['copy_curve']['copy_len']} random tokens repeated at each distance (after its first "
                     f"token, {done['copy_curve']['sequences']} sequences); induction fails at the first distance "
                     f"where fewer than {done['copy_curve']['fail_accuracy']:g} of those tokens are predicted (top-1).")
    return "\n".join(lines)


def _axis(domain: list, title: str, **kw) -> dict:
    return dict(domain=domain, title=dict(text=title), automargin=True, **kw)


def cards_figure(cards: list) -> go.Figure:
    """The cards side by side (module docstring): copy curve, logit lens, heads by role."""
    done = [c for c in cards if not c.get("skipped")]
    if not done:
        return message_figure("No circuit card to draw (python -m explorer.analysis.cards --write stores them).",
                              "Circuit cards")
    unit = done[0]["unit"]
    data = []
    depth = max(len(c["lens"]["natural"]) for c in done)
    for i, c in enumerate(done):
        colour = CYCLE[i % len(CYCLE)]
        cc = c["copy_curve"]
        data.append(dict(type="scatter", x=cc["distances"], y=cc["second_copy"], mode="lines+markers",
                         name=c["model"], legendgroup=c["model"], line=dict(color=colour, width=3), xaxis="x",
                         yaxis="y", hovertemplate=c["model"] + ": distance %{x} tokens, second copy %{y:.2f} "
                         + unit + "<extra></extra>"))
        data.append(dict(type="scatter", x=list(range(len(c["lens"]["natural"]))), y=c["lens"]["natural"],
                         mode="lines+markers", name=c["model"], legendgroup=c["model"], showlegend=False,
                         line=dict(color=colour, width=3), xaxis="x2", yaxis="y2",
                         customdata=c["lens"]["rows"], hovertemplate=c["model"] + ", after %{customdata}: %{y:.2f} "
                         + unit + "<extra></extra>"))
    models = [c["model"] for c in done]
    for label, colour in ROLE_COLOURS.items():
        counts, hover = [], []
        for c in done:
            heads = _heads_of(c, label)
            counts.append(len(heads))
            hover.append(", ".join(f"{_name(h)} ({h['effect']:+.2f} nats)" for h in heads) or "none")
        if any(counts):
            data.append(dict(type="bar", orientation="h", y=models, x=counts, name=label, marker_color=colour,
                             xaxis="x3", yaxis="y3", legend="legend2", customdata=hover,
                             hovertemplate="%{y}: %{x} " + label + " heads: %{customdata}<extra></extra>"))
    title = ("Circuit cards: the same probes on every trained model<br><sup>top: loss on the second copy of "
             "16 random tokens against the distance between the copies; middle: logit-lens loss on held-out text "
             "after each layer; bottom: heads by grounded role (hover: mean-ablation effect; ?: not confirmed)</sup>")
    lay = base_layout(title, 1020, barmode="stack",
                      xaxis=_axis([0, 1], "distance between the copies (tokens)", anchor="y"),
                      yaxis=_axis([0.71, 1.0], f"second copy ({unit})", type="log", anchor="x"),
                      xaxis2=_axis([0, 1], "residual stream read after (0 = the embedding, then each layer)",
                                   anchor="y2", tickmode="array", tickvals=list(range(depth)),
                                   ticktext=["emb"] + [f"L{i}" for i in range(depth - 1)]),
                      yaxis2=_axis([0.37, 0.6], f"logit-lens loss ({unit})", anchor="x2", rangemode="tozero"),
                      xaxis3=_axis([0, 1], "heads (count)", anchor="y3"),
                      yaxis3=_axis([0, 0.26], "", anchor="x3", autorange="reversed"),
                      legend2=dict(orientation="h", x=0, y=-0.08, xanchor="left", yanchor="top",
                                   title=dict(text="role")))
    lay["margin"] = dict(l=70, r=20, t=90, b=120)
    legend_above(lay, data[::2][:len(done)])
    return go.Figure(data=data, layout=lay)
