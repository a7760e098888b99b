"""BERT (Devlin et al. 2019): ``BertForMaskedLM`` / ``BertForPreTraining`` checkpoints, for masked-LM logits.

Catalogue choices: encoder-only (bidirectional, the masked-LM head: dense, GELU, LayerNorm, vocabulary
projection with a bias), full attention, ``learned`` positions (``max_position_embeddings``), a
LayerNorm of the summed embeddings (``embed_norm``), post-LN ``layernorm`` (``layer_norm_eps``),
``gelu`` FFN of width ``intermediate_size``, biases on every projection (``attn_bias="all"``).
Every token has token type 0 (one segment): the type-0 embedding is added to every row of the
position table, which is exactly BERT's sum for that input. The pooler and the next-sentence head
are not read by masked-LM logits and are left out.
"""

from __future__ import annotations

from .fields import Fields
from .mapping import Rule, Tie

MODEL_TYPES = ("bert",)
ACTIVATIONS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "layer_norm_eps",
}  # catalogue field -> config.json key
SIZES = {"type_vocab_size": (1, 1 << 20, "BERT's token types; type 0 is read")}  # checked by models.hf.sizes
UNUSED = ("pooler.", "cls.seq_relationship.", "embeddings.position_ids", "embeddings.token_type_ids")


def config(f: Fields) -> tuple:
    act = f.text("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        f.refuse(
            "hidden_act",
            act,
            f"hidden_act {act!r} is not supported: one of {sorted(ACTIVATIONS)} (the FFN "
            "and the masked-LM head use it)",
        )
    kind = f.text("position_embedding_type", "absolute")
    if kind != "absolute":
        f.refuse("position_embedding_type", kind, "'absolute' (relative_key variants are not supported)")
    if f.flag("is_decoder", False) or f.flag("add_cross_attention", False):
        f.refuse("is_decoder", True, "false (a BERT decoder is not supported; the masked-LM encoder is)")
    f.integer("type_vocab_size", 2, lo=1)
    notes = [
        "token type 0 for every token (its embedding added to the position table)",
        "masked-LM head tied to the token embedding" if _tied(f) else "separate masked-LM decoder weight",
    ]
    return dict(
        architecture="encoder_only",
        causal=False,
        attention="full",
        position="learned",
        norm_placement="post",
        norm="layernorm",
        ffn="gelu",
        gelu_approx=ACTIVATIONS[act],
        attn_bias="all",
        embed_norm=True,
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=f.integer("max_position_embeddings", 512, lo=1),
        n_layers=f.integer("num_hidden_layers", lo=1),
        d_model=f.integer("hidden_size", lo=1),
        n_heads=f.integer("num_attention_heads", lo=1),
        d_ff=f.integer("intermediate_size", lo=1),
        norm_eps=f.number("layer_norm_eps", 1e-12),
    ), notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", True)


def canonical(f: Fields, name: str):
    name = name.removeprefix("bert.")
    if name.endswith(".gamma"):  # TF-converted checkpoints
        name = name[:-6] + ".weight"
    elif name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if name.startswith(UNUSED) or name == "cls.predictions.decoder.bias":  # the latter is cls.predictions.bias
        return None
    if name == "cls.predictions.decoder.weight" and _tied(f):
        return None  # the tied decoder is the embedding
    return name


def rules(f: Fields, cfg) -> dict:
    emb, head = "embeddings.", "cls.predictions."
    out = {
        "embed.weight": Rule((emb + "word_embeddings.weight",)),
        "position.table.weight": Rule(
            (emb + "position_embeddings.weight", emb + "token_type_embeddings.weight"),
            lambda pos, types: pos + types[0],
        ),
        "embed_norm.weight": Rule((emb + "LayerNorm.weight",)),
        "embed_norm.bias": Rule((emb + "LayerNorm.bias",)),
        "head.dense.weight": Rule((head + "transform.dense.weight",)),
        "head.dense.bias": Rule((head + "transform.dense.bias",)),
        "head.norm.weight": Rule((head + "transform.LayerNorm.weight",)),
        "head.norm.bias": Rule((head + "transform.LayerNorm.bias",)),
        "head.decoder.weight": Tie("embed.weight") if _tied(f) else Rule((head + "decoder.weight",)),
        "head.decoder.bias": Rule((head + "bias",)),
    }
    parts = {
        "attn.q_proj": "attention.self.query",
        "attn.k_proj": "attention.self.key",
        "attn.v_proj": "attention.self.value",
        "attn.out_proj": "attention.output.dense",
        "res_attn.norm": "attention.output.LayerNorm",
        "ffn.w1": "intermediate.dense",
        "ffn.w2": "output.dense",
        "res_ffn.norm": "output.LayerNorm",
    }
    for i in range(cfg.n_layers):
        for mine, theirs in parts.items():
            for p in ("weight", "bias"):
                out[f"stack.blocks.{i}.{mine}.{p}"] = Rule((f"encoder.layer.{i}.{theirs}.{p}",))
    return out
