"""What the documented endpoints return (``explorer.app.api.endpoints`` and the Why and Long context tabs' ``api_*``
handlers), as ``TypedDict``s. On the lowest floor (``server``), since both the tabs and the API import it.

``gr.api`` turns an endpoint's return annotation into the JSON schema ``gradio_client``'s ``view_api()`` shows
(``gradio_client.utils.python_type_to_json_schema``: a ``TypedDict``'s keys become the object's properties), so
these annotations are the API's documented result types. Each type mirrors the code that builds the answer:
``AttentionMaps.summary`` (``explorer.analysis.maps.attention``) and the variant views' ``summary``
(``explorer.analysis.views``), ``branch_gradient_norms`` (``explorer.analysis.gradients.norms``), the sweep's
records (``explorer.analysis.cost.sweep``), ``WeightsSource.used`` (``explorer.analysis.source``),
``LossChange.summary`` / ``perplexity`` (``explorer.analysis.surgery.loss``) and ``cache_file``
(``explorer.app.server.gradio_compat``); the Why endpoints' ``to_json`` of ``explorer.analysis.why`` (``lens``,
``attribution``, ``patching``, ``circuits``, assembled in ``explorer.analysis.why.answers``) and ``/long_context``'s
``as_json`` (``explorer.app.tabs.long_context``, of ``explorer.analysis.long_context.view``). Keys present in
every answer are in a ``total=True`` base; keys that only some answers carry are in a ``total=False`` class on
top (``__required_keys__`` / ``__optional_keys__`` tell them apart; ``tests/explorer/app/test_api_types.py``
checks real answers against these types, so a key added or removed without updating its type fails there).

Plain classes, evaluated at import (no ``from __future__ import annotations``): Gradio reads these objects, not
strings. ``X | None`` needs Python 3.10.
"""

from typing import Literal, TypedDict

ConfigValue = str | int | float | bool | None  # a ModelConfig field's value (``ModelConfig.to_dict``)
Grid = list[list[float | None]]  # [layer][head]; None where the number is undefined (NaN / inf)


# ---------------------------------------------------------------------------- weights
class _WeightsUsedBase(TypedDict):
    used: Literal["bundled", "initial", "trained", "checkpoint"]  # the weights drawn
    source: str  # where they come from, as the page says it (initial: why no bundle serves the config)


class WeightsUsed(_WeightsUsedBase, total=False):
    """``WeightsSource.used()``: which weights an answer was computed with."""

    checkpoint: str  # the checkpoint's id (used "checkpoint")
    surgery: list[str]  # the fields changed from the config the weights were trained with (empty: none)
    step: int  # optimiser steps of the weights drawn (used "bundled" / "trained")
    requested: str  # the choice asked for when the initial weights were drawn instead ("bundled")


class LossPair(TypedDict):
    """A mean next-token loss as trained (``before``) and after the surgery (``after``)."""

    before: float  # nats per token (per byte for a byte-level model)
    after: float  # nats per token after the surgery
    perplexity: list[float]  # [before, after]: exp of the losses
    tokens: int  # tokens read
    length: int  # the window they were read in (tokens)
    trained_length: int  # the length the model was trained at (tokens)
    past: bool  # length > trained_length


class LossSummary(TypedDict):
    """``LossChange.summary()``: the loss before and after a checkpoint's or a bundle's surgery."""

    changed: list[str]  # the fields the surgery changed
    unit: str  # "nats/byte" or "nats/token"
    heldout: LossPair  # on a fixed held-out passage
    text: LossPair | None  # on the request's text (None: shorter than two tokens)


class _PerplexityBase(TypedDict):
    heldout: list[float]  # [as trained, after the surgery] on the held-out passage


class Perplexity(_PerplexityBase, total=False):
    """``LossChange.perplexity()``."""

    text: list[float]  # [as trained, after the surgery] on the request's text (absent: too short to score)


class AnalyzeWeights(WeightsUsed, total=False):
    """``/analyze``'s ``weights``: ``WeightsUsed`` and, for a changed checkpoint, the loss of the change."""

    perplexity: Perplexity  # a checkpoint under surgery: perplexity as trained and after
    loss: LossSummary  # the same change as mean losses and what they were measured on


# ---------------------------------------------------------------------------- the variant views
class ApproximationView(TypedDict):
    """An approximate mechanism's effective attention against the exact softmax on the same q, k."""

    mechanism: str  # the attention mechanism
    reference: str  # what it is compared with
    causal: bool
    max_abs_error: Grid  # [layer][head] max |effective - exact|
    mean_abs_error: Grid  # [layer][head] mean over the allowed (query, key) pairs
    overall_max_abs_error: float | None
    overall_mean_abs_error: float | None


class GroupsView(TypedDict):
    """LSH buckets / routing or k-means clusters of the tokens."""

    key: Literal["buckets", "clusters"]  # the LayerInfo field read
    what: str  # "LSH bucket", "routing cluster", "k-means query cluster"
    n_groups: int
    labels: list[list[list[int]]]  # [layer][head][token] group of each token
    group_sizes: list[list[list[int]]]  # [layer][head][group] tokens in each group


class SpanView(TypedDict):
    """Adaptive span: the learned span of each head."""

    span: Grid  # [layer][head] learned span z, in tokens
    max_span: int  # tokens
    span_ramp: int  # tokens


class ExpertsView(TypedDict):
    """Mixture-of-experts routing."""

    ffn: str  # the FFN variant
    expert_counts: list[list[int]]  # [layer][expert] assignments (every top-k choice, before drops)
    dropped: list[int]  # [layer] assignments dropped for capacity
    capacity: list[int | None]  # [layer] per-expert capacity per sequence (None: no capacity)
    n_tokens: int  # tokens routed per layer
    top_k: int  # experts per token
    assignment: list[list[int]]  # [layer][token] top-1 expert
    layers: list[int]  # the model's layer index of each row (a schedule's ':dense' layers route nothing)


class MemoryView(TypedDict):
    """Segment-level memory: slots each layer saw and how far back each query reaches."""

    memory: str  # the memory variant
    memory_len: list[list[int]]  # [layer][segment] memory slots seen
    breakdown: list[list[dict[str, int]]]  # [layer][segment] slots by kind ("mem", "cmem", "prefix", "knn")
    segments: list[list[int]]  # [segment] [first token, length]
    reach: list[list[int]]  # [layer][token] positions back each query can see
    reach_without_memory: list[int]  # [token] the same within its own segment


class DepthView(TypedDict):
    """Early exit / adaptive computation time: the depth each token ran to."""

    key: Literal["exit_depth", "act_steps"]  # the LayerInfo field read
    per_token: list[float | None]  # [token] exit layer (1-based) or ACT steps
    mean: float | None  # mean over the tokens
    n_layers: int
    threshold: float  # exit_threshold / ACT's halting threshold


class SinkhornView(TypedDict):
    """Sparse Sinkhorn attention's block sorting matrices."""

    n_blocks: int
    block_size: int  # tokens
    sinkhorn_iters: int
    causal: bool
    P: list[list[list[list[float]]]]  # [layer][head][block][block] sorting matrix
    max_row_sum_error: float  # max |row sum - 1|
    max_col_sum_error: float  # max |column sum - 1|


class ProbSparseView(TypedDict):
    """ProbSparse (Informer): the queries that attended."""

    u: int  # active queries per head: probsparse_factor * ceil(ln L), at most L
    causal: bool
    active: list[list[list[int]]]  # [layer][head][token] 1: attended, 0: mean of V
    n_active: list[list[int]]  # [layer][head] active queries


class TalkingHeadsView(TypedDict):
    """Talking-heads attention's head mixing."""

    pre_softmax: list[list[list[float]]]  # [layer][new head][old head] mixing of the scores
    post_softmax: list[list[list[float]]]  # [layer][new head][old head] mixing of the weights
    max_off_identity: float  # max |mixing - identity| over both
    post_row_sums: list[list[float]]  # [layer][head]


class ResidualAttentionView(TypedDict):
    """RealFormer / predictive attention: the previous layer's scores in each layer's."""

    attention: str  # the attention mechanism
    prior_share: list[list[float]]  # [layer][head] |prior| / (|prior| + |own|) of the scores
    alpha: list[float | None]  # [layer] predictive attention's sigmoid(a) (None: unused)


class ProductKeysView(TypedDict):
    """Product-key memory: how the value rows are read."""

    n_slots: int  # value rows
    pkm_topk: int
    pkm_heads: int
    reads: list[int]  # [layer] reads
    used: list[int]  # [layer] rows read at least once
    top_slots: list[list[int]]  # [layer] the 10 most-read rows
    top_counts: list[list[int]]  # [layer] their reads


class FunnelView(TypedDict):
    """Funnel Transformer: the sequence each layer's attention saw."""

    funnel_blocks: int
    query_len: list[int]  # [layer] query positions
    key_len: list[int]  # [layer] key positions


class InducedView(TypedDict):
    """Two-step attention through inducing points (Set Transformer ISAB, Luna)."""

    mechanism: str
    n_inducing: int  # inducing points
    max_product_error: float  # max |unpack @ pack - reported attention|
    max_row_sum_error: float  # max |row sum - 1| of the effective attention
    points_per_token: list[list[float]]  # [layer][head] mean top step-2 weight


class LiteView(TypedDict):
    """Lite Transformer: the convolution heads."""

    conv_kernel: int  # taps
    tap_offsets: list[int]  # key position - query position of each tap
    taps: list[list[list[float]]]  # [layer][conv head][tap] softmax kernel
    conv_share: list[list[float]]  # [layer][token] the convolution heads' share of |out|^2
    mean_conv_share: list[float]  # [layer]
    n_attention_heads: int
    n_conv_heads: int


class RetrievalView(TypedDict):
    """kNN-LM / SPALM: what the datastore retrieved."""

    memory: str  # the memory variant
    knn_k: int  # neighbours per position
    segment_len: int  # the store fills after each segment of this many tokens
    positions_with_neighbours: int
    neighbour_next: list[list[int]]  # [token][neighbour] stored next token (-1: none), nearest first
    neighbour_pos: list[list[int]]  # [token][neighbour] position of the stored context (-1: none)
    neighbour_dist: list[list[float | None]]  # [token][neighbour] squared L2 distance (None: none)
    memory_weight: list[float]  # [token] the memory's weight in the output
    top_changed: int  # positions whose most likely next token the memory changed
    top_token: list[str]  # [token] the output's most likely next token


class FeedbackView(TypedDict):
    """Feedback Transformer: the weights of the layers' outputs in the memory."""

    layer_weights: list[float]  # [embedding, layer 1..N] softmax(w)
    sum: float
    heaviest: int  # index into layer_weights


class SandwichView(TypedDict):
    """Sandwich Transformer: the order of the sublayers."""

    order: str  # "a" / "f" per sublayer, bottom first
    sandwich_coeff: int
    n_layers: int
    layer_of: list[int]  # [depth] which attention / FFN (0-based) sits there


class ViewsSummary(TypedDict, total=False):
    """``Views.summary()``: the variant views of the head stack's layers, only those its output has
    (``explorer.analysis.views.VIEWS``, same names); empty for a standard config."""

    approximation: ApproximationView
    groups: GroupsView
    span: SpanView
    experts: ExpertsView
    memory: MemoryView
    exit: DepthView
    act: DepthView
    sinkhorn: SinkhornView
    probsparse: ProbSparseView
    talking_heads: TalkingHeadsView
    residual: ResidualAttentionView
    pkm: ProductKeysView
    funnel: FunnelView
    induced: InducedView
    lite: LiteView
    retrieval: RetrievalView
    feedback: FeedbackView
    sandwich: SandwichView


# ---------------------------------------------------------------------------- attention maps
class HeadLabel(TypedDict):
    """A head's behaviour on the text (``explorer.analysis.maps.heads``)."""

    label: str  # previous-token, induction, first-token, delimiter, local, broad or mixed
    score: float | None  # the score that decided it (None: undefined on this text)


class MapsSummary(TypedDict):
    """``AttentionMaps.summary()`` of one stack's self-attention or one cross-attention."""

    n_tokens: int  # query tokens
    n_keys: int  # keys (memory slots first, then the tokens)
    tokens: list[str]  # label of each query token
    n_layers: int  # maps (applied layers)
    n_heads: int
    mask_kind: Literal["pattern", "support", "full"]  # the section-1 rule, where weight went, or cross-attention
    allowed_fraction: float  # fraction of (query, key) pairs the mask allows
    entropy: Grid  # [layer][head] mean over queries of -sum p log p, in nats
    mean_distance: Grid  # [layer][head] mean over queries of sum p |i - j|, in tokens (None: cross-attention)
    row_sums_ok: bool  # every finite row sums to 1 (or is all zero); an implicit map's rows: finite
    rows: str  # what a row is: "distributions: ...", or "implicit map of a recurrent layer: rows are not ..."
    truncated: bool  # the text was cut to its byte budget
    device: str  # where it ran
    attention: str  # the attention mechanism
    notes: list[str]
    vocabulary: Literal["bytes", "tokenizer"]  # what a token is
    views: ViewsSummary  # the variant views ({} for other stacks and cross-attentions)
    layer_kinds: list[str] | None  # [layer] each layer's kind under a layer schedule ("full:nope"); None: uniform
    head_rules: str | None  # how heads are labelled (None: a cross-attention)
    heads: list[list[HeadLabel]] | None  # [layer][head] (None: a cross-attention)


class _AnalyzeBase(MapsSummary):
    weights: AnalyzeWeights  # the weights used


class AnalyzeResult(_AnalyzeBase, total=False):
    """``/analyze``: the head stack's self-attention (the decoder's for an encoder-decoder) and its weights."""

    encoder_maps: MapsSummary  # an encoder-decoder's encoder self-attention
    cross_maps: MapsSummary  # an encoder-decoder's cross-attention (query = target, key = source)


# ---------------------------------------------------------------------------- gradients
class _GradientNormsBase(TypedDict):
    layer: list[int]  # applied layer index, 0..
    attn_out: list[float]  # [layer] ||dloss/dW|| of the attention output projection
    ffn_out: list[float]  # [layer] ||dloss/dW|| of the FFN output parameters (empty: ffn "none")
    residual: list[float | None]  # [layer] ||dloss/dx|| of the layer's input (None: not measurable)
    loss: float  # next-token cross-entropy, nats
    notes: list[str]
    norm_placement: str  # the placement measured


class _GradientsBase(_GradientNormsBase):
    weights: WeightsUsed  # the weights used


class GradientsResult(_GradientsBase, total=False):
    """``/gradients``: per-layer gradient norms (Xiong et al. 2020) for the config's norm placement."""

    stack: list[str]  # [layer] the stack of each layer (a model of several stacks)
    stack_layer: list[int]  # [layer] its index within that stack
    cross_out: list[float | None]  # [layer] cross-attention output projection's norm (None: no cross-attention)


# ---------------------------------------------------------------------------- the sweep
class _SweepRecordBase(TypedDict):
    seq_len: int  # tokens
    ms: float | None  # median whole-model time, milliseconds (None: not measured)
    attn_ms: float | None  # the attention cores' time inside it, ms (None: forward_backward, or no core)
    peak_bytes: int | None  # peak memory of the warm-up run, bytes (None: not measured)
    backend: str  # the kernels that ran ("not run" when none did)
    status: Literal["ok", "oom", "timeout", "cancelled", "invalid", "error"]
    reason: str  # why not ok, or a note ("" when none)
    mode: Literal["forward", "forward_backward"]
    device: str
    threads: int  # intra-op threads
    memory_method: str  # how peak_bytes was measured
    others: int  # other requests computing during the measurement (0: undisturbed)
    timer: str  # how ms was measured
    dtype: str  # the dtype of the run


class SweepRecord(_SweepRecordBase, total=False):
    """One ``/benchmark`` record: one length of ``latency_memory_sweep``."""

    n_heads: int  # for the size an L x L score matrix would have (absent: cancelled before it started)
    batch: int  # sequences per run (absent: cancelled before it started)
    compile_s: float  # seconds the untimed first run took to compile (only when it had to)
    src_len: int  # an encoder-decoder's source length, tokens
    tgt_len: int  # an encoder-decoder's target length, tokens


# ---------------------------------------------------------------------------- the export
class FileMeta(TypedDict):
    _type: Literal["gradio.FileData"]


class ExportFile(TypedDict):
    """``/export``: the zip as Gradio's ``FileData`` (``gradio_client`` downloads it and returns its path)."""

    path: str  # the file in Gradio's cache, on the server
    orig_name: str  # the zip's name
    meta: FileMeta


# ---------------------------------------------------------------------------- compare
class _CompareAttentionBase(MapsSummary):
    weights: WeightsUsed  # the weights used


class CompareAttention(_CompareAttentionBase, total=False):
    """One side's attention summary, as ``/analyze`` gives it (without a checkpoint's loss change)."""

    encoder_maps: MapsSummary
    cross_maps: MapsSummary


class CompareSide(TypedDict):
    attention: CompareAttention
    gradients: GradientsResult


class CompareResult(TypedDict):
    """``/compare_ab``: two configs on the same text."""

    diff: list[list[ConfigValue]]  # [field, value in A, value in B] for every field that differs
    a: CompareSide
    b: CompareSide
    link: str  # the share query that restores both


# ---------------------------------------------------------------------------- the Why endpoints
class _LogitLensBase(TypedDict):
    rows: list[str]  # "embedding", then "layer 0" .. "layer n-1" (an encoder-decoder: its decoder's)
    stream: str  # what "the residual stream" read at each row is for this model
    tokens: list[str]  # [token] label of each input token (an encoder-decoder: START + the target)
    token_ids: list[int]  # [token] their ids
    positions: list[int]  # [position] the scored positions (next tokens for a causal model)
    targets: list[str]  # [position] the target token of each scored position
    top_tokens: list[list[list[str]]]  # [row][token][k] the k most likely tokens
    top_ids: list[list[list[int]]]  # [row][token][k] their ids
    top_probs: list[list[list[float]]]  # [row][token][k] their probabilities
    target_prob: list[list[float]]  # [row][position] the target's probability
    target_rank: list[list[int]]  # [row][position] tokens strictly more likely than the target (0: the top)
    loss_per_layer: list[float]  # [row] mean -log p(target), nats per token
    unit: str  # "nats per token"
    weights: WeightsUsed  # the weights used


class LogitLensResult(_LogitLensBase, total=False):
    """``/logit_lens``: ``LogitLens.to_json`` (``explorer.analysis.why.lens``) and the weights."""

    source_tokens: list[str]  # an encoder-decoder's source tokens
    source_ids: list[int]  # their ids


class _AttributionBase(TypedDict):
    position: int  # the position attributed (its next token is predicted)
    token: str  # the token whose logit is decomposed (the actual next token)
    token_id: int
    alternative: str | None  # the token subtracted (None: none)
    alternative_id: int | None
    heads: list[list[float]]  # [layer][head] direct contribution (decoder self-attention heads)
    ffn: list[float]  # [layer]
    embedding: float  # the token embedding's term
    position_embedding: float  # the position embedding's term (0 for RoPE / ALiBi / none)
    biases: float  # attention output biases + the final norm's bias + the head's bias
    total: float  # the sum of every term
    logit: float  # the model's own logit (or logit difference)
    final_norm_scale: float  # the final norm's scale, frozen at its forward value (1 without a norm)
    measure: Literal["logit", "logit difference"]
    note: str
    weights: WeightsUsed  # the weights used


class AttributionResult(_AttributionBase, total=False):
    """``/attribution``: ``Attribution.to_json`` (``explorer.analysis.why.attribution``) and the weights."""

    cross: list[list[float]]  # [layer][head] an encoder-decoder's cross-attention heads


class LossChange(TypedDict):
    """A mean next-token loss before and after an ablation, nats per token."""

    before: float
    after: float
    change: float  # after - before


class RepeatLossChange(LossChange):
    """The same on the second copy of the text's longest repeated word, after its first token."""

    positions: list[int]  # the positions scored (each predicts the copy's next token)


class _AblationBase(TypedDict):
    heads: list[list[int | str]]  # the heads ablated: [layer, head], an encoder-decoder's [kind, layer, head]
    mode: Literal["zero", "mean"]
    unit: str  # "nats per token"
    heldout_name: str  # what "heldout" scored (an encoder-decoder: its reversal probes)
    text: LossChange  # on the request's text
    heldout: LossChange  # on the held-out passage
    weights: WeightsUsed  # the weights used


class AblationResult(_AblationBase, total=False):
    """``/ablation``: ``Ablation.to_json`` (``explorer.analysis.why.patching``), ``repeat`` and the weights."""

    repeat: RepeatLossChange  # when a word of the text repeats (a decoder)


class LogitDifference(TypedDict):
    clean: float  # the logit difference of the clean run
    corrupted: float  # of the corrupted run


class PatchingChecks(TypedDict):
    everything_patched: float  # fraction restored patching everything (1)
    nothing_patched: float  # patching nothing (0)


class _PatchingBase(TypedDict):
    positions: list[int]  # the scored positions
    heads: list[list[float]]  # [layer][head] fraction of the clean-vs-corrupted logit difference restored
    ffn: list[float | None]  # [layer] (None: undefined)
    logit_difference: LogitDifference
    checks: PatchingChecks
    measure: str
    corrupted_text: str  # the corrupted text that was run
    weights: WeightsUsed  # the weights used


class PatchingResult(_PatchingBase, total=False):
    """``/patching``: ``Patching.to_json`` (``explorer.analysis.why.patching``), the corrupted text, the weights."""

    cross: list[list[float]]  # an encoder-decoder: [decoder layer][head] cross-attention heads
    encoder: list[list[float]]  # [encoder layer][head]
    encoder_ffn: list[float | None]  # [encoder layer]


class CopyingMeasures(TypedDict):
    copying_eigen: str  # what copying_eigen measures
    copying_diagonal: str


class CopyingScores(TypedDict):
    """``HeadCircuits.to_json`` (``explorer.analysis.why.circuits``; the API never asks for the matrices)."""

    tokens: list[str]  # the tokens the OV circuits were read on
    copying_eigen: list[list[float]]  # [layer][head] sum of the OV eigenvalues / sum of their moduli
    copying_diagonal: list[list[float]]  # [layer][head] fraction of OV rows whose largest entry is the diagonal
    measures: CopyingMeasures


class CompositionPair(TypedDict):
    earlier_head: int
    later_head: int
    score: float


class CompositionScores(TypedDict):
    """``Composition.to_json`` (``explorer.analysis.why.circuits``)."""

    kind: Literal["K", "Q", "V"]
    earlier_layer: int
    later_layer: int
    scores: list[list[float]]  # [earlier head][later head] Frobenius-norm ratio
    random_baseline: float  # the mean ratio of random low-rank matrices of the same shapes
    top: list[CompositionPair]  # the 5 highest pairs
    measure: str


class CircuitsResult(TypedDict):
    """``/circuits``: the heads' copying scores and one composition (``explorer.analysis.why.answers``)."""

    copying: CopyingScores
    composition: CompositionScores | None  # None: a one-layer model
    composition_note: str  # why there is no composition ("" when there is)
    weights: WeightsUsed  # the weights used


# ---------------------------------------------------------------------------- long context
Cells = list[list[list[float | None]]]  # [layer][head][bin] (None: no position in the bin)


class LongContextStats(TypedDict):
    """Per-head statistics, means over the position bins (``explorer.analysis.long_context.view.STATS``)."""

    entropy: Cells  # nats
    distance: Cells  # tokens
    sink: Cells  # mass on the first tokens
    local: Cells  # mass on the nearby keys


class LongContextSide(TypedDict):
    """One model drawn: as trained, or under the change."""

    name: str  # "as trained", "64-key window", ...
    config: dict[str, ConfigValue]  # its ModelConfig
    backend: str  # the kernels that ran
    method: str  # how the maps were pooled
    block_q: int  # query positions per map cell
    block_k: int  # key positions per map cell
    layers: list[int]  # the model layer index of each map
    maps: list[list[list[list[float | None]]]]  # [layer][head][query cell][key cell] attention mass
    mean_loss: float | None  # nats per token over the passage (None: no next-token loss)
    loss_bins: list[float | None] | None  # [bin] mean loss (None: no loss)
    stats_bins: LongContextStats
    notes: list[str]


class LongContextResult(TypedDict):
    """``/long_context``: ``as_json`` of ``explorer.analysis.long_context.view.LongContext``
    (``explorer.app.tabs.long_context``) and the weights."""

    length: int  # tokens read
    unit: str  # "byte" or "token"
    source: str  # the passage: heldout, repeat or pasted
    trained_length: int | None  # the length the model was trained at (None: weights with none)
    repeat: list[int] | None  # [first copy's start, second copy's start, copy length] (None: no repeat)
    origin: str  # what the weights are, as the page says it
    bin_centres: list[float]  # [bin] position of each bin's centre
    sides: list[LongContextSide]
    notes: list[str]
    predicted_bytes: int  # the memory predicted for the view
    seconds: float  # how long it took
    weights: WeightsUsed  # the weights used
