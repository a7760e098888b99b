"""The model card of a config: parameters, measured FLOPs per token, components, KV-cache bytes.

``model_summary(cfg, seq_len)`` counts the built model's parameters (per stack too, for a model of
several stacks), measures the forward FLOPs per token with ``torch.utils.flop_counter``'s formulas
at ``seq_len`` (``flops.FlopCount``: the same total as its ``FlopCounterMode`` without importing
``torch._dynamo``; every input of the arrangement at that length; the CPU SDPA kernel counted with
the FlashAttention convention, ``4 B h Lq Lk d`` halved for causal, as are CUDA's SDPA kernels; the
attention our Triton kernels compute, which no aten op does, is added from
``kernels.record_kernel_flops`` in the same convention, a block-sparse call counting the tiles it
computes), and names the backend
``kernels.attention`` reported while it ran. ``kv_cache_bytes(cfg, seq_lens)`` is computed, not
measured: the cache decoding keeps is exactly ``2 * kv_heads * d_head`` stored values per cached key, summed
over the head stack's layers, each keeping ``L`` keys or, for a causal window / chunk, its span
(``models.footprint.cached_keys``; cross-attention K/V are computed once from the source), or ``n`` numbers per
cached key for a mechanism whose record says so (``AttentionCaps.cache_values``: MLA's latent and shared RoPE
key, ``kv_lora_rank + qk_rope_head_dim``); a recurrent layer (``AttentionCaps.state_values``: Mamba-2, Gated
DeltaNet) keeps its state instead, the same number of values at every length.
"""

from __future__ import annotations

import json

import torch

import kernels
from explorer.analysis.common.memo import Request, eval_model, memo
from explorer.analysis.cost.flops import FlopCount
from explorer.analysis.cost.sweep import backend_label
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from models import ModelConfig, registries
from models.architectures import arrangement, stack_config
from models.encdec import CrossAttention
from models.footprint import layer_cached_keys
from models.layers.parallel import mixer_config


def sdpa_cpu_flops(
    query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs
) -> int:
    """FlashAttention convention, as our kernels count it (``kernels.attention_flops``), for SDPA's kernel."""
    return kernels.attention_flops(query_shape, key_shape, bool(is_causal))


def sdpa_bias_flops(
    query_shape,
    key_shape,
    value_shape,
    attn_bias_shape=None,
    compute_log_sumexp=False,
    dropout_p=0.0,
    is_causal=False,
    *args,
    out_shape=None,
    **kwargs,
) -> int:
    """The same convention for the CUDA SDPA kernels whose fourth argument is the bias (efficient, cuDNN)."""
    return sdpa_cpu_flops(query_shape, key_shape, value_shape, dropout_p, is_causal)


def model_summary(cfg, seq_len: int = 128, weights=None) -> dict:
    """Parameter count, measured forward FLOPs per token at ``seq_len``, and the chosen components
    (memoised on the caller's side: a hit costs no GPU call). ``weights``: the model they are counted on
    (the count does not depend on them; a pretrained checkpoint's model is already built, an initial one
    of its size would cost a second of random initialisation)."""
    req = summary_request(cfg, seq_len, weights)
    result = memo(req.key, lambda: req.compute(), need=req.need)
    return json.loads(json.dumps(result))  # a fresh copy: callers may modify it


def summary_request(cfg, seq_len: int = 128, weights=None) -> Request:
    """What ``model_summary`` computes, checked and keyed on the caller's side (no model runs)."""
    cfg = as_config(cfg)
    need = budget.check(cfg, "forward", int(seq_len), 1)
    w = weights if weights is not None and weights.shared and weights.matches(cfg) else None
    return Request(("summary", cfg, int(seq_len)), need, compute_summary, (cfg, int(seq_len), w))


@gpu(duration=30)
def compute_summary(cfg: ModelConfig, seq_len: int, weights=None) -> dict:
    """The GPU call of ``model_summary``: one counted forward pass (picklable in and out)."""
    return _summary(cfg, seq_len, weights)


def _summary(cfg, seq_len: int, weights=None) -> dict:
    model = eval_model(cfg, weights)
    seq_len = min(seq_len, cfg.max_len) if cfg.position == "learned" else seq_len
    tokens = torch.randint(0, cfg.vocab_size, (1, seq_len), generator=torch.Generator().manual_seed(0))
    args = [tokens.flip(-1) if k else tokens for k in range(len(arrangement(cfg).inputs))]  # one per input
    custom = {
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flops,
        torch.ops.aten._scaled_dot_product_flash_attention: sdpa_cpu_flops,  # CUDA: same arguments
        torch.ops.aten._scaled_dot_product_efficient_attention: sdpa_bias_flops,
        torch.ops.aten._scaled_dot_product_cudnn_attention: sdpa_bias_flops,
    }
    with (
        torch.no_grad(),
        FlopCount(custom) as counter,
        kernels.record_backends() as ran,
        kernels.record_kernel_flops() as in_kernels,
    ):  # what really ran, not a prediction
        model(*(a.to(device()) for a in args))
    total = counter.total + sum(in_kernels)  # the Triton kernels' attention: no aten op to count
    regs = registries()
    components = []
    for cat in regs:
        v = regs[cat][getattr(cfg, cat)]
        components.append(
            {
                "category": cat,
                "key": v.key,
                "paper": v.paper,
                "summary": v.summary,
                "params": {p: getattr(cfg, p) for p in v.params if hasattr(cfg, p)},
            }
        )
    return {
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "stacks": stack_sizes(model) if len(arrangement(cfg).stacks) > 1 else None,
        "flops_per_token": total / seq_len,
        "flops_seq_len": seq_len,
        "backend": backend_label(ran, cfg, device()),
        "components": components,
        "config": cfg.to_dict(),
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
    """Bytes of K and V cached for decoding ``L`` tokens: ``2 * kv_heads * d_head`` values (fp16 by
    default) per cached key, summed over the layers, for the current ``n_kv_heads``, MHA and MQA (Shazeer
    2019; Ainslie et al. 2023), GQA with 4 query heads per K/V head and MLA (DeepSeek-AI 2024: ``kv_lora_rank +
    qk_rope_head_dim`` values per key and layer). The layers are those of the stack the head reads (the decoder's
    self-attention), each keeping the keys of its own kind (``models.footprint.cached_keys``: all ``L``, or a
    causal window's / chunk's last ones), so a layer schedule sums its kinds (``by_kind``: the current
    bytes of each layer kind). A ``parallel_hybrid`` layer keeps its mixer's cache or state too (``by_kind``'s
    ``"<key> (parallel)"``)."""
    cfg = as_config(cfg)
    lens = [int(n) for n in seq_lens]
    stack = stack_config(cfg, arrangement(cfg).head)
    per_layer = {n: layer_cached_keys(stack, n) for n in lens}  # keys each layer keeps, per length

    def cache(kv):
        return [2 * kv * cfg.d_head * sum(per_layer[n]) * bytes_per_value for n in lens]

    attention = registries()["attention"]

    def values(layer) -> int:  # numbers one layer caches per kept key
        own = getattr(attention[layer.attention].caps, "cache_values", None)
        return own(layer) if own else 2 * layer.kv_heads * layer.d_head

    def state(layer) -> int | None:  # numbers a recurrent layer keeps at any length (None: it caches keys)
        own = getattr(attention[layer.attention].caps, "state_values", None)
        return own(layer) if own else None

    current, by_kind, states = [0] * len(lens), {}, {}
    for i in range(stack.n_layers):
        layer = stack.layer_config(i)
        token = layer.attention + (":nope" if layer.position != stack.position else "")
        rows = by_kind.setdefault(token, [0] * len(lens))
        fixed = state(layer)
        if fixed is not None:
            states[layer.attention] = fixed
        for m, n in enumerate(lens):
            kept = (fixed if fixed is not None else values(layer) * per_layer[n][i]) * bytes_per_value
            rows[m] += kept
            current[m] += kept
    if cfg.layer == "parallel_hybrid":  # each layer's mixer keeps its own cache or state beside the attention's
        mixer = mixer_config(stack)
        mixer_keys = {n: layer_cached_keys(mixer, n) for n in lens}
        rows = by_kind.setdefault(f"{mixer.attention} (parallel)", [0] * len(lens))
        fixed = state(mixer)
        if fixed is not None:
            states[mixer.attention] = fixed
        for i in range(stack.n_layers):
            for m, n in enumerate(lens):
                kept = (fixed if fixed is not None else values(mixer) * mixer_keys[n][i]) * bytes_per_value
                rows[m] += kept
                current[m] += kept
    own = getattr(attention[cfg.attention].caps, "cache_values", None)
    gqa = max(1, cfg.n_heads // 4) if cfg.n_heads % 4 == 0 else 1  # a group of 4 query heads per K/V head
    return {
        "seq_len": lens,
        "current": current,
        "values_per_token_layer": values(cfg),  # of the model's own attention (a schedule: see by_kind)
        "own_rule": own is not None,  # values_per_token_layer is the record's rule (not K/V heads)
        "attention": cfg.attention,
        "layers": stack.n_layers,
        "mha": cache(cfg.n_heads),
        "mqa": cache(1),
        "gqa": cache(gqa),
        "gqa_heads": gqa,
        # MLA (DeepSeek-V2): per layer and kept key, the latent and the decoupled RoPE key, at these widths
        "mla": [(cfg.kv_lora_rank + cfg.qk_rope_head_dim) * sum(per_layer[n]) * bytes_per_value for n in lens],
        "mla_values": cfg.kv_lora_rank + cfg.qk_rope_head_dim,
        "by_kind": by_kind,
        # recurrent kinds -> the values one such layer keeps; "recurrent": the bytes of a stack of the same depth
        # with every layer that kind (a pure state-space / delta-rule model), constant in L
        "state_values": states,
        "recurrent": {key: [n * stack.n_layers * bytes_per_value] * len(lens) for key, n in states.items()},
        "kv_heads": cfg.kv_heads,
        "n_heads": cfg.n_heads,
        "bytes_per_value": bytes_per_value,
    }
