"""The intervention record: caching changes nothing, replacing a head's result equals the same change made
in the weights (an independent route), patching every point reproduces the other run, and models the record
is not defined on are refused by ConfigError naming the field."""

import pytest
import torch
from perturbed import perturbed_model

from models import ConfigError, ModelConfig, build_model
from models.interventions import Interventions

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64, vocab_size=50, position="rope", seed=3)


def small_model(**fields):
    return perturbed_model(SMALL, **fields)


def tokens(seed=0, n=24, vocab=50):
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_cache_changes_nothing_and_head_outputs_add_up_to_the_attention_output():
    model = small_model(attn_bias="all")
    x = tokens()
    plain = model(x).logits
    out = model(x, interventions=Interventions(cache=True))
    assert torch.equal(out.logits, plain)
    for layer, info in enumerate(out.layers):
        attn = model.stack.blocks[layer].attn
        expected = info.output - info.input - info.ffn_output  # pre-LN: the stream gains attention + FFN
        got = info.head_outputs.sum(1) + attn.out_proj.bias
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        # z_h W_O^h against a plain per-head product of the cached results
        w = attn.out_proj.weight
        for h in range(4):
            ref = info.head_results[:, h] @ w[:, h * 8 : (h + 1) * 8].T
            torch.testing.assert_close(info.head_outputs[:, h], ref, atol=1e-6, rtol=1e-5)
    assert torch.equal(model.classify(out.layers[-1].output), plain)


@torch.no_grad()
def test_zero_ablation_equals_the_config_field_and_the_zeroed_weights():
    model = small_model()
    x = tokens(1)
    via_record = model(x, interventions=Interventions(replace_heads={(1, 2): "zero", (0, 0): "zero"})).logits
    via_field = build_model(ModelConfig(**{**SMALL, "ablate_heads": "1.2, 0.0"}))
    via_field.load_state_dict(model.state_dict())
    assert torch.equal(via_record, via_field.eval()(x).logits)
    surgery = small_model()
    surgery.load_state_dict(model.state_dict())
    surgery.stack.blocks[1].attn.out_proj.weight[:, 16:24] = 0
    surgery.stack.blocks[0].attn.out_proj.weight[:, 0:8] = 0
    torch.testing.assert_close(via_record, surgery(x).logits, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_mean_ablation_equals_folding_the_mean_into_the_output_bias():
    model = small_model(attn_bias="all")
    x, ref = tokens(2), tokens(3)
    mean = model(ref, interventions=Interventions(cache=True)).layers[1].head_results[:, 3].mean((0, 1))  # (d_h,)
    got = model(x, interventions=Interventions(replace_heads={(1, 3): mean})).logits
    folded = small_model(attn_bias="all")
    folded.load_state_dict(model.state_dict())
    proj = folded.stack.blocks[1].attn.out_proj
    proj.bias += proj.weight[:, 24:32] @ mean
    proj.weight[:, 24:32] = 0
    torch.testing.assert_close(got, folded(x).logits, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_patching_every_point_gives_the_clean_run_and_none_the_corrupted_run():
    model = small_model(attn_bias="all")
    clean, corrupt = tokens(4), tokens(4).clone()
    corrupt[:, 10:14] = (corrupt[:, 10:14] + 7) % 50
    c = model(clean, interventions=Interventions(cache=True))
    heads = {(l, h): c.layers[l].head_results[:, h] for l in range(2) for h in range(4)}
    ffn = {l: c.layers[l].ffn_output for l in range(2)}
    every = Interventions(replace_heads=heads, replace_ffn=ffn, replace_resid={0: c.layers[0].input})
    assert torch.equal(model(corrupt, interventions=every).logits, c.logits)
    assert torch.equal(model(corrupt, interventions=Interventions()).logits, model(corrupt).logits)
    # the residual stream leaving the stack alone decides the logits
    last = Interventions(replace_resid={2: c.layers[1].output})
    assert torch.equal(model(corrupt, interventions=last).logits, c.logits)


@pytest.mark.parametrize(
    "fields, field", [({"layer": "gated"}, "layer"), ({"memory": "xl", "position": "xl"}, "memory")]
)
def test_other_structures_are_refused_naming_the_field(fields, field):
    model = build_model(ModelConfig(**{**SMALL, **fields})).eval()
    with pytest.raises(ConfigError) as e:
        model(tokens(), interventions=Interventions(cache=True))
    assert e.value.field == field


@pytest.mark.parametrize(
    "record, field",
    [
        (Interventions(replace_heads={(2, 0): "zero"}), "replace_heads"),
        (Interventions(replace_heads={(0, 4): "zero"}), "replace_heads"),
        (Interventions(replace_heads={(0, 1): "mean"}), "replace_heads"),
        (Interventions(replace_heads={(0, 1): torch.zeros(2, 7, 8)}), "replace_heads"),
        (Interventions(replace_heads={(0, 1): torch.full((8,), float("nan"))}), "replace_heads"),
        (Interventions(replace_ffn={0: torch.zeros(16)}), "replace_ffn"),
        (Interventions(replace_resid={3: torch.zeros(32)}), "replace_resid"),
        (Interventions(replace_resid={0: "zero"}), "replace_resid"),
    ],
)
def test_out_of_range_points_and_values_are_refused(record, field):
    with pytest.raises(ConfigError) as e:
        small_model()(tokens(), interventions=record)
    assert e.value.field == field
