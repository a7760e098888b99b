"""``save_llama4``: a catalogue model written as a Hugging Face Llama 4 (text) folder (``llama4_text``,
``Llama4ForCausalLM``), the loader ``models.hf.llama4`` run backwards.

The config: each layer's kind from ``cfg.layer_config(i)`` (``layer_types``: ``chunked_attention`` for a
``chunked`` layer, ``full_attention`` for a ``full`` one; ``no_rope_layers``: 1 where the layer keeps RoPE),
``use_qk_norm`` from ``qk_norm="rms_rope"``, the temperature (``attn_temperature_tuning``, ``floor_scale``,
``attn_scale``) from ``attn_temp_floor`` / ``attn_temp_scale``, ``moe_layers`` the layers whose FFN is
``moe_llama4`` (``intermediate_size`` their experts' width), ``intermediate_size_mlp`` the ``:dense`` layers'
SwiGLU width (or every layer's, for a ``swiglu`` model). It is read back through ``llama4.config`` and must give
``cfg`` again, field for field (layers compared by kind, whatever the schedule's spelling): anything Llama 4
cannot express (another FFN or norm, a sliding window, a dense layer's FFN other than SwiGLU) is refused naming
the field. The tensors: each RoPE layer's q / k rows back in interleaved-pair order (``interleave_rows``, the
loader's permutation undone), every expert's ``w`` / ``v`` stacked into ``gate_up_proj [E, d, 2 d_ff]`` (gate
columns first) and ``w2`` into ``down_proj [E, d_ff, d]``, transposed as transformers applies them (``x @ W``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import CORE, ModelConfig
from ..errors import ConfigError
from ..ffn import ffn_hidden_size
from ..ffn.moe_llama4 import expert_width
from ..registry import registries
from ..schedule import layer_kinds
from . import files, llama4
from .fields import Fields
from .loader import Plan, plan

NOT_COMPARED = {"seed", "dropout", "gelu_approx"}  # not part of what Llama 4 computes at inference
TOKEN_IDS = {"bos_token_id", "eos_token_id", "pad_token_id"}
WHAT = (
    "a Llama 4 (text) checkpoint (pre-norm RMSNorm, RoPE and NoPE layers, chunked or full attention, the "
    "weightless q/k norm of the RoPE layers, sigmoid-routed SwiGLU experts with a shared expert, SwiGLU dense layers)"
)


def _width(cfg: ModelConfig) -> int:
    """The hidden width of ``cfg``'s FFN as a Llama 4 reads it (``moe_llama4``'s experts, else the dense rule)."""
    return expert_width(cfg) if cfg.ffn == "moe_llama4" else ffn_hidden_size(cfg)


def llama4_config(cfg: ModelConfig, tied: bool, dtype: torch.dtype, extra: dict | None = None) -> dict:
    """The ``config.json`` of ``cfg`` as a ``llama4_text`` checkpoint (every key the loader reads)."""
    layers = [cfg.layer_config(i) for i in range(cfg.n_layers)]
    moe = [i for i, c in enumerate(layers) if c.ffn == "moe_llama4"]
    dense = [c for c in layers if c.ffn != "moe_llama4"]
    chunked = any(c.attention == "chunked" for c in layers)
    hf = {
        "architectures": ["Llama4ForCausalLM"],
        "model_type": "llama4_text",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.d_head,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base},
        "attention_bias": cfg.attn_bias == "all",
        "attention_dropout": 0.0,
        "layer_types": ["chunked_attention" if c.attention == "chunked" else "full_attention" for c in layers],
        "no_rope_layers": [int(c.position == "rope") for c in layers],
        "attention_chunk_size": cfg.attention_chunk_size if chunked else None,
        "use_qk_norm": cfg.qk_norm == "rms_rope",
        "attn_temperature_tuning": cfg.attn_temp_floor is not None,
        "floor_scale": cfg.attn_temp_floor if cfg.attn_temp_floor is not None else llama4.DEFAULTS["floor_scale"],
        "attn_scale": cfg.attn_temp_scale,
        "moe_layers": moe,
        "num_local_experts": cfg.n_experts if moe else 1,
        "num_experts_per_tok": cfg.top_k if moe else 1,
        "intermediate_size": _width(cfg),
        "intermediate_size_mlp": ffn_hidden_size(dense[0]) if dense else _width(cfg),
        "tie_word_embeddings": tied,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if cfg.rope_scale != 1:
        hf["rope_parameters"] = {"rope_type": "linear", "factor": cfg.rope_scale, "rope_theta": cfg.rope_base}
    clash = sorted(set(extra or ()) & (set(hf) - TOKEN_IDS))
    if clash:
        raise ConfigError(
            "extra",
            clash[0],
            f"keys save_llama4 does not derive from the config (this one is {hf[clash[0]]!r} by the model's config)",
        )
    return {**hf, **(extra or {})}


def check_expressible(cfg: ModelConfig, hf: dict) -> None:
    """Refuse ``cfg`` unless ``llama4.config`` reads ``hf`` back as ``cfg``: the first field (in the config's
    order) that comes back different is named. Layers compare by kind (a schedule spelled otherwise is the same
    model); fields nothing reads (RoPE's settings without a RoPE layer, the chunk size without a chunked layer,
    the temperature's scale without its floor) are not compared."""
    fields, _ = llama4.config(Fields(hf))
    back = ModelConfig(**fields)
    default_width = cfg.n_heads * cfg.d_head == cfg.d_model  # read back as head_dim=None
    same = {"n_kv_heads": cfg.kv_heads, "d_ff": _width(cfg), "head_dim": None if default_width else cfg.head_dim}
    if layer_kinds(cfg) == layer_kinds(back):  # the same layers, whatever the schedule's spelling
        same.update(layer_schedule=back.layer_schedule, attention=back.attention)
    kinds = [cfg.layer_config(i) for i in range(cfg.n_layers)]
    if not any(c.position == "rope" for c in kinds):
        same.update(rope_base=back.rope_base, rope_scale=back.rope_scale)
    if not any(c.attention == "chunked" for c in kinds):
        same.update(attention_chunk_size=back.attention_chunk_size)
    if cfg.attn_temp_floor is None:
        same.update(attn_temp_scale=back.attn_temp_scale)
    dense = [c for c in kinds if c.ffn != cfg.ffn]
    if dense:
        same.update(dense_d_ff=ffn_hidden_size(dense[0]))
    resolved = cfg.replace(**same)
    regs = registries()
    read = {p.name for p in CORE} | {n for cat in regs for n in regs[cat][getattr(cfg, cat)].params}
    read |= {"dense_ffn", "dense_d_ff"}
    for name in (n for n in cfg.to_dict() if n in read - NOT_COMPARED):
        if getattr(resolved, name) != getattr(back, name):
            raise ConfigError(
                name,
                getattr(cfg, name),
                f"{getattr(back, name)!r}: save_llama4 writes {WHAT}, which has no place for this value",
            )


def _tensors(model, cfg: ModelConfig, tied: bool, dtype: torch.dtype) -> dict:
    """``{checkpoint name: tensor}`` of ``model`` in ``Llama4ForCausalLM``'s layout."""
    p = {n: t.detach().float() for n, t in model.named_parameters(remove_duplicate=False)}
    out = {"model.embed_tokens.weight": p["embed.weight"], "model.norm.weight": p["final_norm.weight"]}
    if not tied:
        out["lm_head.weight"] = p["head.weight"]
    for i in range(cfg.n_layers):
        own, src, dst = cfg.layer_config(i), f"stack.blocks.{i}.", f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = "out_proj" if proj == "o_proj" else proj
            for kind in ("weight", "bias") if cfg.attn_bias == "all" else ("weight",):
                t = p[src + f"attn.{mine}.{kind}"]
                if own.position == "rope" and proj in ("q_proj", "k_proj"):
                    t = llama4.interleave_rows(t, cfg.d_head)
                out[dst + f"self_attn.{proj}.{kind}"] = t
        out[dst + "input_layernorm.weight"] = p[src + "res_attn.norm.weight"]
        out[dst + "post_attention_layernorm.weight"] = p[src + "res_ffn.norm.weight"]
        ff, mine = dst + "feed_forward.", src + "ffn."
        pairs = (("gate_proj", "w"), ("up_proj", "v"), ("down_proj", "w2"))
        if own.ffn == "moe_llama4":
            n = own.n_experts
            out[ff + "router.weight"] = p[mine + "router.weight"]
            out[ff + "experts.gate_up_proj"] = torch.stack(
                [
                    torch.cat([p[mine + f"experts.{e}.w.weight"].T, p[mine + f"experts.{e}.v.weight"].T], 1)
                    for e in range(n)
                ]
            )  # (E, d, 2 d_ff): gate columns, then up
            out[ff + "experts.down_proj"] = torch.stack([p[mine + f"experts.{e}.w2.weight"].T for e in range(n)])
            for theirs, ours in pairs:
                out[ff + f"shared_expert.{theirs}.weight"] = p[mine + f"shared.{ours}.weight"]
        else:
            for theirs, ours in pairs:
                out[ff + f"{theirs}.weight"] = p[mine + f"{ours}.weight"]
    return {k: v.to("cpu", dtype).contiguous() for k, v in out.items()}


def save_llama4(
    model: torch.nn.Module,
    cfg: ModelConfig,
    folder,
    *,
    dtype: torch.dtype = torch.bfloat16,
    tokenizer_json: str | None = None,
    extra: dict | None = None,
) -> Plan:
    """Write ``model`` (built from ``cfg``) into ``folder`` as a Llama 4 (text) checkpoint; returns the loader's
    ``plan`` of the written folder. ``extra``: more ``config.json`` keys (``bos_token_id`` / ``eos_token_id``)."""
    cfg = cfg.validate()
    check_expressible(cfg, llama4_config(cfg, False, dtype, extra))  # before the model is looked at
    tied = model.head.weight is model.embed.weight  # the loader ties by sharing the Parameter
    hf = llama4_config(cfg, tied, dtype, extra)
    mine = set(dict(model.named_parameters(remove_duplicate=False)))
    want = set(llama4.rules(Fields(hf), cfg))
    if mine != want:
        raise ConfigError("model", min(mine ^ want), "the parameters of a model built from cfg (they disagree)")
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / files.CONFIG).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    save_file(_tensors(model, cfg, tied, dtype), str(out / files.SINGLE), metadata={"format": "pt"})
    if tokenizer_json is not None:
        (out / files.TOKENIZER).write_text(tokenizer_json, encoding="utf-8")
    return plan(out)
