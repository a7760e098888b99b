"""Per-call state threaded through one forward pass, and the typed per-layer record it collects.

A ``ForwardContext`` lives for one segment of one call (never stored on a module between calls).
Layer stacks open one :class:`LayerInfo` per applied layer with :meth:`ForwardContext.begin_layer`;
it carries the hidden states entering that layer and which layer / step it is (used to pick that
layer's memory), and variants fill in their statistics. ``LayerInfo`` is a slotted dataclass: a
misspelt field raises instead of silently adding a key no view reads. :func:`layer_loss` is the one
place that says which fields are auxiliary losses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

Tensor = torch.Tensor
_TOKEN = {"per_token": True}  # (B, L, ...) fields: concatenated along L when segments are merged


@dataclass(slots=True)
class ExpertStats:
    """Routing statistics of one mixture-of-experts sublayer call (all detached)."""

    expert_counts: Tensor  # (n_experts,) long: assignments per expert (all top-k, before drops)
    dropped: int  # assignments dropped for capacity
    assignment: Tensor  # (B, L) long: top-1 expert of each token
    capacity: int | None = None  # per expert per sequence; None without capacity (hash)


@dataclass(slots=True)
class LayerInfo:
    """What one applied layer reports; ``ModelOutput.layers`` is a list of these."""

    index: int  # layer (or step) number; picks the layer's memory
    input: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L, d) hidden states entering
    # -- attention sublayer
    attention: Tensor | None = None  # (B, h, L, Lk) effective attention, when requested
    q: Tensor | None = None  # (B, h, L, d_h) post-position queries (when requested)
    k: Tensor | None = None  # (B, h_kv, Lk, d_h) post-position keys (when requested)
    score_mods: dict | None = None  # the kernels.attention modifiers of the position encoding
    loss: Tensor | None = None  # auxiliary loss of the attention core (adaptive span)
    span: Tensor | None = None  # (h,) adaptive span z
    buckets: Tensor | None = None  # (B, h, L) LSH buckets, first hash round
    clusters: Tensor | None = None  # (B, h, L) clusters of the queries (routing, clustered)
    key_clusters: Tensor | None = None  # (B, h, Lk) routing clusters of the keys
    sinkhorn: Tensor | None = None  # (B, h, nb, nb) Sinkhorn-balanced block sorting matrix P
    active_queries: Tensor | None = None  # (B, h, L) bool: ProbSparse top-u queries (others: mean of V)
    head_mix: Tensor | None = None  # (2, h, h) talking-heads [new, old] mixing: pre-, post-softmax
    prior_share: Tensor | None = None  # (B, h) realformer / predictive: |prior| / (|prior| + |own|) scores
    prior_alpha: Tensor | None = None  # () predictive attention's mixing weight sigmoid(a) (not layer 0)
    induced_pack: Tensor | None = None  # (B, h, m, Lk) isab / luna step 1: the m points read the tokens
    induced_unpack: Tensor | None = None  # (B, h, Lq, m) step 2: the tokens read the m points
    conv_taps: Tensor | None = None  # (h/2, K) lite: softmax-normalised kernel taps per conv head
    conv_share: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) lite: conv heads' share of |out|^2
    # -- feed-forward sublayer
    experts: ExpertStats | None = None  # moe / switch / hash routing statistics
    slot_counts: Tensor | None = None  # (pkm_subkeys^2,) long: reads of each product-key memory row
    ffn_loss: Tensor | None = None  # load-balancing loss (moe, switch)
    # -- layer structures
    layer_mix: Tensor | None = None  # (n_layers + 1,) feedback memory weights softmax(w) over x^0..x^N
    sublayer_depth: tuple | None = None  # sandwich: (attention, FFN) positions in the 2n-sublayer order
    parallel: LayerInfo | None = None  # parallel_hybrid: the record of the mixer beside the attention (its map, q, k)
    gate_attn: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) mean GTrXL update gate
    gate_ffn: Tensor | None = field(default=None, metadata=_TOKEN)
    exit_confidence: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) top-1 probability
    exited: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) exited at or before it
    exit_depth: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) exit layer (last layer)
    act_halting: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) cumulative halting
    act_steps: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) ACT steps (last step)
    ponder_loss: Tensor | None = None  # ACT ponder cost
    loss_total: Tensor | None = None  # replaces the sublayer losses (reversible; merged segments)
    # -- memory
    memory_len: int | None = None  # slots prepended / stored for this layer in the segment
    memory: dict | None = None  # breakdown, e.g. {"mem": M, "cmem": C} / {"knn": S}
    reach: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) positions back a query can see
    key_ids: Tensor | None = None  # (Lk,) which key each attention column is
    memory_loss: Tensor | None = None  # compressive memory's reconstruction loss
    knn_gate: Tensor | None = None  # (h,) kNN mixing gate
    knn_index: Tensor | None = None  # (B, h, L, k) store slots retrieved
    knn_positions: Tensor | None = None  # (B, h, L, k) their absolute positions
    knn_weights: Tensor | None = None  # (B, h, L, k) retrieved softmax
    lm_next: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L, knn_k) knn_lm / spalm: the
    # retrieved contexts' stored next tokens (-1: no entry), nearest first; with their squared L2 distances
    lm_dist: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L, knn_k) (NaN: no entry)
    lm_pos: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L, knn_k) positions of the contexts (-1)
    lm_mix: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L) the memory's weight in the mixture:
    # knn_lambda (knn_lm) / 1 - g (spalm); 0 while the store is empty
    lm_p_model: Tensor | None = field(default=None, metadata=_TOKEN)  # (B, L, V) next-token probabilities
    lm_p_memory: Tensor | None = field(default=None, metadata=_TOKEN)  # without / from only / with the memory
    lm_p_mixed: Tensor | None = field(default=None, metadata=_TOKEN)  # (display: recorded when weights are)
    segments: list | None = None  # per-segment LayerInfo of a merged multi-segment call
    # -- architecture (encoder-decoder, models/encdec.py)
    stack: str | None = None  # "encoder" / "decoder" (None: the single stack of decoder_only)
    cross_attention: Tensor | None = None  # (B, h, Lt, Ls) decoder -> source attention, when requested
    # -- cached by an ``Interventions`` record with ``cache=True`` (models/interventions.py)
    head_results: Tensor | None = None  # (B, h, L, d_h) each head's z_h, before the output projection
    head_outputs: Tensor | None = None  # (B, h, L, d) each head's write z_h W_O^h to the residual stream
    ffn_output: Tensor | None = None  # (B, L, d) the FFN sublayer's output
    cross_head_results: Tensor | None = None  # (B, h, Lt, d_h) decoder cross-attention heads' z_h (encoder_decoder)
    cross_head_outputs: Tensor | None = None  # (B, h, Lt, d) their writes z_h W_O^h
    output: Tensor | None = None  # (B, L, d) the residual stream leaving the block
    # -- internal hand-offs to the memory update (cleared by it)
    attn_input: Tensor | None = None  # (B, L, d) this layer's attention input
    knn_new: tuple | None = None  # (keys, values) to append to the kNN store
    lm_hidden: Tensor | None = None  # (B, L, d) final hidden states for the knn_lm / spalm store

    def record(self, **values) -> None:
        """Set fields by name (an attention core's ``aux``); an unknown name raises ``AttributeError``."""
        for name, value in values.items():
            if name not in _FIELDS:
                raise AttributeError(f"LayerInfo has no field {name!r}; declare it in models/context.py")
            setattr(self, name, value)

    def record_ffn(self, aux: dict) -> None:
        """Store an FFN sublayer's ``aux`` dict (empty for dense FFNs) as typed fields; pkm's slot counts add up."""
        aux = dict(aux)
        loss = aux.pop("loss", None)
        if loss is not None:
            self.ffn_loss = loss
        counts = aux.pop("slot_counts", None)
        if counts is not None:  # a layer with several FFN calls (sandwich, macaron) reads the memory each time
            self.slot_counts = counts if self.slot_counts is None else self.slot_counts + counts
        if aux:
            self.experts = ExpertStats(**aux)  # an unknown key raises TypeError

    def parts(self) -> list:
        """The per-segment records (just ``[self]`` when the call was one segment)."""
        return self.segments or [self]

    def copy(self) -> LayerInfo:
        return dataclasses.replace(self)


_FIELDS = frozenset(f.name for f in dataclasses.fields(LayerInfo))
TOKEN_FIELDS = tuple(f.name for f in dataclasses.fields(LayerInfo) if f.metadata.get("per_token"))
LOSS_FIELDS = ("loss", "ffn_loss", "memory_loss", "ponder_loss", "loss_total")


@dataclass
class ForwardContext:
    tokens: torch.Tensor  # (B, L) token ids of the current segment
    position: Any  # the model's PositionEncoding module
    need_weights: bool = False  # materialise effective attention for display
    k_start: int = 0  # absolute position of the segment's first token
    memory: Any = None  # memory module of the model (or None)
    state: Any = None  # memory state for this segment (or None)
    positions: torch.Tensor | None = None  # (L,) absolute positions of the segment's tokens
    classifier: Callable | None = None  # hidden (B, L, d) -> logits (final norm + LM head)
    layers: list = field(default_factory=list)  # one LayerInfo per applied layer, filled during the pass
    # -- carried from one layer to the next inside this pass (RealFormer, predictive attention priors)
    prev_scores: torch.Tensor | None = None  # (B, h, L, Lk) previous layer's pre-softmax scores
    prev_probs: torch.Tensor | None = None  # (B, h, L, Lk) previous layer's attention weights
    packed: torch.Tensor | None = None  # (B, n_inducing, d) Luna's packed sequence for the next layer
    interventions: Any = None  # models.interventions.Interventions: head / FFN / residual reads and replacements

    def begin_layer(self, x: torch.Tensor) -> LayerInfo:
        """Open (and record) the record of the next applied layer, whose input is ``x``."""
        info = LayerInfo(index=len(self.layers), input=x)
        self.layers.append(info)
        return info

    def prefix(self, index: int) -> torch.Tensor | None:
        """Hidden states ``(B, P, d)`` prepended to layer ``index``'s keys/values, or None."""
        if self.memory is None:
            return None
        return self.memory.prefix(index, self.state, self.tokens.shape[0])

    def attention_hook(self, index: int) -> Callable | None:
        """A replacement for the attention core call of layer ``index`` (kNN memory), or None."""
        if self.memory is None:
            return None
        return self.memory.hook(index)


def layer_loss(info: LayerInfo) -> torch.Tensor | None:
    """Sum of the auxiliary losses one layer reports (None when it reports none).

    ``loss_total`` (set by the reversible stack, whose sublayer losses are recomputed with gradients
    in backward, and by merged segments) replaces the sublayer losses ``loss`` and ``ffn_loss``.
    """
    if info.loss_total is not None:
        terms = [info.loss_total]
    else:
        terms = [info.loss, info.ffn_loss]
    terms += [info.memory_loss, info.ponder_loss]
    if info.parallel is not None:  # the parallel mixer's core loss (adaptive span beside attention)
        terms.append(layer_loss(info.parallel))
    terms = [t for t in terms if isinstance(t, torch.Tensor)]
    if not terms:
        return None
    return sum(terms[1:], terms[0])
