"""Trained weights in the analyses: a trained copy task's maps show the copy diagonal, the initial
maps come back unchanged, weights reach only the calls they are passed to and only their own config,
snapshots are bounded copies."""

import threading

import numpy as np
import pytest
import torch

from explorer.analysis import attention_maps, gradient_norms, input_batch, next_token_loss
from explorer.analysis.weights import trained as tw
from explorer.app.tabs.train import small_config
from explorer.runtime.text import model_input
from explorer.training.tasks import get_task
from explorer.training.trainer import RunConfig, Trainer
from models import ConfigError

L = 17  # copy task: 8 symbols, the separator, their copy


@pytest.fixture(scope="module")
def trained():
    """A small model trained on the copy task until its held-out accuracy is high (~10 s on one core)."""
    cfg = small_config()
    trainer = Trainer(
        cfg, RunConfig(task="copy", steps=120, lr=3e-3, warmup=20, batch_size=32, seq_len=L, every=60, seed=0)
    )
    snaps = list(trainer.run())
    assert snaps[-1].heldout_acc > 0.9, "the copy task did not train: the diagonal test would be meaningless"
    probe = get_task("copy").probe(L).tokens[0].tolist()
    text = bytes(probe).decode("latin-1")  # the probe's symbols are ASCII: one byte per character
    assert list(model_input(cfg, text).ids("tokens")) == probe
    return cfg, trainer, tw.snapshot(cfg, trainer.model, trainer.step), text


def copy_mass(att: np.ndarray) -> float:
    """Best (layer, head) mean weight of the answer queries on the copy diagonal: query ``p`` on key
    ``p - n`` (the source of the next token) or ``p - n + 1`` (the key after it, which a layer-0
    previous-token head has filled with that source: the two-layer circuit small models learn)."""
    n = (L - 1) // 2
    rows = np.arange(n, 2 * n)
    best = 0.0
    for offset in (n, n - 1):
        on_diag = np.nan_to_num(att[:, :, rows, rows - offset])  # (layers, heads, n)
        best = max(best, float(on_diag.mean(-1).max()))
    return best


def test_trained_maps_show_the_copy_diagonal_and_initial_maps_come_back(trained):
    cfg, _, weights, text = trained
    before = attention_maps(cfg, text).attention.copy()
    after = attention_maps(cfg, text, weights=weights).attention
    assert copy_mass(before) < 0.35  # at initialisation nothing attends the copy source
    assert copy_mass(after) > 0.8  # a trained layer reads the token one copy-length back
    again = attention_maps(cfg, text).attention
    assert np.array_equal(np.nan_to_num(before), np.nan_to_num(again))


def test_trained_maps_match_a_plain_forward_of_the_trained_model(trained):
    cfg, trainer, weights, text = trained
    ids = torch.tensor([list(model_input(cfg, text).ids("tokens"))])
    model = trainer.model.eval()
    with torch.no_grad():
        ref = torch.stack([a[0] for a in model(ids, return_attention=True).attentions]).numpy()
    got = attention_maps(cfg, text, weights=weights).attention
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_weights_apply_to_their_config_only(trained):
    cfg, _, weights, text = trained
    post = cfg.replace(norm_placement="post")
    assert tw.applicable(weights, cfg) is weights and tw.applicable(weights, post) is None
    trained_maps = attention_maps(cfg, text, weights=tw.applicable(weights, cfg)).attention
    other = attention_maps(post, text, weights=tw.applicable(weights, post)).attention
    assert not np.array_equal(np.nan_to_num(trained_maps), np.nan_to_num(attention_maps(cfg, text).attention))
    assert np.array_equal(np.nan_to_num(other), np.nan_to_num(attention_maps(post, text).attention))


def test_explicit_weights_of_another_config_are_refused(trained):
    cfg, _, weights, text = trained
    with pytest.raises(ConfigError) as e:
        attention_maps(cfg.replace(n_layers=3), text, weights=weights)
    assert e.value.field == "weights" and "n_layers=2" in str(e.value)


def test_another_user_never_sees_the_weights(trained):
    """Two users of the same config at once, one with trained weights: the other gets the initial
    weights' results (nothing global carries weights from one call to another)."""
    cfg, _, weights, text = trained
    initial = attention_maps(cfg, text).attention
    seen = {}

    def trained_user():
        seen["trained"] = attention_maps(cfg, text, weights=weights).attention

    def other_user():
        seen["att"] = attention_maps(cfg, text).attention
        seen["grad"] = gradient_norms(cfg, seq_len=16, batch=2)

    threads = [threading.Thread(target=trained_user), threading.Thread(target=other_user)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(np.nan_to_num(seen["att"]), np.nan_to_num(initial))
    assert not np.array_equal(np.nan_to_num(seen["trained"]), np.nan_to_num(initial))
    assert seen["grad"] == gradient_norms(cfg, seq_len=16, batch=2)


def test_gradient_norms_of_trained_weights_use_their_loss(trained):
    cfg, trainer, weights, _ = trained
    init = gradient_norms(cfg, seq_len=16, batch=2)
    got = gradient_norms(cfg, seq_len=16, batch=2, weights=weights)
    (tokens,) = input_batch(cfg, 16, 2, 0)
    with torch.no_grad():
        ref = next_token_loss(trainer.model.eval()(tokens).logits, tokens).item()
    assert got["loss"] == pytest.approx(ref, rel=1e-5)
    assert got["residual"] != init["residual"] and got["loss"] != pytest.approx(init["loss"], rel=1e-3)


def test_snapshot_is_a_frozen_copy_with_a_content_digest(trained):
    cfg, trainer, weights, _ = trained
    copy = tw.snapshot(cfg, trainer.model, trainer.step)
    assert copy.digest == weights.digest and copy.nbytes == sum(t.numel() * 4 for t in copy.tensors.values())
    name = next(iter(copy.tensors))
    with torch.no_grad():
        trainer.model.state_dict()[name].add_(1.0)
    try:
        assert tw.snapshot(cfg, trainer.model).digest != copy.digest
        assert not torch.equal(copy.tensors[name], trainer.model.state_dict()[name])
    finally:
        with torch.no_grad():
            trainer.model.state_dict()[name].sub_(1.0)


def test_snapshot_over_the_byte_cap_is_refused(trained, monkeypatch):
    cfg, trainer, weights, _ = trained
    monkeypatch.setattr(tw, "MAX_TRAINED_BYTES", weights.nbytes - 1)
    with pytest.raises(ConfigError) as e:
        tw.snapshot(cfg, trainer.model)
    assert e.value.field == "weights"
