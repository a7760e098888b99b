"""``save_gpt_oss``: a gpt-oss-shaped catalogue model (learned sinks, q/k/v/o biases, a sliding / full schedule,
``moe_swiglu_clamped`` experts, YaRN or plain RoPE) written as a Hub folder; ``transformers``' own model read from
it gives our logits (1e-4 absolute), ``models.hf.load`` reads it back as the same config, and what the family
cannot express is refused naming the field. ``save_llama`` writes YaRN as ``rope_scaling`` the same way."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.hf import load
from models.hf.export import save_gpt_oss, save_llama

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=256,
    max_len=1024,
    n_layers=4,
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    d_ff=24,
    norm="rmsnorm",
    norm_placement="pre",
    ffn="moe_swiglu_clamped",
    n_experts=4,
    top_k=2,
    swiglu_limit=1.5,
    position="rope",
    attn_bias="all",
    attn_sinks=True,
    attention="sliding_window",
    layer_schedule="sliding_window,full",
    window=3,
)
CONFIGS = {
    "yarn": ModelConfig(**BASE, yarn_factor=4.0, yarn_original_max_len=256, yarn_truncate=False).validate(),
    "yarn_attention_factor": ModelConfig(
        **BASE, rope_base=500.0, yarn_factor=8.0, yarn_original_max_len=64, yarn_attention_factor=1.2
    ).validate(),
    "plain_rope": ModelConfig(**BASE).validate(),
}


def _model(cfg, tied=False):
    model = build_model(cfg).eval()
    if tied:
        model.head.weight = model.embed.weight
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight larger than its init, norms off 1, sinks and biases off 0: each term matters
        for name, p in model.named_parameters():
            p.add_((0.2 if "norm" in name else 0.3) * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformers_reads_the_same_logits(tmp_path, name):
    cfg = CONFIGS[name]
    model = _model(cfg, tied=name == "plain_rope")
    save_gpt_oss(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert type(hf).__name__ == "GptOssForCausalLM"
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours, theirs = model(x).logits, hf(input_ids=x).logits
    assert float((ours - theirs).abs().max()) <= 1e-4
    back = load(tmp_path)
    assert back.config.to_dict() == {**cfg.to_dict(), "seed": back.config.seed}
    with torch.no_grad():
        assert float((back.model(x).logits - ours).abs().max()) <= 1e-5


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(attn_sinks=False), "attn_sinks"),
        (dict(attn_bias="qkv"), "attn_bias"),
        (dict(ffn="moe", capacity_factor=2.0), "ffn"),
        (dict(norm_placement="post"), "norm_placement"),
        (dict(layer_schedule="sliding_window,chunked"), "layer_schedule"),
    ],
)
def test_what_gpt_oss_cannot_express_is_refused_by_name(tmp_path, changes, field):
    cfg = CONFIGS["yarn"].replace(**changes).validate()
    with pytest.raises(ConfigError) as e:
        save_gpt_oss(build_model(cfg), cfg, tmp_path)
    assert e.value.field == field


@pytest.mark.parametrize("truncate", [True, False])
def test_save_llama_writes_yarn_that_transformers_reads(tmp_path, truncate):
    cfg = ModelConfig(
        vocab_size=256,
        max_len=64,
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        d_ff=64,
        norm="rmsnorm",
        ffn="swiglu",
        position="rope",
        yarn_factor=4.0,
        yarn_original_max_len=16,
        yarn_beta_fast=8.0,
        yarn_beta_slow=0.5,
        yarn_truncate=truncate,
    ).validate()
    model = _model(cfg)
    save_llama(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours, theirs = model(x).logits, hf(input_ids=x).logits
        plain = _broken_yarn(model, cfg)(x).logits
    assert float((ours - theirs).abs().max()) <= 1e-4
    assert float((plain - theirs).abs().max()) > 1e-2  # so the comparison can fail
    assert load(tmp_path).config.to_dict() == {**cfg.to_dict(), "seed": 0}


def _broken_yarn(model, cfg):
    other = build_model(cfg.replace(yarn_factor=None)).eval()
    other.load_state_dict(model.state_dict())
    return other
