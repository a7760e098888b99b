"""Plotly never wraps a title, it clips it: long small print is broken into lines of at most NOTE_CHARS
characters (the LSH approximation view's notes ran to 190)."""

from __future__ import annotations

import re
import types

import numpy as np

from explorer.figures.base import NOTE_CHARS, wrap_notes
from explorer.figures.views.approximation import approximation_figure


def _plain_lines(title: str) -> list:
    return [re.sub(r"</?sup>", "", line) for line in title.split("<br>")]


def test_a_clause_longer_than_a_line_breaks_between_words():
    words = " ".join(f"word{i}" for i in range(60))  # one clause, no "; "
    out = wrap_notes(f"Head<br><sup>{words}</sup>")
    lines = _plain_lines(out)
    assert lines[0] == "Head" and all(len(line) <= NOTE_CHARS for line in lines)
    assert " ".join(lines[1:]) == words  # nothing lost, nothing reordered


def test_lsh_approximation_title_fits():
    L = 16
    eff = np.zeros((1, 1, L, L))
    eff[..., np.arange(L), np.arange(L)] = 1.0  # every query alone in its bucket
    exact = np.zeros((1, 1, L, L))
    exact[..., :, 0] = 1.0
    err = np.abs(eff - exact)
    view = types.SimpleNamespace(
        effective=eff,
        exact=exact,
        error=err,
        causal=True,
        mechanism="lsh",
        reference="softmax over every allowed key",
        max_error=err.max((-1, -2)),
        mean_error=err.mean((-1, -2)),
    )
    fig = approximation_figure(view, [str(i) for i in range(L)])
    lines = _plain_lines(fig.layout.title.text)
    assert len(lines) >= 5  # headline, the errors, the two explanations of a large error
    assert all(len(line) <= NOTE_CHARS for line in lines)
    assert fig.layout.margin.t >= 120 + 20 * (len(lines) - 2)  # the band grows with the lines
