"""Latency / memory sweeps and the KV cache -> figures, with the fitted growth exponent and failures marked.

The time panel draws each attention twice: the whole model's forward (thick) and the attention's own
time inside it (``attn_ms``, thin dotted, same colour), so the share the attention takes, and how it
grows, reads off the plot. Slope guides (O(L), O(L²), dashed) start on the current curve and span its
last three doublings: a curve parallel to one grows at that power.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.figures.base import base_layout, legend_above, subplot_domains
from explorer.figures.notes import failure_y, same_curve


# ---------------------------------------------------------------------------- latency / memory
def fitted_slope(records: list, key: str) -> float | None:
    """Least-squares slope of log(value) against log(L) over the ``ok`` records (None if < 2)."""
    pts = [(r["seq_len"], r[key]) for r in records if r["status"] == "ok" and r.get(key) and r[key] > 0]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def end_slope(records: list, key: str) -> float | None:
    """Slope of log(value) against log(L) between the two longest ``ok`` lengths (None if < 3 points,
    where it would equal the fit): where a curve bends (a linear cost giving way to a quadratic one at
    long lengths) the end says more than the fit over every length."""
    pts = sorted((r["seq_len"], r[key]) for r in records if r["status"] == "ok" and r.get(key) and r[key] > 0)
    if len(pts) < 3 or pts[-1][0] <= pts[-2][0]:
        return None
    (l0, v0), (l1, v1) = pts[-2], pts[-1]
    return float(np.log(v1 / v0) / np.log(l1 / l0))


BEND = 0.25  # an end slope this far from the fitted one is said


def slope_text(records: list, key: str) -> str | None:
    """ "1.02" or, for a bending curve, "1.02 overall, 1.81 at the longest lengths" (None: too few points)."""
    fit = fitted_slope(records, key)
    if fit is None:
        return None
    end = end_slope(records, key)
    if end is not None and abs(end - fit) >= BEND:
        return f"{fit:.2f} overall, {end:.2f} at the longest lengths"
    return f"{fit:.2f}"


def _curve(records, key, scale, name, color, dash, axis) -> list:
    ok = [r for r in records if r["status"] == "ok" and r.get(key)]
    slope = fitted_slope(records, key)
    end = end_slope(records, key)
    label = f"{name} (slope {slope:.2f})" if slope is not None else name
    if slope is not None and end is not None and abs(end - slope) >= BEND:
        label = f"{name} (slope {slope:.2f}, {end:.2f} at the end)"
    traces = [
        dict(
            type="scatter",
            mode="lines+markers",
            x=[r["seq_len"] for r in ok],
            y=[r[key] * scale for r in ok],
            name=label,
            legendgroup=name,
            showlegend=axis == "",
            xaxis=f"x{axis}",
            yaxis=f"y{axis}",
            line=dict(color=color, width=4, dash=dash),
            marker=dict(size=9),
            customdata=[r["backend"] for r in ok],
            hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}}<br>%{{customdata}}<extra></extra>",
        )
    ]
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        ys = [failure_y(ok, key, scale, slope, r["seq_len"]) for r in bad]
        status = [r["status"].upper() for r in bad]
        if ok:  # a dotted continuation from the curve's last point to its failures
            last = max(ok, key=lambda r: r["seq_len"])
            pts = sorted([(last["seq_len"], last[key] * scale)] + list(zip([r["seq_len"] for r in bad], ys)))
            traces.append(
                dict(
                    type="scatter",
                    mode="lines",
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                    line=dict(color=color, width=2, dash="dot"),
                )
            )
        traces.append(
            dict(
                type="scatter",
                mode="markers+text",
                x=[r["seq_len"] for r in bad],
                y=ys,
                text=status,
                textposition="top center",
                textfont=dict(color=color, size=14),
                name=f"{name}: {' / '.join(sorted(set(status)))}",
                legendgroup=name,
                showlegend=False,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                marker=dict(symbol="x", size=15, color=color, line=dict(color="#c62828", width=2)),
                customdata=[[st, r.get("reason") or ""] for st, r in zip(status, bad)],
                hovertemplate=f"{name}<br>L=%{{x}}: %{{customdata[0]}}<br>%{{customdata[1]}}<extra></extra>",
            )
        )
    return traces


def _attention_curve(records, name, color, axis) -> list:
    """The attention's own time (``attn_ms``) of the ``ok`` lengths: thin, dotted, the curve's colour."""
    ok = [r for r in records if r["status"] == "ok" and r.get("attn_ms")]
    if not ok:
        return []
    slope = fitted_slope(records, "attn_ms")
    label = f"{name}: attention alone" + (f" (slope {slope:.2f})" if slope is not None else "")
    share = [f"{100 * r['attn_ms'] / r['ms']:.0f}% of the forward" for r in ok]
    return [
        dict(
            type="scatter",
            mode="lines+markers",
            x=[r["seq_len"] for r in ok],
            y=[r["attn_ms"] for r in ok],
            name=label,
            legendgroup=f"{name} attention",
            showlegend=axis == "",
            xaxis=f"x{axis}",
            yaxis=f"y{axis}",
            line=dict(color=color, width=2, dash="dot"),
            marker=dict(size=6, symbol="diamond"),
            customdata=share,
            hovertemplate=f"{name}, attention alone<br>L=%{{x}}: %{{y:.3g}} ms (%{{customdata}})<extra></extra>",
        )
    ]


GUIDE_SPAN = 8  # the guides span the curve's last three doublings (L_max / 8 .. L_max)


def guide_points(records, key, scale) -> list:
    """``[(L, value)]`` of the ``ok`` points a guide starts on and spans: the longest length and those within
    ``GUIDE_SPAN`` of it ([] with fewer than two)."""
    ok = sorted((r["seq_len"], r[key] * scale) for r in records if r["status"] == "ok" and r.get(key))
    if len(ok) < 2:
        return []
    span = [p for p in ok if p[0] * GUIDE_SPAN >= ok[-1][0]]
    return span if len(span) >= 2 else ok[-2:]


def _guides(records, key, scale, axis) -> list:
    pts = guide_points(records, key, scale)
    if not pts:
        return []
    (l0, v0), xs = pts[0], [p[0] for p in pts]
    out = []
    for power, label, dash in ((1, "O(L)", "dash"), (2, "O(L²)", "dashdot")):
        out.append(
            dict(
                type="scatter",
                mode="lines+text",
                x=xs,
                y=[v0 * (x / l0) ** power for x in xs],
                text=[""] * (len(xs) - 1) + ["L²" if power == 2 else "L"],
                textposition="top left",
                textfont=dict(color="#7b8794", size=13),
                name=label,
                legendgroup=label,
                showlegend=axis == "",
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                line=dict(color="#9aa5b1", width=1.5, dash=dash),
                hovertemplate=f"{label}: slope {power} through L={l0}<extra></extra>",
            )
        )
    return out


def sweep_figure(current: list, baseline: list | None, attention: str, baseline_name: str = "full") -> go.Figure:
    """Log-log time and measured peak memory against L, current config vs its baseline
    (``full`` attention, or standard layers for a reversible stack)."""
    (xd0, yd0), (xd1, yd1) = subplot_domains(1, 2, hgap=0.1)
    data = []
    for key, scale, axis in (("ms", 1.0, ""), ("peak_bytes", 1 / 2**20, "2")):
        anchor = current if guide_points(current, key, scale) else (baseline or [])
        data += _guides(anchor, key, scale, axis)
        data += _curve(current, key, scale, attention, "#1f77b4", "solid", axis)
        if baseline:
            data += _curve(baseline, key, scale, f"{baseline_name} (baseline)", "#ff7f0e", "dash", axis)
        if key == "ms":
            data += _attention_curve(current, attention, "#1f77b4", axis)
            data += _attention_curve(baseline or [], f"{baseline_name} (baseline)", "#ff7f0e", axis)
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
        note = (
            f"; no {baseline_name} curve: this config is its own baseline"
            if attention == baseline_name
            else f"; no {baseline_name} baseline for this config"
        )
    elif same_curve(current, baseline):
        note = f"; the two curves coincide: {attention} and {baseline_name} measured within 5% at every length"
    if any(r["status"] != "ok" for r in current + (baseline or [])):
        note += "; × on a curve: that length of that attention failed or was stopped (hover: why)"
    if any(r.get("attn_ms") for r in current + (baseline or [])):
        note += "; dotted: the attention alone inside the same forwards"
    lay = base_layout(
        title + f"<br><sup>{ran}; median of timed runs after warm-up; memory {method}{note}</sup>",
        460,
        xaxis=dict(domain=xd0, type="log", title=dict(text="sequence length L (tokens)"), **ticks),
        yaxis=dict(domain=yd0, type="log", title=dict(text="time per batch (ms)")),
        xaxis2=dict(domain=xd1, anchor="y2", type="log", title=dict(text="sequence length L (tokens)"), **ticks),
        yaxis2=dict(domain=yd1, anchor="x2", type="log", title=dict(text="peak memory (MiB)")),
    )
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data, rows=2))


def kv_cache_figure(kv: dict) -> go.Figure:
    """KV-cache bytes for decoding against L: the current model next to MHA, GQA, MQA and MLA; with recurrent
    layers, their fixed state too, and a pure recurrent stack of the same depth (flat in L)."""
    mib = 1 / 2**20
    own = kv.get("own_rule", False)  # a mechanism with its own cache (MLA's latent): values per token and layer
    current = (
        f"current ({kv['attention']}: {kv['values_per_token_layer']} values per token and layer)"
        if own
        else f"current ({kv['kv_heads']} K/V heads)"
    )
    lines = [
        ("mha", f"MHA ({kv['n_heads']} K/V heads)", "#7f7f7f", "dash"),
        ("mqa", "MQA (1 K/V head)", "#2ca02c", "dot"),
    ]
    if "gqa" in kv and kv["gqa_heads"] not in (1, kv["n_heads"]):
        lines.append(("gqa", f"GQA ({kv['gqa_heads']} K/V heads)", "#ff7f0e", "dashdot"))
    if "mla" in kv:
        lines.append(("mla", f"MLA latent ({kv['mla_values']} values per token and layer)", "#9467bd", "longdash"))
    lines.append(("current", current, "#1f77b4", "solid"))
    data = [
        dict(
            type="scatter",
            mode="lines+markers",
            x=kv["seq_len"],
            y=[b * mib for b in kv[key]],
            name=name,
            line=dict(color=color, width=4 if key == "current" else 2.5, dash=dash),
            hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}} MiB<extra></extra>",
        )
        for key, name, color, dash in lines
    ]
    states = kv.get("state_values") or {}
    for n, (key, values) in enumerate((kv.get("recurrent") or {}).items()):  # a pure recurrent stack: flat
        name = f"all {kv['layers']} layers {key} ({states[key]} state values per layer, any L)"
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=kv["seq_len"],
                y=[b * mib for b in values],
                name=name,
                line=dict(color=("#17becf", "#bcbd22")[n % 2], width=3, dash="dot"),
                hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}} MiB<extra></extra>",
            )
        )
    kinds = kv.get("by_kind") or {}
    if len(kinds) > 1:  # a layer schedule: what each kind of layer holds (a window stops growing at its span)
        palette = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
        for n, (kind, values) in enumerate(kinds.items()):
            name = f"current: its {kind} layers"
            data.append(
                dict(
                    type="scatter",
                    mode="lines",
                    x=kv["seq_len"],
                    y=[b * mib for b in values],
                    name=name,
                    line=dict(color=palette[n % len(palette)], width=2, dash="dashdot"),
                    hovertemplate=f"{name}<br>L=%{{x}}: %{{y:.3g}} MiB<extra></extra>",
                )
            )
    same = [name for key, name, _, _ in lines[:2] if kv[key] == kv["current"]]
    note = f"; current = {same[0].split(' (')[0]}: the curves coincide" if same else ""
    state_note = (
        "; recurrent layers (" + ", ".join(states) + ") keep a fixed state instead, the same at every L"
        if states
        else ""
    )
    lay = base_layout(
        ("KV cache and recurrent state" if states else "KV cache")
        + " for decoding<br><sup>computed: 2 · layers · K/V heads · d_head · L values"
        + (f" ({kv['attention']}: layers · {kv['values_per_token_layer']} · L)" if own else "")
        + f", {8 * kv['bytes_per_value']}-bit{note}{state_note}</sup>",
        400,
        xaxis=dict(type="log", title=dict(text="context length L (tokens)")),
        yaxis=dict(type="log", title=dict(text="KV cache + state (MiB)" if states else "KV cache (MiB)")),
    )
    lay["margin"] = dict(l=80, r=30, t=100, b=60)
    return go.Figure(data=data, layout=legend_above(lay, data))
