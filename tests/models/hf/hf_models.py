"""Tiny random ``transformers`` models of every supported family, saved as a Hub folder would hold them.

``make(family, folder, **changes)`` builds the family's tiny model (2 layers, d 32) with its config
changes, saves it with ``save_pretrained(safe_serialization=True)`` and returns the model (eval mode,
float32). Nothing is downloaded: ``transformers`` builds the models from configs; it is a test
dependency only (the loader never imports it).
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

VOCAB = 120
SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)

FAMILIES = {
    # name: (config class, model class, config fields)
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0),
    ),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(SMALL, num_key_value_heads=2, rms_norm_eps=1e-5)),
    "smollm": (
        "LlamaConfig",
        "LlamaForCausalLM",  # SmolLM: a Llama with tied embeddings and GQA
        dict(SMALL, num_key_value_heads=1, tie_word_embeddings=True, rope_theta=100000.0),
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(SMALL, num_key_value_heads=2, sliding_window=4)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(SMALL, num_key_value_heads=2)),
    # Qwen3: per-head q/k RMSNorm; its config class defaults head_dim to 128, so the tiny model sets d / heads
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(SMALL, num_key_value_heads=2, head_dim=8)),
    "qwen3_tied_bias": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        dict(SMALL, num_key_value_heads=1, head_dim=8, attention_bias=True, tie_word_embeddings=True),
    ),
    # OLMo 2: q/k RMSNorm over the whole projections (k: 2 K/V heads' features), norms after the sublayers
    "olmo2": (
        "Olmo2Config",
        "Olmo2ForCausalLM",
        dict(SMALL, num_key_value_heads=2, rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=0),
    ),
    # Gemma 2 / 3: 4 layers, windows of 3 keys (shorter than the test texts), heads of 16 apart from d / heads,
    # weights drawn at 0.3 (not 0.02) so scores and logits are large; Gemma 2's soft caps low enough to bend them
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        dict(
            SMALL,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=3,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            initializer_range=0.3,
            attn_implementation="eager",
        ),
    ),
    # Qwen3-Next: 4 layers (3 Gated DeltaNet, 1 gated full attention), 2 key / 4 value heads in the linear layers,
    # heads of 8 with RoPE on half their dims, 4 experts (top 2) + a gated shared expert, layer 1 a dense MLP;
    # weights drawn at 0.3 so the decays, gates and router choices are far from their initial values
    "qwen3_next": (
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        dict(
            SMALL,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=8,
            linear_value_head_dim=6,
            linear_conv_kernel_dim=3,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=24,
            mlp_only_layers=[1],
            initializer_range=0.3,
        ),
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            SMALL,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=3,
            sliding_window_pattern=2,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
            initializer_range=0.3,
            attn_implementation="eager",
        ),
    ),
    # gpt-oss: 4 layers alternating windows of 3 keys and full ones, heads of 16 apart from d / heads, 4 experts
    # (top 2) of width 24, YaRN (factor 4 over 256 positions, base 1e4: pairs 1-3 of 8 on its ramp), weights
    # drawn at 0.3 so scores, sinks and router logits are large and the SwiGLU clamp (limit 1.5) binds
    "gpt_oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(
            SMALL,
            intermediate_size=24,
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=3,
            num_local_experts=4,
            num_experts_per_tok=2,
            swiglu_limit=1.5,
            max_position_embeddings=1024,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 256,
            },
            initializer_range=0.3,
            attn_implementation="eager",
        ),
    ),
    # Falcon-H1: attention (2 K/V heads) and Mamba-2 (4 heads of 8, 2 groups, state 8, chunks of 8 so 12 and 16
    # tokens end inside a chunk) side by side; every muP multiplier away from 1 (so each fold is exercised), the
    # gated RMSNorm normed before the gate, weights drawn at 0.2 so the Mamba branch writes as much as attention
    "falcon_h1": (
        "FalconH1Config",
        "FalconH1ForCausalLM",
        dict(
            SMALL,
            num_key_value_heads=2,
            mamba_d_ssm=32,
            mamba_n_heads=4,
            mamba_n_groups=2,
            mamba_d_state=8,
            mamba_chunk_size=8,
            mamba_rms_norm=True,
            embedding_multiplier=1.5,
            lm_head_multiplier=0.7,
            key_multiplier=1.3,
            attention_in_multiplier=0.8,
            attention_out_multiplier=1.2,
            ssm_in_multiplier=1.1,
            ssm_out_multiplier=0.9,
            ssm_multipliers=[0.5, 1.5, 0.8, 1.2, 2.0],
            mlp_multipliers=[1.3, 0.6],
            initializer_range=0.2,
        ),
    ),
    # Mamba-2: 8 SSM heads of 8 (d_inner 64), state 8, 2 B/C groups, chunks of 8 (shorter than the test texts)
    "mamba2": (
        "Mamba2Config",
        "Mamba2ForCausalLM",
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_heads=8,
            head_dim=8,
            expand=2,
            state_size=8,
            n_groups=2,
            chunk_size=8,
            pad_token_id=0,
            eos_token_id=0,
        ),
    ),
    "bert": ("BertConfig", "BertForMaskedLM", dict(SMALL, layer_norm_eps=1e-12)),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        dict(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
            decoder_start_token_id=0,
        ),
    ),
    "t5_gated": (
        "T5Config",
        "T5ForConditionalGeneration",  # v1.1 / Flan-T5: gated GELU, untied unscaled head
        dict(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            decoder_start_token_id=0,
        ),
    ),
}


def build(family: str, **changes):
    config_cls, model_cls, fields = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**fields, **changes})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # random init leaves norms at 1 and biases at 0: move them so every weight matters
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def make(family: str, folder, max_shard_size=None, **changes):
    model = build(family, **changes)
    kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, safe_serialization=True, **kw)
    return model
