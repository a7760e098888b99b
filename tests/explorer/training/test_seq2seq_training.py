"""Training an encoder-decoder on copy / reverse / sort: the split, the loss, the probe, the ideal."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from explorer.training import seq2seq as train_encdec
from explorer.training.tasks import SEP, get_task
from explorer.training.trainer import RunConfig, Trainer
from models import ConfigError, ModelConfig

CFG = ModelConfig(architecture="encoder_decoder", n_layers=1, d_model=32, n_heads=2, d_ff=64)


@pytest.mark.parametrize(
    "task, f", [("copy", lambda x: x), ("reverse", lambda x: x.flip(1)), ("sort", lambda x: x.sort(dim=1).values)]
)
def test_split_gives_source_and_start_token_target(task, f):
    batch = get_task(task).batch(3, 13, torch.Generator().manual_seed(0))
    src, tgt = train_encdec.split_batch(batch)
    assert src.shape == (3, 6) and tgt.tokens.shape == (3, 7)
    assert torch.all(tgt.tokens[:, 0] == SEP) and torch.equal(tgt.tokens[:, 1:], f(src))
    assert not tgt.mask[:, 0].any() and tgt.mask[:, 1:].all()  # exactly the answer symbols are scored


def test_trainer_loss_is_the_targets_cross_entropy_and_falls():
    run = RunConfig(task="reverse", steps=40, batch_size=16, seq_len=13, every=40, lr=3e-3, eval_batches=1)
    trainer = Trainer(CFG, run)
    batch = trainer.heldout[0]
    src, tgt = train_encdec.split_batch(batch)
    trainer.model.eval()
    with torch.no_grad():
        logits = trainer.model(src, tgt.tokens).logits  # (B, n + 1, vocab)
    want = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tgt.tokens[:, 1:].reshape(-1)).item()
    loss0, _ = trainer.evaluate()
    assert loss0 == pytest.approx(want, rel=1e-5)
    snaps = list(trainer.run())
    first, last = snaps[0], snaps[-1]
    assert last.heldout_loss < first.heldout_loss - 0.3
    att = last.attention  # the probe's cross-attention: (layers, heads, n + 1, n)
    n = (min(run.seq_len, 96) - 1) // 2
    assert att.shape == (1, 2, n + 1, n)
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    g = last.grad_norms
    assert g["stack"] == ["encoder", "decoder"] and g["cross_out"][1] > 0


def test_only_sequence_to_sequence_tasks():
    with pytest.raises(ConfigError) as err:
        Trainer(CFG, RunConfig(task="induction", steps=1, seq_len=16, batch_size=2))
    assert err.value.field == "task"


def test_cross_ideal_is_the_alignment():
    tokens = [ord(c) for c in "cab|abc"]
    a = train_encdec.cross_ideal("sort", tokens)  # row p: the source position of the p-th smallest symbol
    assert a.shape == (4, 3) and [int(r.argmax()) for r in a[:3]] == [1, 2, 0] and a[3].sum() == 0
    rev = train_encdec.cross_ideal("reverse", tokens)
    assert [int(r.argmax()) for r in rev[:3]] == [2, 1, 0]
    assert train_encdec.cross_ideal("induction", tokens) is None
