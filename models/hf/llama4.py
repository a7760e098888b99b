"""Llama 4 (Meta 2025, "The Llama 4 herd"), text only: transformers' ``Llama4TextConfig`` / ``Llama4ForCausalLM``
(``model_type`` ``llama4_text``), and the language model of a multimodal ``llama4`` checkpoint
(``Llama4ForConditionalGeneration``: ``text_config`` read, the vision tower's tensors left unread).

Catalogue choices: decoder-only, causal, pre-norm ``rmsnorm`` (``rms_norm_eps``, default 1e-5) with the final
``norm``, ``num_key_value_heads`` K/V heads of ``head_dim`` (default 128), ``attention_bias`` -> ``attn_bias="all"``,
untied head unless ``tie_word_embeddings``. Per layer (``no_rope_layers``, ``layer_types``):

- RoPE (``rope_parameters.rope_theta``, default 500000; ``linear`` scaling -> ``rope_scale``; any other type,
  Llama 3's ``llama3`` of the released Scout included, refused by name, ``models.hf.fields.rope``). Llama 4 rotates
  *interleaved* pairs (dims ``2i, 2i + 1`` as one complex number, ``view_as_complex``); the catalogue's RoPE
  rotates halves (dim ``i`` with ``i + d_h/2``). Scores read ``q . k`` only, and a dot product is unchanged when
  both vectors' dims are permuted alike, so each head's rows of ``q_proj`` and ``k_proj`` (and biases) are read in
  the order ``0, 2, 4, ..., 1, 3, 5, ...`` (``deinterleave``): the catalogue's rotate-half of the permuted head is
  Llama 4's interleaved rotation of the stored one, the same scores exactly (transformers' own Llama conversion
  permutes Meta's interleaved weights the same way). Done in the layers that rotate only.
- ``no_rope_layers[i] == 0`` (default: every ``no_rope_layer_interval``-th layer, 4) -> a ``:nope`` layer of the
  ``layer_schedule``: no positions; ``layer_types`` (default: ``chunked_attention`` in the RoPE layers when
  ``attention_chunk_size`` is set, else ``full_attention``) -> ``chunked`` (``attention_chunk_size``: a query
  sees the keys of its own chunk ``floor(pos / size)``, causally; transformers counts chunks from the first real
  token, which is what a row run on its own tokens does) or ``full``.
- ``use_qk_norm`` (default true) -> ``qk_norm="rms_rope"``: each head's q and k times ``rsqrt(mean(t^2) + eps)``,
  no gain, in the RoPE layers only (after RoPE there; a rotation keeps the sum of squares, and the permutation
  above keeps the mean, so it is the same function).
- ``attn_temperature_tuning`` (default true) -> ``attn_temp_floor = floor_scale`` (8192), ``attn_temp_scale =
  attn_scale`` (0.1) in the NoPE layers: queries at position ``p`` times ``1 + attn_scale * log1p(floor((p + 1)
  / floor_scale))`` (``models.temperature``; positions count from the row's first token).
- FFN: every layer in ``moe_layers`` (default ``interleave_moe_layer_step - 1, 2 * step - 1, ...``; step 1:
  every layer) -> ``ffn="moe_llama4"`` (``models.ffn.moe_llama4``): ``num_local_experts`` SwiGLU experts of
  ``intermediate_size``, top ``num_experts_per_tok`` by router logit, sigmoid scores scaling the experts' inputs,
  plus the shared expert; ``experts.gate_up_proj [E, d, 2 d_ff]`` split into each expert's gate / up rows,
  ``experts.down_proj [E, d_ff, d]`` transposed. The other layers (Maverick's ``interleave_moe_layer_step`` 2:
  every second layer) are ``:dense`` layers of the schedule: ``dense_ffn="swiglu"`` of ``dense_d_ff =
  intermediate_size_mlp`` (``feed_forward.{gate,up,down}_proj``). A model with no MoE layer is ``swiglu`` of
  ``intermediate_size_mlp`` everywhere.

Refused by name: ``hidden_act`` other than ``silu``, rope types other than ``default`` / ``linear``, ``layer_types``
other than ``full_attention`` / ``chunked_attention``, a ``no_rope_layers`` that is no list of 0 / 1 covering the
layers, chunked layers without ``attention_chunk_size``.
"""

from __future__ import annotations

import sys

from ..schedule import from_layer_types
from . import sizes
from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("llama4_text", "llama4")

NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
    "rope_scale": "rope_scaling",
    "head_dim": "head_dim",
    "n_experts": "num_local_experts",
    "top_k": "num_experts_per_tok",
    "attention_chunk_size": "attention_chunk_size",
    "attn_temp_floor": "floor_scale",
    "attn_temp_scale": "attn_scale",
}  # catalogue field -> config.json key (of text_config, for a multimodal llama4)
SIZES = {
    "no_rope_layer_interval": (1, 1 << 20, "every how many layers one has no positions"),
    "interleave_moe_layer_step": (1, 1 << 20, "every how many layers one is a mixture of experts"),
    "intermediate_size_mlp": (1, 1 << 18, "the hidden width of the dense (non-MoE) layers"),
}
# Llama4TextConfig's defaults for what a config.json may omit
DEFAULTS = dict(
    vocab_size=202048,
    hidden_size=5120,
    intermediate_size=8192,
    intermediate_size_mlp=16384,
    num_hidden_layers=48,
    num_attention_heads=40,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=4096 * 32,
    rms_norm_eps=1e-5,
    num_experts_per_tok=1,
    num_local_experts=16,
    interleave_moe_layer_step=1,
    no_rope_layer_interval=4,
    attention_chunk_size=8192,
    floor_scale=8192,
    attn_scale=0.1,
)
THETA = 500000.0  # Llama4TextConfig.default_theta
LAYER_TYPES = {"full_attention": "full", "chunked_attention": "chunked"}


def text_fields(f: Fields) -> Fields:
    """The text model's fields: ``text_config`` of a multimodal ``llama4`` config.json, else the config itself."""
    if f.hf.get("model_type") != "llama4":
        return f
    text = f.hf.get("text_config")
    if not isinstance(text, dict):
        f.refuse("text_config", str(text)[:80], "an object: the language model's Llama4TextConfig")
    sizes.check(sys.modules[__name__], text)  # the loader checked the top level's sizes; these are the model's
    return Fields({**text, "model_type": "llama4_text", "tie_word_embeddings": _tied_flag(f)}, f.names)


def _tied_flag(f: Fields) -> bool:
    """``tie_word_embeddings``: a multimodal config's text_config says it, else the top level (default false)."""
    text = f.hf.get("text_config") if f.hf.get("model_type") == "llama4" else None
    value = text.get("tie_word_embeddings") if isinstance(text, dict) else None
    return f.flag("tie_word_embeddings", False) if value is None else Fields(text).flag("tie_word_embeddings")


def _rope_layers(f: Fields, n_layers: int) -> list:
    """Whether each layer rotates: ``no_rope_layers`` (1 = RoPE, 0 = NoPE; a longer list is cut to the layers),
    or an empty / absent list -> every ``no_rope_layer_interval``-th layer without, as ``Llama4TextConfig``."""
    flags = f.hf.get("no_rope_layers")
    if not flags:
        every = f.integer("no_rope_layer_interval", DEFAULTS["no_rope_layer_interval"], lo=1)
        return [(i + 1) % every != 0 for i in range(n_layers)]
    if not isinstance(flags, list) or len(flags) < n_layers or any(v not in (0, 1) or v is True for v in flags):
        f.refuse("no_rope_layers", str(flags)[:80], f"a list of 0 (NoPE) / 1 (RoPE), one per layer ({n_layers})")
    return [bool(v) for v in flags[:n_layers]]


def _layer_types(f: Fields, rotary: list) -> list:
    types = f.hf.get("layer_types")
    if types is None:
        chunked = f.hf.get("attention_chunk_size", DEFAULTS["attention_chunk_size"]) is not None
        return ["chunked_attention" if r and chunked else "full_attention" for r in rotary]
    if not isinstance(types, list) or len(types) != len(rotary) or not all(t in LAYER_TYPES for t in types):
        f.refuse("layer_types", str(types)[:80], f"one of {list(LAYER_TYPES)} per layer ({len(rotary)} layers)")
    return types


def _schedule(f: Fields, n_layers: int, moe: set) -> tuple:
    """``(fields, rotary)``: position, attention, chunk size and ``layer_schedule`` (``:nope`` on the layers
    without RoPE, ``:dense`` on the layers outside ``moe`` when some are MoE); ``rotary``: RoPE per layer."""
    rotary = _rope_layers(f, n_layers)
    types = _layer_types(f, rotary)
    any_rope = any(rotary)
    mixed = 0 < len(moe) < n_layers
    # a model without any RoPE layer is position "none" everywhere: no ':nope' to mark; likewise ':dense'
    tokens = [
        LAYER_TYPES[t] + (":nope" if any_rope and not r else "") + (":dense" if mixed and i not in moe else "")
        for i, (t, r) in enumerate(zip(types, rotary))
    ]
    out = {"position": "rope" if any_rope else "none", "attention": tokens[0].split(":")[0]}
    if "chunked_attention" in types:
        if f.hf.get("attention_chunk_size", DEFAULTS["attention_chunk_size"]) is None:
            f.refuse("attention_chunk_size", None, "a chunk size (an integer) when a layer is chunked_attention")
        out["attention_chunk_size"] = f.integer("attention_chunk_size", DEFAULTS["attention_chunk_size"], lo=1)
    if len(set(tokens)) > 1 or ":" in tokens[0]:
        out["layer_schedule"] = from_layer_types(tokens, {t: t for t in tokens})
    return out, rotary


def _moe_layers(f: Fields, n_layers: int) -> set:
    layers = f.hf.get("moe_layers")
    if layers is None:
        step = f.integer("interleave_moe_layer_step", DEFAULTS["interleave_moe_layer_step"], lo=1)
        return set(range(step - 1, n_layers, step))
    if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        f.refuse("moe_layers", str(layers)[:80], "a list of layer indices")
    return {i for i in layers if 0 <= i < n_layers}


def _ffn(f: Fields, moe: set, n_layers: int) -> dict:
    """The MoE layers' ``moe_llama4`` and, when some layers are dense, their ``dense_ffn`` / ``dense_d_ff``
    (``Llama4TextMLP`` of ``intermediate_size_mlp``); no MoE layer at all: ``swiglu`` of that width everywhere."""
    mlp = f.integer("intermediate_size_mlp", DEFAULTS["intermediate_size_mlp"], lo=1)
    if not moe:
        return {"ffn": "swiglu", "d_ff": mlp}
    out = {
        "ffn": "moe_llama4",
        "n_experts": f.integer("num_local_experts", DEFAULTS["num_local_experts"], lo=1),
        "top_k": f.integer("num_experts_per_tok", DEFAULTS["num_experts_per_tok"], lo=1),
        "d_ff": f.integer("intermediate_size", DEFAULTS["intermediate_size"], lo=1),
    }
    if len(moe) < n_layers:
        out.update(dense_ffn="swiglu", dense_d_ff=mlp)
    return out


def _rope(f: Fields) -> dict:
    out = rope(f)
    params = f.hf.get("rope_parameters")
    explicit = f.hf.get("rope_theta") is not None or (isinstance(params, dict) and "rope_theta" in params)
    return out if explicit else {**out, "rope_base": THETA}


def config(f: Fields) -> tuple:
    multimodal = f.hf.get("model_type") == "llama4"
    f = text_fields(f)
    d = f.integer("hidden_size", DEFAULTS["hidden_size"], lo=1)
    heads = f.integer("num_attention_heads", DEFAULTS["num_attention_heads"], lo=1)
    kv = f.integer("num_key_value_heads", DEFAULTS["num_key_value_heads"], lo=1)
    n_layers = f.integer("num_hidden_layers", DEFAULTS["num_hidden_layers"], lo=1)
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, f"hidden_act {act!r} is not supported: 'silu' (SwiGLU experts)")
    head_dim = f.integer("head_dim", DEFAULTS["head_dim"], lo=1, hi=1 << 16)
    moe = _moe_layers(f, n_layers)
    att, rotary = _schedule(f, n_layers, moe)
    ffn = _ffn(f, moe, n_layers)
    nope = not all(rotary)
    tune = nope and f.flag("attn_temperature_tuning", True)
    fields = dict(
        architecture="decoder_only",
        causal=True,
        norm_placement="pre",
        norm="rmsnorm",
        attn_bias="all" if f.flag("attention_bias", False) else "none",
        vocab_size=f.integer("vocab_size", DEFAULTS["vocab_size"], lo=1),
        max_len=f.integer("max_position_embeddings", DEFAULTS["max_position_embeddings"], lo=1),
        n_layers=n_layers,
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=None if d % heads == 0 and head_dim == d // heads else head_dim,
        norm_eps=f.number("rms_norm_eps", DEFAULTS["rms_norm_eps"]),
        qk_norm="rms_rope" if any(rotary) and f.flag("use_qk_norm", True) else "none",
        **att,
        **ffn,
        **(_rope(f) if any(rotary) else {}),
    )
    if tune:
        fields["attn_temp_floor"] = f.integer("floor_scale", DEFAULTS["floor_scale"], lo=1)
        fields["attn_temp_scale"] = f.number("attn_scale", DEFAULTS["attn_scale"])
    tied = f.flag("tie_word_embeddings", False)
    notes = [
        f"llama4: {att.get('layer_schedule') or att['attention']} layers, {kv} K/V heads of {head_dim} for "
        f"{heads} query heads, RMSNorm, "
        + (
            f"{ffn['n_experts']} SwiGLU experts (top {ffn['top_k']}, sigmoid-scaled inputs) + a shared expert"
            if ffn["ffn"] == "moe_llama4"
            else "SwiGLU"
        ),
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
        "interleaved RoPE read as rotate-half: each head's q / k rows permuted (0, 2, 4, ..., 1, 3, 5, ...)",
    ]
    if "dense_d_ff" in ffn:
        notes.append(
            f"layers outside moe_layers: a dense SwiGLU of {ffn['dense_d_ff']} (':dense', intermediate_size_mlp)"
        )
    if fields["qk_norm"] == "rms_rope":
        notes.append("q / k of the RoPE layers RMS-normalised per head without a gain (qk_norm='rms_rope')")
    if tune:
        notes.append(
            f"NoPE layers' queries times 1 + {fields['attn_temp_scale']:g} log1p(floor((p + 1) / "
            f"{fields['attn_temp_floor']})) (attention temperature tuning)"
        )
    if multimodal:
        notes.insert(0, "multimodal llama4: the language model only (text_config); the vision tower is not read")
    return fields, notes


def _tied(f: Fields) -> bool:
    return _tied_flag(f)


def canonical(f: Fields, name: str):
    if f.hf.get("model_type") == "llama4":  # Llama4ForConditionalGeneration: the language model's tensors
        if name.startswith(("vision_model.", "multi_modal_projector.")):
            return None  # the vision tower: text logits never read it
        name = name.removeprefix("language_model.")
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and _tied(f)):
        return None  # a buffer recomputed from rope_theta; the tied head is the embedding
    return name


def deinterleave_rows(t, d_head: int):
    """Each head's rows (dim 0 of ``t``: ``n * d_head`` rows) in the order ``0, 2, 4, ..., 1, 3, 5, ...``: an
    interleaved-pair head as a rotate-half head."""
    heads = t.reshape(-1, d_head, *t.shape[1:])  # (n, d_head, ...)
    return heads.reshape(heads.shape[0], d_head // 2, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def interleave_rows(t, d_head: int):
    """The inverse of ``deinterleave_rows``: rotate-half rows back in Llama 4's interleaved-pair order."""
    heads = t.reshape(-1, 2, d_head // 2, *t.shape[1:])  # (n, 2, d_head / 2, ...)
    return heads.transpose(1, 2).reshape(t.shape)


def _rows(d_head: int):
    return lambda t: deinterleave_rows(t, d_head)


def _expert(e: int, part: str):
    """Expert ``e``'s ``w`` (gate), ``v`` (up) or ``w2`` weight from the fused ``gate_up_proj [E, d, 2 d_ff]`` /
    ``down_proj [E, d_ff, d]`` (applied as ``x @ W``: our ``Linear`` weights are their transposes)."""
    if part == "w":
        return lambda t: t[e, :, : t.shape[-1] // 2].T
    if part == "v":
        return lambda t: t[e, :, t.shape[-1] // 2 :].T
    return lambda t: t[e].T


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",)),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        rotary = cfg.layer_config(i).position == "rope"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = "out_proj" if proj == "o_proj" else proj
            permute = rotary and proj in ("q_proj", "k_proj")
            fn = (_rows(cfg.d_head),) if permute else ()
            out[dst + f"attn.{mine}.weight"] = Rule((src + f"self_attn.{proj}.weight",), *fn)
            if cfg.attn_bias == "all":
                out[dst + f"attn.{mine}.bias"] = Rule((src + f"self_attn.{proj}.bias",), *fn)
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",))
        ff = src + "feed_forward."
        if cfg.layer_config(i).ffn == "moe_llama4":  # a ':dense' layer: Llama4TextMLP
            out[dst + "ffn.router.weight"] = Rule((ff + "router.weight",))
            for e in range(cfg.n_experts):
                for part in ("w", "v"):
                    out[dst + f"ffn.experts.{e}.{part}.weight"] = Rule((ff + "experts.gate_up_proj",), _expert(e, part))
                out[dst + f"ffn.experts.{e}.w2.weight"] = Rule((ff + "experts.down_proj",), _expert(e, "w2"))
            for mine, theirs in (("w", "gate_proj"), ("v", "up_proj"), ("w2", "down_proj")):
                out[dst + f"ffn.shared.{mine}.weight"] = Rule((ff + f"shared_expert.{theirs}.weight",))
        else:
            for mine, theirs in (("w", "gate_proj"), ("v", "up_proj"), ("w2", "down_proj")):
                out[dst + f"ffn.{mine}.weight"] = Rule((ff + f"{theirs}.weight",))
    return out
