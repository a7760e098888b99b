"""``save_deepseek_v3``: a DeepSeek-V3-shaped catalogue model written as a Hugging Face ``deepseek_v3`` folder.

The model is decoder-only and causal, with ``mla`` attention, ``rope``, pre-norm ``rmsnorm`` and FFN
``moe_deepseek``. Its first layers may be ``:dense`` layers, a ``swiglu`` of width ``dense_d_ff``. An all-dense
model (``ffn="swiglu"``) is written too. The folder holds ``config.json`` (``DeepseekV3Config``'s keys:
``first_k_dense_replace`` = the leading dense layers, ``q_lora_rank`` null for a plain query projection,
``rope_parameters``: default, linear, or YaRN with ``mscale_all_dim`` from ``yarn_mscale_all_dim``, and
``num_nextn_predict_layers`` 0), ``model.safetensors`` under the Hub's per-expert names
(``mlp.experts.{e}.gate_proj.weight``, ..., what ``save_pretrained`` writes and the released checkpoints hold;
``mlp.gate.e_score_correction_bias`` from the FFN's buffer) and ``tokenizer.json`` when given.

As ``models/hf/export.py``, the writer is the loader run backwards: the config is read back through
``deepseek_v3.config`` and must give the catalogue config again, field for field. So anything the family cannot
express is refused naming the field: another attention or norm, dense layers that are not the first ones,
biases. The tensor names come from ``deepseek_v3.rules`` read in reverse; every rule copies its tensor
as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import CORE, ModelConfig
from ..errors import ConfigError
from ..ffn import ffn_hidden_size
from ..registry import registries
from . import deepseek_v3, files, mapping
from .export import rope_parameters
from .fields import Fields
from .loader import Plan, plan

NOT_COMPARED = {"seed", "dropout", "gelu_approx", "mla_absorb"}  # nothing a checkpoint computes differently
SCHEDULE = ("layer_schedule", "dense_ffn", "dense_d_ff")  # read by the model, not by a chosen variant
TOKEN_IDS = {"bos_token_id", "eos_token_id", "pad_token_id"}
WHAT = (
    "a DeepSeek-V3 checkpoint (a causal decoder: MLA with RoPE, pre-norm RMSNorm, DeepSeek's mixture of SwiGLU "
    "experts after its first dense SwiGLU layers, no biases)"
)


def deepseek_config(cfg: ModelConfig, tied: bool, dtype: torch.dtype) -> dict:
    """The ``config.json`` of ``cfg`` as a ``deepseek_v3`` checkpoint (what cannot be written is caught when it
    is read back: ``check_expressible``)."""
    moe = [cfg.layer_config(i).ffn == "moe_deepseek" for i in range(cfg.n_layers)]
    dense = moe.index(True) if True in moe else cfg.n_layers  # the leading dense layers
    first_dense = cfg.layer_config(0)
    rope = rope_parameters(cfg)  # default, linear or YaRN (its yarn_* fields)
    if cfg.yarn_mscale_all_dim is not None:  # DeepSeek's softmax temperature, read back as yarn_mscale_all_dim
        rope["mscale_all_dim"] = cfg.yarn_mscale_all_dim
    hf = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_heads,
        "q_lora_rank": cfg.q_lora_rank or None,
        "kv_lora_rank": cfg.kv_lora_rank,
        "qk_nope_head_dim": cfg.qk_nope_head_dim,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "v_head_dim": cfg.v_head_dim,
        "rope_interleave": cfg.rope_interleave,
        "rope_parameters": rope,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "first_k_dense_replace": dense,
        "intermediate_size": ffn_hidden_size(first_dense) if dense else ffn_hidden_size(cfg),
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": tied,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if cfg.ffn == "moe_deepseek":
        hf.update(
            n_routed_experts=cfg.n_experts,
            num_experts_per_tok=cfg.top_k,
            moe_intermediate_size=ffn_hidden_size(cfg),
            n_shared_experts=cfg.n_shared_experts,
            n_group=cfg.n_group,
            topk_group=cfg.topk_group,
            routed_scaling_factor=cfg.routed_scaling,
            norm_topk_prob=cfg.norm_topk_prob,
        )
    return hf


def check_expressible(cfg: ModelConfig, hf: dict) -> None:
    """Refuse ``cfg`` unless the loader reads ``hf`` back as ``cfg``: the first field (in the config's order)
    that comes back different is named. Fields no chosen variant reads are not compared."""
    fields, _ = deepseek_v3.config(Fields(hf))
    back = ModelConfig(**fields)
    resolved = cfg.replace(d_ff=ffn_hidden_size(cfg))
    if cfg.dense_d_ff is None and cfg.layer_schedule:  # the dense layers' width as written
        resolved = resolved.replace(dense_d_ff=hf["intermediate_size"])
    regs = registries()
    read = {p.name for p in CORE} | {n for cat in regs for n in regs[cat][getattr(cfg, cat)].params}
    read |= {n for i in range(cfg.n_layers) for n in regs["ffn"][cfg.layer_config(i).ffn].params}
    for name in (n for n in cfg.to_dict() if n in (read | set(SCHEDULE)) - NOT_COMPARED):
        if getattr(resolved, name) != getattr(back, name):
            raise ConfigError(
                name,
                getattr(cfg, name),
                f"{getattr(back, name)!r}: save_deepseek_v3 writes {WHAT}, which has no place for this value",
            )


def save_deepseek_v3(
    model: torch.nn.Module,
    cfg: ModelConfig,
    folder,
    *,
    dtype: torch.dtype = torch.bfloat16,
    tokenizer_json: str | None = None,
    extra: dict | None = None,
) -> Plan:
    """Write ``model`` (built from ``cfg``) into ``folder`` as a DeepSeek-V3 checkpoint; returns the loader's
    ``plan`` of the written folder. ``extra``: token ids for ``config.json`` (``bos_token_id``, ...)."""
    cfg = cfg.validate()
    odd = sorted(set(extra or ()) - TOKEN_IDS)
    if odd:
        raise ConfigError("extra", odd[0], f"only {sorted(TOKEN_IDS)} (every other key is derived from the config)")
    check_expressible(cfg, deepseek_config(cfg, False, dtype))  # before the model is looked at
    tied = model.head.weight is model.embed.weight  # the loader ties by sharing the Parameter
    hf = {**deepseek_config(cfg, tied, dtype), **(extra or {})}
    rules = deepseek_v3.rules(Fields(hf), cfg)
    state = model.state_dict(keep_vars=True)  # parameters and persistent buffers (the selection bias)
    if set(state) != set(rules):
        odd_name = min(set(state) ^ set(rules))
        raise ConfigError("model", odd_name, "the parameters of a model built from cfg (the model and cfg disagree)")
    tensors = {}
    for target, rule in rules.items():
        if isinstance(rule, mapping.Tie):
            continue  # the Hub's tied head is the embedding, stored once
        if not isinstance(rule, mapping.Rule) or len(rule.sources) != 1 or rule.fn is not mapping.same:
            raise ConfigError("weights", target, "a parameter the deepseek_v3 mapping copies as it is")
        source = rule.sources[0]
        name = source if source == "lm_head.weight" else "model." + source
        tensors[name] = state[target].detach().to("cpu", dtype).contiguous()
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / files.CONFIG).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(out / files.SINGLE), metadata={"format": "pt"})
    if tokenizer_json is not None:
        (out / files.TOKENIZER).write_text(tokenizer_json, encoding="utf-8")
    return plan(out)
