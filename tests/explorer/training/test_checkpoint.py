"""Save -> load round trip (identical logits) and refusal of damaged, mismatched or non-finite files."""

import json

import pytest
import torch

from explorer.training import checkpoint as ck
from explorer.training.trainer import RunConfig, Trainer
from models import ConfigError, ModelConfig, build_model

CFG = ModelConfig(n_layers=2, d_model=32, n_heads=2, max_len=64)


@pytest.fixture(scope="module")
def trained():
    trainer = Trainer(
        CFG, RunConfig(task="copy", steps=5, every=5, batch_size=4, seq_len=16, grad_norms=False, probe=False)
    )
    list(trainer.run())
    return trainer.model


def test_round_trip_gives_identical_logits(trained, tmp_path):
    weights, config = ck.save(trained, tmp_path, extra={"step": 5})
    cfg, model, meta = ck.load(weights, config=config)
    assert cfg.to_dict() == CFG.to_dict() and meta["step"] == "5"
    assert json.loads(config.read_text()) == CFG.to_dict()
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    trained.eval()
    model.eval()
    with torch.no_grad():
        assert torch.equal(trained(x).logits, model(x).logits)
    fresh = build_model(CFG).eval()
    with torch.no_grad():
        assert not torch.equal(fresh(x).logits, model(x).logits)  # the trained weights, not the initial ones
    assert weights.read_bytes()[:8] != b"\x80\x02" and b"torch" not in weights.read_bytes()[:64]  # not a pickle


def test_edited_tensor_bytes_are_refused(trained):
    data = bytearray(ck.to_bytes(trained))
    data[-3] ^= 0xFF  # flip bits inside the last tensor
    with pytest.raises(ConfigError, match="modified after it was saved"):
        ck.load(bytes(data))


def test_corrupt_or_foreign_files_are_refused(trained):
    with pytest.raises(ConfigError, match="too short"):
        ck.load(b"abc")
    with pytest.raises(ConfigError, match="header"):
        ck.load(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    from safetensors.torch import save

    with pytest.raises(ConfigError, match="saved by the explorer"):
        ck.load(save({"w": torch.zeros(2)}))
    data = ck.to_bytes(trained)
    with pytest.raises(ConfigError, match="weights"):
        ck.load(data[:-10])  # truncated data


def test_mismatched_config_or_shapes_are_refused(trained):
    data = ck.to_bytes(trained)
    with pytest.raises(ConfigError, match="n_layers"):
        ck.load(data, config=CFG.replace(n_layers=3))
    # a file whose metadata claims another config: the shapes do not match that model
    other = ck.to_bytes(trained, cfg=CFG.replace(d_model=64))
    with pytest.raises(ConfigError, match=r"shape \(256, 64\)"):
        ck.load(other)
    fewer = ck.to_bytes(trained, cfg=CFG.replace(n_layers=1))
    with pytest.raises(ConfigError, match="unexpected"):
        ck.load(fewer)
    bad = ck.to_bytes(trained, extra={})
    meta = ck.read_metadata(bad)
    assert json.loads(meta["config"])["n_layers"] == 2


def test_invalid_embedded_config_is_refused(trained):
    from safetensors.torch import save

    tensors = {k: v.contiguous() for k, v in trained.state_dict().items()}
    meta = {
        "format": ck.FORMAT,
        "version": "1",
        "config": json.dumps({**CFG.to_dict(), "attention": "magic"}),
        "sha256": ck.tensor_digest(tensors),
    }
    with pytest.raises(ConfigError, match="attention"):
        ck.load(save(tensors, metadata=meta))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused_even_with_a_recomputed_digest(trained, bad):
    """The digest only catches accidental damage: a file saved (digest recomputed) with NaN / Inf weights
    passes it, and is refused by the finiteness check, naming the tensor."""
    import copy

    poisoned = copy.deepcopy(trained)
    name, param = next(iter(poisoned.named_parameters()))
    with torch.no_grad():
        param.view(-1)[0] = bad
    data = ck.to_bytes(poisoned)  # a fresh, valid digest over the poisoned tensors
    with pytest.raises(ConfigError, match="NaN or Inf") as err:
        ck.load(data)
    assert name in str(err.value)
