"""The Why tab's handlers against the analyses' own outputs on the default bundle and the landing text: the
figures draw the numbers ``logit_lens``, ``attribute``, ``patch_heads``, ``head_circuits`` and ``composition``
give for the same model and tokens; a model a view refuses gets a warning naming the field while the other views draw;
link fields are ignored when malformed (the answers' own caps: ``tests/explorer/analysis/why/test_answers.py``)."""

import csv
import html
import io
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.analysis import source
from explorer.analysis.why import answers as wv
from explorer.analysis.why import head_labels as wh
from explorer.analysis.why.attribution import attribute
from explorer.analysis.why.circuits import composition, head_circuits
from explorer.analysis.why.lens import logit_lens
from explorer.analysis.why.patching import default_pair, patch_heads
from explorer.app.tabs import why
from explorer.runtime.configs import app_config
from explorer.runtime.text import DEFAULT_TEXT
from models import ConfigError


@pytest.fixture(scope="module")
def src():
    return source.resolve("bundled", app_config(""))


@pytest.fixture(scope="module")
def drawn(src):
    return why.draw(
        {},
        weights=src,
        text=DEFAULT_TEXT,
        why_pos=-1,
        why_alt="",
        why_heads=["1.0", "1.1", "1.2", "1.3"],
        why_mode="zero",
        why_bad="",
    )


def test_the_figures_draw_the_analyses_numbers(src, drawn):
    model = src.weights.eval_model(src.config).eval()
    ids = torch.tensor([list(DEFAULT_TEXT.encode())])
    lens = logit_lens(model, ids)
    np.testing.assert_allclose(np.array(drawn["why_lens"].data[0].z, dtype=float), lens.target_prob.numpy(), atol=1e-5)
    second = DEFAULT_TEXT.index("Xq7Rv9Lm2", DEFAULT_TEXT.index("Xq7Rv9Lm2") + 1)
    attr = attribute(model, ids, second)  # default position: the second copy's first byte, predicting 'q'
    lo, hi = drawn["why_lens"].layout.xaxis.range  # the lens opens on the positions around it
    assert lo < second < hi and hi - lo == 48
    z = np.array(drawn["why_attr"].data[0].z, dtype=float)
    np.testing.assert_allclose(z[:, :-1], attr.heads.numpy(), atol=1e-5)
    np.testing.assert_allclose(z[:, -1], attr.ffn.numpy(), atol=1e-5)
    bad = torch.tensor([list(default_pair(DEFAULT_TEXT)[1].encode())])
    patch = patch_heads(model, ids, bad)
    np.testing.assert_allclose(
        np.array(drawn["why_patch"].data[0].z, dtype=float)[:, :-1], patch.heads.numpy(), atol=1e-5
    )
    assert "ablation of 1.0, 1.1, 1.2, 1.3" in drawn["why_abl_md"] and "second copy" in drawn["why_abl_md"]
    circ = head_circuits(model)
    np.testing.assert_allclose(np.array(drawn["why_copy"].data[0].z, dtype=float), circ.eigen.numpy(), atol=1e-6)
    comp = composition(model, 0, 1, "K")
    np.testing.assert_allclose(np.array(drawn["why_comp"].data[0].z, dtype=float), comp.scores.numpy(), atol=1e-6)
    assert "⚠️" not in drawn["why_md"] and drawn["why_qs"] == f"why_pos={second}&tab=why"


def test_the_csv_holds_every_grid(drawn):
    rows = list(csv.DictReader(io.StringIO(Path(drawn["why_csv"]).read_text())))
    views = {r["view"] for r in rows}
    assert {
        "lens_p_target",
        "lens_rank",
        "lens_loss",
        "attribution",
        "patching",
        "ablation_zero",
        "copying_eigen",
        "K_composition",
    } <= views
    attr = [float(r["value"]) for r in rows if r["view"] == "attribution" and r["column"] != "FFN"]
    np.testing.assert_allclose(attr, np.array(drawn["why_attr"].data[0].z, dtype=float)[:, :-1].ravel(), atol=1e-6)


def test_a_post_ln_model_warns_on_attribution_and_draws_the_rest():
    post = source.resolve("initial", app_config('{"norm_placement": "post"}'))
    out = why.draw(
        {},
        weights=post,
        text="abcabcabc",
        why_pos=-1,
        why_alt="",
        why_heads=["0.0"],
        why_mode="zero",
        why_bad="abdabcabd",
    )
    md = html.unescape(out["why_md"]).replace("\\", "")  # the warning is escaped Markdown
    assert "**Attribution:**" in md and "norm_placement" in md and "['pre', 'none']" in md
    assert out["why_attr"] is None and out["why_lens"] is not None and out["why_patch"] is not None


def test_the_encoder_decoder_bundle_is_read_on_its_decoder():
    from explorer.analysis.weights.bundled import load

    cfg = load("encoder_decoder").config
    s2s = source.resolve("bundled", cfg)
    text = "abcdefghij0123456789ABC=>CBA9876543210jihgfedcba"  # a reversal of the trained length
    out = why.draw({}, weights=s2s, text=text, why_heads=["0.0"])  # a stale label: the defaults (every cross head)
    assert out["why_lens"] is not None and out["why_attr"] is not None and out["why_patch"] is not None
    assert "mirror" in out["why_roles"] and "cross 0.0" in out["why_abl_md"]
    md = html.unescape(out["why_md"]).replace("\\", "")
    assert "Circuits:** architecture" in md and "cross-attention heads read the encoder's stream" in md
    assert "Ablation" not in md and "Patching" not in md
    lens = wv.lens(s2s, text)
    assert lens["tokens"][0] == "|" and "".join(lens["targets"]) == text.split("=>")[1]
    assert lens["loss_per_layer"][-1] < 0.01 < lens["loss_per_layer"][0]
    attr = wv.attribution(s2s, text, 3, "")
    assert abs(attr["total"] - attr["logit"]) < 1e-3 and len(attr["cross"]) == 2
    assert [t.name for t in out["why_attr"].data] == [None] and list(out["why_attr"].data[0].x)[4] == "cross 0"
    patch = wv.patching(s2s, text, "")
    assert patch["checks"] == {"everything_patched": 1.0, "nothing_patched": 0.0}
    assert list(out["why_patch"].data[0].y)[:2] == ["encoder 0", "encoder 1"]
    with pytest.raises(ConfigError, match="same number of target tokens"):
        wv.patching(s2s, text, "abcdefghij0123456789ABC=>CBA")
    assert wh.parse_heads("cross 1.2, enc 0.3", cfg) == [("cross", 1, 2), ("encoder", 0, 3)]
    with pytest.raises(ConfigError, match="heads"):
        wh.parse_heads("1.2", cfg)
    assert wv.patch_forwards(cfg) == 2 * 4 * 3 + 2 + 2 + 4
    assert "cross head 3" in wv.csv_text(None, attr, patch)


def test_an_untrained_encoder_decoder_has_no_roles_but_the_other_views():
    s2s = source.resolve("initial", app_config('{"architecture": "encoder_decoder"}'))
    out = why.draw({}, weights=s2s, text="ab=>ba", why_heads=["cross 0.0"])
    assert "Head roles:** architecture" in out["why_md"] and out["why_lens"] is not None


def test_link_fields_fill_the_boxes_and_junk_is_ignored():
    req = types.SimpleNamespace(query_params={"why_pos": "12", "why_alt": "x", "why_bad": "abc"})
    assert why.from_link(req) == {"why_pos": 12, "why_alt": "x", "why_bad": "abc"}
    junk = why.from_link(types.SimpleNamespace(query_params={"why_pos": "1e9x", "why_alt": "y" * 99}))
    assert all(not isinstance(v, (int, str)) for v in junk.values())  # gr.skip() each


def test_the_head_roles_are_the_stored_cards_for_a_bundle_as_trained(drawn):
    """The roles table is the default bundle's circuit card (independent of the text): its four layer-1 heads
    induction, layer 0 head 0 previous-token, each with the card's ablation cost."""
    from explorer.analysis.why.cards import load_card

    card = load_card("default")
    roles = html.unescape(drawn["why_roles"]).replace("\\", "")
    assert "circuit card stored beside the model" in roles
    rows = [line for line in roles.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 1 and rows[0].count("induction") == 4
    for h in card["heads"][1]:
        assert f"{h['label']} {h['score']:.2f} ({h['effect']:+.2f})" in rows[0]
    assert "previous-token" in next(line for line in roles.splitlines() if line.startswith("| 0 |"))


def test_the_circuit_cards_are_on_the_tab_and_in_its_export():
    from explorer.analysis.why.cards import load_cards

    fig, table = why.cards_section()
    names = {t.name for t in fig.data}
    assert {c["model"] for c in load_cards() if not c.get("skipped")} <= names  # every model not skipped, drawn
    assert table.startswith("| model |")
    scene = types.SimpleNamespace(extra={"why_drawn": True})
    assert [title for title, _ in why.export(scene)] == ["Circuit cards across the shipped models"]
    assert why.export(types.SimpleNamespace(extra={})) == []  # not opened in this session: not in the zip
