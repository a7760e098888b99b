"""``save_llama``: a catalogue model written as a Hugging Face Llama checkpoint folder (``save_qwen3`` and
``save_olmo2``: the same for a model with a per-head / whole-projection query-key norm).

The folder holds what the Hub would: ``config.json`` (a ``LlamaConfig`` in the classic spelling,
``rope_theta`` / ``rope_scaling`` / ``torch_dtype``, that transformers 5 still reads),
``model.safetensors`` under the Hub's tensor names and ``tokenizer.json`` when given, so
``models.hf.load`` and ``transformers.LlamaForCausalLM.from_pretrained`` read the same model.

The writer is the loader run backwards, so the two cannot drift apart: the config is mapped back
through ``llama.config`` and must give the catalogue config again, field for field (anything a Llama
cannot express, e.g. ``norm="layernorm"`` or attention biases, is refused naming that field), and the
tensor names come from ``llama.rules`` read in reverse. Those rules copy every tensor as it is (the
Hub's Llama layout already rotates the two halves of a head, as the catalogue's RoPE does, so no
permutation is undone); a rule that transformed its tensor would have no inverse here and is refused.
A sliding window is written as ``mistral`` (a Llama with a window): transformers' Llama ignores one.
``save_qwen3`` writes ``model_type="qwen3"`` (``qk_norm="head"``: ``self_attn.q_norm`` / ``k_norm`` per head;
a window in every layer as ``use_sliding_window`` with ``max_window_layers=0``) and ``save_olmo2``
``model_type="olmo2"`` (``qk_norm="all"``, ``norm_placement="res_post"``: ``post_attention_layernorm`` /
``post_feedforward_layernorm`` after the sublayers; no window): the config read back through that family's
reader must again give the catalogue config, so each refuses what its family cannot express by name.
``save_gemma2`` / ``save_gemma3`` write ``gemma2`` / ``gemma3_text`` (``gemma_config``: ``layer_types`` per layer,
the soft caps, ``query_pre_attn_scalar = head_dim``, Gemma 3's ``rope_local_base_freq``); Gemma's norms store
``w`` with gain ``1 + w``, so their rules' one transform is inverted (``INVERSES``: ``w = g - 1``).
``save_gpt_oss`` writes ``gpt_oss`` (``gpt_oss_config``: ``layer_types``, the experts' settings, ``rope_parameters``
with YaRN's fields); its tensors (sinks, router, stacked experts) are copied as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import CORE, ModelConfig
from ..errors import ConfigError
from ..ffn import ffn_hidden_size
from ..registry import registries
from . import files, gemma2, gemma3, gpt_oss, llama, mapping, olmo2, qwen3
from .fields import Fields
from .loader import Plan, plan

# Not part of what a Llama computes at inference: the init seed, training-time dropout, and the GELU
# approximation (a Llama has no GELU).
NOT_COMPARED = {"seed", "dropout", "gelu_approx"}
TOKEN_IDS = {"bos_token_id", "eos_token_id", "pad_token_id"}
# family -> (its reader, what its checkpoint is, for refusals)
WRITERS = {
    "llama": (
        llama,
        "a Llama checkpoint (a causal decoder: RoPE, pre-norm RMSNorm, SwiGLU, no biases, full or "
        "sliding-window attention)",
    ),
    "qwen3": (qwen3, "a Qwen3 checkpoint (a Llama with a per-head query/key RMSNorm, qk_norm='head')"),
    "olmo2": (
        olmo2,
        "an OLMo 2 checkpoint (RoPE, RMSNorm after each sublayer (res_post), SwiGLU, a query/key "
        "RMSNorm over the whole projections (qk_norm='all'), full attention)",
    ),
    "gemma2": (
        gemma2,
        "a Gemma 2 checkpoint (RoPE, RMSNorm before and after each sublayer (sandwich), GeGLU with tanh GELU, "
        "embed_scale, sliding-window and full layers, soft caps, no biases)",
    ),
    "gemma3": (
        gemma3,
        "a Gemma 3 checkpoint (Gemma 2's model with a per-head query/key RMSNorm (qk_norm='head') and RoPE bases "
        "rope_base for full layers, rope_local_base for sliding ones)",
    ),
    "gpt_oss": (
        gpt_oss,
        "a gpt-oss checkpoint (RoPE with or without YaRN, pre-norm RMSNorm, learned attention sinks, q/k/v/o biases "
        "or none, sliding-window and full layers, a mixture of clamped-SwiGLU experts: moe_swiglu_clamped)",
    ),
}
# a rule's function -> its inverse (the tensor to write from the catalogue parameter): Gemma stores gains as 1 + w
INVERSES = {mapping.same: mapping.same, gemma2.gain: lambda g: g - 1.0}
GEMMA = {"gemma2": ("Gemma2ForCausalLM", "gemma2"), "gemma3": ("Gemma3ForCausalLM", "gemma3_text")}


def gemma_config(cfg: ModelConfig, tied: bool, dtype: torch.dtype, family: str) -> dict:
    """The ``config.json`` of ``cfg`` as a Gemma 2 / Gemma 3 (text) checkpoint: ``layer_types`` from each layer's
    attention (any layer that does not slide written as full: the read-back check names what differs)."""
    types = [
        "sliding_attention" if cfg.layer_config(i).attention == "sliding_window" else "full_attention"
        for i in range(cfg.n_layers)
    ]
    arch, model_type = GEMMA[family]
    hf = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": ffn_hidden_size(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.d_head,
        "query_pre_attn_scalar": cfg.d_head,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "sliding_window": cfg.window,
        "layer_types": types,
        "attn_logit_softcapping": cfg.softcap,
        "final_logit_softcapping": cfg.final_softcap,
        "rope_theta": cfg.rope_base,
        "tie_word_embeddings": tied,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if family == "gemma3":
        local = cfg.rope_local_base if cfg.rope_local_base is not None else cfg.rope_base
        hf.update(rope_local_base_freq=local)
    return hf


def rope_parameters(cfg: ModelConfig) -> dict:
    """transformers 5's ``rope_parameters`` of ``cfg``: YaRN (``yarn_*``), linear (``rope_scale``) or default."""
    if cfg.yarn_factor is not None:
        out = {
            "rope_type": "yarn",
            "rope_theta": cfg.rope_base,
            "factor": cfg.yarn_factor,
            "original_max_position_embeddings": cfg.yarn_original_max_len,
            "beta_fast": cfg.yarn_beta_fast,
            "beta_slow": cfg.yarn_beta_slow,
            "truncate": cfg.yarn_truncate,
        }
        if cfg.yarn_attention_factor is not None:
            out["attention_factor"] = cfg.yarn_attention_factor
        return out
    if cfg.rope_scale != 1:
        return {"rope_type": "linear", "rope_theta": cfg.rope_base, "factor": cfg.rope_scale}
    return {"rope_type": "default", "rope_theta": cfg.rope_base}


def gpt_oss_config(cfg: ModelConfig, tied: bool, dtype: torch.dtype) -> dict:
    """The ``config.json`` of ``cfg`` as a gpt-oss checkpoint (``GptOssConfig``'s keys, ``rope_parameters`` always
    written: absent, transformers would read its YaRN defaults); ``layer_types`` from each layer's attention (any
    layer that does not slide written as full: the read-back check names what differs)."""
    types = [
        "sliding_attention" if cfg.layer_config(i).attention == "sliding_window" else "full_attention"
        for i in range(cfg.n_layers)
    ]
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": ffn_hidden_size(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.d_head,
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.attn_bias != "none",  # "qkv" comes back "all": the read-back check names it
        "attention_dropout": 0.0,
        "sliding_window": cfg.window,
        "layer_types": types,
        "num_local_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.top_k,
        "swiglu_alpha": cfg.swiglu_alpha,
        "swiglu_limit": cfg.swiglu_limit,
        "rope_parameters": rope_parameters(cfg),
        "tie_word_embeddings": tied,
        "output_router_logits": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def hf_config(
    cfg: ModelConfig, tied: bool, dtype: torch.dtype, extra: dict | None = None, family: str = "llama"
) -> dict:
    """The ``config.json`` of ``cfg``: every key the loader reads, in the classic Llama spelling (``family``:
    ``llama``, ``qwen3`` or ``olmo2``, the ``WRITERS`` key; ``gemma2`` / ``gemma3``: ``gemma_config``)."""
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": ffn_hidden_size(cfg),
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.d_head,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if cfg.rope_scale != 1:
        hf["rope_scaling"] = {"rope_type": "linear", "factor": cfg.rope_scale}
    if cfg.yarn_factor is not None:  # YaRN (every family read through fields.rope reads it back)
        hf["rope_scaling"] = rope_parameters(cfg)
    if family in GEMMA:
        hf = gemma_config(cfg, tied, dtype, family)
    elif family == "gpt_oss":
        hf = gpt_oss_config(cfg, tied, dtype)
    elif family == "qwen3":
        hf.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
        if cfg.attention == "sliding_window":  # every layer from max_window_layers = 0 on slides
            hf.update(use_sliding_window=True, sliding_window=cfg.window, max_window_layers=0)
    elif family == "olmo2":
        hf.update(model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    elif cfg.attention == "sliding_window":
        hf.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=cfg.window)
    clash = sorted(set(extra or ()) & (set(hf) - TOKEN_IDS))
    if clash:
        raise ConfigError(
            "extra",
            clash[0],
            f"keys save_llama does not derive from the config (this one is {hf[clash[0]]!r} by the model's config)",
        )
    return {**hf, **(extra or {})}


def check_expressible(cfg: ModelConfig, hf: dict, family: str = "llama") -> None:
    """Refuse ``cfg`` unless the loader reads ``hf`` back as ``cfg``: the first field (in the config's
    order) that comes back different is named. Fields no chosen variant reads are not compared."""
    reader, what = WRITERS[family]
    fields, _ = reader.config(Fields(hf))
    back = ModelConfig(**fields)
    default_width = cfg.n_heads * cfg.d_head == cfg.d_model  # read back as head_dim=None
    resolved = cfg.replace(
        n_kv_heads=cfg.kv_heads, d_ff=ffn_hidden_size(cfg), head_dim=None if default_width else cfg.head_dim
    )
    regs = registries()
    read = {p.name for p in CORE} | {n for cat in regs for n in regs[cat][getattr(cfg, cat)].params}
    skipped = NOT_COMPARED - {"gelu_approx"} if family in GEMMA else NOT_COMPARED  # Gemma's GELU is tanh's
    for name in (n for n in cfg.to_dict() if n in read - skipped):
        if getattr(resolved, name) != getattr(back, name):
            raise ConfigError(
                name,
                getattr(cfg, name),
                f"{getattr(back, name)!r}: save_{family} writes {what}, which has no place for this value",
            )


def save_llama(
    model: torch.nn.Module,
    cfg: ModelConfig,
    folder,
    *,
    dtype: torch.dtype = torch.bfloat16,
    tokenizer_json: str | None = None,
    extra: dict | None = None,
) -> Plan:
    """Write ``model`` (built from ``cfg``) into ``folder`` as a Llama checkpoint; returns the loader's
    ``plan`` of the written folder (a check that it reads back). ``extra``: more ``config.json`` keys
    (``bos_token_id`` / ``eos_token_id``, ...)."""
    return _save("llama", model, cfg, folder, dtype, tokenizer_json, extra)


def save_qwen3(model, cfg, folder, *, dtype=torch.bfloat16, tokenizer_json=None, extra=None) -> Plan:
    """``save_llama`` for a model with ``qk_norm="head"``: a Qwen3 checkpoint."""
    return _save("qwen3", model, cfg, folder, dtype, tokenizer_json, extra)


def save_olmo2(model, cfg, folder, *, dtype=torch.bfloat16, tokenizer_json=None, extra=None) -> Plan:
    """``save_llama`` for a model with ``qk_norm="all"`` and ``norm_placement="res_post"``: an OLMo 2 checkpoint."""
    return _save("olmo2", model, cfg, folder, dtype, tokenizer_json, extra)


def save_gemma2(model, cfg, folder, *, dtype=torch.bfloat16, tokenizer_json=None, extra=None) -> Plan:
    """``save_llama`` for a Gemma 2 model (sandwich RMSNorm, GeGLU with tanh GELU, ``embed_scale``; norm gains
    written as ``w = g - 1``): a Gemma 2 checkpoint."""
    return _save("gemma2", model, cfg, folder, dtype, tokenizer_json, extra)


def save_gemma3(model, cfg, folder, *, dtype=torch.bfloat16, tokenizer_json=None, extra=None) -> Plan:
    """``save_gemma2`` for a model with ``qk_norm="head"`` and per-kind RoPE bases: a Gemma 3 (text) checkpoint."""
    return _save("gemma3", model, cfg, folder, dtype, tokenizer_json, extra)


def save_gpt_oss(model, cfg, folder, *, dtype=torch.bfloat16, tokenizer_json=None, extra=None) -> Plan:
    """``save_llama`` for a gpt-oss-shaped model (learned sinks, ``moe_swiglu_clamped`` experts, YaRN or plain
    RoPE, a sliding / full schedule): a gpt-oss checkpoint, not quantized."""
    return _save("gpt_oss", model, cfg, folder, dtype, tokenizer_json, extra)


def _save(family, model, cfg, folder, dtype, tokenizer_json, extra) -> Plan:
    cfg = cfg.validate()
    check_expressible(cfg, hf_config(cfg, False, dtype, extra, family), family)  # before the model is looked at
    tied = model.head.weight is model.embed.weight  # the loader ties by sharing the Parameter
    hf = hf_config(cfg, tied, dtype, extra, family)
    rules = WRITERS[family][0].rules(Fields(hf), cfg)
    params = dict(model.named_parameters(remove_duplicate=False))
    if set(params) != set(rules):
        odd = min(set(params) ^ set(rules))
        raise ConfigError("model", odd, "the parameters of a model built from cfg (the model and cfg disagree)")
    tensors = {}
    for target, rule in rules.items():
        if isinstance(rule, mapping.Tie):
            continue  # the Hub's tied head is the embedding, stored once
        if not isinstance(rule, mapping.Rule) or len(rule.sources) != 1 or rule.fn not in INVERSES:
            raise ConfigError(
                "weights",
                target,
                f"a parameter the {family} mapping copies as it is (this rule transforms it and has no inverse here)",
            )
        source = rule.sources[0]
        name = source if source == "lm_head.weight" else "model." + source
        tensors[name] = INVERSES[rule.fn](params[target].detach().float()).to("cpu", dtype).contiguous()
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / files.CONFIG).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(out / files.SINGLE), metadata={"format": "pt"})
    if tokenizer_json is not None:
        (out / files.TOKENIZER).write_text(tokenizer_json, encoding="utf-8")
    return plan(out)
