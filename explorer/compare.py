"""A/B comparison of two configurations: what differs, and their gradient norms in one figure.

No gradio here (``explorer.ui_compare`` wires it). A is the pinned configuration, B the one on
screen; the attention maps of each are ``plots.attention_grid`` figures drawn side by side.
"""
from __future__ import annotations

import plotly.graph_objects as go

from models import ModelConfig

from .plots import GRAD_PANELS, _grid, _layout, human_bytes

COLORS = {"A": "#3949ab", "B": "#e65100"}


def config_diff(a: ModelConfig, b: ModelConfig) -> list:
    """``[(field, value in A, value in B)]`` for every ModelConfig field that differs, in field order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in da if da[k] != db.get(k)]


def diff_markdown(a: ModelConfig, b: ModelConfig, card_a: dict | None = None, card_b: dict | None = None) -> str:
    """The comparison's reading: a table of the differing fields and, given the model summaries
    (``experiments.model_summary``), parameter count and FLOPs per token of each."""
    rows = config_diff(a, b)
    if not rows:
        head = "**A and B are the same configuration**: change a control to compare."
    else:
        head = (f"**{len(rows)} field{'s differ' if len(rows) > 1 else ' differs'}** "
                "(A = pinned, B = the controls now).")
    lines = [head, ""]
    if card_a and card_b:
        lines += ["| | A | B |", "| --- | --- | --- |",
                  f"| parameters | {card_a['parameters']:,} | {card_b['parameters']:,} |",
                  f"| FLOPs per token | {card_a['flops_per_token']:,.0f} | {card_b['flops_per_token']:,.0f} |"]
        for k, va, vb in rows:
            lines.append(f"| `{k}` | `{va}` | `{vb}` |")
    elif rows:
        lines += ["| field | A | B |", "| --- | --- | --- |"] + [f"| `{k}` | `{va}` | `{vb}` |" for k, va, vb in rows]
    return "\n".join(lines)


def gradient_compare_figure(grad_a: dict, grad_b: dict) -> go.Figure:
    """Per-layer gradient norms of A and B overlaid (``experiments.gradient_norms`` results), log scale.

    Zeros cannot sit on a log axis: they are drawn at a floor a decade below the smallest positive
    value and the legend says "= 0". Identical curves are said to be identical (B drawn dashed on A).
    """
    domains = _grid(1, 3, hgap=0.07)
    positive = [v for r in (grad_a, grad_b) for key, _ in GRAD_PANELS for v in r[key] if v is not None and v > 0]
    floor = min(positive) / 10 if positive else 1e-6
    same = all(grad_a[key] == grad_b[key] for key, _ in GRAD_PANELS)
    data, layout = [], {"annotations": []}
    for p, (key, label) in enumerate(GRAD_PANELS):
        s = "" if p == 0 else str(p + 1)
        for name, r in (("A", grad_a), ("B", grad_b)):
            vals = r[key]
            if not vals:
                continue
            zero = all(v == 0 for v in vals if v is not None)
            data.append(dict(type="scatter", mode="lines+markers", x=list(range(len(vals))),
                             y=[None if v is None else (v if v > 0 else floor) for v in vals],
                             name=f"{name} ({r.get('norm_placement', '')})" + (" = 0" if zero else ""),
                             legendgroup=name, showlegend=p == 0, xaxis=f"x{s}", yaxis=f"y{s}",
                             line=dict(color=COLORS[name], width=4 if name == "A" else 2,
                                       dash="dash" if name == "B" else "solid"),
                             customdata=vals, hovertemplate=f"{name}, layer %{{x}}: %{{customdata:.3g}}<extra></extra>"))
        xd, yd = domains[p]
        layout[f"xaxis{s}"] = dict(domain=xd, anchor=f"y{s}", title=dict(text="layer"), dtick=1)
        layout[f"yaxis{s}"] = dict(domain=yd, anchor=f"x{s}", type="log", exponentformat="power",
                                   title=dict(text="gradient norm (Frobenius)" if p == 0 else ""))
        layout["annotations"].append(dict(text=f"<b>{label}</b>", x=(xd[0] + xd[1]) / 2, y=1.02, xref="paper",
                                          yref="paper", showarrow=False, xanchor="center", yanchor="bottom"))
    title = "Gradient norms at initialisation: A (pinned) vs B (now)"
    if same:
        title += "<br><sup>the curves coincide: A and B have identical gradient norms (B dashed on A)</sup>"
    lay = _layout(title, 470, **layout)
    lay["legend"] = dict(orientation="h", y=-0.22, x=0.5, xanchor="center")
    lay["margin"] = dict(l=80, r=30, t=110, b=110)
    return go.Figure(data=data, layout=lay)


def _times(x: float, y: float) -> str:
    """How many times ``x`` is larger than ``y`` (both positive), as text."""
    return f"{x / y:.2f}×" if y > 0 else "∞×"


def ab_sweep_reading(a: list, b: list, name_a: str, name_b: str) -> str:
    """Which of A and B is faster and which smaller, and by how much, at the longest length both
    measured; the failures of each (OOM, time-out, ...) after it."""
    ok_a = {r["seq_len"]: r for r in a if r["status"] == "ok"}
    ok_b = {r["seq_len"]: r for r in b if r["status"] == "ok"}
    common = sorted(set(ok_a) & set(ok_b))
    if not common:
        text = "A and B have no length that both measured, so they cannot be compared here."
    else:
        L = common[-1]
        ra, rb = ok_a[L], ok_b[L]
        ta, tb, ma, mb = ra["ms"], rb["ms"], ra["peak_bytes"], rb["peak_bytes"]
        if ta == tb:
            speed = f"A and B take the same time ({ta:.1f} ms)"
        else:
            fast, slow = ("A", "B") if ta < tb else ("B", "A")
            speed = (f"**{fast} is {_times(max(ta, tb), min(ta, tb))} faster** than {slow} "
                     f"({min(ta, tb):.1f} ms vs {max(ta, tb):.1f} ms)")
        if ma == mb:
            size = f"the same peak memory ({human_bytes(ma)})"
        else:
            small = "A" if ma < mb else "B"
            size = (f"**{small} needs {_times(max(ma, mb), min(ma, mb))} less peak memory** "
                    f"({human_bytes(min(ma, mb))} vs {human_bytes(max(ma, mb))})")
        text = f"At L={L}, the longest length both measured: {speed}, and {size}."
    fails = [f"{side} ({name}) L={r['seq_len']}: {r['status'].upper()}"
             for side, name, records in (("A", name_a, a), ("B", name_b, b)) for r in records if r["status"] != "ok"]
    if fails:
        text += " Not measured: " + "; ".join(fails) + "."
    return text + f" A = {name_a} (pinned), B = {name_b} (the controls)."
