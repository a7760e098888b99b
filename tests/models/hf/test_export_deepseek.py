"""``save_deepseek_v3``: a DeepSeek-V3-shaped catalogue model (MLA, ``moe_deepseek``, dense first layers) written
as a Hub folder; ``transformers``' own model read from it gives our logits (1e-4 absolute), ``models.hf.load`` reads
it back as the same config, and what the family cannot express is refused naming the field."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.hf import load
from models.hf.export_deepseek import save_deepseek_v3

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=256,
    max_len=64,
    n_layers=3,
    d_model=32,
    n_heads=4,
    attention="mla",
    position="rope",
    rope_base=500.0,
    norm="rmsnorm",
    norm_placement="pre",
    norm_eps=1e-6,
    q_lora_rank=12,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=12,
    ffn="moe_deepseek",
    d_ff=12,
    n_experts=8,
    top_k=2,
    n_group=2,
    topk_group=1,
    n_shared_experts=1,
    routed_scaling=2.5,
)
MOE = ModelConfig(**BASE).validate()
DENSE = ModelConfig(**BASE, layer_schedule="mla:dense,mla*2", dense_d_ff=40).validate()
PLAIN = ModelConfig(**{**BASE, "q_lora_rank": 0, "rope_interleave": False, "norm_topk_prob": False}).validate()
MOE_FIELDS = ("n_experts", "top_k", "n_group", "topk_group", "n_shared_experts", "routed_scaling")
ALL_DENSE = ModelConfig(
    **{**{k: v for k, v in BASE.items() if k not in MOE_FIELDS}, "ffn": "swiglu", "d_ff": 40}
).validate()
# DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim = 1) with a RoPE part wider than d_model / n_heads
YARN = MOE.replace(
    max_len=320,
    qk_rope_head_dim=12,
    yarn_factor=40.0,
    yarn_original_max_len=8,
    yarn_attention_factor=1.0,
    yarn_mscale_all_dim=1.0,
).validate()
CONFIGS = {"moe": MOE, "dense_first": DENSE, "plain_query": PLAIN, "all_dense": ALL_DENSE, "yarn": YARN}


def _model(cfg):
    model = build_model(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight larger than its init, norms off 1, a selection bias that changes choices
        for name, p in model.named_parameters():
            p.add_((0.1 if "norm" in name else 0.15) * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_transformers_reads_the_same_logits(tmp_path, name):
    cfg = CONFIGS[name]
    model = _model(cfg)
    save_deepseek_v3(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert type(hf).__name__ == "DeepseekV3ForCausalLM"
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, mine = hf(input_ids=x).logits, model(x).logits
    ckpt = load(tmp_path)
    assert ckpt.family == "deepseek_v3" and ckpt.config == cfg
    assert want.abs().max() > 0.5
    assert float((mine - want).abs().max()) < 1e-4
    assert float((ckpt.logits(x) - mine).abs().max()) < 1e-5


@pytest.mark.parametrize("attention_factor", [1.0, None])
def test_yarn_is_written_as_transformers_reads_it(tmp_path, attention_factor):
    """``rope_parameters`` of type yarn with ``mscale_all_dim``: transformers' attention scale is multiplied by
    ``(0.1 ln 40 + 1)^2`` and its cos / sin by the attention factor (the paper's ``0.1 ln 40 + 1`` when none is
    written), as ours."""
    cfg = YARN.replace(yarn_attention_factor=attention_factor)
    save_deepseek_v3(_model(cfg), cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    rope = hf.config.rope_parameters
    assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == ("yarn", 40.0, 8)
    assert rope["mscale_all_dim"] == 1.0 and rope.get("attention_factor") == attention_factor
    m = 0.1 * math.log(40.0) + 1
    assert hf.model.layers[0].self_attn.scaling == pytest.approx(m * m / math.sqrt(8 + 12), rel=1e-12)
    assert hf.model.rotary_emb.attention_scaling == pytest.approx(attention_factor or m, rel=1e-12)
    assert load(tmp_path).config == cfg


def test_a_tied_head_is_written_once(tmp_path):
    model = _model(MOE)
    model.head.weight = model.embed.weight
    p = save_deepseek_v3(model, MOE, tmp_path, dtype=torch.float32)
    assert p.hf_config["tie_word_embeddings"] is True and "lm_head.weight" not in p.headers


@pytest.mark.parametrize(
    "cfg,field",
    [
        (MOE.replace(norm="layernorm"), "norm"),
        (MOE.replace(norm_placement="post"), "norm_placement"),
        (ModelConfig(**BASE, layer_schedule="mla,mla:dense,mla").validate(), "layer_schedule"),  # a later dense layer
        (MOE.replace(ffn="moe", n_group=1, topk_group=1), "ffn"),
        (MOE.replace(softcap=30.0), "softcap"),
        (DENSE.replace(dense_ffn="geglu"), "dense_ffn"),
    ],
)
def test_what_deepseek_cannot_express_is_refused(tmp_path, cfg, field):
    with pytest.raises(ConfigError) as e:
        save_deepseek_v3(build_model(cfg), cfg, tmp_path)
    assert e.value.field == field
