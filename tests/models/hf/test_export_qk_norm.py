"""``save_qwen3`` and ``save_olmo2``: a catalogue model with a query/key norm written as a Hub Qwen3 / OLMo 2
folder; ``transformers``' own model read from it gives our logits (1e-4 relative), ``models.hf.load`` reads it
back as the same model, and a config the family cannot express is refused naming the field."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.hf import load
from models.hf.export import save_llama, save_olmo2, save_qwen3

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=256,
    max_len=64,
    n_layers=2,
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    norm="rmsnorm",
    ffn="swiglu",
    position="rope",
    norm_eps=1e-6,
    rope_base=500.0,
)
QWEN3 = ModelConfig(**BASE, qk_norm="head").validate()
OLMO2 = ModelConfig(**BASE, qk_norm="all", norm_placement="res_post").validate()
SAVE = {"qwen3": (save_qwen3, QWEN3, "Qwen3ForCausalLM"), "olmo2": (save_olmo2, OLMO2, "Olmo2ForCausalLM")}


def _model(cfg, tied=False):
    model = build_model(cfg).eval()
    if tied:
        model.head.weight = model.embed.weight
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # norms (q/k norms included) moved off 1 so every gain matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize(
    "family,change",
    [
        ("qwen3", {}),
        ("qwen3", {"tied": True}),
        ("qwen3", {"attention": "sliding_window", "window": 4}),
        ("olmo2", {}),
        ("olmo2", {"n_kv_heads": 1, "rope_scale": 2.0}),
    ],
)
def test_transformers_reads_the_same_logits(tmp_path, family, change):
    change = dict(change)
    tied = change.pop("tied", False)
    save, base, arch = SAVE[family]
    cfg = base.replace(**change)
    model = _model(cfg, tied)
    save(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(hf).__name__ == arch
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, mine = hf(input_ids=x).logits, model(x).logits
    ckpt = load(tmp_path)
    assert ckpt.family == family and ckpt.config == cfg.replace(n_kv_heads=cfg.kv_heads, d_ff=ckpt.config.d_ff)
    assert float((mine - want).abs().max() / want.abs().max()) < 1e-4
    assert float((ckpt.logits(x) - mine).abs().max()) < 1e-5


@pytest.mark.parametrize(
    "save,cfg,field",
    [
        (save_llama, QWEN3, "qk_norm"),  # a Llama has no query/key norm
        (save_qwen3, OLMO2, "norm_placement"),
        (save_qwen3, QWEN3.replace(qk_norm="all"), "qk_norm"),
        (save_olmo2, QWEN3, "norm_placement"),
        (save_olmo2, OLMO2.replace(attention="sliding_window", window=4), "attention"),
        (save_olmo2, OLMO2.replace(rope_fraction=0.5), "rope_fraction"),
    ],
)
def test_a_config_the_family_cannot_express_is_refused_by_name(tmp_path, save, cfg, field):
    with pytest.raises(ConfigError) as e:
        save(build_model(cfg), cfg, tmp_path)
    assert e.value.field == field
    assert not (tmp_path / "model.safetensors").exists()
