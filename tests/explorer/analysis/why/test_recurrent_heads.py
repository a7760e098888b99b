"""The Why analyses on recurrent mixers (Mamba-2, Gated DeltaNet), uniform and in a hybrid: a recurrent head's
write is linear in its result ``z_h`` (``z_h W_O^h``), so direct logit attribution and ablation / patching through
``Interventions.replace_heads`` work as for attention heads; head circuits refuse with the mixer's reason; a mixer
whose head layout is not ``n_heads x d_head`` is refused by name."""

import pytest
import torch

from explorer.analysis.why.attribution import attribute
from explorer.analysis.why.circuits import check_structure
from explorer.analysis.why.patching import patch_heads
from models import ConfigError, ModelConfig, build_model
from models.interventions import Interventions, check_head_layout, layer_heads

SMALL = dict(n_layers=4, d_model=32, n_heads=2)
CASES = {
    "mamba2": dict(attention="mamba2", ffn="none", position="none"),
    "mamba2_gelu": dict(attention="mamba2", ffn="gelu", position="none"),
    "gated_deltanet": dict(attention="gated_deltanet"),
    "hybrid": dict(attention="full", layer_schedule="gated_deltanet*3,full", position="rope"),
}
IDS = torch.tensor([list(b"abc abc abd abc abc")])


def _model(name):
    return build_model(ModelConfig(**SMALL, **CASES[name]).validate()).eval()


@pytest.mark.parametrize("name", list(CASES))
def test_attribution_terms_sum_to_the_logit(name):
    model = _model(name)
    a = attribute(model, IDS, 9, alternative=ord("x"))
    total = float(a.heads.double().sum() + a.ffn.double().sum()) + a.embedding + a.position_term + a.biases
    assert total == pytest.approx(a.logit, abs=1e-3 * max(1.0, abs(a.logit)))
    assert a.heads.shape == (4, 2) and bool((a.heads != 0).all())
    if CASES[name].get("ffn") == "none":  # no FFN sublayer: it writes nothing
        assert bool((a.ffn == 0).all())


@pytest.mark.parametrize("name", list(CASES))
def test_zeroing_a_recurrent_head_equals_zeroing_its_output_columns(name):
    """Independent reference: the head's write is ``z_h W_O^h``, so ``replace_heads`` zero gives the logits of the
    same model with head ``h``'s columns of the output projection set to 0."""
    model = _model(name)
    layer, head = 1, 1
    with torch.no_grad():
        ablated = model(IDS, interventions=Interventions(replace_heads={(layer, head): "zero"})).logits
        plain = model(IDS).logits
        w = model.stack.blocks[layer].attn.out_proj.weight
        width = w.shape[1] // 2
        w[:, head * width : (head + 1) * width] = 0
        reference = model(IDS).logits
    assert not torch.allclose(ablated, plain, atol=1e-5)  # the head matters
    torch.testing.assert_close(ablated, reference, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["mamba2", "hybrid"])
def test_patching_every_head_and_nothing_are_its_checks(name):
    model = _model(name)
    corrupted = torch.tensor([list(b"abc axc abd axc abc")])  # the context and the answer at 13 changed
    p = patch_heads(model, IDS, corrupted, positions=[12])
    assert p.heads.shape == (4, 2) and p.clean != p.corrupted
    assert p.everything == pytest.approx(1.0, abs=1e-4) and p.nothing == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize("name", ["mamba2", "gated_deltanet", "hybrid"])
def test_head_circuits_refuse_a_recurrent_layer_with_its_reason(name):
    cfg = ModelConfig(**SMALL, **CASES[name]).validate()
    with pytest.raises(ConfigError) as e:
        check_structure(cfg)
    assert "recurrent mixer" in str(e.value) and "latent" not in str(e.value)
    assert e.value.field == ("layer_schedule" if name == "hybrid" else "attention")
    if name == "hybrid":
        assert "layer 0" in str(e.value)


def test_a_mixer_with_a_head_count_of_its_own_is_refused_by_name():
    cfg = ModelConfig(**SMALL, attention="mamba2", ffn="none", position="none", ssm_heads=4).validate()
    assert layer_heads(cfg)[0][0] == 4
    with pytest.raises(ConfigError) as e:
        check_head_layout(cfg)
    assert e.value.field == "attention" and "4 heads" in str(e.value) and "n_heads=2" in str(e.value)
    model = build_model(cfg).eval()
    with pytest.raises(ConfigError, match="heads of one layout"):
        attribute(model, IDS, 3)
    with pytest.raises(ConfigError, match="heads of one layout"):
        model(IDS, interventions=Interventions(replace_heads={(0, 3): "zero"}))
