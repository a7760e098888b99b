"""A checkpoint whose weights are finite but overflow float32 in the forward pass loads (every tensor is
finite), and then its maps and its surgery loss say so by name instead of drawing NaN."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_checkpoint import make_checkpoint

from explorer.analysis import attention_maps
from explorer.analysis import surgery as analysis_surgery
from explorer.analysis.surgery import moved
from explorer.analysis.weights import checkpoints
from models import ConfigError

TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again."
SCALE = 1e20  # each weight finite; a SwiGLU of two such products passes float32's 3.4e38


@pytest.fixture(scope="module")
def huge_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("overflowing")
    make_checkpoint(root / "huge")
    path = root / "huge" / "model.safetensors"
    tensors = load_file(path)
    for name in [n for n in tensors if ".mlp." in n]:
        tensors[name] = tensors[name] * SCALE
    assert all(torch.isfinite(t).all() for t in tensors.values())
    save_file(tensors, str(path), metadata={"format": "pt"})
    return root, tensors


@pytest.fixture
def huge(huge_root, monkeypatch):
    root, tensors = huge_root
    monkeypatch.setenv(checkpoints.ROOTS_ENV, str(root))
    checkpoints._LOADED.clear()
    moved._MOVED.clear()
    yield "huge", tensors
    checkpoints._LOADED.clear()
    moved._MOVED.clear()


def test_its_maps_name_the_overflow_and_the_largest_weight(huge):
    ckpt, tensors = huge
    loaded = checkpoints.load(ckpt)  # loads: every value is finite
    with pytest.raises(ConfigError) as e:
        attention_maps(loaded.config, TEXT, weights=loaded.weights)
    assert e.value.field == "weights" and "non-finite activations after layer 1" in e.value.value
    largest = max(float(t.abs().max()) for t in tensors.values())  # the reference: the file's own values
    assert f"{largest:.3g}" in e.value.allowed and "attention maps" in e.value.allowed


def test_its_surgery_loss_names_the_overflow(huge):
    ckpt, _ = huge
    window = analysis_surgery.config_for(ckpt, {"attention": "sliding_window", "window": 3})
    with pytest.raises(ConfigError) as e:
        analysis_surgery.loss_change(window, TEXT, checkpoint=ckpt)
    assert e.value.field == "weights" and "non-finite logits" in e.value.value and "losses" in e.value.allowed
