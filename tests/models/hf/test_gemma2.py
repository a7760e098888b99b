"""The Gemma 2 reader: the catalogue choices its config.json maps onto (sandwich RMSNorms, GeGLU with tanh GELU,
alternating sliding / full layers, both soft caps, the embedding scale), the logits of transformers' own eager
forward within 1e-4 (absolute, float32) with and without padding, and the terms whose absence would break that
agreement (the window, the norms' ``1 + w``, the caps, the embedding scale), so the comparison can fail."""

import json
import shutil

import pytest
import torch
from hf_models import VOCAB

from models.errors import ConfigError
from models.hf import load, plan

ATOL = 1e-4


def _ids(seed=1, B=2, L=12):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _diff(got, want) -> float:
    return float((got - want).abs().max())


def _want(hf, ids, mask=None):
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask).logits


def test_gemma2_maps_onto_catalogue_choices(saved):
    p = plan(saved("gemma2")[0])
    c = p.config
    assert (c.norm_placement, c.norm, c.ffn, c.gelu_approx, c.attn_bias) == (
        "sandwich",
        "rmsnorm",
        "geglu",
        "tanh",
        "none",
    )
    assert (c.attention, c.layer_schedule, c.window, c.head_dim, c.n_kv_heads) == (
        "sliding_window",
        "sliding_window,full",
        3,
        16,
        2,
    )
    assert (c.softcap, c.final_softcap, c.embed_scale, c.norm_eps) == (2.0, 3.0, True, 1e-6)
    model = load(saved("gemma2")[0]).model
    assert model.head.weight is model.embed.weight  # tied, as Gemma's head is


def test_gemma2_logits_match_transformers(saved):
    folder, hf = saved("gemma2")
    ckpt = load(folder)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second row is 7 tokens, right-padded
    got, want = ckpt.logits(ids, attention_mask=mask), _want(hf, ids, mask)
    real = mask.bool()
    assert _diff(got[real], want[real]) <= ATOL


def _broken(ckpt, **changes):
    """The checkpoint's weights in a model of the same config with ``changes``."""
    from models.model import build_model

    model = build_model(ckpt.config.replace(**changes)).eval()
    model.load_state_dict(ckpt.model.state_dict())
    return model


@pytest.mark.parametrize(
    "changes",
    [dict(window=4), dict(softcap=None), dict(final_softcap=None), dict(embed_scale=False), dict(layer_schedule="")],
)
def test_each_gemma2_term_matters(saved, changes):
    folder, hf = saved("gemma2")
    ckpt = load(folder)
    ids = _ids(L=16)
    with torch.no_grad():
        assert _diff(_broken(ckpt, **changes)(ids).logits, _want(hf, ids)) > 1e-2


def test_norm_offset_matters(saved):
    folder, hf = saved("gemma2")
    ckpt = load(folder)
    with torch.no_grad():  # the stored w read as the gain (no 1 +): far from transformers
        ckpt.model.final_norm.weight.sub_(1.0)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-2


def _edit(src, tmp_path, **changes):
    dst = tmp_path / "edited"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(query_pre_attn_scalar=144), "query_pre_attn_scalar"),
        (dict(hidden_activation="gelu"), "hidden_activation"),
        (dict(final_logit_softcapping=-1.0), "final_logit_softcapping"),
        (dict(layer_types=["full_attention"]), "layer_types"),
        (dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), "rope_scaling"),
    ],
)
def test_gemma2_refusals_name_the_key(saved, tmp_path, changes, field):
    folder, _ = saved("gemma2")
    with pytest.raises(ConfigError) as e:
        plan(_edit(folder, tmp_path, **changes))
    assert field in e.value.field


def test_gemma2_without_caps_and_with_default_layer_types(saved, tmp_path):
    folder, _ = saved("gemma2")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("layer_types", None)
    cfg.update(attn_logit_softcapping=None, final_logit_softcapping=None)
    dst = _edit(folder, tmp_path, **cfg)
    c = plan(dst).config
    assert (c.softcap, c.final_softcap, c.layer_schedule) == (None, None, "sliding_window,full")
