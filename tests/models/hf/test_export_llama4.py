"""``save_llama4``: a Llama-4-shaped catalogue model written as a ``llama4_text`` folder; transformers'
``Llama4ForCausalLM`` (eager) reads the same logits within 1e-4, the loader the same config, and what Llama 4
cannot express is refused by name."""

import pytest
import torch

from models import ModelConfig, build_model
from models.errors import ConfigError
from models.hf import load, save_llama4

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=80,
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    n_layers=4,
    norm="rmsnorm",
    norm_placement="pre",
    position="rope",
    rope_base=10_000.0,
    norm_eps=1e-5,
    attention="chunked",
    attention_chunk_size=5,
    layer_schedule="chunked:dense,chunked,chunked:dense,full:nope",
    qk_norm="rms_rope",
    attn_temp_floor=3,
    attn_temp_scale=0.6,
    ffn="moe_llama4",
    n_experts=3,
    top_k=2,
    d_ff=24,
    dense_d_ff=40,
)


def _model(**changes):
    cfg = ModelConfig(**{**BASE, **changes}).validate()
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():  # larger weights than the init's, and norm gains away from 1, so every weight matters
        for name, p in model.named_parameters():
            p.mul_(2.0) if "norm" not in name else p.add_(0.2 * torch.randn_like(p))
    return cfg, model


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(attn_bias="all", top_k=1, dense_d_ff=None),
        dict(layer_schedule="chunked*3,full:nope", attention="full", attn_temp_floor=None, dense_d_ff=None),
        dict(ffn="swiglu", layer_schedule="full,full:nope", attention="full", d_ff=40, dense_d_ff=None),
    ],
)
def test_transformers_reads_the_same_logits(tmp_path, changes):
    cfg, model = _model(**changes)
    p = save_llama4(model, cfg, tmp_path, dtype=torch.float32)
    assert p.family == "llama4" and p.n_params == sum(t.numel() for t in model.parameters())
    back = p.config
    kinds = [(c.attention, c.position, c.ffn, c.qk_norm) for c in (back.layer_config(i) for i in range(4))]
    assert kinds == [(c.attention, c.position, c.ffn, c.qk_norm) for c in (cfg.layer_config(i) for i in range(4))]
    assert (back.ffn, back.qk_norm, back.attn_temp_floor) == (cfg.ffn, cfg.qk_norm, cfg.attn_temp_floor)
    hf = transformers.Llama4ForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = torch.randint(0, 80, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = model(ids).logits, hf(input_ids=ids).logits
        again = load(tmp_path).logits(ids)
    assert float((mine - theirs).abs().max()) <= 1e-4 < float(theirs.abs().max())
    assert float((again - mine).abs().max()) <= 1e-5


def test_a_tied_head_is_written_once(tmp_path):
    cfg, model = _model()
    model.head.weight = model.embed.weight
    save_llama4(model, cfg, tmp_path, dtype=torch.float32)
    loaded = load(tmp_path).model
    assert loaded.head.weight is loaded.embed.weight
    hf = transformers.Llama4ForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert hf.config.tie_word_embeddings
    ids = torch.randint(0, 80, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert float((model(ids).logits - hf(input_ids=ids).logits).abs().max()) <= 1e-4


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(ffn="moe", layer_schedule="chunked*3,full:nope", dense_d_ff=None), "ffn"),
        (dict(norm="layernorm"), "norm"),
        (dict(norm_placement="post"), "norm_placement"),
        (dict(dense_ffn="geglu"), "dense_ffn"),
        (dict(qk_norm="head"), "qk_norm"),
        (
            dict(
                attention="sliding_window", layer_schedule="sliding_window:dense,sliding_window*2,full:nope", window=4
            ),
            "attention",  # the first field read back otherwise: a sliding window is no Llama 4 layer
        ),
    ],
)
def test_what_llama4_cannot_express_is_refused_by_name(tmp_path, changes, field):
    cfg, model = _model(**changes)
    with pytest.raises(ConfigError) as e:
        save_llama4(model, cfg, tmp_path)
    assert e.value.field == field
    assert not (tmp_path / "config.json").exists()
