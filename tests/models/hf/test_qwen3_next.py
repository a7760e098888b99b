"""The Qwen3-Next reader: transformers writes tiny random ``Qwen3NextForCausalLM`` checkpoints (Gated DeltaNet and
gated full-attention layers, partial RoPE, experts with a gated shared expert, a dense layer); our reader maps them
onto catalogue choices and its logits agree with transformers' forward (its torch path) to 1e-4; the (1 + w) norm
weights are converted; the default layer kinds; refusals by name. (test_logits.py runs the family too.)"""

import json
import shutil

import pytest
import torch
from hf_models import VOCAB, make

from models import ConfigError
from models.hf import load, plan


def _ids(seed=0, B=2, L=16):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "changes,schedule,ffn",
    [
        ({}, "gated_deltanet,gated_deltanet:dense,gated_deltanet,full", "moe_qwen"),
        ({"num_experts": 0}, "gated_deltanet*3,full", "swiglu"),
    ],
)
def test_logits_agree_with_transformers(tmp_path, changes, schedule, ffn):
    hf = make("qwen3_next", tmp_path, **changes)
    ckpt = load(tmp_path)
    cfg = ckpt.config
    assert (cfg.layer_schedule, cfg.attention, cfg.ffn) == (schedule, "full", ffn)
    assert (cfg.qk_norm, cfg.attn_gate, cfg.rope_fraction, cfg.head_dim) == ("head", "elementwise", 0.5, None)
    assert (cfg.delta_key_heads, cfg.delta_value_heads, cfg.delta_key_dim, cfg.delta_value_dim, cfg.delta_conv) == (
        2,
        4,
        8,
        6,
        3,
    )
    for seed in range(2):
        ids = _ids(seed)
        with torch.no_grad():
            want = hf(input_ids=ids).logits
            assert want.abs().max() > 1  # weights drawn at 0.3: large logits, every weight matters
            assert (ckpt.logits(ids) - want).abs().max() < 1e-4
    blocks = ckpt.model.stack.blocks
    gate = blocks[3].attn.gate_proj.weight  # the gate rows of the fused q_proj, per head after its query rows
    q_proj = hf.model.layers[3].self_attn.q_proj.weight.view(4, 2, 8, 32)
    torch.testing.assert_close(gate, q_proj[:, 1].reshape(32, 32))
    norm = hf.model.layers[3].self_attn.q_norm.weight  # zero-centred: the gain is 1 + w
    torch.testing.assert_close(blocks[3].attn.q_norm.weight, 1 + norm)
    gated = hf.model.layers[0].linear_attn.norm.weight  # the gated norm's weight is a plain gain
    torch.testing.assert_close(blocks[0].attn.core.norm.weight, gated)


def test_default_layer_kinds_and_sparse_step(tmp_path):
    """Without ``layer_types`` every fourth layer is full (Qwen3NextConfig's default); ``decoder_sparse_step`` 2:
    MoE in the odd layers, the others dense."""
    hf = make("qwen3_next", tmp_path, decoder_sparse_step=2, mlp_only_layers=[])
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ckpt = load(tmp_path)
    assert ckpt.config.layer_schedule == "gated_deltanet:dense,gated_deltanet,gated_deltanet:dense,full"
    ids = _ids(3)
    with torch.no_grad():
        assert (ckpt.logits(ids) - hf(input_ids=ids).logits).abs().max() < 1e-4


@pytest.mark.parametrize(
    "key,value",
    [
        ("attention_bias", True),
        ("hidden_act", "gelu"),
        ("layer_types", ["linear_attention", "sliding_attention", "linear_attention", "full_attention"]),
        ("partial_rotary_factor", 0.375),  # int(8 * 0.375) = 3 rotated dims: odd
    ],
)
def test_refusals_name_the_field(tmp_path, saved, key, value):
    folder, _ = saved("qwen3_next")
    shutil.copytree(folder, tmp_path / "q")
    cfg = json.loads((tmp_path / "q" / "config.json").read_text())
    if key == "partial_rotary_factor":
        cfg["rope_parameters"][key] = value
    else:
        cfg[key] = value
    (tmp_path / "q" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        plan(tmp_path / "q")
    assert key in e.value.field
