"""The model card of a config: parameters, measured FLOPs per token, components, KV-cache bytes.

``model_summary(cfg, seq_len)`` counts the built model's parameters (per stack too, for a model of
several stacks), measures the forward FLOPs per token with ``torch.utils.flop_counter`` at
``seq_len`` (every input of the arrangement at that length; the CPU SDPA kernel counted with the
FlashAttention convention, ``4 B h Lq Lk d`` halved for causal), and names the backend
``kernels.attention`` reported while it ran. ``kv_cache_bytes(cfg, seq_lens)`` is computed, not
measured: the cache decoding keeps is exactly ``2 * layers * kv_heads * d_head * L`` stored values
(the head stack's layers; cross-attention K/V are computed once from the source).
"""
from __future__ import annotations

import json

import torch

import kernels
from explorer.analysis.memo import eval_model, memo
from explorer.analysis.sweep import backend_label
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from models import registries
from models.architectures import arrangement, stack_depth
from models.encdec import CrossAttention


def sdpa_cpu_flops(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args,
                   out_shape=None, **kwargs) -> int:
    """FlashAttention convention: ``4 B h Lq Lk d`` forward, halved for causal (CPU SDPA kernel)."""
    b, h, lq, d = query_shape
    flops = 4 * b * h * lq * key_shape[-2] * d
    return flops // 2 if is_causal else flops


@gpu
def model_summary(cfg, seq_len: int = 128) -> dict:
    """Parameter count, measured forward FLOPs per token at ``seq_len``, and the chosen components."""
    cfg = as_config(cfg)
    need = budget.check(cfg, "forward", int(seq_len), 1)
    result = memo(("summary", cfg.to_json(), int(seq_len)), lambda: _summary(cfg, int(seq_len)), need=need)
    return json.loads(json.dumps(result))  # a fresh copy: callers may modify it


def _summary(cfg, seq_len: int) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    model = eval_model(cfg)
    seq_len = min(seq_len, cfg.max_len) if cfg.position == "learned" else seq_len
    tokens = torch.randint(0, cfg.vocab_size, (1, seq_len), generator=torch.Generator().manual_seed(0))
    args = [tokens.flip(-1) if k else tokens for k in range(len(arrangement(cfg).inputs))]  # one per input
    custom = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flops}
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=custom) as counter, \
            kernels.record_backends() as ran:  # what really ran, not a prediction
        model(*(a.to(device()) for a in args))
    regs = registries()
    components = []
    for cat in regs:
        v = regs[cat][getattr(cfg, cat)]
        components.append({"category": cat, "key": v.key, "paper": v.paper, "summary": v.summary,
                           "params": {p: getattr(cfg, p) for p in v.params if hasattr(cfg, p)}})
    return {
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "stacks": stack_sizes(model) if len(arrangement(cfg).stacks) > 1 else None,
        "flops_per_token": counter.get_total_flops() / seq_len, "flops_seq_len": seq_len,
        "backend": backend_label(ran, cfg, device()),
        "components": components, "config": cfg.to_dict(),
    }


def stack_sizes(model) -> dict:
    """``{<stack>_layers, <stack>_params}`` of each stack (its positions and final norm included; the
    shared token embedding and the head in neither) and ``cross_params`` of the cross-attention
    sublayers (inside the reading stack's count too), from the model's ``stack_parts()``."""
    out, cross = {}, 0
    for name, (layers, modules) in model.stack_parts().items():
        out[f"{name}_layers"] = layers
        out[f"{name}_params"] = int(sum(p.numel() for m in modules for p in m.parameters()))
    for m in model.modules():
        if isinstance(m, CrossAttention):
            cross += int(sum(p.numel() for p in m.parameters()))
    return {**out, "cross_params": cross}


def kv_cache_bytes(cfg, seq_lens, bytes_per_value: int = 2) -> dict:
    """Bytes of K and V cached for decoding ``L`` tokens: ``2 * layers * kv_heads * d_head * L``
    values (fp16 by default), for the current ``n_kv_heads``, MHA and MQA (Shazeer 2019; Ainslie et
    al. 2023). ``layers``: those of the stack the head reads (the decoder's self-attention)."""
    cfg = as_config(cfg)
    lens = [int(n) for n in seq_lens]
    layers = stack_depth(cfg, arrangement(cfg).head)

    def cache(kv):
        return [2 * layers * kv * cfg.d_head * n * bytes_per_value for n in lens]

    return {"seq_len": lens, "current": cache(cfg.kv_heads), "mha": cache(cfg.n_heads), "mqa": cache(1),
            "kv_heads": cfg.kv_heads, "n_heads": cfg.n_heads, "bytes_per_value": bytes_per_value}
