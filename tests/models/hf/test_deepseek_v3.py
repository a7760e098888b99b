"""The DeepSeek-V3 reader: tiny random checkpoints written by transformers' own ``DeepseekV3ForCausalLM`` give
transformers' eager logits within 1e-4 (absolute, float32) with and without padding; each term of the family
(the selection bias, the group limit, the routed scale, the normalisation, the shared expert, the interleaved
RoPE) moves the logits when removed, so the comparison can fail; what the catalogue cannot express is refused
by name."""

import json
import math
import shutil

import pytest
import torch

from models.errors import ConfigError
from models.hf import load, plan

transformers = pytest.importorskip("transformers")

ATOL = 1e-4
VOCAB = 96
BASE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=40,
    moe_intermediate_size=12,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_group=2,
    topk_group=1,
    n_shared_experts=1,
    routed_scaling_factor=2.5,
    first_k_dense_replace=0,
    kv_lora_rank=16,
    q_lora_rank=None,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=12,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    initializer_range=0.2,
    attn_implementation="eager",
)
VARIANTS = {
    # a plain query projection, interleaved RoPE, top-2 of 8 in 1 of 2 groups, one shared expert
    "plain": {},
    # the low-rank query path, rotate-half RoPE, unnormalised weights, 4 groups, two shared experts, a tied head
    "lora": dict(
        q_lora_rank=12,
        rope_interleave=False,
        norm_topk_prob=False,
        n_group=4,
        topk_group=2,
        n_shared_experts=2,
        routed_scaling_factor=1.5,
        tie_word_embeddings=True,
    ),
    # DeepSeek-V3's dense first layers (first_k_dense_replace): the schedule's ':dense' layers
    "dense1": dict(first_k_dense_replace=1),
    "dense2": dict(num_hidden_layers=3, first_k_dense_replace=2, q_lora_rank=12),
    "all_dense": dict(first_k_dense_replace=2),  # every layer dense: ffn='swiglu', no schedule
    # a RoPE part wider than hidden_size / num_attention_heads (DeepSeek-V3: 64 against 7168 / 128 = 56)
    "wide_rope": dict(qk_rope_head_dim=12),
}


def _yarn(factor, original, mscale=1.0, mscale_all_dim=1.0):
    """DeepSeek-V2 / V3's YaRN settings (their configs: factor 40, original 4096, beta 32 / 1, mscale and
    mscale_all_dim 1), with a short original context so that the test's positions pass it."""
    return dict(
        max_position_embeddings=int(factor * original),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 500.0,
            "factor": factor,
            "original_max_position_embeddings": original,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": mscale,
            "mscale_all_dim": mscale_all_dim,
        },
    )


YARN = {
    # factor 4, mscale = mscale_all_dim = 1: cos / sin times 1, the softmax scale times (0.1 ln 4 + 1)^2
    "yarn4": _yarn(4.0, 16),
    # DeepSeek-V3's factor 40 with its wider RoPE part and the low-rank query path
    "yarn40": dict(**_yarn(40.0, 4), qk_rope_head_dim=12, q_lora_rank=12),
    # mscale_all_dim 0: no softmax term, cos / sin times the paper's 0.1 ln 40 + 1
    "yarn40_no_all_dim": _yarn(40.0, 4, mscale_all_dim=0),
    # unequal mscale / mscale_all_dim: cos / sin times their ratio, rotate-half layout
    "yarn_ratio": dict(**_yarn(16.0, 4, mscale=0.707, mscale_all_dim=0.5), rope_interleave=False),
}
VARIANTS.update(YARN)


def build(**changes):
    config = transformers.DeepseekV3Config(**{**BASE, **changes})
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1 and a selection bias large enough to change the experts chosen
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cache = {}

    def get(name, **changes):
        key = (name, tuple(sorted(changes.items())))
        if key not in cache:
            folder = tmp_path_factory.mktemp(name)
            model = build(**{**VARIANTS.get(name, {}), **changes})
            model.save_pretrained(folder, safe_serialization=True)
            cache[key] = folder, model
        return cache[key]

    return get


def _ids(seed=1, B=2, L=12):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _diff(got, want) -> float:
    return float((got - want).abs().max())


def _want(hf, ids, mask=None):
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask).logits


def test_deepseek_v3_maps_onto_catalogue_choices(saved):
    p = plan(saved("plain")[0])
    c = p.config
    assert (c.attention, c.position, c.norm_placement, c.norm, c.ffn) == (
        "mla",
        "rope",
        "pre",
        "rmsnorm",
        "moe_deepseek",
    )
    assert (c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim) == (0, 16, 8, 8, 12)
    assert (c.n_experts, c.top_k, c.n_group, c.topk_group, c.n_shared_experts, c.d_ff) == (8, 2, 2, 1, 1, 12)
    assert (c.routed_scaling, c.norm_topk_prob, c.rope_interleave, c.rope_base, c.n_kv_heads) == (
        2.5,
        True,
        True,
        500.0,
        None,
    )
    lora = plan(saved("lora")[0]).config
    assert (lora.q_lora_rank, lora.rope_interleave, lora.norm_topk_prob, lora.n_shared_experts) == (12, False, False, 2)
    model = load(saved("lora")[0]).model
    assert model.head.weight is model.embed.weight  # tie_word_embeddings
    one, two = plan(saved("dense1")[0]).config, plan(saved("dense2")[0]).config
    assert (one.layer_schedule, one.dense_ffn, one.dense_d_ff, one.ffn) == (
        "mla:dense,mla",
        "swiglu",
        40,
        "moe_deepseek",
    )
    assert two.layer_schedule == "mla:dense*2,mla" and [two.layer_config(i).ffn for i in range(3)] == [
        "swiglu",
        "swiglu",
        "moe_deepseek",
    ]
    every = plan(saved("all_dense")[0]).config
    assert (every.ffn, every.d_ff, every.layer_schedule) == ("swiglu", 40, "")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_deepseek_v3_logits_match_transformers(saved, name):
    folder, hf = saved(name)
    ckpt = load(folder)
    ids = _ids()
    want = _want(hf, ids)
    assert want.abs().max() > 1.0  # logits large enough that 1e-4 is a real bound
    assert _diff(ckpt.logits(ids), want) <= ATOL
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second row is 7 tokens, right-padded
    ids[1, 7:] = 0
    got, want = ckpt.logits(ids, attention_mask=mask), _want(hf, ids, mask)
    real = mask.bool()
    assert _diff(got[real], want[real]) <= ATOL


@pytest.mark.parametrize("name", list(VARIANTS))
def test_deepseek_v3_parameter_count(saved, name):
    folder, hf = saved(name)
    p, ckpt = plan(folder), load(folder)
    tied = VOCAB * 32 if hf.config.tie_word_embeddings else 0  # the catalogue's count has a head of its own
    assert (
        p.n_params
        == ckpt.n_params
        == sum(t.numel() for t in ckpt.model.parameters())
        == p.config.approx_params() - tied
    )
    assert ckpt.n_params == sum(t.numel() for t in hf.parameters())  # the bias is a buffer in both


def _broken(ckpt, **changes):
    """The checkpoint's weights in a model of the same config with ``changes``."""
    from models.model import build_model

    model = build_model(ckpt.config.replace(**changes)).eval()
    model.load_state_dict(ckpt.model.state_dict())
    return model


@pytest.mark.parametrize(
    "changes",
    [
        dict(routed_scaling=1.0),
        dict(norm_topk_prob=False),
        dict(n_group=1, topk_group=1),
        dict(rope_interleave=False),
        dict(top_k=1),
    ],
)
def test_each_deepseek_term_matters(saved, changes):
    folder, hf = saved("plain")
    ckpt = load(folder)
    ids = _ids(L=16)
    with torch.no_grad():
        assert _diff(_broken(ckpt, **changes)(ids).logits, _want(hf, ids)) > 1e-3


@pytest.mark.parametrize("which", ["e_score_correction_bias", "shared.w2.weight"])
def test_the_bias_and_the_shared_expert_matter(saved, which):
    folder, hf = saved("plain")
    ckpt = load(folder)
    with torch.no_grad():
        for name, t in list(ckpt.model.named_parameters()) + list(ckpt.model.named_buffers()):
            if name.endswith(which):
                t.zero_()
    ids = _ids(L=16)
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-3


def _edit(src, tmp_path, **changes):
    dst = tmp_path / "edited"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(rope_parameters={**_yarn(40.0, 4)["rope_parameters"], "mscale_all_dim": -1.0}), "rope_scaling"),
        (dict(rope_parameters={**_yarn(40.0, 4)["rope_parameters"], "mscale_all_dim": "1"}), "rope_scaling"),
        (
            dict(rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0, "mscale_all_dim": 1.0}),
            "rope_scaling",
        ),
        (dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 500.0, "factor": 2.0}), "rope_scaling"),
        (dict(attention_bias=True), "attention_bias"),
        (dict(num_key_value_heads=2), "num_key_value_heads"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(quantization_config={"quant_method": "fp8"}), "quantization_config"),
        (dict(scoring_func="softmax"), "scoring_func"),
        (dict(topk_method="greedy"), "topk_method"),
        (dict(moe_layer_freq=2), "moe_layer_freq"),
        (dict(n_group=None), "n_group"),
        (dict(n_group=3), "n_group"),  # 8 experts in 3 groups: the catalogue's check, under config.json's name
        (dict(num_experts_per_tok=5), "num_experts_per_tok"),  # 1 group of 4 reachable
        (dict(first_k_dense_replace=-1), "first_k_dense_replace"),
    ],
)
def test_deepseek_v3_refusals_name_the_key(saved, tmp_path, changes, field):
    folder, _ = saved("plain")
    with pytest.raises(ConfigError) as e:
        plan(_edit(folder, tmp_path, **changes))
    assert field in e.value.field


def test_linear_rope_scaling_is_read(saved, tmp_path):
    folder, _ = saved("plain")
    p = plan(_edit(folder, tmp_path, rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}))
    assert p.config.rope_scale == 2.0


def test_null_flags_read_as_transformers_reads_them(saved, tmp_path):
    """``rope_interleave`` / ``norm_topk_prob`` null are false in transformers' ``if``; ``q_lora_rank`` null is the
    plain projection, absent is DeepseekV3Config's 1536."""
    folder, _ = saved("plain")
    c = plan(_edit(folder, tmp_path, rope_interleave=None, norm_topk_prob=None)).config
    assert (c.rope_interleave, c.norm_topk_prob) == (False, False)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("q_lora_rank")
    (tmp_path / "absent").mkdir()
    shutil.copytree(folder, tmp_path / "absent" / "f")
    (tmp_path / "absent" / "f" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:  # the default rank asks for q_a_proj, which this checkpoint lacks
        plan(tmp_path / "absent" / "f")
    assert "q_a_proj" in str(e.value)


def test_multi_token_prediction_layers_are_left_unread(tmp_path):
    """A real checkpoint stores its MTP module as the layers after the last: read without them, with a note,
    and transformers' model of the same folder (which skips them too) gives the same logits."""
    big = build(num_hidden_layers=3)
    big.save_pretrained(tmp_path, safe_serialization=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(num_hidden_layers=2, num_nextn_predict_layers=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ckpt = load(tmp_path)
    assert ckpt.config.n_layers == 2 and any("multi-token" in n for n in ckpt.notes)
    hf = transformers.DeepseekV3ForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
    cfg.update(num_nextn_predict_layers=0)  # without the MTP count, the extra layer is an unknown weight
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        plan(tmp_path)
    assert "layers.2" in str(e.value.value)


def test_fused_expert_tensors_are_read(saved, tmp_path):
    """transformers' in-memory layout (``experts.gate_up_proj [E, 2I, d]``, ``experts.down_proj [E, d, I]``) as
    a checkpoint could store it: the same model."""
    from safetensors.torch import load_file, save_file

    folder, hf = saved("plain")
    dst = tmp_path / "fused"
    shutil.copytree(folder, dst)
    tensors = load_file(dst / "model.safetensors")
    for i in range(2):
        pre = f"model.layers.{i}.mlp.experts."
        gate = [tensors.pop(f"{pre}{e}.gate_proj.weight") for e in range(8)]
        up = [tensors.pop(f"{pre}{e}.up_proj.weight") for e in range(8)]
        down = [tensors.pop(f"{pre}{e}.down_proj.weight") for e in range(8)]
        tensors[pre + "gate_up_proj"] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up)])
        tensors[pre + "down_proj"] = torch.stack(down)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    ids = _ids()
    assert _diff(load(dst).logits(ids), _want(hf, ids)) <= ATOL


def test_yarn_maps_onto_the_yarn_fields(saved):
    """transformers' ``_compute_yarn_parameters`` and ``yarn_apply_mscale`` inputs as the catalogue's fields."""
    c = plan(saved("yarn40")[0]).config
    assert (c.yarn_factor, c.yarn_original_max_len, c.yarn_beta_fast, c.yarn_beta_slow, c.yarn_truncate) == (
        40.0,
        4,
        32.0,
        1.0,
        True,
    )
    assert (c.yarn_attention_factor, c.yarn_mscale_all_dim, c.qk_rope_head_dim) == (1.0, 1.0, 12)
    off = plan(saved("yarn40_no_all_dim")[0]).config
    assert (off.yarn_factor, off.yarn_attention_factor, off.yarn_mscale_all_dim) == (40.0, None, None)
    ratio = plan(saved("yarn_ratio")[0]).config
    m = 0.1 * math.log(16.0)
    assert ratio.yarn_attention_factor == pytest.approx((0.707 * m + 1) / (0.5 * m + 1), rel=1e-12)
    assert ratio.yarn_mscale_all_dim == 0.5
    assert any("YaRN" in n and "mscale_all_dim" in n for n in load(saved("yarn4")[0]).notes)


@pytest.mark.parametrize(
    "name, changes",
    [
        ("yarn4", dict(yarn_mscale_all_dim=None)),  # the softmax temperature (mscale_all_dim)
        ("yarn40", dict(yarn_mscale_all_dim=None)),
        ("yarn_ratio", dict(yarn_mscale_all_dim=None)),
        ("yarn_ratio", dict(yarn_attention_factor=None)),  # the cos / sin factor mscale / mscale_all_dim
        ("yarn40_no_all_dim", dict(yarn_attention_factor=1.0)),  # the paper's 0.1 ln s + 1 on cos / sin
        ("yarn40", dict(yarn_factor=None, yarn_attention_factor=None, yarn_mscale_all_dim=None)),  # plain RoPE
    ],
)
def test_each_yarn_term_matters(saved, name, changes):
    folder, hf = saved(name)
    ckpt = load(folder)
    ids = _ids(L=16)
    with torch.no_grad():
        assert _diff(_broken(ckpt, **changes)(ids).logits, _want(hf, ids)) > 1e-3


def test_the_released_config_spelling_is_read(saved, tmp_path):
    """DeepSeek-V3's own config.json keys: ``rope_theta`` at the top and a legacy ``rope_scaling`` with ``type``
    (its values verbatim: factor 40 over 4096 positions, max_position_embeddings 163840); transformers' model of
    the edited folder and ours agree within 1e-4."""
    folder, _ = saved("yarn40")
    real = {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    }
    dst = tmp_path / "released"
    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("rope_parameters")
    cfg.update(rope_theta=500.0, rope_scaling=real, max_position_embeddings=163840)
    (dst / "config.json").write_text(json.dumps(cfg))
    hf = transformers.DeepseekV3ForCausalLM.from_pretrained(dst, attn_implementation="eager").eval()
    assert hf.config.rope_parameters["rope_type"] == "yarn" and hf.config.rope_parameters["factor"] == 40
    ckpt = load(dst)
    c = ckpt.config
    assert (c.yarn_factor, c.yarn_original_max_len, c.yarn_mscale_all_dim, c.rope_base) == (40.0, 4096, 1.0, 500.0)
    ids = _ids()
    want = _want(hf, ids)
    assert _diff(ckpt.logits(ids), want) <= ATOL
    with torch.no_grad():
        assert _diff(_broken(ckpt, yarn_mscale_all_dim=None)(ids).logits, want) > 1e-3
