"""``save_gemma2`` and ``save_gemma3``: a Gemma-shaped catalogue model (sandwich RMSNorm, GeGLU with tanh GELU,
``embed_scale``, a sliding / full schedule; soft caps for Gemma 2, per-head q/k norm and per-kind RoPE bases for
Gemma 3) written as a Hub folder (norm gains as ``w = g - 1``); ``transformers``' own model read from it gives our
logits (1e-4 absolute), ``models.hf.load`` reads it back as the same config, and what the family cannot express is
refused naming the field."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.hf import load
from models.hf.export import save_gemma2, save_gemma3

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=256,
    max_len=64,
    n_layers=4,
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    d_ff=64,
    norm="rmsnorm",
    norm_placement="sandwich",
    ffn="geglu",
    gelu_approx="tanh",
    position="rope",
    norm_eps=1e-6,
    embed_scale=True,
    attention="sliding_window",
    layer_schedule="sliding_window,full",
    window=3,
)
GEMMA2 = ModelConfig(**BASE, softcap=2.0, final_softcap=3.0).validate()
GEMMA3 = ModelConfig(**BASE, qk_norm="head", rope_base=1e6, rope_local_base=100.0).validate()
SAVE = {"gemma2": (save_gemma2, GEMMA2, "Gemma2ForCausalLM"), "gemma3": (save_gemma3, GEMMA3, "Gemma3ForCausalLM")}


def _model(cfg):
    model = build_model(cfg).eval()
    model.head.weight = model.embed.weight  # Gemma ties its head
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight larger than its init, norms off 1: each term matters
        for name, p in model.named_parameters():
            p.add_((0.2 if "norm" in name else 0.3) * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize("family", list(SAVE))
def test_transformers_reads_the_same_logits(tmp_path, family):
    save, cfg, arch = SAVE[family]
    model = _model(cfg)
    save(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert type(hf).__name__ == arch
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, mine = hf(input_ids=x).logits, model(x).logits
    ckpt = load(tmp_path)
    assert ckpt.family == family and ckpt.config == cfg
    assert float((mine - want).abs().max()) < 1e-4
    assert float((ckpt.logits(x) - mine).abs().max()) < 1e-5


@pytest.mark.parametrize(
    "save,cfg,field",
    [
        (save_gemma2, GEMMA3, "qk_norm"),  # Gemma 2 has no query/key norm
        (save_gemma2, GEMMA2.replace(embed_scale=False), "embed_scale"),
        (save_gemma2, GEMMA2.replace(norm_placement="pre"), "norm_placement"),
        (save_gemma2, GEMMA2.replace(gelu_approx="none"), "gelu_approx"),
        (save_gemma2, GEMMA2.replace(rope_scale=2.0), "rope_scale"),
        (save_gemma3, GEMMA3.replace(layer_schedule="dilated_window,full"), "attention"),
        (save_gemma3, GEMMA3.replace(qk_norm="none"), "qk_norm"),
    ],
)
def test_a_config_the_family_cannot_express_is_refused_by_name(tmp_path, save, cfg, field):
    with pytest.raises(ConfigError) as e:
        save(build_model(cfg), cfg, tmp_path)
    assert e.value.field == field
    assert not (tmp_path / "model.safetensors").exists()
