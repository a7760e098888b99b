"""A sweep of tiny ``Mamba2ForCausalLM`` and ``Qwen3NextForCausalLM`` configs (transformers' own classes, torch paths:
no CUDA kernels here), each saved with ``save_pretrained`` and read by ``models.hf.load``; our logits agree with
transformers' forward to 1e-4 (float32; absolute, or relative to the largest logit above 1) on sequences of 1, 37
and 70 tokens (37: no multiple of the 64-token chunks; 70: past one) and on a right-padded batch (the real tokens
compared). The cases vary every field the readers map (groups, head widths, state, convolution, chunk, ties, biases;
layer kinds, K/V heads, partial RoPE, key / value head ratios, experts, routing, sparse steps, RoPE scaling) and
include each class's own defaults with only the sizes shrunk. What a reader refuses is refused by a ConfigError
naming the config.json key and the valid values (asserted). One case of each family is read through the app's
checkpoint path (``explorer.analysis.weights.checkpoints``) as well. The larger half of the cases is ``slow``."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models import ConfigError  # noqa: E402
from models.hf import load, plan  # noqa: E402

ATOL = 1e-4
VOCAB = 96
LENGTHS = (1, 37, 70)


def slow(values, cid):
    return pytest.param(values, id=cid, marks=pytest.mark.slow)


# Mamba-2: hidden_size * expand == num_heads * head_dim always (Mamba2Config refuses anything else)
MAMBA2 = [
    pytest.param(
        dict(hidden_size=32, num_heads=4, head_dim=16, n_groups=1, state_size=16, conv_kernel=4, chunk_size=16),
        id="groups1_hd16_state16",
    ),
    slow(
        dict(
            hidden_size=32, expand=1, num_heads=4, head_dim=8, n_groups=4, state_size=64, conv_kernel=2, chunk_size=64
        ),
        "groups4_hd8_expand1_state64_conv2",
    ),
    pytest.param(
        dict(
            hidden_size=32,
            num_heads=2,
            head_dim=32,
            n_groups=2,
            state_size=8,
            chunk_size=7,
            tie_word_embeddings=True,
            use_bias=True,
            use_conv_bias=False,
            residual_in_fp32=False,
        ),
        id="hd32_chunk7_tied_bias_noconvbias_fp16residual_flag",
    ),
    slow(
        dict(hidden_size=24, num_heads=6, head_dim=8, n_groups=2, state_size=16, conv_kernel=3, chunk_size=32),
        "heads6_not_dividing_hidden_conv3",
    ),
    slow(
        dict(hidden_size=48, expand=2, num_heads=12, head_dim=8, n_groups=3, state_size=8, layer_norm_epsilon=1e-3),
        "groups3_eps1e-3_default_chunk",
    ),
    # Mamba2Config's defaults (head_dim 64, state 128, 8 groups, expand 2, conv 4, chunk 256), sizes shrunk
    slow(dict(hidden_size=256, num_heads=8), "class_defaults_scaled"),
]

# Qwen3-Next: full attention where layer_types says (default: every fourth layer)
QWEN3_NEXT_BASE = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=24,
    max_position_embeddings=256,
    initializer_range=0.2,
)


def q(**changes):
    return {**QWEN3_NEXT_BASE, **changes}


def rope(partial, theta=10000.0, **scaling):
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial, **scaling}


QWEN3_NEXT = [
    pytest.param(q(rope_parameters=rope(0.25)), id="default_layers_partial0.25_moe_top2"),
    slow(
        q(
            full_attention_interval=2,
            num_key_value_heads=1,
            head_dim=16,
            rope_parameters=rope(1.0),
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=8,
            num_experts=0,
        ),
        "interval2_mqa_hd16_full_rope_ratio1_kd16_vd8_dense",
    ),
    pytest.param(
        q(
            layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"],
            num_key_value_heads=4,
            rope_parameters=rope(0.5),
            linear_num_key_heads=1,
            linear_num_value_heads=4,
            linear_key_head_dim=12,
            linear_value_head_dim=6,
            num_experts_per_tok=1,
            norm_topk_prob=False,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
            tie_word_embeddings=True,
        ),
        id="layer_types_mha_ratio4_top1_unnormed_step2_mlp_only_tied",
    ),
    slow(
        q(
            num_hidden_layers=3,
            layer_types=["linear_attention"] * 3,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_conv_kernel_dim=2,
            mlp_only_layers=[1],
            shared_expert_intermediate_size=8,
        ),
        "all_linear_conv2_mlp_only",
    ),
    slow(
        q(
            num_hidden_layers=2,
            layer_types=["full_attention"] * 2,
            head_dim=12,
            rope_parameters=rope(0.5, theta=1e6, rope_type="linear", factor=2.0),
            num_experts=4,
            num_experts_per_tok=4,
        ),
        "all_full_hd12_linear_rope_scaling_all_experts",
    ),
    slow(
        q(
            rope_parameters=rope(
                0.5, rope_type="yarn", factor=4.0, original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0
            ),
            num_attention_heads=2,
            head_dim=16,
            num_experts=8,
            num_experts_per_tok=3,
        ),
        "yarn_heads2_hd16_experts8_top3",
    ),
    slow(q(head_dim=8, num_attention_heads=4, rope_parameters=rope(0.25)), "head_dim_is_hidden_over_heads"),
    slow(
        q(num_attention_heads=3, num_key_value_heads=1, head_dim=8, rope_parameters=rope(0.5)),
        "heads3_not_dividing_hidden",
    ),
    # Qwen3NextConfig's defaults (head_dim 256, 16 / 2 heads, 16 key / 32 value linear heads of 128, 512 experts
    # top 10, partial RoPE 0.25), sizes shrunk: the widths, the layer count and the vocabulary
    slow(
        dict(
            hidden_size=32,
            num_hidden_layers=4,
            head_dim=16,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            intermediate_size=32,
            moe_intermediate_size=4,
            shared_expert_intermediate_size=8,
            max_position_embeddings=256,
            initializer_range=0.2,  # not a size: larger random weights, so every one of them moves the logits
        ),
        "class_defaults_scaled",
    ),
]


def build(config_cls, model_cls, fields):
    config = getattr(transformers, config_cls)(vocab_size=VOCAB, **fields)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # random init leaves norms at 1 (or 0) and biases at 0: move them so every weight matters
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def saved(tmp_path, config_cls, model_cls, fields):
    model = build(config_cls, model_cls, fields)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model


def compare(ckpt, hf) -> float:
    """The largest |ours - transformers'| over every length and a right-padded batch (real tokens only), divided by
    the largest |logit| where that exceeds 1 (float32 rounding grows with the logits' scale: weights drawn at 0.2
    give logits of about 5, and the two chunked recurrences then differ by about 3e-5 of that at 70 tokens)."""
    worst = 0.0
    # use_cache=False: transformers' Qwen3-Next cache fails on a model of linear-attention layers only
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for L in LENGTHS:
            ids = torch.randint(1, VOCAB, (2, L), generator=g)
            want = hf(input_ids=ids, use_cache=False).logits
            got = ckpt.logits(ids)
            assert got.shape == want.shape
            worst = max(worst, float((got - want).abs().max()) / max(1.0, float(want.abs().max())))
        ids = torch.randint(1, VOCAB, (2, 37), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 20:] = 0  # the second row is 20 tokens, right-padded
        ids[1, 20:] = 0
        want = hf(input_ids=ids, attention_mask=mask, use_cache=False).logits
        got = ckpt.logits(ids, attention_mask=mask)
        real = mask.bool()
        worst = max(worst, float((got[real] - want[real]).abs().max()) / max(1.0, float(want[real].abs().max())))
    return worst


@pytest.mark.parametrize("fields", MAMBA2)
def test_mamba2_logits(tmp_path, fields):
    hf = saved(tmp_path, "Mamba2Config", "Mamba2ForCausalLM", fields)
    ckpt = load(tmp_path)
    assert ckpt.family == "mamba2" and ckpt.config.attention == "mamba2"
    assert compare(ckpt, hf) < ATOL


@pytest.mark.parametrize("fields", QWEN3_NEXT)
def test_qwen3_next_logits(tmp_path, fields):
    hf = saved(tmp_path, "Qwen3NextConfig", "Qwen3NextForCausalLM", fields)
    ckpt = load(tmp_path)
    assert ckpt.family == "qwen3_next"
    with torch.no_grad():
        assert (
            hf(input_ids=torch.arange(1, 9)[None], use_cache=False).logits.abs().max() > 0.5
        )  # weights large enough to matter
    assert compare(ckpt, hf) < ATOL


def _edited(tmp_path, folder, **changes):
    """A copy of the checkpoint ``folder`` whose config.json has ``changes`` (None: the key removed)."""
    import shutil

    out = tmp_path / "edited"
    shutil.copytree(folder, out)
    cfg = json.loads((out / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (out / "config.json").write_text(json.dumps(cfg))
    return out


# (family, config.json changes, the key the refusal names, a valid value its message states)
REFUSALS = [
    ("mamba2", {"expand": 3}, "expand", "hidden_size * expand = num_heads * head_dim = 64"),
    ("mamba2", {"hidden_act": "gelu"}, "hidden_act", "'silu'"),
    ("mamba2", {"rms_norm": False}, "rms_norm", "true"),
    ("mamba2", {"time_step_limit": [0.0, 0.1]}, "time_step_limit", "[0.0, Infinity]"),
    ("mamba2", {"n_groups": 3}, "n_groups", "a divisor of the Mamba-2 head count 8"),
    ("mamba2", {"state_size": 0}, "state_size", "an integer in [1,"),
    ("qwen3_next", {"hidden_act": "gelu"}, "hidden_act", "'silu'"),
    ("qwen3_next", {"attention_bias": True}, "attention_bias", "false"),
    (
        "qwen3_next",
        {"layer_types": ["linear_attention", "sliding_attention", "linear_attention", "full_attention"]},
        "layer_types",
        "['linear_attention', 'full_attention']",
    ),
    (
        "qwen3_next",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.375}},
        "partial_rotary_factor",
        "int(head_dim * factor) = 3 is even",
    ),
    (
        "qwen3_next",
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0, "partial_rotary_factor": 0.5}},
        "rope_scaling",
        "'linear'",
    ),
    ("qwen3_next", {"num_experts": 1024}, "num_experts", "an integer in [0, 512]"),
    ("qwen3_next", {"mlp_only_layers": "1"}, "mlp_only_layers", "a list of layer indices"),
    ("qwen3_next", {"num_attention_heads": 3}, "num_key_value_heads", "a divisor of n_heads=3"),
]


@pytest.mark.parametrize("family,changes,key,valid", REFUSALS, ids=[f"{r[0]}-{r[2]}" for r in REFUSALS])
def test_refusals_name_the_key_and_the_valid_values(saved, tmp_path, family, changes, key, valid):
    folder = _edited(tmp_path, saved(family)[0], **changes)
    with pytest.raises(ConfigError) as e:
        plan(folder)
    assert key in e.value.field, e.value
    assert valid in str(e.value.allowed), e.value


@pytest.mark.parametrize("family", ["mamba2", "qwen3_next"])
def test_the_apps_checkpoint_paths_read_them(saved, tmp_path, monkeypatch, family):
    """A folder under ``EXPLORER_CHECKPOINTS`` and an upload of its files, read by the app
    (``explorer.analysis.weights.checkpoints`` / ``checkpoint_upload``): the model the app builds from the loaded
    weights gives transformers' logits."""
    import shutil

    from explorer.analysis.weights import checkpoint_upload, checkpoints

    src, hf = saved(family)
    root = tmp_path / "root"
    shutil.copytree(src, root / f"sweep-{family}")
    monkeypatch.setenv(checkpoints.ROOTS_ENV, str(root))
    checkpoints._LOADED.clear()
    checkpoints._UPLOADS.clear()
    try:
        from_folder = checkpoints.load(f"sweep-{family}")
        files = [str(p) for p in (root / f"sweep-{family}").iterdir() if p.suffix in (".json", ".safetensors")]
        uploaded = checkpoint_upload.receive(files, root=str(root))
        ids = torch.randint(1, 100, (2, 37), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            want = hf(input_ids=ids, use_cache=False).logits
            for loaded in (from_folder, uploaded):
                assert loaded.family == family
                model = loaded.weights.eval_model(loaded.config).eval()
                assert float((model(ids).logits - want).abs().max()) < ATOL
    finally:
        checkpoints._LOADED.clear()
        checkpoints._UPLOADS.clear()
