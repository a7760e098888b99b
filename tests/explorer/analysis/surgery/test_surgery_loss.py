"""One held-out number per model, and every loss saying its length.

The held-out loss of a model as trained is the same in the weights line (the bundle's source), the
Surgery headline (``loss_change``) and the stored Surgery table's first column, and it is what a plain
PyTorch loop over the held-out bytes in windows of the trained length gives. byte-llama's headline scores
the held-out passage at its trained length, not read whole past it. Bundles and checkpoints answer the
same verbs with the same record (``LossChange`` of ``Loss``)."""

import math

import pytest
import torch
import torch.nn.functional as F

from explorer.analysis import surgery
from explorer.analysis.surgery.__main__ import main, markdown
from explorer.analysis.weights import bundled, checkpoints
from explorer.figures.readings import loss_line
from models import ConfigError

TEXT = "def area(r):\n    return 3.14159 * r * r  # the area of a circle of radius r\n"


def _plain(model, ids, window) -> float:
    """Mean next-token loss of ``ids`` in windows of ``window`` (the last partial window left out), by hand."""
    windows = [ids[i : i + window] for i in range(0, len(ids) // window * window, window)]
    total = count = 0
    with torch.no_grad():
        for w in windows:
            logits = model(torch.tensor([w])).logits[0].float()
            total += F.cross_entropy(logits[:-1], torch.tensor(w[1:]), reduction="sum").item()
            count += len(w) - 1
    return total / count


def test_the_default_bundle_has_one_held_out_number():
    origin = surgery.bundle_origin("default")
    b = bundled.load("default")
    by_hand = _plain(b.model(), list(surgery.heldout_text()), origin.trained_length)
    stored = surgery.as_trained(surgery.stored_table(origin))
    assert stored == pytest.approx(by_hand, abs=2e-3)
    assert f"held-out loss {stored:.3f} nats/byte" in b.source()  # the weights line
    change = surgery.loss_change(b.config.replace(attention="longformer"), TEXT)
    before, after = change.heldout
    assert before.nats == pytest.approx(stored, abs=1e-4)  # the headline
    assert (before.tokens, before.length, before.trained_length, before.past) == (4096, 128, 128, False)
    assert after.nats == pytest.approx(
        dict((r["label"], r["loss"]["128"]) for r in surgery.stored_table(origin)["rows"])["longformer (64)"], abs=1e-4
    )
    line = loss_line(change)
    assert f"**{stored:.3f} →" in line and "4096 tokens in windows of 128, the trained length" in line


def test_a_loss_says_its_length_against_the_trained_length():
    within = surgery.Loss(1.0, 89, 89, 128, "nats/byte")
    past = surgery.Loss(2.0, 512, 512, 128, "nats/token")
    windows = surgery.Loss(1.5, 4096, 128, 128, "nats/byte")
    assert not within.past and "89 tokens read whole, within the trained length (128)" == within.reading()
    assert past.past and past.reading() == "512 tokens read whole, 4.0x past the trained length (128)"
    assert windows.reading() == "4096 tokens in windows of 128, the trained length"
    assert past.perplexity == pytest.approx(math.exp(2.0))


def test_the_text_is_read_whole_and_its_loss_is_plain_pytorch():
    origin = surgery.bundle_origin("default")
    cfg = origin.config.replace(attention="longformer")
    change = surgery.loss_change(cfg, TEXT)
    ids = list(TEXT.encode())
    (tb, ta) = change.text
    assert tb.nats == pytest.approx(_plain(bundled.load("default").model(), ids, len(ids)), rel=1e-5)
    assert (tb.tokens, tb.length, tb.past) == (len(ids), len(ids), False)
    assert change.kind == "bundle" and change.changed == ("attention",) and change.unit == "nats/byte"
    summary = change.summary()
    assert summary["text"]["before"] == tb.nats and summary["heldout"]["length"] == 128
    assert surgery.loss_change(origin.config, TEXT) is None  # the model as trained: no change


def test_byte_llamas_headline_is_at_its_trained_length_and_agrees_with_its_table():
    origin = surgery.checkpoint_origin("byte-llama")
    table = surgery.stored_table(origin)
    assert origin.trained_length == table["trained_length"] == 128 and table["window"] == origin.window == 32
    cfg = surgery.config_for("byte-llama", {"attention": "sliding_window", "window": 32})
    change = surgery.loss_change(cfg, TEXT, checkpoint="byte-llama")
    before, after = change.heldout
    rows = {r["label"]: r["loss"] for r in table["rows"]}
    assert before.length == 128 and not before.past and change.kind == "checkpoint"
    assert before.nats == pytest.approx(rows["full (as trained)"]["128"], abs=1e-4)
    assert after.nats == pytest.approx(rows["sliding_window (32)"]["128"], abs=1e-4)
    assert after.nats > before.nats  # at the trained length a window costs a little, as the table says
    loaded = checkpoints.load("byte-llama")
    assert surgery.weights_for(cfg, checkpoint=loaded).surgery == ("attention", "window")  # an id or the record


def test_the_one_command_prints_either_table_and_refuses_what_it_cannot_score(capsys):
    md = markdown(surgery.stored_table(surgery.checkpoint_origin("byte-llama")))
    assert "L=512 tokens (4x past trained)" in md and "L=128 tokens (trained)" in md and "32 keys" in md
    assert "windows of 32 keys" in next(line for line in md.splitlines() if line.startswith("| change"))
    with pytest.raises(SystemExit):
        main(["encoder_decoder"])  # no byte-level loss: refused with the reason, no traceback
    assert "causal language model" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        surgery.bundle_origin("no-such-bundle")
