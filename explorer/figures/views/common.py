"""Styling the variant-view figures share (no torch): categorical colours for groups and experts,
and bold subplot titles placed on the paper above a panel."""

from __future__ import annotations

GROUP_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
]


def discrete_colorscale(n: int) -> list:
    """A stepped colorscale of ``n`` categorical colours for integer z in ``[0, n - 1]``."""
    if n <= 1:
        return [[0, GROUP_COLORS[0]], [1, GROUP_COLORS[0]]]
    out = []
    for g in range(n):
        c = GROUP_COLORS[g % len(GROUP_COLORS)]
        out += [[g / n, c], [(g + 1) / n, c]]
    return out


def panel_title(text: str, xd, y: float = 1.0) -> dict:
    """A bold title centred over the x domain ``xd``, its bottom at paper height ``y``."""
    return dict(
        text=f"<b>{text}</b>",
        x=(xd[0] + xd[1]) / 2,
        y=y,
        xref="paper",
        yref="paper",
        showarrow=False,
        xanchor="center",
        yanchor="bottom",
        font=dict(size=15),
    )
