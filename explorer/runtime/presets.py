"""Named architectures as ModelConfig overrides, scaled to the explorer's size.

Each preset keeps the architecture's *choices* (attention pattern, positions, norm placement, FFN,
K/V heads, ...) at the explorer's interactive size (4 layers, d_model 128, ~128 tokens), so the
maps and curves show what the choices do, not what a 70B model costs. Head ratios are kept where
they matter (GQA: several query heads per K/V head). Presets that name a variant not yet in the
registries (or a combination it rejects) are hidden by ``available()`` until it lands.
"""

from __future__ import annotations

from models import ConfigError, ModelConfig

# name -> (one-line description, overrides of ModelConfig defaults)
PRESETS: dict = {
    "Vanilla Transformer (2017)": (
        "Vaswani et al. 2017, decoder side: sinusoidal positions, post-LN, ReLU FFN.",
        dict(attention="full", position="sinusoidal", norm_placement="post", norm="layernorm", ffn="relu", causal=True),
    ),
    "BERT (2018)": (
        "Devlin et al. 2018: encoder-only (bidirectional, masked-LM head), learned positions, post-LN, GELU.",
        dict(
            architecture="encoder_only",
            attention="full",
            position="learned",
            max_len=512,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "GPT-2 (2019)": (
        "Radford et al. 2019: causal decoder, learned positions, pre-LN, GELU.",
        dict(
            attention="full",
            position="learned",
            max_len=1024,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "T5 (2020)": (
        "Raffel et al. 2020: encoder-decoder; relative position buckets (one bias table per stack, shared "
        "by its layers), pre-norm RMSNorm (no bias), ReLU (here with FFN biases, which T5 drops).",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="t5",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Sparse Transformer (2019)": (
        "Child et al. 2019: strided factorised attention, pre-activation residuals, GELU.",
        dict(
            attention="strided",
            stride=16,
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Longformer (2020)": (
        "Beltagy et al. 2020: sliding window plus global tokens, bidirectional, RoBERTa-style post-LN.",
        dict(
            attention="longformer",
            window=32,
            n_global=2,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "BigBird (2020)": (
        "Zaheer et al. 2020: window + global + random blocks, bidirectional.",
        dict(
            attention="bigbird",
            window=16,
            n_global=2,
            n_random=2,
            block_size=16,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "LLaMA (2023)": (
        "Touvron et al. 2023: RoPE, pre-norm RMSNorm, SwiGLU, causal.",
        dict(attention="full", position="rope", norm_placement="pre", norm="rmsnorm", ffn="swiglu", causal=True),
    ),
    "Llama-2-70B (GQA)": (
        "Touvron et al. 2023: LLaMA with grouped-query attention (64 query heads over 8 K/V heads; here 8 over 2).",
        dict(
            attention="full",
            position="rope",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="swiglu",
            n_heads=8,
            n_kv_heads=2,
            causal=True,
        ),
    ),
    "Mistral 7B (2023)": (
        "Jiang et al. 2023: sliding-window attention + GQA (32 query heads over 8 K/V heads; here 8 "
        "over 2), RoPE, RMSNorm, SwiGLU; window scaled to the short input.",
        dict(
            attention="sliding_window",
            window=32,
            position="rope",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="swiglu",
            n_heads=8,
            n_kv_heads=2,
            causal=True,
        ),
    ),
    "BLOOM (2022)": (
        "BigScience 2022: ALiBi distance penalties instead of position embeddings, pre-LN, GELU.",
        dict(attention="full", position="alibi", norm_placement="pre", norm="layernorm", ffn="gelu", causal=True),
    ),
    "Shaw relative (2018)": (
        "Shaw et al. 2018: clipped relative position vectors on keys and values.",
        dict(
            attention="full",
            position="shaw",
            max_relative=16,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Transformer-XL (2019)": (
        "Dai et al. 2019: segment-level recurrence (each layer also attends the previous segment's "
        "hidden states, detached) with relative positions (u, v biases, sinusoidal R); post-LN, ReLU. "
        "Segments of 32 bytes so the demo text spans several.",
        dict(
            attention="full",
            position="xl",
            memory="xl",
            segment_len=32,
            mem_len=32,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Compressive Transformer (2019)": (
        "Rae et al. 2019: Transformer-XL memory plus older memories compressed 3:1 by a learned 1D "
        "convolution (the paper's best compression), trained by attention reconstruction.",
        dict(
            attention="full",
            position="xl",
            memory="compressive",
            segment_len=32,
            mem_len=32,
            cmem_len=16,
            compression_rate=3,
            compression="conv",
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Memorizing Transformer (2022)": (
        "Wu et al. 2022: a decoder with T5 relative biases whose second-to-last layer retrieves the "
        "exact top-k of an external (key, value) store and gates it with local attention.",
        dict(
            attention="full",
            position="t5",
            memory="knn",
            segment_len=32,
            knn_size=1024,
            knn_k=8,
            norm_placement="pre",
            norm="rmsnorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "GTrXL (2020)": (
        "Parisotto et al. 2020: Transformer-XL memory with identity-map reordering (pre-LN) and "
        "GRU-type gates in place of the residual additions.",
        dict(
            attention="full",
            position="xl",
            memory="xl",
            segment_len=32,
            mem_len=32,
            layer="gated",
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Reformer (2020)": (
        "Kitaev et al. 2020: shared-QK LSH attention (2 hash rounds, 8 buckets, chunks of 16) and "
        "reversible layers; learned absolute positions (the paper's axial embeddings are learned too).",
        dict(
            attention="lsh",
            n_buckets=8,
            n_hashes=2,
            chunk_size=16,
            layer="reversible",
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Routing Transformer (2021)": (
        "Roy et al. 2021: online k-means routing: queries and keys attend within their nearest of "
        "n_clusters centroids (about sqrt(L)), updated by EMA; pre-LN decoder.",
        dict(
            attention="routing",
            n_clusters=8,
            cluster_decay=0.999,
            position="sinusoidal",
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Linear Transformer (2020)": (
        "Katharopoulos et al. 2020: softmax replaced by the elu(x) + 1 feature map, causal prefix sums "
        "(an RNN in disguise); post-LN, ReLU as in their fast-transformers layers.",
        dict(
            attention="linear", position="sinusoidal", norm_placement="post", norm="layernorm", ffn="relu", causal=True
        ),
    ),
    "Performer (2021)": (
        "Choromanski et al. 2021: FAVOR+ positive orthogonal random features (m = 64 per head), linear "
        "in L; learned positions, pre-LN, GELU.",
        dict(
            attention="performer",
            n_features=64,
            feature_map="positive",
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Linformer (2020)": (
        "Wang et al. 2020: keys and values projected along the sequence to proj_len = 64 by learned "
        "E, F; a bidirectional RoBERTa-style encoder (learned positions, post-LN, GELU).",
        dict(
            attention="linformer",
            proj_len=64,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "Nystromformer (2021)": (
        "Xiong et al. 2021: Nystrom approximation of softmax with 16 segment-mean landmarks; a "
        "bidirectional BERT-style encoder (learned positions, post-LN, GELU).",
        dict(
            attention="nystrom",
            n_landmarks=16,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "Switch Transformer (2021)": (
        "Fedus et al. 2021: top-1 routing to 8 experts with capacity factor 1.25 and the load-balancing "
        "loss; T5-style relative biases, pre-norm RMSNorm.",
        dict(
            attention="full",
            position="t5",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="switch",
            n_experts=8,
            capacity_factor=1.25,
            causal=True,
        ),
    ),
    "Universal Transformer (2019)": (
        "Dehghani et al. 2019: one shared block applied up to n_layers times with a position + step "
        "timing signal and ACT halting per token (threshold 1 - 0.01); post-LN, ReLU.",
        dict(
            attention="full",
            position="sinusoidal",
            layer="universal",
            act=True,
            act_threshold=0.99,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    # encoder-decoder architectures (models/architectures.py)
    "Original Transformer (Vaswani 2017, encoder-decoder)": (
        "Vaswani et al. 2017: bidirectional encoder + causal decoder with cross-attention in every "
        "layer; sinusoidal positions, post-LN, ReLU.",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="sinusoidal",
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "BART (2020)": (
        "Lewis et al. 2020: encoder-decoder with learned positions (one table per stack), post-LN, GELU.",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="learned",
            max_len=1024,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    # score mixing across layers
    "RealFormer (2020)": (
        "He et al. 2020: BERT (bidirectional, learned positions, post-LN, GELU) with residual attention: "
        "each layer's pre-softmax scores add the previous layer's.",
        dict(
            attention="realformer",
            position="learned",
            max_len=512,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    # layer structures
    "Sandwich Transformer (2020)": (
        "Press et al. 2020: the sublayers reordered a^s (af)^(n-s) f^s; their best 16-layer model has "
        "s = 6, here s = 2 of 4 layers; sinusoidal positions, pre-LN, ReLU, causal.",
        dict(
            attention="full",
            position="sinusoidal",
            layer="sandwich",
            sandwich_coeff=2,
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Funnel-Transformer (2020)": (
        "Dai et al. 2020: blocks on a sequence mean-pooled by 2, pool-query-only first layers, "
        "upsampled + first-block residual for tokens; B4-4-4 scaled to 3 blocks of 2 layers; post-LN, GELU, "
        "bidirectional (learned positions instead of the paper's relative attention).",
        dict(
            attention="full",
            position="learned",
            max_len=512,
            layer="funnel",
            n_layers=6,
            funnel_blocks=3,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
}

# the models the axial, sinkhorn, probsparse and synthesizer papers name
PRESETS.update(
    {
        "Axial Transformer (2019)": (
            "Ho et al. 2019: the sequence folded into rows of 32 (a 32-pixel-wide image); half the heads attend "
            "along the row, half along the column, causal (here with learned positions, pre-LN).",
            dict(
                attention="axial",
                axial_width=32,
                position="learned",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "Sinkhorn Transformer (2020)": (
            "Tay et al. 2020: blocks of 16, a learned sorting network balanced by 7 Sinkhorn iterations at "
            "temperature 0.75 sorts one key block next to each query block; causal LM, Tensor2Tensor base "
            "(sinusoidal positions, pre-LN, ReLU).",
            dict(
                attention="sinkhorn",
                block_size=16,
                sinkhorn_iters=7,
                sinkhorn_temperature=0.75,
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "Informer encoder (2021)": (
            "Zhou et al. 2021: ProbSparse self-attention (factor c = 5: the 5 ceil(ln L) most peaked queries "
            "attend, the rest output the mean of V); bidirectional encoder, sinusoidal positions, post-LN, GELU; "
            "the distilling convolutions between layers are not built.",
            dict(
                attention="probsparse",
                probsparse_factor=5,
                position="sinusoidal",
                norm_placement="post",
                norm="layernorm",
                ffn="gelu",
                causal=False,
            ),
        ),
        "Synthesizer (2021)": (
            "Tay et al. 2021, Dense Synthesizer: each token synthesizes its attention logits with a two-layer MLP, "
            "no query-key product; causal LM, Tensor2Tensor base (sinusoidal positions, pre-LN, ReLU).",
            dict(
                attention="synthesizer_dense",
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
    }
)

# the other models the catalogue's papers name (Talking-Heads, clustered attention and
# product-key memory are mechanisms the papers add to existing models: no model name, no preset)
PRESETS.update(
    {
        "Set Transformer (2019)": (
            "Lee et al. 2019: induced set attention blocks (ISAB) with 16 learned inducing points, post-LN, "
            "ReLU row-wise FFN, bidirectional; the paper's inputs are unordered sets, byte text needs order "
            "so sinusoidal positions are added.",
            dict(
                attention="isab",
                n_inducing=16,
                position="sinusoidal",
                norm_placement="post",
                norm="layernorm",
                ffn="relu",
                causal=False,
            ),
        ),
        "Macaron Net (2019)": (
            "Lu et al. 2019: each layer is half an FFN step, attention, then another half FFN step; on the "
            "Transformer-base recipe (sinusoidal positions, post-LN, ReLU), decoder side.",
            dict(
                attention="full",
                layer="macaron",
                position="sinusoidal",
                norm_placement="post",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "Lite Transformer (2020)": (
            "Wu et al. 2020: long-short range attention (half the heads attend, half run a lightweight "
            "convolution, here of width 7 in every layer; the paper grows it 3, 7, 15, 31 by layer), flattened "
            "FFN (d_ff = d_model), pre-LN, sinusoidal positions, ReLU; their WikiText-103 LM, causal.",
            dict(
                attention="lite",
                conv_kernel=7,
                d_ff=128,
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "Transformer-PN (2020)": (
            "Shen et al. 2020: the Transformer with every LayerNorm replaced by PowerNorm (quadratic mean over "
            "the batch, running statistics with alpha = 0.9); sinusoidal positions, post-norm, ReLU, decoder side.",
            dict(
                attention="full",
                position="sinusoidal",
                norm_placement="post",
                norm="powernorm",
                powernorm_alpha=0.9,
                ffn="relu",
                causal=True,
            ),
        ),
        "kNN-LM (2020)": (
            "Khandelwal et al. 2020: a causal LM (pre-LN, sinusoidal positions, ReLU) whose next-token "
            "distribution is interpolated with that of the nearest stored contexts, lambda = 0.25 as in the "
            "paper (k = 8 neighbours here, 1024 there); segments of 32 bytes so the store fills on the demo text.",
            dict(
                attention="full",
                memory="knn_lm",
                segment_len=32,
                knn_size=1024,
                knn_k=8,
                knn_lambda=0.25,
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "Feedback Transformer (2020)": (
            "Fan et al. 2020: tokens run one at a time and every layer attends to a memory of earlier steps, "
            "each a learned softmax-weighted sum of all layers' states; pre-LN, ReLU, causal (sinusoidal "
            "positions here).",
            dict(
                attention="full",
                layer="feedback",
                max_len=256,
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
        "DeBERTa (2021)": (
            "He et al. 2021: disentangled attention (content and relative-position terms, log-bucketed "
            "distances, no absolute positions in the input); a BERT-style encoder (masked-LM head, post-LN, GELU).",
            dict(
                architecture="encoder_only",
                attention="full",
                position="deberta",
                norm_placement="post",
                norm="layernorm",
                ffn="gelu",
                causal=False,
            ),
        ),
        "TUPE-R (2021)": (
            "Ke et al. 2021: untied positional encoding (absolute position correlation projected separately, "
            "never added to the embeddings) plus T5-style relative buckets (the -R variant); a BERT-base-style "
            "encoder with pre-LN and GELU.",
            dict(
                architecture="encoder_only",
                attention="full",
                position="tupe",
                tupe_relative=True,
                max_len=512,
                norm_placement="pre",
                norm="layernorm",
                ffn="gelu",
                causal=False,
            ),
        ),
        "Luna-16 (2021)": (
            "Ma et al. 2021: linear unified nested attention with a packed sequence of 16 (Luna-16 of their "
            "Long Range Arena runs), post-LN, GELU, bidirectional, learned positions.",
            dict(
                attention="luna",
                n_inducing=16,
                position="learned",
                max_len=512,
                norm_placement="post",
                norm="layernorm",
                ffn="gelu",
                causal=False,
            ),
        ),
        "Poolingformer (2021)": (
            "Zhang et al. 2021: a sliding window, then the window's outputs attend mean-pooled keys / values of a "
            "wider window (stride 4); windows scaled to the short input (16 and 64); a RoBERTa-style encoder "
            "(post-LN, GELU) with rotary positions, since a pooled key has no single distance.",
            dict(
                architecture="encoder_only",
                attention="poolingformer",
                window=16,
                pool_window=64,
                pool_stride=4,
                position="rope",
                norm_placement="post",
                norm="layernorm",
                ffn="gelu",
                causal=False,
            ),
        ),
        "SPALM (2021)": (
            "Yogatama et al. 2021: a causal LM whose final hidden state is mixed, through a learned gate, with "
            "the embeddings of the next tokens of the nearest stored contexts (k = 8, segments of 32 bytes); "
            "pre-LN, sinusoidal positions, ReLU; the paper's short-term Transformer-XL memory is not combined.",
            dict(
                attention="full",
                memory="spalm",
                segment_len=32,
                knn_size=1024,
                knn_k=8,
                position="sinusoidal",
                norm_placement="pre",
                norm="layernorm",
                ffn="relu",
                causal=True,
            ),
        ),
    }
)

# The families of 2024-2026: layer schedules, query/key norms, learned sinks, gated / latent / differential
# attention, at the explorer's size (windows and chunks scaled to a ~128-token text, so both kinds of layer
# show on the maps; the real sizes are in each description).
PRESETS.update(
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

# The models shipped with trained weights (``assets/bundles``, made by ``explorer.training.bundle``): picking
# one of these draws its bundle. The overrides repeat the bundle recipes' configs on purpose: a test fails
# when a preset and its bundle's manifest drift apart.
BUNDLE_PRESETS = {
    "Trained: default (pre-LN, RoPE)": "default",
    "Trained: post-LN": "post_ln",
    "Trained: ALiBi": "alibi",
    "Trained: sliding window": "sliding_window",
    "Trained: GQA (2 K/V heads)": "gqa",
    "Trained: MoE (4 experts)": "moe",
    "Trained: encoder-decoder (reverse)": "encoder_decoder",
    "Trained: gpt-oss style (windows + sinks)": "gpt_oss_style",
    "Trained: MLA (latent attention)": "mla",
    "Trained: gated attention output": "gated_attention",
    "Trained: differential attention": "differential",
}
PRESETS = {
    **{  # first in the dropdown
        "Trained: default (pre-LN, RoPE)": (
            "The app's default model with bundled trained weights: byte-level LM on the Python documentation "
            "(pre-LN, RoPE, full attention, 4 layers, d_model 128).",
            {},
        ),
        "Trained: post-LN": (
            "The default model with the original Transformer's post-LN placement, trained the same way.",
            dict(norm_placement="post"),
        ),
        "Trained: ALiBi": (
            "The default model with ALiBi's distance penalty instead of RoPE, trained the same way.",
            dict(position="alibi"),
        ),
        "Trained: sliding window": (
            "The default model with sliding-window attention (64 keys back), trained the same way.",
            dict(attention="sliding_window"),
        ),
        "Trained: GQA (2 K/V heads)": (
            "The default model with 4 query heads sharing 2 K/V heads, trained the same way.",
            dict(n_kv_heads=2),
        ),
        "Trained: MoE (4 experts)": (
            "The default model with a mixture of 4 experts (top-2, d_ff 256 each) as FFN, trained the same way.",
            dict(ffn="moe", d_ff=256),
        ),
        "Trained: encoder-decoder (reverse)": (
            "A 2 + 2 layer encoder-decoder trained to write a string backwards (type 'abc=>cba').",
            dict(architecture="encoder_decoder", n_layers=2),
        ),
        "Trained: gpt-oss style (windows + sinks)": (
            "The default model with gpt-oss's layers: 64-key sliding windows and full attention alternate, and "
            "every head has a learned sink; trained the same way.",
            dict(layer_schedule="sliding_window,full", window=64, attn_sinks=True),
        ),
        "Trained: MLA (latent attention)": (
            "The default model with DeepSeek's multi-head latent attention (keys and values from one shared "
            "latent and a shared RoPE key), trained the same way.",
            dict(attention="mla"),
        ),
        "Trained: gated attention output": (
            "The default model with an elementwise sigmoid gate on each head's output (Qiu et al. 2025, G1), "
            "trained the same way.",
            dict(attn_gate="elementwise"),
        ),
        "Trained: differential attention": (
            "The default model with differential attention (two softmax maps subtracted, Ye et al. 2025), "
            "trained the same way.",
            dict(attention="differential"),
        ),
    },
    **PRESETS,
}

# Presets for a lesson: the size and the text at which a family's difference shows. The placements'
# per-layer gradient norms separate with depth (Xiong et al. 2020; at initialisation here, attention
# out-projection, last / first layer: pre-LN 0.52 at 4 layers, 0.29 at 12; post-LN 0.98 and 0.91),
# and on a 100-byte text BigBird's blocks cover 49.9% of the pairs against 50.5% for causal full
# attention, so it looks like full attention: 256 bytes (the maps' cap) in blocks of 16 leave it
# 7 of 16 blocks per row.
LESSON_TEXT = (
    "Attention lets every token read every earlier token, so its cost grows with the square of "
    "the length. Sparse patterns keep a few keys per query: a local window, some global tokens "
    "and a few random blocks. At this length the blocks no longer cover the map."
)
LESSONS = {
    "Lesson: post-LN vs pre-LN gradients (12 layers)": (
        "Xiong et al. 2020 at a depth where it shows: 12 post-LN layers. The Gradients tab draws every "
        "placement per layer; their curves separate with depth, far more at 12 layers than at the default 4.",
        dict(n_layers=12, norm_placement="post"),
        None,
    ),
    "Lesson: BigBird vs full attention (256 bytes)": (
        "BigBird's window, global and random blocks on a text long enough (256 bytes) that they leave most "
        "of the map empty; pin it as A and switch the attention to full to compare.",
        dict(PRESETS["BigBird (2020)"][1]),
        LESSON_TEXT,
    ),
    "Lesson: sliding window vs full (256 bytes)": (
        "A 32-key sliding window on 256 bytes: the band a window keeps, against full attention's triangle.",
        dict(attention="sliding_window", window=32),
        LESSON_TEXT,
    ),
}
PRESETS.update({name: (about, overrides) for name, (about, overrides, _) in LESSONS.items()})


def preset_text(name: str):
    """The text a lesson preset brings (None: the preset keeps the page's text)."""
    return LESSONS[name][2] if name in LESSONS else None


CUSTOM = "(custom)"
DEFAULT_PRESET = "LLaMA (2023)"


def preset_config(name: str) -> ModelConfig:
    """The full ``ModelConfig`` of preset ``name`` (ConfigError names the valid presets)."""
    if name not in PRESETS:
        raise ConfigError("preset", name, f"one of {list(PRESETS)}")
    return ModelConfig(**PRESETS[name][1])


def available() -> list:
    """Names of the presets whose variants are all registered and whose combination validates, the lessons
    first (what a newcomer or a speaker looks for), then the named architectures."""
    names = []
    for name in sorted(PRESETS, key=lambda n: n not in LESSONS):  # stable: each group keeps its order
        try:
            preset_config(name).validate()
        except ConfigError:
            continue
        names.append(name)
    return names


PRESET_INFO = "A named architecture fills every control (sizes kept small)."


def preset_info(name: str) -> str:
    """The line under the Preset dropdown: which named preset the controls match (``name``, from
    ``matching_preset``), said in words rather than by switching the dropdown under the visitor."""
    return PRESET_INFO if name == CUSTOM else f"The controls match {name}. {PRESET_INFO}"


def matching_preset(cfg: ModelConfig) -> str:
    """The preset whose config equals ``cfg`` exactly (ignoring the seed), else ``CUSTOM``; a paper's
    preset wins over a trained one of the same config (BLOOM is the ALiBi bundle's architecture), and both
    over a lesson (the BigBird lesson is BigBird's config at another text)."""
    d = {**cfg.to_dict(), "seed": 0}
    names = available()
    for name in sorted(names, key=lambda n: (n in LESSONS, n in BUNDLE_PRESETS)):
        if preset_config(name).to_dict() == d:
            return name
    return CUSTOM
