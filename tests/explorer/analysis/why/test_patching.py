"""Ablation and activation patching: against the config's own head ablation, a mean folded into the output
bias, a plain forward with one head's write patched, and the exact endpoints (everything patched: the clean
run; nothing: the corrupted run)."""

import pytest
import torch
from plain_forward import PLAIN, perturbed, plain_run, sample_ids

from explorer.analysis.why.patching import ablate, default_pair, heldout_ids, patch_heads
from explorer.runtime.text import DEFAULT_TEXT
from models import ConfigError, ModelConfig, build_model


def pair():
    clean = sample_ids(6)
    corrupt = clean.clone()
    corrupt[0, 12:17] = (corrupt[0, 12:17] + 5) % PLAIN["vocab_size"]
    return clean, corrupt


def test_default_pair_changes_the_second_copy_of_the_password_only():
    clean, corrupt = default_pair(DEFAULT_TEXT)
    assert clean == DEFAULT_TEXT and len(corrupt.encode()) == len(clean.encode())
    word = max((w for w in set(clean.replace(";", " ").replace(".", " ").split()) if clean.count(w) > 1), key=len)
    first, second = clean.find(word), clean.find(word, clean.find(word) + 1)
    differ = [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b]
    assert differ == list(range(second, second + len(word))) and first < second
    with pytest.raises(ConfigError) as e:
        default_pair("no word here twice")
    assert e.value.field == "text"


def test_patching_endpoints_are_exact_and_a_head_matches_a_plain_patched_forward():
    model = perturbed()
    clean, corrupt = pair()
    got = patch_heads(model, clean, corrupt)
    assert got.everything == 1.0 and got.nothing == 0.0
    pos = torch.tensor(got.positions)
    assert torch.equal(pos, torch.nonzero(clean[0, 1:] != corrupt[0, 1:]).flatten())
    ref_clean, ref_corrupt = plain_run(model, clean), plain_run(model, corrupt)
    a, b = clean[0, 1:][pos], corrupt[0, 1:][pos]
    ld = lambda logits: float((logits[pos].gather(1, a[:, None]) - logits[pos].gather(1, b[:, None])).mean())  # noqa
    lc, lx = ld(ref_clean["logits"]), ld(ref_corrupt["logits"])
    assert got.clean == pytest.approx(lc, abs=1e-4) and got.corrupted == pytest.approx(lx, abs=1e-4)
    for l, h in ((0, 1), (1, 3)):
        patched = plain_run(model, corrupt, patch={(l, h): ref_clean["heads"][l][h]})
        assert float(got.heads[l, h]) == pytest.approx((ld(patched["logits"]) - lx) / (lc - lx), abs=1e-4)
    js = got.to_json()
    assert js["checks"] == {"everything_patched": 1.0, "nothing_patched": 0.0} and len(js["heads"]) == 2


def test_patching_refuses_texts_of_different_lengths_and_bad_positions():
    model = perturbed()
    clean, corrupt = pair()
    with pytest.raises(ConfigError) as e:
        patch_heads(model, clean, corrupt[:, :-1])
    assert e.value.field == "corrupted"
    with pytest.raises(ConfigError) as e:
        patch_heads(model, clean, corrupt, positions=[29])
    assert e.value.field == "positions"


def test_zero_ablation_equals_the_config_field():
    model, ids, held = perturbed(), sample_ids(7), sample_ids(8).repeat(3, 1)
    got = ablate(model, ids, [(1, 0), (0, 2)], heldout=held)
    other = build_model(ModelConfig(**{**PLAIN, "ablate_heads": "1.0, 0.2"}))
    other.load_state_dict(model.state_dict())
    ce = lambda m, x: float(torch.nn.functional.cross_entropy(m(x).logits[:, :-1].transpose(1, 2), x[:, 1:]).detach())  # noqa
    other.eval()
    assert got.loss == pytest.approx(ce(model, ids), abs=1e-6)
    assert got.loss_ablated == pytest.approx(ce(other, ids), abs=1e-6)
    assert got.heldout_ablated == pytest.approx(ce(other, held), abs=1e-6)
    assert got.to_json()["text"]["change"] == pytest.approx(got.loss_ablated - got.loss)


def test_mean_ablation_equals_the_reference_mean_folded_into_the_bias():
    model, ids, ref = perturbed(), sample_ids(9), sample_ids(10).repeat(2, 1)
    got = ablate(model, ids, [(1, 1)], mode="mean", reference=ref, heldout=ref)
    with torch.no_grad():
        z = plain_run(model, ref[:1])["heads"][1][1]  # (L, d): the head's write at every position of the text
        folded = perturbed()
        folded.load_state_dict(model.state_dict())
        proj = folded.stack.blocks[1].attn.out_proj
        proj.bias += z.mean(0).float()
        proj.weight[:, 8:16] = 0
        ce = float(torch.nn.functional.cross_entropy(folded(ids).logits[:, :-1].transpose(1, 2), ids[:, 1:]))
    assert got.loss_ablated == pytest.approx(ce, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"heads": [(0, 9)]}, "replace_heads"),
        ({"heads": ["x"]}, "heads"),
        ({"heads": [(0, 1)], "mode": "resample"}, "mode"),
    ],
)
def test_bad_ablation_requests_are_refused(kwargs, field):
    with pytest.raises(ConfigError) as e:
        ablate(perturbed(), sample_ids(), heldout=sample_ids(), **kwargs)
    assert e.value.field == field


def test_heldout_passage_is_the_first_bytes_of_the_split_in_windows():
    from explorer.analysis.surgery.loss import heldout_text

    held = heldout_ids(128)
    assert held.shape[1] == 128 and bytes(held.flatten().tolist()) == heldout_text()[: held.numel()]


def test_an_encoder_decoder_given_one_sequence_is_refused_naming_the_ids():
    from explorer.analysis.why.lens import logit_lens

    model = build_model(ModelConfig(**{**PLAIN, "architecture": "encoder_decoder"})).eval()
    for call in (
        lambda: logit_lens(model, sample_ids()),
        lambda: ablate(model, sample_ids(), [("self", 0, 0)]),
        lambda: patch_heads(model, *pair()),
    ):
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.field == "ids"
