"""Interpretability results -> figures: logit lens, direct logit attribution, patching, head circuits.

Inputs are the ``to_json()`` dicts of ``explorer.analysis.why.lens``, ``attribution``, ``patching`` and
``circuits`` (what the API answers), so the page, the export and the API draw the same numbers. Grids of
heads are layers (rows, layer 0 at the top, as the attention grid) x heads, with the FFN as a last
column where the analysis gives one. Signed quantities use a diverging scale centred on 0.

An encoder-decoder's grids (a ``cross`` grid in the dict) are decoder layers x (self-attention heads ``self h``,
then cross-attention heads ``cross h``, then the FFN); patching adds the encoder's layers as rows above them
(``encoder i``: its heads in the ``self`` columns, no cross-attention, its FFN).
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.figures.base import base_layout, token_axis

DIVERGING = "RdBu"  # red: pushes down / harms; blue: pushes up / restores
SEQUENTIAL = "Viridis"


def _head_grid(values: list, ffn: list | None, cross: list | None = None) -> tuple:
    """``(z, x labels)``: rows of head values (then an encoder-decoder's cross heads), the FFN value appended
    as a last column when given."""
    n_heads = len(values[0]) if values else 0
    z = [
        list(row) + (list(cross[i]) if cross is not None else []) + ([ffn[i]] if ffn is not None else [])
        for i, row in enumerate(values)
    ]
    heads = (
        [f"self {h}" for h in range(n_heads)] + [f"cross {h}" for h in range(n_heads)]
        if cross is not None
        else [f"head {h}" for h in range(n_heads)]
    )
    return z, heads + (["FFN"] if ffn is not None else [])


def _seq2seq_rows(grid: dict, z: list) -> tuple:
    """``(z, row labels)`` of an encoder-decoder's grid: the encoder's rows (when the dict has them) above the
    decoder's."""
    rows = [f"decoder {i}" for i in range(len(z))]
    enc = grid.get("encoder")
    if not enc:
        return z, rows
    n_heads = len(enc[0])
    enc_z = [list(row) + [None] * n_heads + [grid["encoder_ffn"][i]] for i, row in enumerate(enc)]
    return enc_z + z, [f"encoder {i}" for i in range(len(enc))] + rows


def _grid_figure(
    z: list,
    x: list,
    title: str,
    bar: str,
    hover: str,
    zmid: float | None = 0.0,
    text_fmt: str = "{:+.2f}",
    rows: list | None = None,
) -> go.Figure:
    rows = rows or [f"layer {i}" for i in range(len(z))]
    seq2seq = x and x[0].startswith("self")
    x_title = (
        "head: self-attention (its stack's), cross-attention (decoder), and the layer's FFN"
        if seq2seq
        else "head (and the layer's FFN)"
    )
    text = [["" if v is None else text_fmt.format(v) for v in row] for row in z]
    trace = go.Heatmap(
        z=z,
        x=x,
        y=rows,
        text=text,
        texttemplate="%{text}",
        colorscale=DIVERGING if zmid is not None else SEQUENTIAL,
        zmid=zmid,
        colorbar=dict(title=dict(text=bar, side="right")),
        hovertemplate=hover + "<extra></extra>",
    )
    return go.Figure(
        data=[trace],
        layout=base_layout(
            title,
            140 + 60 * len(z),
            xaxis=dict(title=dict(text=x_title), side="bottom"),
            yaxis=dict(title=dict(text="layer"), autorange="reversed"),
        ),
    )


LENS_SPAN = 48  # positions shown at first around a focus, so each cell's top token stays readable


def lens_figure(lens: dict, focus: int | None = None, span: int = LENS_SPAN) -> go.Figure:
    """Layers x positions: the probability of the target at each position after each layer, each cell
    labelled with that layer's top token; the title gives the loss per layer. With ``focus`` (a position)
    and more than ``span`` positions, the x axis first shows the ``span`` around it (pan or double-click
    for all)."""
    pos = lens["positions"]
    probs = lens["target_prob"]
    top = [[lens["top_tokens"][r][p][0] for p in pos] for r in range(len(lens["rows"]))]
    losses = ", ".join(f"{row} {v:.2f}" for row, v in zip(lens["rows"], lens["loss_per_layer"]))
    trace = go.Heatmap(
        z=probs,
        x=list(range(len(pos))),
        y=lens["rows"],
        text=top,
        texttemplate="%{text}",
        zmin=0,
        zmax=1,
        colorscale=SEQUENTIAL,
        colorbar=dict(title=dict(text="p(target)", side="right")),
        customdata=[[lens["targets"][i] for i in range(len(pos))] for _ in lens["rows"]],
        hovertemplate="%{y}, position %{x}: top %{text}, target %{customdata} p=%{z:.3f}<extra></extra>",
    )
    tokens = [lens["tokens"][p] for p in pos]
    xaxis = token_axis(tokens, title=dict(text="position (the token read there)"))
    shown = ""
    if focus is not None and len(pos) > span:
        lo = max(0, min(int(focus) - span // 2, len(pos) - span))
        xaxis["range"] = [lo - 0.5, lo + span - 0.5]
        shown = f"; positions {lo}-{lo + span - 1} of {len(pos)} shown (drag or double-click for all)"
    return go.Figure(
        data=[trace],
        layout=base_layout(
            f"Logit lens: p(next token) after each layer (cells: top prediction)<br><sup>loss per layer, "
            f"{lens['unit']}: {losses}{shown}</sup>",
            160 + 48 * len(lens["rows"]),
            xaxis=xaxis,
            yaxis=dict(title=dict(text="residual stream after"), autorange="reversed"),
        ),
    )


def attribution_figure(attr: dict) -> go.Figure:
    """Layers x heads (+ FFN): each head's direct contribution to the target's logit (or logit difference)."""
    z, x = _head_grid(attr["heads"], attr["ffn"], attr.get("cross"))
    rows = _seq2seq_rows(attr, z)[1] if attr.get("cross") is not None else None
    what = (
        attr["measure"]
        + f" of {attr['token']!r}"
        + (f" − {attr['alternative']!r}" if attr["alternative"] is not None else "")
    )
    rest = (
        f"embedding {attr['embedding']:+.2f}, position {attr['position_embedding']:+.2f}, biases "
        f"{attr['biases']:+.2f}; total {attr['total']:.2f} = logit {attr['logit']:.2f}"
    )
    return _grid_figure(
        z,
        x,
        f"Direct logit attribution at position {attr['position']}: {what}<br><sup>final "
        f"norm's scale frozen at its forward value; {rest}</sup>",
        "logit contribution",
        "%{y}, %{x}: %{z:+.3f}",
        rows=rows,
    )


def patching_figure(patch: dict) -> go.Figure:
    """Layers x heads (+ FFN): the fraction of the clean-vs-corrupted logit difference restored by patching."""
    z, x = _head_grid(patch["heads"], patch["ffn"], patch.get("cross"))
    rows = None
    if patch.get("cross") is not None:
        z, rows = _seq2seq_rows(patch, z)
    ld = patch["logit_difference"]
    return _grid_figure(
        z,
        x,
        f"Activation patching: fraction of the logit difference restored<br><sup>clean "
        f"{ld['clean']:.2f}, corrupted {ld['corrupted']:.2f}; everything patched "
        f"{patch['checks']['everything_patched']:.2f}, nothing "
        f"{patch['checks']['nothing_patched']:.2f}</sup>",
        "fraction restored",
        "%{y}, %{x}: %{z:+.3f} restored",
        rows=rows,
    )


def copying_figure(circuits: dict) -> go.Figure:
    """Layers x heads: the OV circuit's copying score (eigenvalue ratio, -1 to 1)."""
    fig = _grid_figure(
        circuits["copying_eigen"],
        [f"head {h}" for h in range(len(circuits["copying_eigen"][0]))],
        "OV copying score: Σλ / Σ|λ| of each head's OV circuit<br><sup>1: writes the token it "
        "reads; −1: suppresses it</sup>",
        "copying score",
        "%{y}, %{x}: %{z:+.3f}",
    )
    fig.data[0].update(zmin=-1, zmax=1)
    fig.layout.xaxis.title.text = "head"
    return fig


def composition_figure(comp: dict) -> go.Figure:
    """Earlier heads x later heads: the composition score, the random baseline in the title."""
    s = comp["scores"]
    trace = go.Heatmap(
        z=s,
        x=[f"{comp['later_layer']}.{h}" for h in range(len(s[0]))],
        y=[f"{comp['earlier_layer']}.{h}" for h in range(len(s))],
        colorscale=SEQUENTIAL,
        zmin=0,
        text=[[f"{v:.2f}" for v in row] for row in s],
        texttemplate="%{text}",
        colorbar=dict(title=dict(text="score", side="right")),
        hovertemplate="%{y} -> %{x}: %{z:.3f}<extra></extra>",
    )
    return go.Figure(
        data=[trace],
        layout=base_layout(
            f"{comp['kind']}-composition, layer {comp['earlier_layer']} -> layer {comp['later_layer']}<br><sup>"
            f"Frobenius-norm ratio; random matrices: {comp['random_baseline']:.3f}</sup>",
            140 + 60 * len(s),
            xaxis=dict(title=dict(text=f"reading head (layer {comp['later_layer']})")),
            yaxis=dict(title=dict(text=f"writing head (layer {comp['earlier_layer']})"), autorange="reversed"),
        ),
    )
