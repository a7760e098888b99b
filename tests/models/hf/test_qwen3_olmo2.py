"""The Qwen3 and OLMo 2 readers: which catalogue choices their config.json maps onto (per-head vs whole-projection
query/key norm, res-post-norm), the weights that carry them, and the settings read the way transformers reads
them (a sliding window in every Qwen3 layer; OLMo 2 ignoring a ``sliding_window`` key). Logits against
transformers with and without padding for the tiny models are in test_logits.py (every family of hf_models)."""

import json

import pytest
import torch
from hf_models import VOCAB, make

from models.hf import load, plan


def _ids(seed=1, B=2, L=12):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _rel(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def test_qwen3_maps_to_a_per_head_qk_norm(saved):
    p = plan(saved("qwen3")[0])
    cfg = p.config
    assert (cfg.qk_norm, cfg.norm_placement, cfg.norm, cfg.attn_bias, cfg.n_kv_heads) == (
        "head",
        "pre",
        "rmsnorm",
        "none",
        2,
    )
    assert any("qk_norm='head'" in n for n in p.notes)
    names = set(p.meta.state_dict())
    assert "stack.blocks.1.attn.q_norm.weight" in names and p.meta.stack.blocks[1].attn.k_norm.weight.shape == (8,)
    tied = plan(saved("qwen3_tied_bias")[0]).config
    assert tied.attn_bias == "all" and tied.n_kv_heads == 1  # Qwen3's attention_bias: q, k, v and o


def test_olmo2_maps_to_res_post_norm_and_a_whole_projection_qk_norm(saved):
    p = plan(saved("olmo2")[0])
    cfg = p.config
    assert (cfg.qk_norm, cfg.norm_placement, cfg.norm, cfg.norm_eps) == ("all", "res_post", "rmsnorm", 1e-6)
    attn = p.meta.stack.blocks[0].attn
    assert attn.q_norm.weight.shape == (32,) and attn.k_norm.weight.shape == (16,)  # 4 x 8 and 2 K/V heads x 8


def test_qwen3_sliding_window_in_every_layer_agrees_with_transformers(tmp_path):
    hf = make("qwen3", tmp_path, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    ckpt = load(tmp_path)
    assert (ckpt.config.attention, ckpt.config.window) == ("sliding_window", 4)
    ids = _ids()
    with torch.no_grad():
        assert _rel(ckpt.logits(ids), hf(input_ids=ids).logits) < 1e-4


def test_olmo2_ignores_a_sliding_window_key_as_transformers_does(saved, tmp_path):
    import shutil

    src, hf = saved("olmo2")
    folder = tmp_path / "olmo2"
    shutil.copytree(src, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["sliding_window"] = 2
    (folder / "config.json").write_text(json.dumps(cfg))
    ckpt = load(folder)
    assert ckpt.config.attention == "full"
    ids = _ids()
    with torch.no_grad():
        assert _rel(ckpt.logits(ids), hf(input_ids=ids).logits) < 1e-4


@pytest.mark.parametrize("family", ["qwen3", "olmo2"])
def test_the_qk_norm_gains_are_read_not_left_at_one(saved, family):
    folder, hf = saved(family)
    ckpt = load(folder)
    mine = ckpt.model.stack.blocks[0].attn.q_norm.weight
    theirs = hf.model.layers[0].self_attn.q_norm.weight
    torch.testing.assert_close(mine, theirs)
    assert not torch.allclose(mine, torch.ones_like(mine))
