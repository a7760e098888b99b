"""The one Q/K/V projection helper: its head split against a plain reference, its parameter count,
and the sublayers that share it (names of their weights are what checkpoints are saved by)."""

import pytest
import torch

from models import ModelConfig, build_model
from models.blocks import Attention
from models.encdec import CrossAttention
from models.qkv import QKVProjection, projection_params


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_project_and_merge_match_a_plain_reference(n_kv_heads):
    cfg = ModelConfig(d_model=24, n_heads=4, n_kv_heads=n_kv_heads)
    torch.manual_seed(0)
    proj = QKVProjection(cfg)
    xq, xkv = torch.randn(2, 5, 24), torch.randn(2, 7, 24)
    q, k, v = proj.project(xq, xkv)
    h, hkv, dh = 4, cfg.kv_heads, 6
    # head n of q reads output features n*d_h .. (n+1)*d_h - 1 of W_q x
    wq = proj.q_proj.weight.view(h, dh, 24)
    wk = proj.k_proj.weight.view(hkv, dh, 24)
    wv = proj.v_proj.weight.view(hkv, dh, 24)
    torch.testing.assert_close(q, torch.einsum("hed,bld->bhle", wq, xq))
    torch.testing.assert_close(k, torch.einsum("hed,bld->bhle", wk, xkv))
    torch.testing.assert_close(v, torch.einsum("hed,bld->bhle", wv, xkv))
    assert q.shape == (2, h, 5, dh) and k.shape == v.shape == (2, hkv, 7, dh)
    out = torch.randn(2, h, 5, dh)
    concat = torch.cat([out[:, n] for n in range(h)], dim=-1)  # (B, L, h * d_h), head 0 first
    torch.testing.assert_close(proj.merge(out), concat @ proj.out_proj.weight.T)
    assert projection_params(cfg) == sum(p.numel() for p in proj.parameters())


def test_every_attention_sublayer_shares_it_and_keeps_its_weight_names():
    cfg = ModelConfig(architecture="encoder_decoder", n_layers=1, d_model=16, n_heads=2, n_kv_heads=1).validate()
    model = build_model(cfg)
    block = model.decoder.blocks[0]
    assert isinstance(block.attn, Attention) and isinstance(block.cross, CrossAttention)
    assert isinstance(block.attn, QKVProjection) and isinstance(block.cross, QKVProjection)
    names = set(model.state_dict())
    for sub in ("attn", "cross"):
        for p in ("q_proj", "k_proj", "v_proj", "out_proj"):
            assert f"decoder.blocks.0.{sub}.{p}.weight" in names
