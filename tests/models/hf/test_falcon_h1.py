"""The Falcon-H1 reader (``models/hf/falcon_h1.py``): tiny checkpoints written by transformers' own
``FalconH1ForCausalLM`` load as ``layer="parallel_hybrid"`` models with ``parallel_mixer="mamba2"`` and give
transformers' logits (its torch path: no mamba_ssm kernels here) within 1e-4, for each Mamba output norm, biases,
a tied head with and without multipliers, a head width apart from d / heads and ``mamba_d_ssm`` null; each term
matters (a model without it is further than 1e-2 off), and what the catalogue cannot express is refused by name.
The test model with every multiplier away from 1 is also in test_logits.py (padding, shards)."""

import json
import shutil

import pytest
import torch
from hf_models import VOCAB, make

from models import ConfigError
from models.hf import load, plan

ATOL = 1e-4


def _ids(seed=1, B=2, L=16):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _diff(ckpt, hf, ids=None) -> float:
    ids = _ids() if ids is None else ids
    with torch.no_grad():
        return float((ckpt.logits(ids) - hf(input_ids=ids).logits).abs().max())


def test_the_checkpoint_maps_to_attention_and_mamba2_side_by_side(saved):
    p = plan(saved("falcon_h1")[0])
    cfg = p.config
    assert (cfg.layer, cfg.attention, cfg.parallel_mixer, cfg.norm, cfg.norm_placement, cfg.ffn) == (
        "parallel_hybrid",
        "full",
        "mamba2",
        "rmsnorm",
        "pre",
        "swiglu",
    )
    assert (cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_groups, cfg.ssm_state, cfg.ssm_norm) == (4, 8, 2, 8, "before_gate")
    assert any("ssm_multipliers" in n for n in p.notes) and any("parallel_hybrid" in n for n in p.notes)


def test_every_multiplier_is_folded_and_each_one_matters(saved, tmp_path):
    """The saved model's logits agree; the same weights read with any one multiplier at 1 do not."""
    folder, hf = saved("falcon_h1")
    assert _diff(load(folder), hf) < ATOL
    for key, plain in (
        ("embedding_multiplier", 1.0),
        ("lm_head_multiplier", 1.0),
        ("attention_out_multiplier", 1.0),
        ("key_multiplier", 1.0),
        ("attention_in_multiplier", 1.0),
        ("ssm_in_multiplier", 1.0),
        ("ssm_out_multiplier", 1.0),
        ("ssm_multipliers", [1.0] * 5),
        ("mlp_multipliers", [1.0] * 2),
    ):
        changed = tmp_path / key
        shutil.copytree(folder, changed)
        cfg = json.loads((changed / "config.json").read_text())
        cfg[key] = plain
        (changed / "config.json").write_text(json.dumps(cfg))
        assert _diff(load(changed), hf) > 1e-2, key


@pytest.mark.parametrize(
    "changes",
    [
        {"mamba_rms_norm": False},  # y * silu(z), no norm
        {"mamba_norm_before_gate": False},  # RMSNorm(y * silu(z)): Mamba-2's own
        {"attention_bias": True, "mamba_proj_bias": True, "projectors_bias": True, "mamba_conv_bias": False},
        {"attention_bias": True},  # the mixer's biases filled with zeros
        {"tie_word_embeddings": True, "embedding_multiplier": 1.0, "lm_head_multiplier": 1.0},
        {"tie_word_embeddings": True},  # tied, multipliers apart: read as two tables
        {"head_dim": 16},  # attention heads of 16 at d 32 and 4 heads
        {"mamba_d_ssm": None, "mamba_expand": 2, "mamba_n_heads": 8},  # width 2 d, heads of 8
    ],
    ids=["no_norm", "norm_after_gate", "biases", "attention_bias", "tied", "tied_scaled", "head_dim", "expand"],
)
def test_variants_agree_with_transformers(tmp_path, changes):
    hf = make("falcon_h1", tmp_path, **changes)
    ckpt = load(tmp_path)
    assert _diff(ckpt, hf) < ATOL
    # the Mamba branch writes: without it the logits are far off (so the agreement is not attention's alone)
    with torch.no_grad():
        for block in ckpt.model.stack.blocks:
            block.mixer.out_proj.weight.zero_()
    assert _diff(ckpt, hf) > 1e-2


def test_the_tied_head_stays_tied_only_when_no_multiplier_tells_the_tables_apart(tmp_path):
    make("falcon_h1", tmp_path / "plain", tie_word_embeddings=True, embedding_multiplier=1.0, lm_head_multiplier=1.0)
    make("falcon_h1", tmp_path / "scaled", tie_word_embeddings=True)
    plain, scaled = load(tmp_path / "plain").model, load(tmp_path / "scaled").model
    assert plain.head.weight is plain.embed.weight
    assert scaled.head.weight is not scaled.embed.weight
    torch.testing.assert_close(scaled.head.weight / 0.7, scaled.embed.weight / 1.5)


def test_a_literal_infinity_in_time_step_limit_is_read(saved, tmp_path):
    """Older writers spell the upper clamp as the bare literal Infinity, transformers 5 as {"__float__": ...}."""
    folder, hf = saved("falcon_h1")
    dst = tmp_path / "literal"
    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg["time_step_limit"][1] == {"__float__": "Infinity"}
    cfg["time_step_limit"] = "LIMIT"
    (dst / "config.json").write_text(json.dumps(cfg).replace('"LIMIT"', "[0.0, Infinity]"))
    assert _diff(load(dst), hf) < ATOL


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("hidden_act", "gelu", "silu"),
        ("mlp_bias", True, "SwiGLU has no biases"),
        ("time_step_limit", [0.0, 10.0], "does not clamp"),
        ("time_step_limit", [0.001, {"__float__": "Infinity"}], "does not clamp"),
        ("mamba_d_head", 4, "heads x head width"),
        ("ssm_multipliers", [1.0, 2.0], "5 finite numbers"),
        ("rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, "not supported"),
    ],
)
def test_settings_the_catalogue_cannot_express_are_refused_by_name(saved, tmp_path, key, value, words):
    folder, _ = saved("falcon_h1")
    dst = tmp_path / "refused"
    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg[key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        plan(dst)
    assert key.split("_")[0] in e.value.field and words in str(e.value)
