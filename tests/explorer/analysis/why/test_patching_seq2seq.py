"""Ablation and activation patching of an encoder-decoder's three kinds of heads (decoder self-attention,
cross-attention, encoder). References: output-projection columns zeroed in the weights, a plain forward hook
that swaps one head's slice of the output projection's input, the model's own logits (exact endpoints)."""

import pytest
import torch
import torch.nn.functional as F
from perturbed import perturbed_model

from explorer.analysis.why.patching import ablate, head_means, patch_heads, reference_ids, seq2seq_default_pair
from explorer.analysis.why.seq2seq_ids import TRAINED_SOURCE, Seq2SeqIds, pair_ids
from models import ConfigError, ModelConfig

SMALL = dict(
    architecture="encoder_decoder",
    d_model=32,
    n_heads=4,
    n_layers=2,
    n_encoder_layers=2,
    max_len=64,
    vocab_size=128,
    position="rope",
    seed=11,
)


def perturbed(**fields):
    return perturbed_model(SMALL, scale=0.2, **fields)


def clean_and_corrupted():
    src = list(b"abcdefghij")
    bad = list(b"abcXYZghij")
    return pair_ids(src, src[::-1]), pair_ids(bad, bad[::-1])


def loss(model, ids):
    with torch.no_grad():
        logits = model(ids.source, ids.target).logits[:, :-1]
    return float(F.cross_entropy(logits.transpose(1, 2), ids.target[:, 1:]))


def test_zero_ablation_of_each_kind_equals_zeroed_output_columns():
    model = perturbed()
    ids, held = clean_and_corrupted()
    got = ablate(model, ids, [("cross", 1, 2), ("encoder", 0, 1), ("self", 0, 3)], heldout=held)
    cut = perturbed()
    cut.load_state_dict(model.state_dict())
    with torch.no_grad():
        cut.decoder.blocks[1].cross.out_proj.weight[:, 16:24] = 0
        cut.encoder.blocks[0].attn.out_proj.weight[:, 8:16] = 0
        cut.decoder.blocks[0].attn.out_proj.weight[:, 24:32] = 0
    assert got.loss == pytest.approx(loss(model, ids), abs=1e-6)
    assert got.loss_ablated == pytest.approx(loss(cut, ids), abs=1e-5)
    assert got.heldout_ablated == pytest.approx(loss(cut, held), abs=1e-5)
    assert got.to_json()["heads"][0] == ["cross", 1, 2]


def test_mean_ablation_of_a_cross_head_folds_the_reference_mean_into_the_bias():
    model = perturbed(attn_bias="all")
    ids, ref = clean_and_corrupted()
    got = ablate(model, ids, [("cross", 0, 1)], mode="mean", reference=ref, heldout=ref)
    captured = {}
    proj = model.decoder.blocks[0].cross.out_proj
    handle = proj.register_forward_pre_hook(lambda m, a: captured.setdefault("z", a[0].detach().clone()))
    with torch.no_grad():
        model(ref.source, ref.target)
    handle.remove()
    mean = captured["z"][..., 8:16].reshape(-1, 8).mean(0)
    folded = perturbed(attn_bias="all")
    folded.load_state_dict(model.state_dict())
    with torch.no_grad():
        p = folded.decoder.blocks[0].cross.out_proj
        p.bias += p.weight[:, 8:16] @ mean
        p.weight[:, 8:16] = 0
    assert got.loss_ablated == pytest.approx(loss(folded, ids), abs=1e-5)
    assert set(head_means(model, ref)) >= {("self", 1, 3), ("cross", 0, 0), ("encoder", 1, 2)}


def test_patching_endpoints_are_exact_and_a_cross_head_matches_a_hooked_forward():
    model = perturbed(attn_bias="all")
    clean, bad = clean_and_corrupted()
    got = patch_heads(model, clean, bad)
    assert got.everything == 1.0 and got.nothing == 0.0
    assert got.cross.shape == (2, 4) and got.encoder.shape == (2, 4) and got.heads.shape == (2, 4)
    nxt_c, nxt_b = clean.target[0, 1:], bad.target[0, 1:]
    pos = torch.nonzero(nxt_c != nxt_b).flatten()
    assert got.positions == tuple(pos.tolist()) == (4, 5, 6)

    def ld(logits):
        lg = logits[0, pos].double()
        return float((lg.gather(1, nxt_c[pos, None]) - lg.gather(1, nxt_b[pos, None])).mean())

    with torch.no_grad():
        lc, lx = ld(model(clean.source, clean.target).logits), ld(model(bad.source, bad.target).logits)
    assert got.clean == pytest.approx(lc, abs=1e-6) and got.corrupted == pytest.approx(lx, abs=1e-6)
    for stack, l, h in (("cross", 1, 0), ("encoder", 0, 2)):
        proj = (model.decoder.blocks[l].cross if stack == "cross" else model.encoder.blocks[l].attn).out_proj
        store = {}
        hook = proj.register_forward_pre_hook(lambda m, a: store.setdefault("z", a[0].detach().clone()))
        with torch.no_grad():
            model(clean.source, clean.target)
        hook.remove()

        def swap(m, a):
            z = a[0].clone()
            z[..., h * 8 : (h + 1) * 8] = store["z"][..., h * 8 : (h + 1) * 8]
            return (z,)

        hook = proj.register_forward_pre_hook(swap)
        with torch.no_grad():
            lp = ld(model(bad.source, bad.target).logits)
        hook.remove()
        grid = got.cross if stack == "cross" else got.encoder
        assert float(grid[l, h]) == pytest.approx((lp - lx) / (lc - lx), abs=1e-4)
    js = got.to_json()
    assert len(js["cross"]) == 2 and len(js["encoder_ffn"]) == 2 and js["checks"]["everything_patched"] == 1.0


def test_patching_refuses_pairs_of_other_lengths():
    model = perturbed()
    clean, _ = clean_and_corrupted()
    short = pair_ids(list(b"abcdefghi"), list(b"ihgfedcba"))
    with pytest.raises(ConfigError) as e:
        patch_heads(model, clean, Seq2SeqIds(short.source, clean.target))
    assert e.value.field == "corrupted" and "source" in str(e.value)


def test_default_corruption_changes_a_source_word_and_its_mirror():
    src, tgt = seq2seq_default_pair("abc hello", "olleh cba")
    assert src == "abc ifmmp" and tgt == "pmmfi cba"
    assert seq2seq_default_pair("0123", "0123") == ("1234", "1234")  # copy: the word itself
    with pytest.raises(ConfigError) as e:
        seq2seq_default_pair("hello", "world")
    assert e.value.field == "corrupted"


def test_default_reference_is_the_reverse_task_at_the_bundles_length():
    from explorer.training.bundle import RECIPES

    recipe = RECIPES["encoder_decoder"]
    assert TRAINED_SOURCE == (recipe.seq_len - 1) // 2
    ref = reference_ids(ModelConfig(**SMALL))
    assert ref.source.shape[1] == TRAINED_SOURCE and torch.equal(ref.target[:, 1:], ref.source.flip(1))
