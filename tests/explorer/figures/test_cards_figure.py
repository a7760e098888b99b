"""The circuit cards' figure and table, drawn from the stored cards: a title, every axis titled with its unit,
a copy curve and a lens curve per model card, role bars that count every head; the table has a row per card
and says why a card was skipped."""

import json

from explorer.analysis.weights import bundled
from explorer.analysis.why.cards import cards_table_md
from explorer.figures.cards import cards_figure


def stored():
    return [json.loads((bundled.BUNDLE_DIR / f"{n}.card.json").read_text()) for n in bundled.names()]


def test_the_figure_has_a_title_axis_titles_and_a_trace_per_model():
    cards = stored()
    done = [c for c in cards if not c["skipped"]]
    fig = cards_figure(cards)
    assert fig.layout.title.text.startswith("Circuit cards")
    for axis in ("xaxis", "yaxis", "xaxis2", "yaxis2", "xaxis3"):
        assert fig.layout[axis].title.text, axis
    assert "nats/byte" in fig.layout.yaxis.title.text and "tokens" in fig.layout.xaxis.title.text
    lines = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x"]
    assert [t.name for t in lines] == [c["model"] for c in done if c.get("task") != "reverse"]  # no copy curve
    assert list(lines[0].y) == done[0]["copy_curve"]["second_copy"]
    lens = [t for t in fig.data if t.type == "scatter" and t.xaxis == "x2"]
    assert [t.name for t in lens] == [c["model"] for c in done]
    seq = next(t for t in lens if t.name == "encoder_decoder")
    assert list(seq.y) == next(c for c in done if c["model"] == "encoder_decoder")["lens"]["reversal"]
    assert seq.line.dash == "dash" and seq.showlegend  # its only trace carries its legend entry
    bars = [t for t in fig.data if t.type == "bar"]
    per_model = [sum(t.x[i] for t in bars) for i in range(len(done))]
    assert per_model == [c["architecture"]["n_layers"] * c["architecture"]["n_heads"] for c in done]


def test_the_table_has_a_row_per_card_and_says_why_one_was_skipped():
    cards = stored()
    md = cards_table_md(cards)
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith(("| model", "| ---"))]
    seq = [c for c in cards if c.get("task") == "reverse"]
    assert len(rows) == len(cards) + len(seq) == len(cards) + 1  # the encoder-decoder: a row in each table
    assert any("see the encoder-decoder table" in r and r.startswith("| encoder_decoder") for r in rows)
    seq_row = [r for r in rows if r.startswith("| encoder_decoder") and "mirror" not in r and "table below" not in r]
    assert len(seq_row) == 1 and "0.0 0.1 0.2 0.3 1.0 1.1 1.2 1.3" in seq_row[0]
    assert "1.0 1.1 1.2 1.3" in next(r for r in rows if r.startswith("| default "))
    skipped = [{**cards[0], "skipped": "no per-head intervention points: layer 'gated'"}]
    assert "skipped: no per-head" in cards_table_md(skipped)
    assert cards_figure(skipped).layout.title.text == "Circuit cards"
