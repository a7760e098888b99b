"""The models the catalogue's papers name (axial, Sinkhorn, ProbSparse, Synthesizer, Set Transformer and
the others) as ModelConfig overrides."""

from __future__ import annotations

PAPERS: dict = {}

# the models the axial, sinkhorn, probsparse and synthesizer papers name
PAPERS.update(
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
PAPERS.update(
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
