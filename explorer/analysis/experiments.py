"""Experiments: pure functions from a config to a result; no gradio, no plotting.

- ``attention_maps(cfg, text)``: the effective attention of every layer and head on a byte-level
  encoding of ``text``, the pattern mask, the fraction of allowed pairs, per-head entropy and mean
  attention distance, and the variant views of the same forward pass (``explorer.analysis.views``).
- ``gradient_norms(cfg, seq_len, batch, seed)``: at initialisation, the gradient norms of
  Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture"): per layer the
  Frobenius norm of the gradient of the attention output projection, of the FFN output projection,
  and of the loss with respect to the layer's input hidden states. Measured with autograd, never
  shaped.
- ``latency_memory_sweep(cfg, seq_lens, mode)``: see ``explorer.analysis.sweep``.
- ``model_summary(cfg, seq_len)``: parameter count, measured forward FLOPs per token, components.
- ``kv_cache_bytes(cfg, seq_lens)``: bytes of the K/V cache decoding needs, for the current
  ``n_kv_heads`` and for MHA / MQA (Shazeer 2019; Ainslie et al. 2023).

An encoder-decoder (``architecture="encoder_decoder"``) is called as ``model(src, tgt)``: the text
is split at a separator (``explorer.analysis.seq2seq``), the maps gain the encoder's and the cross-attention
(``AttentionMaps.stacks``), the gradient norms are per stack, the FLOPs are counted on a source
and a target of ``seq_len`` each.
``attention_maps`` and ``gradient_norms`` take optional ``weights`` (``explorer.analysis.weights``):
a session's trained weights of the same config instead of the initial ones; without the argument
they use the record ``trained_weights.active`` set for the current request, if it is this config's.

Every request is checked against the per-request memory budget first (``explorer.runtime.budget``: the
weights counted exactly, the activations predicted from the shapes), so a config that would not
fit is refused with a ``ConfigError`` naming what to shrink, whichever entry point it came from.
Results are memoised by config in one cache bounded in bytes (``explorer.runtime.cache.ByteLRU``), so
redrawing the same config costs nothing (trained weights: keyed by their digest as well, see
``explorer.analysis.weights``); after a large request the freed heap is handed back to the
system (``malloc_trim``). No per-user state lives here.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

import kernels
from explorer.analysis import seq2seq as encdec
from explorer.analysis.gradients import branch_gradient_norms
from explorer.analysis.sweep import backend_label
from explorer.analysis.sweep import latency_memory_sweep as _sweep
from explorer.analysis.views import Views, compute_views
from explorer.analysis.weights import TrainedWeights, resolve
from explorer.runtime import budget
from explorer.runtime.cache import TRIM_AFTER, ByteLRU, release_memory
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.seeding import GLOBAL_RNG, build
from explorer.runtime.tokens import token_label
from models import ConfigError, ModelConfig, registries
from models.architectures import n_decoder_layers
from models.attention import RULES, pattern_mask

__all__ = ["AttentionMaps", "attention_maps", "gradient_norms", "gradient_batch", "latency_memory_sweep",
           "model_summary", "kv_cache_bytes", "as_config", "encode_text", "token_label", "clear_caches"]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- text
def encode_text(text: str, max_bytes: int = MAX_TEXT_BYTES) -> tuple:
    """UTF-8 bytes of ``text`` cut to ``max_bytes`` -> (token ids, truncated?)."""
    raw = str(text).encode("utf-8")
    return list(raw[:max_bytes]), len(raw) > max_bytes


# Models and results of every function below, bounded in bytes (EXPLORER_CACHE_BYTES).
CACHE = ByteLRU()


def _eval_model(cfg_json: str, weights: TrainedWeights | None = None):
    """The model of a config (initial or ``weights``), built once and shared read-only (eval mode,
    no gradients); trained models are cached under their weights' digest."""
    def make():
        model = build(ModelConfig.from_dict(json.loads(cfg_json)))
        if weights is not None:
            weights.load_into(model)
        model = model.to(device()).eval()
        model.requires_grad_(False)
        return model
    return CACHE.get(("model", cfg_json, _digest_of(weights)), make)


def _digest_of(weights: TrainedWeights | None):
    return None if weights is None else weights.digest


def _memo(name: str, compute, *key, need: int = 0):
    """``compute(*key)`` memoised under ``(name, *key)``; a request predicted to need more than
    ``TRIM_AFTER`` bytes hands its freed heap back to the system once done."""
    def run():
        try:
            return compute(*key)
        finally:
            if need >= TRIM_AFTER:
                release_memory()
    return CACHE.get((name, *key), run)


# ---------------------------------------------------------------------------- attention maps
@dataclass
class AttentionMaps:
    tokens: list                 # label of each query token
    key_tokens: list             # label of each key (memory slots first, then the tokens)
    attention: np.ndarray        # (n_maps, h, L, Lk) float32, effective attention (NaN: not available)
    mask: np.ndarray             # (L, Lk) bool: the pattern (or the support of the attention)
    mask_kind: str               # "pattern" (section-1 rule) or "support" (where any head puts weight)
    allowed_fraction: float      # mask.mean()
    entropy: np.ndarray          # (n_maps, h) mean over queries of -sum p log p, in nats
    distance: np.ndarray         # (n_maps, h) mean over queries of sum p |i - j|, in tokens
    config: dict
    truncated: bool = False      # the text was cut to MAX_TEXT_BYTES
    device: str = "cpu"
    notes: list = field(default_factory=list)
    views: Views = None          # the variant views of the same forward pass (``explorer.analysis.views``)
    stacks: dict = None          # encoder-decoder: {"encoder": AttentionMaps, "cross": AttentionMaps}

    def summary(self) -> dict:
        """JSON-safe digest (no full maps): what the ``/analyze`` endpoint returns."""
        def clean(a):
            return [[None if not np.isfinite(x) else round(float(x), 4) for x in row] for row in a]
        return {
            "n_tokens": len(self.tokens), "n_keys": len(self.key_tokens), "tokens": self.tokens,
            "n_layers": int(self.attention.shape[0]), "n_heads": int(self.attention.shape[1]),
            "mask_kind": self.mask_kind, "allowed_fraction": round(self.allowed_fraction, 6),
            "entropy": clean(self.entropy), "mean_distance": clean(self.distance),
            "row_sums_ok": bool(_rows_ok(self.attention)), "truncated": self.truncated,
            "device": self.device, "attention": self.config["attention"], "notes": self.notes,
            "views": self.views.summary() if self.views is not None else {},
            **({f"{k}_maps": m.summary() for k, m in self.stacks.items()} if self.stacks else {}),
        }


def _rows_ok(att: np.ndarray) -> bool:
    """Every finite row sums to 1 or is all zero (a query with no allowed key)."""
    s = np.nan_to_num(att).sum(-1)
    return bool(np.all((np.abs(s - 1) < 1e-3) | (np.abs(s) < 1e-6)))


@gpu
def attention_maps(cfg, text: str, max_bytes: int = MAX_TEXT_BYTES,
                   separator: str = encdec.DEFAULT_SEPARATOR, weights: TrainedWeights | None = None) -> AttentionMaps:
    """Run the model on ``text`` (byte-level) with ``return_attention=True``; see ``AttentionMaps``.

    An encoder-decoder reads ``text`` as ``source <separator> target`` (``encdec.split_text``).
    ``weights`` (``explorer.analysis.weights``): trained weights of this config instead of the
    initial ones (default: the request's active record when it belongs to ``cfg``)."""
    cfg = as_config(cfg)
    w = resolve(cfg.to_json(), weights)
    if encdec.is_seq2seq(cfg):
        src, tgt, truncated = encdec.split_text(text, separator, max_bytes)
        need = budget.check(cfg, "attention", max(len(src), len(tgt)), 1)
        return _memo("maps2", partial(_seq2seq_maps_cached, weights=w), cfg.to_json(), tuple(src), tuple(tgt),
                     truncated, _digest_of(w), need=need)
    ids, truncated = encode_text(text, max_bytes)
    if not ids:
        raise ConfigError("text", text, "at least one character")
    need = budget.check(cfg, "attention", len(ids), 1)
    return _memo("maps", partial(_attention_maps_cached, weights=w), cfg.to_json(), tuple(ids), truncated,
                 _digest_of(w), need=need)


def _seq2seq_maps_cached(cfg_json: str, src: tuple, tgt: tuple, truncated: bool, digest=None,
                         weights=None) -> AttentionMaps:
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    return encdec.seq2seq_maps(cfg, _eval_model(cfg_json, weights), src, tgt, truncated, device(), _maps_of)


def _maps_of(attentions: list, cfg: ModelConfig, labels: list, key_labels: list, pattern: tuple,
             truncated: bool) -> AttentionMaps:
    """One stack's ``AttentionMaps`` (queries ``labels``, keys ``key_labels``, no views) for
    ``explorer.analysis.seq2seq``; ``pattern`` is ``(mask, kind)``, or ``(None, "support")``."""
    maps, notes = _stack_maps(attentions, cfg, len(labels))
    mask, kind = pattern
    if mask is None:
        mask = np.nan_to_num(maps).max(axis=(0, 1)) > 0  # (Lq, Lk)
    entropy, distance = _head_stats(maps, 0)
    if kind == "full":  # cross-attention: |i - j| between a target and a source position means nothing
        distance = np.full_like(distance, np.nan)
    return AttentionMaps(tokens=labels, key_tokens=key_labels, attention=maps, mask=mask, mask_kind=kind,
                         allowed_fraction=float(mask.mean()), entropy=entropy, distance=distance,
                         config=cfg.to_dict(), truncated=truncated, device=str(device()), notes=notes)


def _attention_maps_cached(cfg_json: str, ids: tuple, truncated: bool, digest=None, weights=None) -> AttentionMaps:
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    model = _eval_model(cfg_json, weights)
    tokens = torch.tensor([ids], device=device())
    with torch.no_grad():
        out = model(tokens, return_attention=True)
    L = len(ids)
    maps, notes = _stack_maps(out.attentions or [], cfg, L)
    lk = maps.shape[-1]
    prefix = lk - L
    labels = [token_label(b) for b in ids]
    key_labels = [f"mem{m}" for m in range(prefix)] + labels
    mask, kind = _mask(cfg, maps, L, prefix)
    entropy, distance = _head_stats(maps, prefix)
    return AttentionMaps(tokens=labels, key_tokens=key_labels, attention=maps, mask=mask, mask_kind=kind,
                         allowed_fraction=float(mask.mean()), entropy=entropy, distance=distance,
                         config=cfg.to_dict(), truncated=truncated, device=str(device()), notes=notes,
                         views=compute_views(cfg, out.layers, labels))


def _stack_maps(attentions: list, cfg: ModelConfig, L: int) -> tuple:
    """One ``(h, L, Lk)`` array per applied layer -> ``(n, h, L, Lk)``; layers without weights are NaN."""
    notes = []
    arrays = [a[0].float().cpu().numpy() if isinstance(a, torch.Tensor) else None for a in attentions]
    shapes = [a.shape for a in arrays if a is not None]
    if not shapes:
        raise ConfigError("attention", cfg.attention, "a mechanism that returns its attention weights")
    h = max(s[0] for s in shapes)
    lq = max(s[1] for s in shapes)
    lk = max(s[2] for s in shapes)
    out = np.full((len(arrays), h, lq, lk), np.nan, dtype=np.float32)
    for n, a in enumerate(arrays):
        if a is None:
            notes.append(f"layer {n} returned no attention weights")
            continue
        out[n, :a.shape[0], lq - a.shape[1]:, lk - a.shape[2]:] = a  # right-aligned: queries are the last keys
    if lq != L:
        notes.append(f"maps have {lq} query rows for {L} tokens (segmented processing)")
    return out, notes


def _mask(cfg: ModelConfig, maps: np.ndarray, L: int, prefix: int) -> tuple:
    """The section-1 pattern when there is one, else where the effective attention is non-zero."""
    lq = maps.shape[2]
    if cfg.attention in RULES and lq == L:
        pat = pattern_mask(cfg, L).cpu().numpy()
        return np.concatenate([np.ones((L, prefix), bool), pat], axis=1), "pattern"
    support = np.nan_to_num(maps).max(axis=(0, 1)) > 0  # (L, Lk)
    return support, "support"


def _head_stats(maps: np.ndarray, prefix: int) -> tuple:
    """Per (layer, head): mean entropy (nats) and mean distance |i - j| (tokens) over the queries."""
    p = np.nan_to_num(maps.astype(np.float64))
    lq, lk = maps.shape[2], maps.shape[3]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)  # (n, h, L)
    i = np.arange(lq)[:, None] + (lk - lq)  # absolute key index of each query
    dist = (p * np.abs(i - np.arange(lk)[None, :])).sum(-1)
    missing = np.isnan(maps).all(axis=(2, 3))
    ent, dist = ent.mean(-1), dist.mean(-1)
    ent[missing] = np.nan
    dist[missing] = np.nan
    return ent.astype(np.float32), dist.astype(np.float32)


# ---------------------------------------------------------------------------- gradient norms
def gradient_batch(cfg: ModelConfig, seq_len: int = 64, batch: int = 8, seed: int = 0) -> torch.Tensor:
    """The seeded random token batch ``(batch, seq_len)`` the gradient norms are measured on."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, cfg.vocab_size, (int(batch), int(seq_len)), generator=gen)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token ``t + 1`` from position ``t``."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


@gpu
def gradient_norms(cfg, seq_len: int = 64, batch: int = 8, seed: int = 0,
                   weights: TrainedWeights | None = None) -> dict:
    """Per-layer gradient norms at initialisation (one backward of the next-token loss), or of the
    trained ``weights`` of this config (default: the request's active record when it belongs to ``cfg``).

    Returns ``{"layer": [0..], "attn_out": [...], "ffn_out": [...] (empty when ffn="none"),
    "residual": [...], "loss": float, "norm_placement": str, "notes": [...]}``. The auxiliary
    losses of variants (MoE balance, ...) are not part of the loss: the quantities are those of
    the language-modelling objective, as in Xiong et al. 2020.
    """
    cfg = as_config(cfg)
    if int(seq_len) < 2 or int(batch) < 1:
        raise ConfigError("seq_len", seq_len, "seq_len >= 2 and batch >= 1 (next-token loss)")
    w = resolve(cfg.to_json(), weights)
    need = budget.check(cfg, "gradients", int(seq_len), int(batch))
    result = _memo("gradients", partial(_gradient_norms_cached, weights=w), cfg.to_json(), int(seq_len),
                   int(batch), int(seed), _digest_of(w), need=need)
    return json.loads(json.dumps(result))  # a fresh copy: callers may modify it


def _gradient_norms_cached(cfg_json: str, seq_len: int, batch: int, seed: int, digest=None, weights=None) -> dict:
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    model = build(cfg)  # a fresh model: gradients never touch the shared one
    if weights is not None:
        weights.load_into(model)
    model = model.to(device()).train()
    if encdec.is_seq2seq(cfg):
        src, tgt = encdec.seq2seq_batch(cfg, seq_len, batch, seed)
        with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            result = encdec.seq2seq_gradient_norms(model, src.to(device()), tgt.to(device()))
        result["norm_placement"] = cfg.norm_placement
        return result
    tokens = gradient_batch(cfg, seq_len, batch, seed).to(device())
    with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # dropout (if any) is seeded too
        result = branch_gradient_norms(model, tokens, next_token_loss)
    result["norm_placement"] = cfg.norm_placement
    return result


# ---------------------------------------------------------------------------- latency / memory sweep
def latency_memory_sweep(cfg, *args, **kw) -> list:
    """``explorer.analysis.sweep.latency_memory_sweep``, then the freed heap handed back to the system: a
    sweep to 4096 tokens frees hundreds of MB that glibc would otherwise keep (RSS stays high)."""
    try:
        return _sweep(cfg, *args, **kw)
    finally:
        release_memory()


# ---------------------------------------------------------------------------- model summary
def _sdpa_cpu_flops(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args,
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
    return json.loads(json.dumps(_memo("summary", _summary_cached, cfg.to_json(), int(seq_len), need=need)))


def _summary_cached(cfg_json: str, seq_len: int) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    model = _eval_model(cfg_json)
    seq_len = min(seq_len, cfg.max_len) if cfg.position == "learned" else seq_len
    tokens = torch.randint(0, cfg.vocab_size, (1, seq_len), generator=torch.Generator().manual_seed(0))
    custom = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops}
    args = (tokens, tokens.flip(-1)) if encdec.is_seq2seq(cfg) else (tokens,)  # source and target of seq_len
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
        "stacks": encdec.stack_sizes(model) if encdec.is_seq2seq(cfg) else None,
        "flops_per_token": counter.get_total_flops() / seq_len, "flops_seq_len": seq_len,
        "backend": backend_label(ran, cfg, device()),
        "components": components, "config": cfg.to_dict(),
    }


def kv_cache_bytes(cfg, seq_lens, bytes_per_value: int = 2) -> dict:
    """Bytes of K and V cached for decoding ``L`` tokens: ``2 * n_layers * kv_heads * d_head * L``
    values (fp16 by default), for the current ``n_kv_heads``, MHA and MQA. Computed, not measured:
    the cache is exactly this many stored numbers."""
    cfg = as_config(cfg)
    lens = [int(n) for n in seq_lens]

    # an encoder-decoder caches its decoder's self-attention K/V per target token (the cross-attention
    # K/V are the source's, computed once: not part of the per-token cache)
    layers = n_decoder_layers(cfg) if encdec.is_seq2seq(cfg) else cfg.n_layers

    def cache(kv):
        return [2 * layers * kv * cfg.d_head * n * bytes_per_value for n in lens]

    return {"seq_len": lens, "current": cache(cfg.kv_heads), "mha": cache(cfg.n_heads), "mqa": cache(1),
            "kv_heads": cfg.kv_heads, "n_heads": cfg.n_heads, "bytes_per_value": bytes_per_value}


def clear_caches() -> None:
    """Forget every memoised model and result (benchmarks time the uncached path)."""
    CACHE.clear()


def placement_results(cfg: ModelConfig) -> tuple:
    """Gradient norms of ``cfg`` under every registered norm placement -> (results, skipped)."""
    results, skipped = {}, {}
    for placement in registries()["norm_placement"]:
        try:
            results[placement] = gradient_norms(cfg.replace(norm_placement=placement))
        except ConfigError as exc:
            skipped[placement] = str(exc)
    return results, skipped
