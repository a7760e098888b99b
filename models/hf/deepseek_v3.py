"""DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report"): multi-head latent attention and a mixture of
fine-grained routed experts with shared experts, after ``first_k_dense_replace`` dense layers.

The conventions are those of ``transformers`` 5's ``DeepseekV3Config`` / ``modeling_deepseek_v3.py`` (its defaults
fill what config.json omits). Catalogue choices: decoder-only, causal, pre-norm ``rmsnorm`` (``rms_norm_eps``) with
a final norm, ``rope`` (``rope_theta`` -> ``rope_base``; linear scaling -> ``rope_scale``; YaRN -> the ``yarn_*``
fields, ``models/positions/yarn.py``: its frequencies over the ``qk_rope_head_dim`` rotated numbers, cos / sin times
``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` and, through ``mscale_all_dim`` ->
``yarn_mscale_all_dim``, the softmax scale times ``mscale(factor, mscale_all_dim)**2`` with ``mscale(s, m) =
0.1 m ln s + 1``, as DeepSeek-V2 / V3's long-context configs ask), and per layer:

- attention ``mla`` (``models/attention/mla.py``): ``q_lora_rank`` (null: one ``q_proj``; absent: 1536),
  ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``, ``rope_interleave`` (default
  true); the latents' RMSNorms use eps 1e-6 whatever ``rms_norm_eps`` is, as transformers builds them; scores
  scale by ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`` (times YaRN's ``mscale_all_dim`` term above).
- FFN ``moe_deepseek`` (``models/ffn/moe_shared.py``): ``n_routed_experts`` -> ``n_experts``,
  ``num_experts_per_tok`` -> ``top_k``, ``moe_intermediate_size`` -> ``d_ff``, ``n_shared_experts``, ``n_group``,
  ``topk_group``, ``routed_scaling_factor`` -> ``routed_scaling``, ``norm_topk_prob``; ``mlp.gate.weight`` is the
  router, ``mlp.gate.e_score_correction_bias`` the selection bias, ``mlp.experts.{e}.gate_proj`` / ``up_proj`` /
  ``down_proj`` each expert's Swish branch, linear branch and output (or the fused ``mlp.experts.gate_up_proj``
  ``[E, 2 I, d]`` / ``down_proj`` ``[E, d, I]`` of transformers' own layout), ``mlp.shared_experts`` the shared one.
- the first ``first_k_dense_replace`` layers: a dense ``swiglu`` of width ``intermediate_size`` (``mlp.gate_proj``
  / ``up_proj`` / ``down_proj``), through the layer schedule's ``:dense`` modifier (``dense_ffn="swiglu"``,
  ``dense_d_ff``); every layer dense: ``ffn="swiglu"`` and no schedule.

The LM head is tied to the embedding when ``tie_word_embeddings`` (default false). A real checkpoint's
multi-token-prediction module (``num_nextn_predict_layers`` layers stored after the last one, as
``model.layers.{num_hidden_layers + j}.*``) is not part of the logits (transformers' model skips it too): its
tensors are left unread, and a note says so.

Refused by name: an ``mscale_all_dim`` with a scaling other than YaRN (linear), other scalings as for every family
(``fields.rope``); ``attention_bias`` true; ``num_key_value_heads`` other than
``num_attention_heads`` (MLA has no K/V heads to group); ``hidden_act`` other than silu; a ``quantization_config``
(FP8 weights); the original code's ``scoring_func`` other than sigmoid, ``topk_method`` other than
``noaux_tc`` and ``moe_layer_freq`` other than 1 (transformers' model ignores them, so a checkpoint that sets
them computes something else than it says); null for the sizes transformers cannot run with.
"""

from __future__ import annotations

import math

from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("deepseek_v3",)

NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "moe_intermediate_size",
    "dense_d_ff": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
    "rope_scale": "rope_scaling",
    "yarn_factor": "rope_scaling",  # (not an integer: models.hf.sizes does not read it)
    "yarn_beta_fast": "rope_scaling",
    "yarn_attention_factor": "rope_scaling",
    "yarn_mscale_all_dim": "rope_scaling",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "n_experts": "n_routed_experts",
    "top_k": "num_experts_per_tok",
    "n_shared_experts": "n_shared_experts",
    "n_group": "n_group",
    "topk_group": "topk_group",
    "routed_scaling": "routed_scaling_factor",
    "norm_topk_prob": "norm_topk_prob",
    "rope_interleave": "rope_interleave",
}  # catalogue field -> config.json key
SIZES = {
    "first_k_dense_replace": (0, 1 << 20, "the dense layers before the first mixture of experts"),
    "num_nextn_predict_layers": (0, 64, "the multi-token-prediction layers stored after the model's own"),
}
# DeepseekV3Config's defaults for the keys config.json may omit
DEFAULTS = dict(
    vocab_size=129280,
    hidden_size=7168,
    intermediate_size=18432,
    moe_intermediate_size=2048,
    num_hidden_layers=61,
    num_attention_heads=128,
    n_shared_experts=1,
    n_routed_experts=256,
    routed_scaling_factor=2.5,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_rope_head_dim=64,
    v_head_dim=128,
    qk_nope_head_dim=128,
    n_group=8,
    topk_group=4,
    num_experts_per_tok=8,
    first_k_dense_replace=3,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    num_nextn_predict_layers=1,
)
BIG = 1 << 20


def _size(f: Fields, key: str, lo: int = 1) -> int:
    """A size: absent -> DeepseekV3Config's default; null -> refused (transformers' model cannot run with it)."""
    if key in f.hf and f.hf[key] is None:
        f.refuse(key, None, f"an integer (absent means DeepseekV3Config's default {DEFAULTS[key]})")
    return f.integer(key, DEFAULTS[key], lo=lo, hi=BIG)


def _switch(f: Fields, key: str, default: bool) -> bool:
    """A flag transformers reads by truth: absent -> its default, null -> false."""
    if key in f.hf and f.hf[key] is None:
        return False
    return f.flag(key, default)


def _rope(f: Fields) -> dict:
    """``fields.rope`` (none, linear, YaRN with DeepSeek's ``mscale`` / ``mscale_all_dim`` ratio on cos / sin) and,
    under YaRN, ``mscale_all_dim`` -> ``yarn_mscale_all_dim``: transformers' ``yarn_apply_mscale`` multiplies the
    attention's scale by ``(0.1 mscale_all_dim ln factor + 1)**2`` whenever the type is not 'default' and
    ``mscale_all_dim`` is truthy (absent, null or 0: no change)."""
    out = rope(f)
    params = f.hf.get("rope_parameters")
    params = f.hf.get("rope_scaling") if params is None else params  # the dictionary fields.rope read
    if not isinstance(params, dict) or not params.get("mscale_all_dim"):
        return out
    kind, m_all = params.get("rope_type", params.get("type", "default")), params["mscale_all_dim"]
    if kind == "default":
        return out  # transformers reads mscale_all_dim only with a scaling type
    if kind != "yarn":
        f.refuse(
            "rope_scaling",
            f"{kind} with mscale_all_dim={m_all}",
            "mscale_all_dim with 'yarn' only: transformers multiplies DeepSeek's attention scale by "
            "(0.1 mscale_all_dim ln factor + 1)**2 for any scaling type, and the catalogue's yarn_mscale_all_dim "
            "is YaRN's",
        )
    if isinstance(m_all, bool) or not isinstance(m_all, (int, float)) or not (math.isfinite(m_all) and 0 < m_all):
        f.refuse("rope_scaling", m_all, "mscale_all_dim: a positive number (absent, null or 0: no change)")
    out["yarn_mscale_all_dim"] = float(m_all)
    return out


def _refusals(f: Fields, heads: int) -> None:
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, "'silu' (DeepSeek's experts and dense layers are SwiGLU)")
    if f.flag("attention_bias", False):
        f.refuse("attention_bias", True, "false (the catalogue's MLA projections have no biases)")
    kv = f.hf.get("num_key_value_heads")
    if kv is not None and kv != heads:
        f.refuse(
            "num_key_value_heads",
            kv,
            f"num_attention_heads={heads} or null: MLA up-projects keys and values for every head from one latent "
            "(transformers' model cannot run with fewer K/V heads either)",
        )
    if f.hf.get("quantization_config") is not None:
        f.refuse("quantization_config", "present", "none: quantized (FP8) weights are not read; dequantize first")
    for key, expected in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc"), ("moe_layer_freq", 1)):
        if f.hf.get(key, expected) != expected:
            f.refuse(key, f.hf.get(key), f"{expected!r} (what transformers' DeepSeek-V3 model computes)")


def config(f: Fields) -> tuple:
    """``(ModelConfig fields, notes)``."""
    d, heads = _size(f, "hidden_size"), _size(f, "num_attention_heads")
    n_layers = _size(f, "num_hidden_layers")
    _refusals(f, heads)
    q_rank = 0 if "q_lora_rank" in f.hf and f.hf["q_lora_rank"] is None else _size(f, "q_lora_rank")
    dense = min(_size(f, "first_k_dense_replace", lo=0), n_layers)
    tied = f.flag("tie_word_embeddings", False)
    interleave = _switch(f, "rope_interleave", True)
    fields = dict(
        architecture="decoder_only",
        causal=True,
        attention="mla",
        position="rope",
        norm_placement="pre",
        norm="rmsnorm",
        vocab_size=_size(f, "vocab_size"),
        max_len=_size(f, "max_position_embeddings"),
        n_layers=n_layers,
        d_model=d,
        n_heads=heads,
        norm_eps=f.number("rms_norm_eps", DEFAULTS["rms_norm_eps"]),
        q_lora_rank=q_rank,
        kv_lora_rank=_size(f, "kv_lora_rank"),
        qk_nope_head_dim=_size(f, "qk_nope_head_dim"),
        qk_rope_head_dim=_size(f, "qk_rope_head_dim"),
        v_head_dim=_size(f, "v_head_dim"),
        rope_interleave=interleave,
        **_rope(f),
    )
    notes = [
        f"deepseek_v3: MLA (latent {fields['kv_lora_rank']}, "
        + (f"query rank {q_rank}" if q_rank else "plain query projection")
        + f"), RMSNorm, RoPE on {fields['qk_rope_head_dim']} numbers per head"
        + (" (interleaved pairs)" if interleave else ""),
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
    ]
    if fields.get("yarn_factor") is not None:
        m_all = fields.get("yarn_mscale_all_dim")
        notes.append(
            f"YaRN RoPE: factor {fields['yarn_factor']:g} over an original context of "
            f"{fields['yarn_original_max_len']} positions"
            + (f"; softmax scale times (0.1 * {m_all:g} ln s + 1)^2 (mscale_all_dim)" if m_all else "")
        )
    if dense < n_layers:
        experts = _size(f, "n_routed_experts")
        fields.update(
            ffn="moe_deepseek",
            d_ff=_size(f, "moe_intermediate_size"),
            n_experts=experts,
            top_k=_size(f, "num_experts_per_tok"),
            n_shared_experts=_size(f, "n_shared_experts", lo=0),
            n_group=_size(f, "n_group"),
            topk_group=_size(f, "topk_group"),
            routed_scaling=f.number("routed_scaling_factor", DEFAULTS["routed_scaling_factor"]),
            norm_topk_prob=_switch(f, "norm_topk_prob", True),
        )
        notes.append(
            f"MoE: top-{fields['top_k']} of {experts} routed SwiGLU experts ({fields['n_group']} groups, "
            f"{fields['topk_group']} per token) + {fields['n_shared_experts']} shared, scaled by "
            f"{fields['routed_scaling']}"
        )
    if dense == n_layers:
        fields.update(ffn="swiglu", d_ff=_size(f, "intermediate_size"))
        notes.append("every layer dense (first_k_dense_replace >= num_hidden_layers): SwiGLU")
    elif dense:
        fields.update(
            layer_schedule=f"{_run('mla:dense', dense)},{_run('mla', n_layers - dense)}",
            dense_ffn="swiglu",
            dense_d_ff=_size(f, "intermediate_size"),
        )
        notes.append(f"layers 0-{dense - 1} dense SwiGLU of width {fields['dense_d_ff']} (first_k_dense_replace)")
    mtp = f.integer("num_nextn_predict_layers", DEFAULTS["num_nextn_predict_layers"], lo=0, hi=64)
    if any(_layer(name) is not None and _layer(name) >= n_layers for name in f.names):
        notes.append(f"multi-token-prediction layers ({mtp}) not read: they are not part of the logits")
    return fields, notes


def _run(token: str, n: int) -> str:
    """``n`` layers of ``token`` as a schedule entry (``"mla"``, ``"mla*3"``)."""
    return token if n == 1 else f"{token}*{n}"


def _layer(name: str):
    """The layer index of ``model.layers.{i}.*`` (None for other names)."""
    parts = name.removeprefix("model.").split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "layers" and parts[1].isdigit() else None


def canonical(f: Fields, name: str):
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and f.flag("tie_word_embeddings", False)):
        return None  # a buffer recomputed from rope_theta; the tied head is the embedding
    i = _layer(name)
    n = f.integer("num_hidden_layers", DEFAULTS["num_hidden_layers"], lo=1, hi=BIG)
    mtp = f.integer("num_nextn_predict_layers", DEFAULTS["num_nextn_predict_layers"], lo=0, hi=64)
    if i is not None and n <= i < n + mtp:
        return None  # the multi-token-prediction module: not part of the logits
    return name


def _swiglu(out: dict, dst: str, src: str) -> None:
    out[dst + "w.weight"] = Rule((src + "gate_proj.weight",))
    out[dst + "v.weight"] = Rule((src + "up_proj.weight",))
    out[dst + "w2.weight"] = Rule((src + "down_proj.weight",))


def _experts(out: dict, f: Fields, cfg, dst: str, src: str) -> None:
    """Each routed expert from its own tensors, or from transformers' fused ``[E, 2 I, d]`` / ``[E, d, I]``."""
    hidden = cfg.d_ff
    fused = "model." + src + "gate_up_proj" in f.names or src + "gate_up_proj" in f.names
    for e in range(cfg.n_experts):
        if fused:
            out[dst + f"{e}.w.weight"] = Rule((src + "gate_up_proj",), lambda t, e=e: t[e, :hidden])
            out[dst + f"{e}.v.weight"] = Rule((src + "gate_up_proj",), lambda t, e=e: t[e, hidden:])
            out[dst + f"{e}.w2.weight"] = Rule((src + "down_proj",), lambda t, e=e: t[e])
        else:
            _swiglu(out, dst + f"{e}.", src + f"{e}.")


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",)),
        "head.weight": Tie("embed.weight") if f.flag("tie_word_embeddings", False) else Rule(("lm_head.weight",)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        attn, core = src + "self_attn.", dst + "attn.core."
        out[dst + "attn.out_proj.weight"] = Rule((attn + "o_proj.weight",))
        names = ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj"]
        names += ["q_a_proj", "q_a_layernorm", "q_b_proj"] if cfg.q_lora_rank else ["q_proj"]
        for name in names:
            out[core + f"{name}.weight"] = Rule((attn + f"{name}.weight",))
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",))
        mlp, ffn = src + "mlp.", dst + "ffn."
        if cfg.layer_config(i).ffn == "moe_deepseek":
            out[ffn + "router.weight"] = Rule((mlp + "gate.weight",))
            out[ffn + "e_score_correction_bias"] = Rule((mlp + "gate.e_score_correction_bias",))
            _experts(out, f, cfg, ffn + "experts.", mlp + "experts.")
            if cfg.n_shared_experts:
                _swiglu(out, ffn + "shared.", mlp + "shared_experts.")
        else:
            _swiglu(out, ffn, mlp)
    return out
