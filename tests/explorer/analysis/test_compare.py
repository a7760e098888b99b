"""A/B comparison helpers: the diff against the configs' own dicts, the figure's traces, the link."""

from urllib.parse import parse_qsl

from explorer.analysis import compare
from explorer.app.controls.share import compare_query, from_query
from explorer.app.tabs import link_params
from explorer.figures.compare import gradient_compare_figure
from explorer.figures.readings import diff_markdown
from models import ModelConfig

A = ModelConfig(n_layers=2, d_model=32, n_heads=2)


def test_diff_lists_exactly_the_changed_fields():
    b = A.replace(attention="sliding_window", window=4)
    da, db = A.to_dict(), b.to_dict()
    expected = [(k, da[k], db[k]) for k in da if da[k] != db[k]]
    assert compare.config_diff(A, b) == expected and {"attention", "window"} <= {k for k, _, _ in expected}
    assert compare.config_diff(A, A) == []
    assert "same configuration" in diff_markdown(compare.config_diff(A, A))
    assert "2 fields differ" in diff_markdown(compare.config_diff(A, b))
    assert "1 field differs" in diff_markdown(compare.config_diff(A, A.replace(attention="strided")))
    md = diff_markdown(
        compare.config_diff(A, b),
        {"parameters": 10, "flops_per_token": 5.0},
        {"parameters": 12, "flops_per_token": 7.0},
    )
    assert "| `attention` | `full` | `sliding_window` |" in md and "| parameters | 10 | 12 |" in md


def test_gradient_figure_overlays_a_and_b_and_says_when_they_coincide():
    g = {"attn_out": [1.0, 0.5], "ffn_out": [2.0, 0.0], "residual": [3.0, 1.0], "norm_placement": "pre"}
    h = {**g, "attn_out": [4.0, 0.25]}
    fig = gradient_compare_figure(g, h)
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend == ["A (pre)", "B (pre)"] and len(fig.data) == 6  # 3 panels x (A, B); legend once per curve
    assert list(fig.data[1].y) == [4.0, 0.25]
    assert "coincide" not in fig.layout.title.text
    assert "coincide" in gradient_compare_figure(g, dict(g)).layout.title.text


def test_share_query_restores_both():
    b = A.replace(attention="strided")
    q = dict(parse_qsl(compare_query(A, b, "hello")))
    assert q["tab"] == "compare"
    cfg_b, text, _, notice = from_query(q, link_params())  # the main link leaves pin to Compare, tab to the page
    assert notice is None and cfg_b == b and text == "hello"
    cfg_a, _, _, notice = from_query(dict(parse_qsl(q["pin"])))
    assert notice is None and cfg_a == A
