"""The Gemma 3 (text) reader: its choices (Gemma 2's sandwich RMSNorms, GeGLU and embedding scale, plus a per-head
query/key norm with gains ``1 + w``, a RoPE base per layer kind, its layer pattern), the logits of transformers'
own eager forward within 1e-4 (absolute, float32) with and without padding, the terms whose absence breaks that
agreement (window, local RoPE base, q/k norm offset), and what is refused by name."""

import json

import pytest
import torch
from hf_models import make
from test_gemma2 import _broken, _diff, _edit, _ids, _want

from models.errors import ConfigError
from models.hf import load, plan

ATOL = 1e-4


def test_gemma3_maps_onto_catalogue_choices(saved):
    c = plan(saved("gemma3")[0]).config
    assert (c.norm_placement, c.ffn, c.gelu_approx, c.qk_norm, c.embed_scale) == (
        "sandwich",
        "geglu",
        "tanh",
        "head",
        True,
    )
    assert (c.attention, c.layer_schedule, c.window) == ("sliding_window", "sliding_window,full", 3)
    assert (c.rope_base, c.rope_local_base, c.softcap, c.final_softcap) == (1e6, 100.0, None, None)


def test_gemma3_logits_match_transformers(saved):
    folder, hf = saved("gemma3")
    ckpt = load(folder)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    got, want = ckpt.logits(ids, attention_mask=mask), _want(hf, ids, mask)
    assert _diff(got[mask.bool()], want[mask.bool()]) <= ATOL


@pytest.mark.parametrize("changes", [dict(window=2), dict(rope_local_base=None), dict(embed_scale=False)])
def test_each_gemma3_term_matters(saved, changes):
    folder, hf = saved("gemma3")
    ids = _ids(L=16)
    with torch.no_grad():
        assert _diff(_broken(load(folder), **changes)(ids).logits, _want(hf, ids)) > 1e-2


def test_qk_norm_offset_matters(saved):
    folder, hf = saved("gemma3")
    ckpt = load(folder)
    with torch.no_grad():
        for block in ckpt.model.stack.blocks:
            block.attn.q_norm.weight.sub_(1.0)  # the stored w as the gain, without Gemma's 1 +
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-2


def test_gemma3_default_pattern_and_old_rope_keys(tmp_path):
    hf = make(
        "gemma3",
        tmp_path,
        num_hidden_layers=7,
        sliding_window_pattern=6,
        rope_parameters=None,
        rope_theta=50_000.0,
        rope_local_base_freq=500.0,
    )
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.pop("layer_types"), cfg.pop("rope_parameters")
    cfg.update(sliding_window_pattern=6, rope_theta=50_000.0, rope_local_base_freq=500.0)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ckpt = load(tmp_path)
    c = ckpt.config
    assert (c.layer_schedule, c.rope_base, c.rope_local_base) == ("sliding_window*5,full", 50_000.0, 500.0)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(model_type="gemma3"), "model_type"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
        (dict(query_pre_attn_scalar=8), "query_pre_attn_scalar"),
        (
            dict(
                rope_parameters={
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                }
            ),
            "rope_scaling",
        ),
        (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4}), "rope_parameters"),
    ],
)
def test_gemma3_refusals_name_the_key(saved, tmp_path, changes, field):
    with pytest.raises(ConfigError) as e:
        plan(_edit(saved("gemma3")[0], tmp_path, **changes))
    assert field in e.value.field
