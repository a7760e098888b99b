"""A forward pass that overflows float32 is said by name (where it stopped being finite, the largest weight),
never drawn as NaN: ``explorer.analysis.common.finite`` and the maps that call it."""

import math

import pytest
import torch

from explorer.analysis import attention_maps
from explorer.analysis.common import finite
from explorer.analysis.compare import compare_pair
from explorer.analysis.weights.trained import snapshot
from models import ConfigError, ModelConfig, build_model

TEXT = "The quick brown fox jumps over the lazy dog."


def tiny(**changes) -> ModelConfig:
    base = dict(
        position="rope",
        norm="rmsnorm",
        norm_placement="pre",
        ffn="swiglu",
        d_model=32,
        d_ff=64,
        n_layers=3,
        n_heads=4,
        max_len=128,
    )
    return ModelConfig(**{**base, **changes}).validate()


def blown(cfg, layer: int):
    """The model of ``cfg`` with block ``layer``'s FFN weights scaled so its output overflows float32 (each
    finite: 1e20 is far inside float32; their product on a hidden state is not)."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for name in ("w", "v", "w2"):
            getattr(model.stack.blocks[layer].ffn, name).weight.mul_(1e20)
    return model


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_the_reading_names_the_layer_whose_output_overflowed(layer):
    cfg = tiny()
    model = blown(cfg, layer)
    with torch.no_grad():
        out = model(torch.tensor([list(TEXT.encode())]))
    assert not torch.isfinite(out.logits).all()  # the premise: finite weights, non-finite logits
    reading = finite.forward_reading(out)
    if layer < 2:  # the input of the next layer is the first non-finite state
        assert reading == f"non-finite activations after layer {layer + 1} of 3"
    else:  # the last layer's output enters the head only
        assert reading.startswith("non-finite logits")


def test_a_finite_forward_pass_has_no_reading():
    torch.manual_seed(0)
    with torch.no_grad():
        out = build_model(tiny()).eval()(torch.tensor([list(TEXT.encode())]))
    assert finite.forward_reading(out) is None


def test_maps_of_overflowing_weights_are_refused_naming_the_largest_weight():
    cfg = tiny()
    model = blown(cfg, 0)
    weights = snapshot(cfg, model)
    state = model.state_dict()
    name = max(state, key=lambda k: float(state[k].abs().max()))  # the reference: a plain scan
    with pytest.raises(ConfigError) as e:
        attention_maps(cfg, TEXT, weights=weights)
    assert e.value.field == "weights" and e.value.value == "non-finite activations after layer 1 of 3"
    assert "attention maps" in e.value.allowed and name in e.value.allowed
    assert f"{float(state[name].abs().max()):.3g}" in e.value.allowed
    with pytest.raises(ConfigError, match="attention maps"):  # Compare draws the same maps
        compare_pair(cfg, cfg, TEXT, weights_b=weights)
    attention_maps(cfg, TEXT, weights=snapshot(cfg, build_model(cfg)))  # the same config, sane weights: drawn


def test_a_rope_base_out_of_the_ordinary_is_named_as_a_cause():
    assert "rope_base=1e-30" in finite.cause(tiny(rope_base=1e-30), None)
    assert "rope_base" not in finite.cause(tiny(rope_base=500000.0), None)


@pytest.mark.parametrize("values,refused", [([1.2, 3.4], False), ([1.2, math.nan], True), ([math.inf], True)])
def test_a_non_finite_loss_is_refused_by_name(values, refused):
    if not refused:
        finite.refuse_losses(values, "losses", tiny(), None)
        return
    with pytest.raises(ConfigError) as e:
        finite.refuse_losses(values, "losses", tiny(), None)
    assert "non-finite logits" in str(e.value.value) and "losses" in e.value.allowed
