"""The Mamba-2 reader (models/hf/mamba2.py): config.json onto the ``mamba2`` mixer, the logits of transformers'
``Mamba2ForCausalLM`` (its torch path: no CUDA kernels here) on texts longer than a chunk, for the plain test model
and one with tied embeddings, biases, no convolution bias and a head count that does not divide hidden_size; and the
refusals, each naming its config.json key. (test_logits.py runs the plain model with padding and shards too.)"""

import json
import shutil

import pytest
import torch
from hf_models import VOCAB, make

from models import ConfigError
from models.hf import load, plan

VARIANT = dict(
    tie_word_embeddings=True, use_bias=True, use_conv_bias=False, num_heads=6, head_dim=16, expand=3, n_groups=3
)


def _ids(seed=1, B=2, L=40):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def test_config_maps_onto_the_mamba2_mixer(saved):
    p = plan(saved("mamba2")[0])
    cfg = p.config
    assert (cfg.attention, cfg.position, cfg.ffn, cfg.norm_placement, cfg.norm) == (
        "mamba2",
        "none",
        "none",
        "pre",
        "rmsnorm",
    )
    assert (cfg.n_heads, cfg.ssm_heads, cfg.ssm_head_dim, cfg.ssm_state, cfg.ssm_groups, cfg.ssm_conv) == (
        8,
        None,
        8,
        8,
        2,
        4,
    )
    assert p.meta.stack.blocks[1].attn.core.in_proj.weight.shape == (64 + 64 + 2 * 2 * 8 + 8, 32)


@pytest.mark.parametrize("changes", [{}, VARIANT], ids=["plain", "tied_biases_no_conv_bias"])
def test_logits_match_transformers(saved, changes):
    folder, hf = saved("mamba2", **changes)
    ckpt = load(folder)
    ids = _ids()  # 40 tokens: five chunks of 8
    with torch.no_grad():
        want = hf(input_ids=ids).logits
    got = ckpt.logits(ids)
    assert float((got - want).abs().max()) < 1e-4
    if changes:
        model = ckpt.model
        assert model.head.weight is model.embed.weight
        core = model.stack.blocks[0].attn.core
        assert torch.equal(core.conv1d.bias, torch.zeros_like(core.conv1d.bias))
        assert (ckpt.config.n_heads, ckpt.config.ssm_heads, ckpt.config.attn_bias) == (1, 6, "all")


@pytest.mark.parametrize(
    "changes,key",
    [
        ({"expand": 3}, "expand"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rms_norm": False}, "rms_norm"),
        ({"time_step_limit": [0.0, 0.1]}, "time_step_limit"),
        ({"n_groups": 3}, "n_groups"),
    ],
)
def test_refusals_name_the_key(saved, tmp_path, changes, key):
    src, _ = saved("mamba2")
    folder = tmp_path / "m"
    shutil.copytree(src, folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    with pytest.raises(ConfigError) as e:
        plan(folder)
    assert key in str(e.value.field), e.value


def test_config_without_time_step_limit_is_read(tmp_path):
    make("mamba2", tmp_path)
    path = tmp_path / "config.json"
    hf = json.loads(path.read_text())
    hf.pop("time_step_limit")
    path.write_text(json.dumps(hf))
    assert plan(tmp_path).config.attention == "mamba2"
