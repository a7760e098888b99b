"""Architecture surgery (models.surgery): which changes keep trained weights, and what moving them does.

References: the dense masked reference (a full-width window is the full model), the GQA paper's
mean-pooled K/V heads (exact when the pooled heads are equal), position interpolation's definition
(angles of position p / s), and StreamingLLM's sinks (the first keys visible under any pattern).
"""

import pytest
import torch
import torch.nn.functional as F

from kernels.cpu.rope import apply_rope_ref
from models import ConfigError, ModelConfig, build_model, registries, surgery
from models.attention import pattern_mask
from models.config import FIELDS

BASE = ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=256).validate()


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _loss(model, x):
    with torch.no_grad():
        logits = model(x).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = build_model(BASE).eval()
    return model, _params(model), torch.randint(0, 256, (2, 96), generator=torch.Generator().manual_seed(1))


def test_full_width_window_is_the_full_model(trained):
    model, params, x = trained
    wide = BASE.replace(attention="sliding_window", window=96).validate()
    moved = surgery.transplant(params, BASE, wide)
    with torch.no_grad():  # the dense reference of both (return_attention): the same arithmetic, bit for bit
        a, b = model(x, return_attention=True).logits, moved(x, return_attention=True).logits
    assert torch.equal(a, b)
    assert abs(_loss(model, x).item() - _loss(moved, x).item()) < 1e-5  # block-sparse against SDPA
    narrow = surgery.transplant(params, BASE, BASE.replace(attention="sliding_window", window=4).validate())
    assert abs(_loss(model, x).item() - _loss(narrow, x).item()) > 1e-3  # a real window changes the loss


def test_surgery_leaves_the_weights_bit_identical(trained):
    _, params, _ = trained
    before = {k: v.clone() for k, v in params.items()}
    target = BASE.replace(
        attention="strided", stride=8, n_sinks=2, softcap=20.0, rope_scale=2.0, n_kv_heads=4
    ).validate()
    moved = surgery.transplant(params, BASE, target)
    for name, p in moved.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.data_ptr() != params[name].data_ptr()  # a copy: the source is never shared
    assert all(torch.equal(t, before[name]) for name, t in params.items())


def test_merging_identical_kv_heads_is_exact():
    torch.manual_seed(3)
    mha = build_model(BASE).eval()
    d_h = BASE.d_head
    with torch.no_grad():  # make heads 0 = 1 and 2 = 3 in every K and V projection
        for name, p in mha.named_parameters():
            if name.endswith(("k_proj.weight", "v_proj.weight")):
                heads = p.view(4, d_h, -1)
                heads[1].copy_(heads[0])
                heads[3].copy_(heads[2])
    x = torch.randint(0, 256, (2, 40))
    gqa_cfg = BASE.replace(n_kv_heads=2).validate()
    gqa = surgery.transplant(_params(mha), BASE, gqa_cfg)
    assert gqa.state_dict()["stack.blocks.0.attn.k_proj.weight"].shape[0] == 2 * d_h
    with torch.no_grad():
        assert torch.allclose(mha(x).logits, gqa(x).logits, atol=1e-5)
        back = surgery.transplant(_params(gqa), gqa_cfg, BASE)  # repeating heads back: the same model again
        assert torch.allclose(gqa(x).logits, back(x).logits, atol=1e-6)


def test_merging_different_kv_heads_is_the_mean():
    w = torch.arange(4 * 8 * 3, dtype=torch.float32).view(32, 3)  # 4 heads of width d_head = 8
    merged = surgery.transfer({"a.k_proj.weight": w}, BASE, BASE.replace(n_kv_heads=2).validate())["a.k_proj.weight"]
    expected = torch.cat([(w[0:8] + w[8:16]) / 2, (w[16:24] + w[24:32]) / 2])
    assert torch.equal(merged, expected)


@pytest.mark.parametrize(
    "change",
    [
        dict(ffn="moe"),
        dict(d_model=64),
        dict(norm_placement="post"),
        dict(attention="talking_heads"),
        dict(position="alibi"),
        dict(n_layers=3),
    ],
)
def test_changes_that_need_other_weights_are_refused_by_name(change):
    target = BASE.replace(**change).validate()
    with pytest.raises(ConfigError) as err:
        surgery.check(BASE, target)
    assert err.value.field == next(iter(change))


def test_kv_heads_must_divide_or_multiply():
    three = BASE.replace(d_model=48, n_heads=6, n_kv_heads=3).validate()
    with pytest.raises(ConfigError) as err:
        surgery.check(three, three.replace(n_kv_heads=2).validate())
    assert err.value.field == "n_kv_heads"
    surgery.check(three, three.replace(n_kv_heads=1).validate())
    surgery.check(three, three.replace(n_kv_heads=None).validate())


def test_every_surgery_variant_reads_the_full_models_weights(trained):
    """A variant that declares ``surgery`` must build with exactly the default model's parameters."""
    _, params, x = trained
    flagged = [k for k, v in registries()["attention"].items() if v.surgery]
    assert {"full", "sliding_window", "bigbird", "performer", "linear"} <= set(flagged)
    for key in flagged:
        model = surgery.transplant(params, BASE, BASE.replace(attention=key).validate())
        with torch.no_grad():
            assert torch.isfinite(model(x[:, :64]).logits).all(), key


def test_surgery_fields_are_declared_on_their_records():
    safe = {n for n, p in FIELDS.items() if p.surgery}
    assert {"window", "n_sinks", "softcap", "rope_base", "rope_scale", "n_kv_heads"} <= safe
    assert not {"d_model", "n_layers", "d_ff", "vocab_size", "n_experts"} & safe


@pytest.mark.parametrize("attention", ["sliding_window", "block_local", "strided", "longformer", "bigbird"])
def test_sinks_keep_the_first_keys_visible(attention):
    cfg = BASE.replace(attention=attention, window=4, block_size=8, stride=8, n_sinks=3).validate()
    plain = pattern_mask(cfg.replace(n_sinks=0).validate(), 40)
    sunk = pattern_mask(cfg, 40)
    causal = torch.ones(40, 40, dtype=torch.bool).tril()
    assert torch.equal(sunk[:, :3], causal[:, :3])  # every query sees keys 0..2 (those before it)
    assert torch.equal(sunk[:, 3:], plain[:, 3:])  # the rest is the pattern as published
    model = build_model(cfg).eval()  # block-sparse run against the dense mask
    x = torch.randint(0, 256, (1, 130))
    with torch.no_grad():
        assert torch.allclose(model(x).logits, model(x, return_attention=True).logits, atol=1e-4)


def test_rope_scale_is_position_interpolation():
    from models.positions.rope import Rope

    q, k = torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)
    scaled = Rope(BASE.replace(rope_scale=4.0).validate())
    q2, k2, _ = scaled.modify(q, k, 0)
    pos = torch.arange(16, dtype=torch.float32) / 4
    assert torch.allclose(q2, apply_rope_ref(q, pos, BASE.rope_base), atol=1e-6)
    assert torch.allclose(k2, apply_rope_ref(k, pos, BASE.rope_base), atol=1e-6)
    with pytest.raises(ConfigError, match="rope_scale"):
        BASE.replace(rope_scale=0.0).validate()


def test_ablating_a_head_is_zeroing_its_slice_of_the_output_projection(trained):
    """Reference: a head's output enters the residual stream only through its d_head columns of out_proj."""
    model, params, x = trained
    cut = surgery.transplant(params, BASE, BASE.replace(ablate_heads="1.0, 1.3").validate())
    by_hand = build_model(BASE).eval()
    by_hand.load_state_dict(model.state_dict())
    d_h = BASE.d_head
    with torch.no_grad():
        w = by_hand.stack.blocks[1].attn.out_proj.weight
        for h in (0, 3):
            w[:, h * d_h : (h + 1) * d_h] = 0
        assert torch.allclose(cut(x).logits, by_hand(x).logits, atol=1e-5)
        assert not torch.allclose(cut(x).logits, model(x).logits, atol=1e-3)


@pytest.mark.parametrize("bad", ["2.0", "0.4", "1", "a.b", "1.0;1.1"])
def test_ablate_heads_refuses_what_is_no_head_by_name(bad):
    with pytest.raises(ConfigError) as err:
        BASE.replace(ablate_heads=bad).validate()
    assert err.value.field == "ablate_heads"
