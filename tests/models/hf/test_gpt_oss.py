"""The gpt-oss reader: the catalogue choices its config.json maps onto (learned sinks, alternating sliding / full
layers, YaRN RoPE, the clamped-SwiGLU experts), the logits of transformers' own eager forward within 1e-4
(absolute, float32) with and without padding, the terms whose absence breaks that agreement (so the comparison
can fail), ``GptOssConfig``'s defaults for what config.json omits, YaRN read for a Llama too, and the refusals."""

import json
import shutil

import pytest
import torch
from hf_models import VOCAB, build

from models.errors import ConfigError
from models.hf import load, plan
from models.model import build_model

ATOL = 1e-4


def _ids(seed=1, B=2, L=12):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _diff(got, want) -> float:
    return float((got - want).abs().max())


def _want(hf, ids, mask=None):
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask).logits


def _edit(src, tmp_path, drop=(), **changes):
    dst = tmp_path / "edited"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    for key in drop:
        cfg.pop(key, None)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_gpt_oss_maps_onto_catalogue_choices(saved):
    c = plan(saved("gpt_oss")[0]).config
    assert (c.norm_placement, c.norm, c.ffn, c.attn_bias, c.attn_sinks, c.norm_eps) == (
        "pre",
        "rmsnorm",
        "moe_swiglu_clamped",
        "all",
        True,
        1e-5,
    )
    assert (c.attention, c.layer_schedule, c.window, c.head_dim, c.n_kv_heads) == (
        "sliding_window",
        "sliding_window,full",
        3,
        16,
        2,
    )
    assert (c.n_experts, c.top_k, c.d_ff, c.swiglu_alpha, c.swiglu_limit) == (4, 2, 24, 1.702, 1.5)
    assert (c.rope_base, c.yarn_factor, c.yarn_original_max_len, c.yarn_truncate) == (10000.0, 4.0, 256, False)
    assert (c.yarn_beta_fast, c.yarn_beta_slow, c.yarn_attention_factor) == (32.0, 1.0, None)
    model = load(saved("gpt_oss")[0]).model
    assert model.head.weight is not model.embed.weight  # gpt-oss's head is its own


def test_gpt_oss_logits_match_transformers(saved):
    folder, hf = saved("gpt_oss")
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
    model = build_model(ckpt.config.replace(**changes)).eval()
    model.load_state_dict(ckpt.model.state_dict())
    return model


@pytest.mark.parametrize(
    "changes",
    [
        dict(window=4),
        dict(layer_schedule=""),
        dict(yarn_factor=None),  # plain RoPE: neither YaRN's angles nor its attention factor
        dict(yarn_attention_factor=1.0),  # YaRN's angles without the temperature
        dict(yarn_truncate=True),  # the ramp's bounds rounded outward
        dict(swiglu_limit=7.0),
        dict(swiglu_alpha=1.0),
        dict(top_k=1),
    ],
)
def test_each_gpt_oss_term_matters(saved, changes):
    folder, hf = saved("gpt_oss")
    ckpt = load(folder)
    ids = _ids(L=16)
    with torch.no_grad():
        assert _diff(_broken(ckpt, **changes)(ids).logits, _want(hf, ids)) > 1e-2


@pytest.mark.parametrize("name", ["sinks", "router.bias", "gate_up_proj_bias"])
def test_each_gpt_oss_tensor_matters(saved, name):
    folder, hf = saved("gpt_oss")
    ckpt = load(folder)
    with torch.no_grad():
        for key, p in ckpt.model.named_parameters():
            if key.endswith(name):
                p.zero_()
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-2


def test_gate_up_columns_are_interleaved(saved):
    """A reader that split gate / up by halves (gate = the first f columns) is far from transformers': the same
    model with each gate_up tensor permuted so that its even columns hold the first half."""
    folder, hf = saved("gpt_oss")
    ckpt = load(folder)
    with torch.no_grad():
        for key, p in ckpt.model.named_parameters():
            if key.endswith("gate_up_proj") or key.endswith("gate_up_proj_bias"):
                f = p.shape[-1] // 2
                p.copy_(torch.stack([p[..., :f], p[..., f:]], -1).reshape(p.shape))
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-2


def test_config_defaults_are_gpt_oss_configs(saved, tmp_path):
    """A config.json without rope_parameters, layer_types, head_dim or the expert settings reads as GptOssConfig
    fills them: YaRN factor 32 over 4096 positions (truncate false), rope_theta 150000, layers alternating from
    sliding, heads of 64, 4 of the experts, alpha 1.702, limit 7."""
    folder, _ = saved("gpt_oss")
    keep = {"model_type", "hidden_size", "num_attention_heads", "num_hidden_layers", "num_local_experts"}
    cfg = json.loads((folder / "config.json").read_text())
    dst = _edit(folder, tmp_path, drop=[k for k in cfg if k not in keep], head_dim=None)
    with pytest.raises(ConfigError):  # the defaults' sizes (vocab 201088 ...) no longer fit the tensors
        plan(dst)
    from models.hf import gpt_oss
    from models.hf.fields import Fields

    fields, _ = gpt_oss.config(Fields({k: cfg[k] for k in keep} | {"model_type": "gpt_oss"}))
    assert (fields["yarn_factor"], fields["yarn_original_max_len"], fields["yarn_truncate"]) == (32.0, 4096, False)
    assert (fields["rope_base"], fields["layer_schedule"], fields["window"]) == (150000.0, "sliding_window,full", 128)
    assert (fields["head_dim"], fields["top_k"], fields["swiglu_alpha"], fields["swiglu_limit"]) == (64, 4, 1.702, 7.0)
    assert (fields["n_kv_heads"], fields["attn_bias"], fields["norm_eps"]) == (8, "all", 1e-5)


def test_gpt_oss_default_yarn_logits_match_transformers(saved):
    """GptOssConfig's own YaRN (no rope_parameters given: factor 32 over 4096, base 150000) and tied embeddings."""
    folder, hf = saved("gpt_oss", rope_parameters=None, tie_word_embeddings=True)
    ckpt = load(folder)
    assert (ckpt.config.yarn_factor, ckpt.config.rope_base) == (32.0, 150000.0)
    assert ckpt.model.head.weight is ckpt.model.embed.weight
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL


@pytest.mark.parametrize("truncate", [True, False])
def test_llama_with_yarn_logits_match_transformers(tmp_path, truncate):
    """fields.rope reads YaRN for every family that reads RoPE through it: a Llama with YaRN."""
    yarn = {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "truncate": truncate,
        "beta_fast": 8.0,
        "beta_slow": 0.5,
    }
    hf = build("llama", rope_parameters=yarn, max_position_embeddings=64, initializer_range=0.3)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = load(tmp_path)
    assert (ckpt.config.yarn_factor, ckpt.config.yarn_truncate, ckpt.config.yarn_beta_slow) == (4.0, truncate, 0.5)
    ids = _ids(L=16)
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
    with torch.no_grad():
        assert _diff(_broken(ckpt, yarn_factor=None)(ids).logits, _want(hf, ids)) > 1e-2


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(quantization_config={"quant_method": "mxfp4"}), "quantization_config"),
        (dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}), "rope_scaling"),
        (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 0.5}), "rope_scaling"),
        (
            dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0, "partial_rotary_factor": 0.5}),
            "partial_rotary_factor",
        ),
        (
            dict(rope_parameters={"rope_type": "yarn", "factor": 2.0, "beta_fast": 1.0, "beta_slow": 2.0}),
            "rope_scaling",
        ),
        (dict(layer_types=["full_attention", "chunked_attention"] * 2), "layer_types"),
        (dict(layer_types=["full_attention"]), "layer_types"),
        (dict(sliding_window=None), "sliding_window"),
        (dict(num_local_experts=1000), "num_local_experts"),
        (dict(num_experts_per_tok=5), "num_experts_per_tok"),
    ],
)
def test_gpt_oss_refusals_name_the_key(saved, tmp_path, changes, field):
    folder, _ = saved("gpt_oss")
    with pytest.raises(ConfigError) as e:
        plan(_edit(folder, tmp_path, **changes))
    assert field in e.value.field


def test_released_spelling_rope_scaling_and_rope_theta(saved, tmp_path):
    """The released config.json spells YaRN as ``rope_scaling`` beside a top-level ``rope_theta`` (transformers 4's
    keys): read as the same model."""
    folder, hf = saved("gpt_oss")
    params = json.loads((folder / "config.json").read_text())["rope_parameters"]
    theta = params.pop("rope_theta")
    dst = _edit(folder, tmp_path, drop=["rope_parameters"], rope_scaling=params, rope_theta=theta)
    ckpt = load(dst)
    assert (ckpt.config.yarn_factor, ckpt.config.rope_base, ckpt.config.yarn_truncate) == (4.0, 10000.0, False)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
