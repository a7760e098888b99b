"""What a model and one request on it will occupy in memory, before anything is allocated.

- ``weights(cfg)``: parameters and buffers, counted exactly by building the model on the meta
  device (``torch.device("meta")``: every tensor has a shape and a dtype but no storage), so the
  count includes what a formula forgets (Linformer's ``max_len x proj_len`` projections, kNN
  memories, sinusoidal tables, per-expert matrices).
- ``footprint(cfg, kind, seq_len, batch)``: the weights plus a prediction of the request's peak of
  activations from their shapes, for the three kinds of request the explorer makes:
  ``"attention"`` (a no-grad forward that returns every layer's attention, copied to NumPy and
  reduced to statistics), ``"gradients"`` (a forward and backward of the next-token loss: every
  layer's activations are saved) and ``"forward"`` (a no-grad forward, e.g. counting FLOPs or a
  timed sweep point; ``"forward_backward"`` is ``"gradients"``).

The prediction is an upper bound by construction: each layer's working set counts several live
copies of its widest activations, its score matrices and the variant's own intermediates
(features, landmarks, buckets, experts' capacity), saved activations count every layer, and the
build's temporary of its largest tensor is counted (a product-key memory's value table is most of
a tiny model). A
test measures real peaks (PyTorch's allocator events) on sampled configs and checks
``measured <= predicted``; being generous only means the app refuses a config somewhat earlier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from .config import ModelConfig
from .ffn.dense import ffn_hidden_size
from .qkv import value_layout
from .schedule import kind_configs

__all__ = ["Footprint", "weights", "footprint", "KINDS", "cached_keys", "layer_cached_keys"]

KINDS = ("attention", "gradients", "forward", "forward_backward")
F32 = 4  # bytes per activation value (the explorer runs in float32)
# live copies of a layer's widest (B, L, width) activation during a forward, of its (B, h, L, Lk)
# scores (logits, masked, softmax, the returned weights), and of the rest of its saved activations
# per layer in a backward
HIDDEN_COPIES, SCORE_COPIES, SAVED_COPIES, MECHANISM_COPIES = 8, 6, 12, 3


@dataclass(frozen=True)
class Footprint:
    kind: str
    seq_len: int
    batch: int
    n_params: int
    param_bytes: int
    buffer_bytes: int
    activation_bytes: int
    parts: dict = field(default_factory=dict)  # name -> bytes of the activation prediction

    @property
    def total(self) -> int:
        grads = self.param_bytes if self.kind in ("gradients", "forward_backward") else 0
        return self.param_bytes + self.buffer_bytes + grads + self.activation_bytes

    def largest_part(self) -> str:
        """The biggest contributor: ``"weights"`` or the name of an activation part."""
        sizes = {"weights": self.param_bytes + self.buffer_bytes, **self.parts}
        return max(sizes, key=sizes.get)


def weights(cfg: ModelConfig) -> tuple:
    """``(n_params, param_bytes, buffer_bytes, widest)`` of ``build_model(cfg)``, built on the meta device.

    ``widest`` is the largest output width of any linear map inside the layers (the FFN's hidden size,
    the fused QKV projection), which sets the size of the widest activation a layer saves; the vocabulary
    head's output is the logits, counted on their own (a pretrained model's 50k-token head would
    otherwise count as every layer's width, 50 times the real activations).
    The caller holds whatever lock guards the global RNG (``build_model`` seeds it).
    """
    return _weights(cfg)[:4]


@lru_cache(maxsize=256)
def _weights(cfg: ModelConfig) -> tuple:  # memoised by the frozen config itself
    from .meta import on_meta
    from .model import build_model  # late: the model imports the registries, which import config

    with on_meta():
        model = build_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    head = getattr(model, "head", None)
    widest = max(
        [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head] + [cfg.d_model]
    )
    largest = max([t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())] + [0])
    return n_params, param_bytes, buffer_bytes, widest, largest


def _keys(cfg: ModelConfig, L: int) -> int:
    """Keys each query may see: the tokens plus what the memory variant prepends."""
    extra = {
        "xl": cfg.mem_len,
        "compressive": cfg.mem_len + cfg.cmem_len,
        "tokens": cfg.n_memory,
        "knn": cfg.knn_k,
    }.get(cfg.memory, 0)
    return L + extra


def _mechanism_width(cfg: ModelConfig, L: int) -> int:
    """Per (batch, head, query): the width of the mechanism's own intermediates (features,
    projected keys, landmarks, buckets and chunks, clusters, retrieved memories)."""
    a = cfg.attention
    # LSH sorts each hash round into n_buckets runs padded to whole chunks (up to L + n_buckets *
    # chunk_size slots), each slot scoring 2 chunks of keys with float, bool and int64 companions,
    # and keeps one dense (L, L) map per round when the weights are asked for
    slots = (L + cfg.n_buckets * cfg.chunk_size) / max(1, L)
    widths = {
        "performer": 2 * cfg.n_features,
        "linear": cfg.d_head,
        "linformer": cfg.proj_len,
        "nystrom": 2 * cfg.n_landmarks,
        "lsh": cfg.n_hashes * (math.ceil(slots * 2 * cfg.chunk_size) * 2 + L),
        "routing": cfg.n_clusters + 2 * math.ceil(L / max(1, cfg.n_clusters)),
        "adaptive_span": min(L, cfg.max_span + cfg.span_ramp),
    }
    w = widths.get(a, 0)
    chunk = _recurrent_chunk(cfg)
    if chunk is not None:  # a recurrent mixer's chunked scan: each chunk's state (h_own d_k d_v), per query of it
        heads, _ = _own_layout(cfg)
        states = _caps(cfg).state_values(cfg)  # the state and the convolution's tail, per layer
        w = heads * (2 * chunk + math.ceil(states / max(1, heads) / chunk)) // max(1, cfg.n_heads) + 1
    if cfg.memory == "knn":
        w += cfg.knn_k * cfg.d_head + cfg.knn_size // max(1, L)  # gathered K/V, similarity to the store
    return w


# recurrent mixers (``AttentionCaps.state_values``) whose chunked scan runs in chunks of this field's length
_RECURRENT_CHUNK = {"mamba2": "ssm_chunk", "gated_deltanet": "delta_chunk"}


def _caps(cfg: ModelConfig):
    """The registry record's capabilities of ``cfg``'s attention."""
    from .attention import ATTENTION  # late: the attention package imports this module's siblings

    return ATTENTION[cfg.attention].caps


def _recurrent_chunk(cfg: ModelConfig) -> int | None:
    """The chunk length of a recurrent mixer's scan (Mamba-2, Gated DeltaNet: their maps are implicit and
    computed only when returned), else None."""
    field = _RECURRENT_CHUNK.get(cfg.attention)
    if field is None or getattr(_caps(cfg), "state_values", None) is None:
        return None
    return int(getattr(cfg, field))


def _own_layout(cfg: ModelConfig) -> tuple:
    """``(heads, width)`` of the core's values (its own head count for a recurrent mixer)."""
    own = getattr(_caps(cfg), "own_projections", None)
    return value_layout(cfg, own(cfg)) if own else (cfg.n_heads, cfg.d_head)


def _computed_keys(cfg: ModelConfig, L: int, Lk: int) -> int:
    """Keys per query whose scores exist at once when the weights are not returned.

    Structured patterns run in ``kernels.attention``: full attention without a bias goes to SDPA,
    whose CPU kernel works on key tiles of at most 512 (flash-style, never the whole row); the
    other patterns go to the block-sparse path, which computes only the visited blocks of the
    pattern's ``BlockMask``. Anything else (a bias, memory slots, a mechanism) counts every key.
    """
    from .attention import RULES  # late: the attention package imports this module's siblings

    chunk = _recurrent_chunk(cfg)
    if chunk is not None and cfg.memory == "none":  # the scan holds one chunk's (chunk x chunk) block at once
        heads, _ = _own_layout(cfg)  # its own head count: the scores are counted in n_heads
        return min(Lk, chunk * -(-heads // max(1, cfg.n_heads)))
    if cfg.attention not in RULES or cfg.memory != "none":
        return Lk
    if cfg.attention == "full":
        # learned sinks (attn_sinks) leave SDPA for the block-sparse path's all-visited layout: every key
        plain = cfg.position in ("none", "rope", "sinusoidal", "learned") and cfg.softcap is None and not cfg.attn_sinks
        return min(Lk, 512) if plain else Lk
    from .attention.sparse import pattern_block_mask

    bm = pattern_block_mask(cfg, L)
    return min(Lk, -(-bm.n_visited * bm.block_q * bm.block_k // max(1, L)))


def footprint(cfg: ModelConfig, kind: str, seq_len: int, batch: int = 1) -> Footprint:
    """Weights (exact) and predicted activation peak (upper bound) of one request; see the module doc."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: one of {KINDS}")
    n_params, pbytes, bbytes, widest, largest = _weights(cfg)
    B, L, h = int(batch), int(seq_len), cfg.n_heads
    Lk = _keys(cfg, L)
    steps = cfg.n_layers  # universal layers apply one block n_layers times: the same activations
    if cfg.architecture == "encoder_decoder":  # both stacks; a decoder layer also runs cross-attention
        n_enc = cfg.n_encoder_layers or cfg.n_layers
        n_dec = cfg.n_decoder_layers or cfg.n_layers
        steps = n_enc + 2 * n_dec
    width = max(widest, cfg.d_model)
    if cfg.ffn in ("moe", "switch", "hash"):  # tokens copied into each chosen expert's capacity
        width = max(width, math.ceil(cfg.top_k * cfg.capacity_factor) * widest)
    if cfg.ffn == "moe_deepseek":  # dropless: every token copied into each of its top_k experts
        width = max(width, cfg.top_k * widest)
    if cfg.ffn == "moe_swiglu_clamped":  # dropless: each token's top_k experts keep their 2f + f + d numbers
        width = max(width, cfg.top_k * (3 * ffn_hidden_size(cfg) + cfg.d_model))
    if cfg.ffn in ("moe_llama4", "moe_qwen"):  # dropless: each token copied into its top_k experts and the shared one
        width = max(width, (cfg.top_k + 1) * widest)
    hidden = B * L * width * F32
    # the weights of every pair exist only when they are returned (the attention maps)
    layers = kind_configs(cfg)  # a layer schedule: the widest of its layer kinds
    computed = max(_computed_keys(c, L, Lk) for c in layers)
    scores = B * h * L * (Lk if kind == "attention" else computed) * F32
    mechanism = MECHANISM_COPIES * B * h * L * max(_mechanism_width(c, L) for c in layers) * F32
    logits = B * L * cfg.vocab_size * F32
    per_layer = HIDDEN_COPIES * hidden + SCORE_COPIES * scores + mechanism
    # a request builds its model: initialising a tensor (``randn(...) * scale``) briefly holds a
    # temporary of its size next to it
    parts = {"one layer's working set": per_layer, "logits": 3 * logits, "initialising the largest weight": largest}
    if kind == "attention":
        maps = B * h * L * Lk * F32
        # the returned weights and the views' exact/approximate maps per layer, the NumPy copy and
        # its float64 statistics (p, p log p, distances: 4 temporaries of 8 bytes)
        qk = 2 * B * L * max(cfg.d_model, h * cfg.d_head) * F32  # the kept q and k (heads of head_dim)
        parts["attention maps of every layer"] = steps * (3 * maps + qk)
        parts["NumPy copies of the maps"] = steps * h * L * Lk * (F32 + 4 * 8)
    elif kind in ("gradients", "forward_backward"):
        parts["saved activations of every layer"] = steps * (SAVED_COPIES * hidden + SCORE_COPIES * scores + mechanism)
    return Footprint(
        kind=kind,
        seq_len=L,
        batch=B,
        n_params=n_params,
        param_bytes=pbytes,
        buffer_bytes=bbytes,
        activation_bytes=sum(parts.values()),
        parts=parts,
    )


# the patterns whose causal decoding keeps a bounded cache: key -> the field holding the span
_BOUNDED_CACHE = {"sliding_window": "window", "chunked": "attention_chunk_size", "block_local": "block_size"}


def cached_keys(cfg: ModelConfig, L: int) -> int:
    """Keys one layer of config ``cfg`` (a layer's own config: ``cfg.layer_config(i)``) keeps cached
    after decoding ``L`` tokens, for the next query. A causal window keeps its last ``window`` keys (Mistral's
    rolling buffer), a causal chunk or block at most ``attention_chunk_size`` / ``block_size`` (the current
    one), plus the ``n_sinks`` first keys; every other layer keeps all ``L``."""
    span = _BOUNDED_CACHE.get(cfg.attention)
    if span is None or not cfg.causal:
        return int(L)
    return min(int(L), getattr(cfg, span) + cfg.n_sinks)


def layer_cached_keys(cfg: ModelConfig, L: int) -> list:
    """``cached_keys`` of each of ``cfg``'s ``n_layers`` layers (a layer schedule's kinds each their own)."""
    return [cached_keys(cfg.layer_config(i), L) for i in range(cfg.n_layers)]
