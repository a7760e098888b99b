"""Circuit cards: every shipped model has a stored card that passes the loader's checks; a fresh computation
of a small bundle's card equals the stored one; an edited card, or one of other weights, is refused."""

import json
import shutil

import pytest
import torch

from explorer.analysis.why import cards
from explorer.analysis.why.cards.stored import UNTIMED, origin_named
from models import ConfigError


def test_every_shipped_model_has_a_card_that_matches_its_weights():
    got = cards.load_cards()
    assert [c["model"] for c in got] == cards.shipped()
    assert "default" in cards.shipped() and "byte-llama" in cards.shipped()
    skipped = {c["model"]: c["skipped"] for c in got if c["skipped"]}
    assert not skipped
    seq = next(c for c in got if c["model"] == "encoder_decoder")
    assert seq["task"] == "reverse" and all(h["label"] == "mirror" for row in seq["heads"] for h in row)
    for c in got:  # a first-layer head has nothing to compose with: never an induction head
        assert c["skipped"] or all(h["label"] != "induction" for h in c["heads"][0]), c["model"]


def close(a, b, path=""):
    """``a == b`` with numbers to 2e-3 (a fresh card may run with another thread count)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for k in a:
            close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=2e-3), path
    else:
        assert a == b, path


def test_the_stored_card_equals_a_fresh_computation():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the small per-head forwards are slower with two threads on a busy machine
    try:
        fresh = cards.fresh_card(origin_named("default"))
    finally:
        torch.set_num_threads(threads)
    stored = cards.load_card("default")
    close({k: v for k, v in fresh.items() if k not in UNTIMED}, {k: v for k, v in stored.items() if k not in UNTIMED})
    assert [h["label"] for h in stored["heads"][1]] == ["induction"] * 4


def copied(tmp_path, edit):
    card = json.loads(cards.card_path(origin_named("default")).read_text())
    edit(card)
    (tmp_path / "default.card.json").write_text(json.dumps(card))
    return tmp_path


def test_the_loader_refuses_an_edited_card_and_one_of_other_weights(tmp_path):
    shutil.copy(cards.card_path(origin_named("default")), tmp_path / "default.card.json")
    assert cards.load_card("default", directory=tmp_path)["model"] == "default"  # an exact copy passes

    def tamper(card):
        card["heads"][0][0]["label"] = "induction"

    with pytest.raises(ConfigError) as e:
        cards.load_card("default", directory=copied(tmp_path, tamper))
    assert e.value.field == "card" and "edited" in str(e.value)

    def retrained(card):
        card["weights_sha256"] = "0" * 64
        card["digest"] = cards.content_digest(card)  # a consistent card, of other weights

    with pytest.raises(ConfigError) as e:
        cards.load_card("default", directory=copied(tmp_path, retrained))
    assert "retrained" in str(e.value) and "--write" in str(e.value)

    (tmp_path / "default.card.json").unlink()
    with pytest.raises(ConfigError):
        cards.load_card("default", directory=tmp_path)


def test_the_encoder_decoder_card_equals_a_fresh_computation_and_its_parts_are_measured():
    from explorer.analysis.weights.bundled import load
    from explorer.analysis.why.cards.seq2seq import mirror_scores
    from explorer.analysis.why.seq2seq_ids import TRAINED_SOURCE, reversal_probes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = cards.fresh_card(origin_named("encoder_decoder"))
    finally:
        torch.set_num_threads(threads)
    stored = cards.load_card("encoder_decoder")
    close({k: v for k, v in fresh.items() if k not in UNTIMED}, {k: v for k, v in stored.items() if k not in UNTIMED})
    # the mirror score against a plain reading of the model's cross-attention maps
    model = load("encoder_decoder").model()
    p = reversal_probes(4, TRAINED_SOURCE, seed=5)
    with torch.no_grad():
        maps = model(p.source, p.target, return_attention=True).cross_attentions
    n = TRAINED_SOURCE
    plain = torch.tensor(
        [
            [sum(float(maps[l][b, h, t, n - 1 - t]) for b in range(4) for t in range(n)) / (4 * n) for h in range(4)]
            for l in range(2)
        ]
    )
    torch.testing.assert_close(mirror_scores(model, p), plain, atol=1e-5, rtol=1e-5)
    # the lens's last row is the model's own loss; the group ablation costs more than any head alone
    assert stored["lens"]["reversal"][-1] == pytest.approx(stored["baseline"], abs=1e-3)
    alone = max(h["effect"] for row in stored["heads"] for h in row)
    assert stored["groups"]["mirror"]["effect"] > 10 * max(alone, 0.05)
    curve = stored["length_curve"]
    assert curve["fails_at"] > curve["trained_length"] and curve["accuracy"][curve["lengths"].index(23)] > 0.95
    table = cards.cards_table_md([stored])
    assert "mirror cross-attention heads" in table and "reversal fails at" in table
