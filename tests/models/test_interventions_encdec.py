"""The intervention record on an encoder-decoder: the decoder's self-attention heads, its cross-attention heads
and the encoder's heads are cached, ablated and patched through the one record. References: the model's own
logits, the sublayer sums, and the same change made in the weights (zeroed output-projection columns)."""

import pytest
import torch
from perturbed import perturbed_model

from models import ConfigError, ModelConfig, build_model
from models.interventions import Interventions

SMALL = dict(
    architecture="encoder_decoder",
    d_model=32,
    n_heads=4,
    n_layers=2,
    n_encoder_layers=3,
    max_len=64,
    vocab_size=50,
    position="rope",
    seed=5,
)


def small_model(**fields):
    return perturbed_model(SMALL, **fields)


def pair(seed=0, ls=11, lt=9):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50, (2, ls), generator=g), torch.randint(0, 50, (2, lt), generator=g)


def stack(out, name):
    return [i for i in out.layers if i.stack == name]


@torch.no_grad()
def test_cache_changes_nothing_and_self_plus_cross_heads_add_up_to_the_decoder_sublayers():
    model = small_model(attn_bias="all")
    src, tgt = pair()
    plain = model(src, tgt).logits
    out = model(src, tgt, interventions=Interventions(cache=True))
    assert torch.equal(out.logits, plain)
    enc, dec = stack(out, "encoder"), stack(out, "decoder")
    assert len(enc) == 3 and len(dec) == 2
    for layer, info in enumerate(dec):
        block = model.decoder.blocks[layer]
        # pre-LN: the stream gains self-attention + cross-attention + FFN
        got = (
            info.head_outputs.sum(1)
            + block.attn.out_proj.bias
            + info.cross_head_outputs.sum(1)
            + block.cross.out_proj.bias
            + info.ffn_output
        )
        torch.testing.assert_close(got, info.output - info.input, atol=1e-5, rtol=1e-5)
        w = block.cross.out_proj.weight
        for h in range(4):  # z_h W_O^h of the cross heads against a plain per-head product
            ref = info.cross_head_results[:, h] @ w[:, h * 8 : (h + 1) * 8].T
            torch.testing.assert_close(info.cross_head_outputs[:, h], ref, atol=1e-6, rtol=1e-5)
        assert info.cross_head_results.shape == (2, 4, 9, 8)
    for layer, info in enumerate(enc):
        assert info.head_results.shape == (2, 4, 11, 8) and info.cross_head_results is None
        got = info.head_outputs.sum(1) + model.encoder.blocks[layer].attn.out_proj.bias + info.ffn_output
        torch.testing.assert_close(got, info.output - info.input, atol=1e-5, rtol=1e-5)
    assert torch.equal(model.classify(dec[-1].output), plain)


@torch.no_grad()
def test_zero_ablation_of_each_kind_of_head_equals_zeroing_its_output_columns():
    model = small_model()
    src, tgt = pair(1)
    record = Interventions(
        replace_heads={(1, 0): "zero"},
        replace_cross={(0, 2): "zero", (1, 3): "zero"},
        encoder=Interventions(replace_heads={(2, 1): "zero"}),
    )
    got = model(src, tgt, interventions=record).logits
    surgery = small_model()
    surgery.load_state_dict(model.state_dict())
    surgery.decoder.blocks[1].attn.out_proj.weight[:, 0:8] = 0
    surgery.decoder.blocks[0].cross.out_proj.weight[:, 16:24] = 0
    surgery.decoder.blocks[1].cross.out_proj.weight[:, 24:32] = 0
    surgery.encoder.blocks[2].attn.out_proj.weight[:, 8:16] = 0
    torch.testing.assert_close(got, surgery(src, tgt).logits, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, model(src, tgt).logits, atol=1e-3)


@torch.no_grad()
def test_mean_ablation_of_a_cross_head_equals_folding_its_mean_into_the_bias():
    model = small_model(attn_bias="all")
    src, tgt = pair(2)
    ref = model(*pair(3), interventions=Interventions(cache=True))
    mean = stack(ref, "decoder")[1].cross_head_results[:, 2].mean((0, 1))  # (d_h,)
    got = model(src, tgt, interventions=Interventions(replace_cross={(1, 2): mean})).logits
    folded = small_model(attn_bias="all")
    folded.load_state_dict(model.state_dict())
    proj = folded.decoder.blocks[1].cross.out_proj
    proj.bias += proj.weight[:, 16:24] @ mean
    proj.weight[:, 16:24] = 0
    torch.testing.assert_close(got, folded(src, tgt).logits, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_patching_every_point_gives_the_clean_run_and_none_the_corrupted_run():
    model = small_model(attn_bias="all")
    src, tgt = pair(4)
    bad_src, bad_tgt = src.clone(), tgt.clone()
    bad_src[:, 3:7] = (bad_src[:, 3:7] + 7) % 50
    bad_tgt[:, 2:4] = (bad_tgt[:, 2:4] + 3) % 50
    c = model(src, tgt, interventions=Interventions(cache=True))
    enc, dec = stack(c, "encoder"), stack(c, "decoder")
    corrupt = model(bad_src, bad_tgt).logits
    assert not torch.allclose(corrupt, c.logits, atol=1e-3)
    every = Interventions(
        replace_heads={(l, h): dec[l].head_results[:, h] for l in range(2) for h in range(4)},
        replace_cross={(l, h): dec[l].cross_head_results[:, h] for l in range(2) for h in range(4)},
        replace_ffn={l: dec[l].ffn_output for l in range(2)},
        replace_resid={0: dec[0].input},
    )
    assert torch.equal(model(bad_src, bad_tgt, interventions=every).logits, c.logits)
    # the decoder's points alone: the source reaches the decoder only through the cross heads
    assert torch.equal(
        model(bad_src, tgt, interventions=Interventions(replace_cross=every.replace_cross)).logits, c.logits
    )
    # the encoder's every point gives the clean source memory, so (same target) the clean logits
    enc_every = Interventions(
        replace_heads={(l, h): enc[l].head_results[:, h] for l in range(3) for h in range(4)},
        replace_ffn={l: enc[l].ffn_output for l in range(3)},
        replace_resid={0: enc[0].input},
    )
    assert torch.equal(model(bad_src, tgt, interventions=Interventions(encoder=enc_every)).logits, c.logits)
    assert torch.equal(model(bad_src, bad_tgt, interventions=Interventions()).logits, corrupt)
    for l in range(2):  # no single cross head restores the clean run
        for h in range(4):
            one = model(bad_src, tgt, interventions=Interventions(replace_cross={(l, h): every.replace_cross[l, h]}))
            assert not torch.equal(one.logits, c.logits)


@pytest.mark.parametrize(
    "record, field",
    [
        (Interventions(replace_cross={(2, 0): "zero"}), "replace_cross"),
        (Interventions(replace_cross={(0, 1): torch.zeros(2, 11, 8)}), "replace_cross"),  # the source's length
        (Interventions(replace_heads={(2, 0): "zero"}), "replace_heads"),
        (Interventions(encoder=Interventions(replace_heads={(3, 0): "zero"})), "replace_heads"),
        (Interventions(encoder=Interventions(replace_ffn={0: torch.zeros(2, 9, 32)})), "replace_ffn"),
        (Interventions(encoder=Interventions(replace_cross={(0, 0): "zero"})), "encoder.replace_cross"),
    ],
)
def test_out_of_range_points_are_refused_naming_the_field(record, field):
    with pytest.raises(ConfigError) as e:
        small_model()(*pair(), interventions=record)
    assert e.value.field == field


def test_single_stack_models_refuse_the_encoder_decoder_points():
    model = build_model(ModelConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=50, max_len=64)).eval()
    for record, field in (
        (Interventions(replace_cross={(0, 0): "zero"}), "replace_cross"),
        (Interventions(encoder=Interventions()), "encoder"),
    ):
        with pytest.raises(ConfigError) as e:
            model(torch.zeros(1, 5, dtype=torch.long), interventions=record)
        assert e.value.field == field
