"""The families of 2024-2026 as ModelConfig overrides."""

from __future__ import annotations

MODERN: dict = {}

# The families of 2024-2026: layer schedules, query/key norms, learned sinks, gated / latent / differential
# attention, at the explorer's size (windows and chunks scaled to a ~128-token text, so both kinds of layer
# show on the maps; the real sizes are in each description).
MODERN.update(
    {
        "Gemma 2 (2024)": (
            "Gemma Team 2024: sliding-window and full layers alternate 1:1 (window 4096 in the paper, 32 here), "
            "attention logits soft-capped at 50, pre- and post-norm around each sublayer (RMSNorm), GeGLU, GQA.",
            dict(
                attention="sliding_window",
                layer_schedule="sliding_window,full",
                window=32,
                softcap=50.0,
                position="rope",
                norm_placement="sandwich",
                norm="rmsnorm",
                ffn="geglu",
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "Gemma 3 (2025)": (
            "Gemma Team 2025: five sliding-window layers per full one (window 1024 in the paper, 32 here), RoPE "
            "base 10k on the local layers and 1M on the global ones, RMSNorm of each head's queries and keys, "
            "pre- and post-norm, GeGLU, GQA; six layers, so one full layer shows.",
            dict(
                attention="sliding_window",
                layer_schedule="sliding_window*5,full",
                window=32,
                n_layers=6,
                rope_base=1_000_000.0,
                rope_local_base=10_000.0,
                qk_norm="head",
                position="rope",
                norm_placement="sandwich",
                norm="rmsnorm",
                ffn="geglu",
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "gpt-oss (2025)": (
            "OpenAI 2025: sliding-window (128 keys in the model card, 32 here) and full layers alternate 1:1, and "
            "every head has a learned sink logit in its softmax's denominator, so a row can give less than all "
            "its weight to the keys; pre-norm RMSNorm, GQA, and a mixture of clamped-SwiGLU experts (32 experts, "
            "top 4 in gpt-oss-20b; 4, top 2 here).",
            dict(
                attention="sliding_window",
                layer_schedule="sliding_window,full",
                window=32,
                attn_sinks=True,
                position="rope",
                norm_placement="pre",
                norm="rmsnorm",
                ffn="moe_swiglu_clamped",
                n_experts=4,
                top_k=2,
                d_ff=128,
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "Llama 4 (2025)": (
            "Meta 2025: three layers attend within fixed chunks (8192 tokens in the model, 32 here) with RoPE and "
            "a weightless RMS norm of queries and keys, every fourth attends in full with no position encoding "
            "(NoPE) and queries sharpened with position (from 8192 tokens in the model, 32 here); pre-norm "
            "RMSNorm, GQA, a routed expert (top 1) plus a shared one in every layer (Scout).",
            dict(
                attention="chunked",
                layer_schedule="chunked*3,full:nope",
                attention_chunk_size=32,
                position="rope",
                qk_norm="rms_rope",
                attn_temp_floor=32,
                attn_temp_scale=0.1,
                norm_placement="pre",
                norm="rmsnorm",
                ffn="moe_llama4",
                n_experts=4,
                top_k=1,
                d_ff=128,
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "Qwen3 (2025)": (
            "Qwen Team 2025: a Llama-style decoder (pre-norm RMSNorm, SwiGLU, GQA, RoPE base 1M) with an RMSNorm "
            "of each head's queries and keys before RoPE.",
            dict(
                attention="full",
                qk_norm="head",
                rope_base=1_000_000.0,
                position="rope",
                norm_placement="pre",
                norm="rmsnorm",
                ffn="swiglu",
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "OLMo 2 (2024)": (
            "OLMo et al. 2024: the norm moves after each sublayer, inside the residual branch "
            "(x + Norm(F(x))), and an RMSNorm spans the whole query and key projections; SwiGLU, RoPE.",
            dict(
                attention="full",
                qk_norm="all",
                rope_base=500_000.0,
                position="rope",
                norm_placement="res_post",
                norm="rmsnorm",
                ffn="swiglu",
                causal=True,
            ),
        ),
        "Gated attention (Qwen3-Next, 2025)": (
            "Qiu et al. 2025: each head's attention output is multiplied by a sigmoid gate computed from the "
            "layer's normalised input (one gate per head dimension, as Qwen3-Next), with Qwen3's query/key norm.",
            dict(
                attention="full",
                attn_gate="elementwise",
                qk_norm="head",
                position="rope",
                norm_placement="pre",
                norm="rmsnorm",
                ffn="swiglu",
                n_kv_heads=2,
                causal=True,
            ),
        ),
        "DeepSeek-V3 MLA (2024)": (
            "DeepSeek-AI 2024: multi-head latent attention: keys and values come from one compressed latent per "
            "token plus a RoPE key shared by the heads, so the decoding cache holds only those; pre-norm RMSNorm; "
            "DeepSeekMoE: sigmoid-routed experts plus a shared one after dense first layers (3 of 61 in the model, "
            "1 of 4 here).",
            dict(
                attention="mla",
                layer_schedule="mla:dense,mla*3",
                position="rope",
                norm_placement="pre",
                norm="rmsnorm",
                ffn="moe_deepseek",
                n_experts=8,
                top_k=2,
                n_shared_experts=1,
                d_ff=64,
                dense_d_ff=256,
                causal=True,
            ),
        ),
        "Differential Transformer (2025)": (
            "Ye et al. 2025: each head subtracts a second softmax map, scaled by a learned lambda, from the first "
            "(so the maps have negative weights), then normalises its output; pre-norm RMSNorm, SwiGLU, RoPE.",
            dict(
                attention="differential",
                position="rope",
                norm_placement="pre",
                norm="rmsnorm",
                ffn="swiglu",
                causal=True,
            ),
        ),
    }
)
