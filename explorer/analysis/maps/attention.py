"""Attention maps of a config on a text: one forward pass, walked stack by stack.

``attention_maps(cfg, text)`` reads the text as the config's model does (``explorer.runtime.text``:
one byte sequence, or a source and a target split at a separator), runs the model with
``return_attention=True`` and walks its arrangement (``models.architectures.Arrangement``): the
self-attention of the stack the head reads is the main ``AttentionMaps``; every other stack's
self-attention and every cross-attention (queries of the reading stack, keys of the stack it reads)
is one more complete ``AttentionMaps`` in ``stacks`` (``"encoder"``, ``"cross"`` for an
encoder-decoder; ``"mixer"`` for a ``parallel_hybrid`` model: the maps of the mixer beside each layer's attention,
``LayerInfo.parallel``, e.g. Mamba-2's implicit attention, under the mixer's own config). Each holds the
effective attention of every layer and head (``[B, h, L, L_k]``
rows summing to 1, or to ``1 - p_sink`` with learned attention sinks (``attn_sinks``: the mass each
row gives to keys; the sink has no key column), NaN where a layer reports none), the pattern (the
section-1 rule when the stack has one, else where any head puts weight), the allowed fraction, per-head
entropy and mean distance, and the variant views of the head stack's layers.

Every request passes the memory budget before anything runs (``explorer.runtime.budget``), and the
result is memoised by config, inputs and trained-weights digest (``explorer.analysis.common.memo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from explorer.analysis.common import finite
from explorer.analysis.common.memo import Request, eval_model, memo, weights_key
from explorer.analysis.maps.heads import RULES_TEXT, classify_heads
from explorer.analysis.views import Views, compute_views
from explorer.analysis.weights.trained import TrainedWeights, checked_for
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import ModelInput, model_input
from models import ConfigError, ModelConfig
from models.architectures import arrangement, stack_config
from models.attention import ATTENTION, RULES, pattern_mask
from models.layers.parallel import mixer_config
from models.schedule import kind_configs, layer_kinds


@dataclass
class AttentionMaps:
    tokens: list  # label of each query token
    key_tokens: list  # label of each key (memory slots first, then the tokens)
    attention: np.ndarray  # (n_maps, h, L, Lk) float32, effective attention (NaN: not available)
    mask: np.ndarray  # (L, Lk) bool: the pattern (or the support of the attention)
    mask_kind: str  # "pattern" (section-1 rule), "support", or "full" (cross-attention)
    allowed_fraction: float  # mask.mean() (a layer schedule: the mean of the layers' own, layer_masks.mean())
    entropy: np.ndarray  # (n_maps, h) mean over queries of -sum p log p, in nats
    distance: np.ndarray  # (n_maps, h) mean over queries of sum p |i - j|, in tokens (NaN: cross)
    config: dict
    truncated: bool = False  # the text was cut to its byte budget
    device: str = "cpu"
    notes: list = field(default_factory=list)
    views: Views = None  # the variant views of the same forward pass (``explorer.analysis.views``)
    stacks: dict = None  # other stacks and cross-attentions: {"encoder": AttentionMaps, "cross": ...}
    stack: str = "decoder"  # the stack whose queries these are
    sides: tuple = ("tokens", "tokens")  # the inputs the queries and the keys are positions of
    vocabulary: str = "bytes"  # what a token is: "bytes", or "tokenizer" (a pretrained checkpoint's)
    ids: list = None  # byte id of each query token
    key_ids: list = None  # byte id of each key (-1: a memory slot); None for a cross-attention's keys
    nonfinite: str = None  # where the forward pass stopped being finite (``explorer.analysis.common.finite``)
    # a layer schedule (``models.schedule``): (n_maps, L, Lk) bool, each layer's own pattern (or support), and
    # ``mask`` their union; None when every layer has the same pattern
    layer_masks: np.ndarray = None
    # a layer schedule: each map's layer kind as a schedule entry ("sliding_window", "full:nope"); None when uniform
    layer_kinds: list = None
    # per map: True where the layer is a recurrent mixer (``AttentionCaps.rows_sum_to_one=None``: Mamba-2, Gated
    # DeltaNet) whose drawn map is its exact implicit attention matrix, signed, rows of no fixed sum; None: no such
    # layer. The figures read it (they import no model registry) to draw these maps as weights, not probabilities
    implicit: list = None
    _heads: list = field(default=None, repr=False, compare=False)

    def heads(self) -> list | None:
        """``[[HeadLabel per head] per map]`` of a self-attention (``explorer.analysis.maps.heads``); None for a
        cross-attention (previous-token, induction ... name positions of one sequence)."""
        if self.ids is None or self.key_ids is None:
            return None
        if self._heads is None:  # the maps are memoised and never change: classify once
            self._heads = classify_heads(self.attention, self.ids, self.key_ids)
        return self._heads

    def summary(self) -> dict:
        """JSON-safe digest (no full maps): what the ``/analyze`` endpoint returns."""

        def clean(a):
            return [[None if not np.isfinite(x) else round(float(x), 4) for x in row] for row in a]

        heads = self.heads()
        return {
            "n_tokens": len(self.tokens),
            "n_keys": len(self.key_tokens),
            "tokens": self.tokens,
            "n_layers": int(self.attention.shape[0]),
            "n_heads": int(self.attention.shape[1]),
            "mask_kind": self.mask_kind,
            "allowed_fraction": round(self.allowed_fraction, 6),
            "entropy": clean(self.entropy),
            "mean_distance": clean(self.distance),
            "row_sums_ok": bool(rows_ok(self.attention, normalised(self.config), bool(self.config.get("attn_sinks")))),
            "rows": rows_reading(normalised(self.config), self.implicit),
            "truncated": self.truncated,
            "device": self.device,
            "attention": self.config["attention"],
            "notes": self.notes,
            "vocabulary": self.vocabulary,
            "views": self.views.summary() if self.views is not None else {},
            "layer_kinds": self.layer_kinds,
            "head_rules": None if heads is None else RULES_TEXT,
            "heads": None
            if heads is None
            else [
                [
                    {"label": h.label, "score": None if not np.isfinite(h.score) else round(float(h.score), 4)}
                    for h in row
                ]
                for row in heads
            ],
            **({f"{k}_maps": m.summary() for k, m in self.stacks.items()} if self.stacks else {}),
        }


def normalised(config: dict) -> bool | None:
    """Whether the mechanisms' records say their drawn rows sum to one (``AttentionCaps.rows_sum_to_one``): the
    model's attention and, under a layer schedule, every layer's; None when one of them draws rows of no fixed sum
    (a recurrent mixer's implicit map)."""
    keys = {config.get("attention")}
    schedule = config.get("layer_schedule") or ""
    keys |= {entry.strip().partition(":")[0].partition("*")[0] for entry in schedule.split(",") if entry.strip()}
    rules = [getattr(ATTENTION[k].caps, "rows_sum_to_one", True) for k in keys if k in ATTENTION]
    return None if None in rules else all(rules)


def rows_reading(normalised: bool | None, implicit: list | None = None) -> str:
    """What a drawn row is, in words: the reading beside ``row_sums_ok`` (True for an implicit map whose rows are
    finite: its rows have no sum to check, which is by design, not an error)."""
    if normalised is None:
        some = implicit is not None and not all(implicit)
        which = (
            f"layers {', '.join(str(n) for n, i in enumerate(implicit) if i)} are implicit maps of a recurrent layer"
            if some
            else "implicit map of a recurrent layer"
        )
        return f"{which}: rows are not distributions (signed weights of no fixed sum, not probabilities)" + (
            "; the other layers' rows are distributions" if some else ""
        )
    if normalised:
        return "distributions: each row sums to 1 (or is all zero)"
    return "rows of one fixed sum per head (not 1: differential attention's 1 - lambda)"


def implicit_maps(cfg, n_maps: int) -> list | None:
    """Per map: whether its layer draws a recurrent mixer's implicit map (``rows_sum_to_one=None``); one map per
    layer under a schedule, else every map is the config's attention's. None when no map is implicit."""
    keys = (
        [cfg.layer_config(n).attention for n in range(n_maps)] if n_maps == cfg.n_layers else [cfg.attention] * n_maps
    )
    flags = [k in ATTENTION and getattr(ATTENTION[k].caps, "rows_sum_to_one", True) is None for k in keys]
    return flags if any(flags) else None


def rows_ok(att: np.ndarray, normalised: bool | None = True, learned_sinks: bool = False) -> bool:
    """Every finite row sums to 1 or is all zero (a query with no allowed key); with ``learned_sinks``
    (``attn_sinks``) a row sums to anything in [0, 1]: the learned sink takes the rest; for a mechanism whose
    rows do not sum to one by design (differential: ``1 - lambda``), every row of a head sums to that head's
    value; ``normalised=None`` (a recurrent mixer's implicit map): rows of any finite sum."""
    s = np.nan_to_num(att).sum(-1)  # (n_maps, h, L)
    if normalised is None:
        return bool(np.all(np.isfinite(s)))
    if learned_sinks:
        return bool(np.all((s > -1e-6) & (s < 1 + 1e-3)))
    if not normalised:
        return bool(np.all(np.abs(s - s[..., :1]) < 1e-3))
    return bool(np.all((np.abs(s - 1) < 1e-3) | (np.abs(s) < 1e-6)))


def attention_maps(
    cfg, text, max_bytes: int = MAX_TEXT_BYTES, separator: str | None = None, weights: TrainedWeights | None = None
) -> AttentionMaps:
    """The maps of ``cfg`` on ``text`` (see the module docstring). ``separator``: where the text of a
    source / target model splits (None: the default); ``weights``: trained weights of this config
    instead of the initial ones (an argument, never read from a context: a GPU call's worker sees only
    its arguments). Memoised here, on the caller's side: a result already computed costs no GPU call."""
    return fetch_maps(maps_request(cfg, text, max_bytes, separator, weights))


def fetch_maps(req: Request) -> AttentionMaps:
    """The maps ``req`` (a ``maps_request``, its weights checked once there) names: memoised, computed by
    its GPU call on a miss; a forward pass that is not finite is refused by name (``finite.refuse``)."""
    maps = memo(req.key, lambda: req.compute(), need=req.need)
    cfg, _, weights = req.args
    finite.refuse(maps.nonfinite, "attention maps", cfg, weights)  # a sentence, not a page of NaN
    return maps


def maps_request(
    cfg, text, max_bytes: int = MAX_TEXT_BYTES, separator: str | None = None, weights: TrainedWeights | None = None
) -> Request:
    """What ``attention_maps`` computes, checked and keyed on the caller's side (no model runs)."""
    cfg = as_config(cfg)
    w = checked_for(cfg, weights)
    inp = model_input(cfg, text, separator, max_bytes, tokenizer=None if w is None else w.tokenizer)
    need = budget.check(cfg, "attention", inp.longest, 1)
    return Request(("maps", cfg, inp, weights_key(w)), need, compute_maps, (cfg, inp, w))


@gpu(duration=30)
def compute_maps(cfg: ModelConfig, inp: ModelInput, weights: TrainedWeights | None) -> AttentionMaps:
    """The GPU call of ``attention_maps``: one forward pass with attention weights (picklable in and out)."""
    return _compute(cfg, inp, weights)


def _compute(cfg, inp: ModelInput, weights) -> AttentionMaps:
    arr = arrangement(cfg)
    model = eval_model(cfg, weights)
    args = [torch.tensor([list(inp.ids(name))], device=device()) for name in arr.inputs]  # (1, L) each
    with torch.no_grad():
        out = model(*args, return_attention=True)
    labels = {name: list(inp.labels(name)) for name in arr.inputs}
    ids = {name: list(inp.ids(name)) for name in arr.inputs}
    single = len(arr.stacks) == 1
    layers = {s.name: [i for i in out.layers if single or getattr(i, "stack", None) == s.name] for s in arr.stacks}
    maps = {}
    for s in arr.stacks:
        stack_cfg = stack_config(cfg, s)
        maps[s.name] = _self_maps(
            [i.attention for i in layers[s.name]],
            stack_cfg,
            labels[s.reads],
            inp.truncated,
            s.name,
            s.reads,
            ids[s.reads],
        )
    for reader, source in arr.cross:
        r, src = arr.stack(reader), arr.stack(source)
        key = "cross" if len(arr.cross) == 1 else f"cross_{reader}_{source}"
        maps[key] = _cross_maps(
            [i.cross_attention for i in layers[reader]],
            stack_config(cfg, r),
            labels[r.reads],
            labels[src.reads],
            inp.truncated,
            reader,
            (r.reads, src.reads),
            ids[r.reads],
        )
    head = arr.head
    beside = [i.parallel for i in layers[head.name]]
    if beside and all(b is not None for b in beside):  # parallel_hybrid: the mixer beside each layer's attention
        mixer = mixer_config(stack_config(cfg, head))
        name = f"parallel {mixer.attention} mixer"
        maps["mixer"] = _self_maps(
            [b.attention for b in beside], mixer, labels[head.reads], inp.truncated, name, head.reads, ids[head.reads]
        )
    if inp.pieces:
        for m in maps.values():
            m.vocabulary = "tokenizer"
    main = maps.pop(head.name)
    main.views = compute_views(stack_config(cfg, head), layers[head.name], labels[head.reads])
    main.nonfinite = finite.forward_reading(out)
    if "mixer" in maps:
        main.notes = main.notes + [
            f"parallel_hybrid: these are each layer's attention; the {maps['mixer'].config['attention']} mixer "
            "beside it reads the same normed input, and its maps are shown apart"
        ]
    if maps:
        main.stacks = maps
    if len(arr.stacks) > 1:
        sizes = " and ".join(f"a {name} of {len(inp.ids(name))}" for name in arr.inputs)
        main.notes = main.notes + [
            f"{cfg.architecture.replace('_', '-')}: the text split into {sizes} tokens; "
            f"the main maps are the {head.name}'s self-attention"
        ]
    return main


def _self_maps(
    attentions: list, cfg, labels: list, truncated: bool, stack: str, reads: str, ids: list
) -> AttentionMaps:
    """One stack's self-attention; keys before the queries (a memory's slots) come first."""
    L = len(labels)
    maps, notes = stack_maps(attentions, cfg, L)
    prefix = maps.shape[-1] - L
    mask, kind = pattern_or_support(cfg, maps, L, prefix)
    layer_masks, kinds = None, None
    if cfg.layer_schedule and maps.shape[0] == cfg.n_layers:  # each layer shows its own pattern
        kinds = [k.token for k in layer_kinds(cfg)]
        layer_masks = np.stack(
            [pattern_or_support(cfg.layer_config(n), maps[n : n + 1], L, prefix)[0] for n in range(cfg.n_layers)]
        )
        mask = layer_masks.any(axis=0)
    entropy, distance = head_stats(maps)
    implicit = implicit_maps(cfg, maps.shape[0])
    if implicit is not None:  # signed weights of no fixed sum: -sum p log p is no entropy of anything
        entropy[np.array(implicit)] = np.nan
    return AttentionMaps(
        tokens=labels,
        key_tokens=[f"mem{m}" for m in range(prefix)] + labels,
        attention=maps,
        mask=mask,
        mask_kind=kind,
        allowed_fraction=float((mask if layer_masks is None else layer_masks).mean()),
        entropy=entropy,
        distance=distance,
        config=cfg.to_dict(),
        truncated=truncated,
        device=str(device()),
        notes=notes,
        stack=stack,
        sides=(reads, reads),
        ids=ids,
        key_ids=[-1] * prefix + ids,
        layer_masks=layer_masks,
        layer_kinds=kinds,
        implicit=implicit,
    )


def _cross_maps(
    attentions: list, cfg, q_labels: list, k_labels: list, truncated: bool, stack: str, sides: tuple, ids: list
) -> AttentionMaps:
    """Cross-attention: full softmax over the other stack's tokens; |i - j| between positions of two
    different sequences means nothing, so the distance is NaN."""
    maps, notes = stack_maps(attentions, cfg, len(q_labels))
    entropy, distance = head_stats(maps)
    mask = np.ones((len(q_labels), len(k_labels)), bool)
    return AttentionMaps(
        tokens=q_labels,
        key_tokens=k_labels,
        attention=maps,
        mask=mask,
        mask_kind="full",
        allowed_fraction=1.0,
        entropy=entropy,
        distance=np.full_like(distance, np.nan),
        config=cfg.to_dict(),
        truncated=truncated,
        device=str(device()),
        notes=notes,
        stack=stack,
        sides=sides,
        ids=ids,
    )


def stack_maps(attentions: list, cfg, L: int) -> tuple:
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
        out[n, : a.shape[0], lq - a.shape[1] :, lk - a.shape[2] :] = a  # right-aligned: queries are the last keys
    if lq != L:
        notes.append(f"maps have {lq} query rows for {L} tokens (segmented processing)")
    return out, notes


def pattern_or_support(cfg, maps: np.ndarray, L: int, prefix: int) -> tuple:
    """The section-1 pattern when there is one (memory keys before it all allowed; a layer schedule of
    patterns: their union), else where the effective attention is non-zero."""
    layers = kind_configs(cfg)  # a layer schedule: the union of its layer kinds' patterns
    if all(c.attention in RULES for c in layers) and maps.shape[2] == L:
        pat = np.logical_or.reduce([pattern_mask(c, L).cpu().numpy() for c in layers])
        return np.concatenate([np.ones((L, prefix), bool), pat], axis=1), "pattern"
    return np.abs(np.nan_to_num(maps)).max(axis=(0, 1)) > 0, "support"  # (L, Lk): signed maps too


def head_stats(maps: np.ndarray) -> tuple:
    """Per (layer, head): mean entropy (nats) and mean distance |i - j| (tokens) over the queries (each
    row's sum accumulated in float64; a pretrained model's 30 x 9 maps of 256 tokens in a fraction of a
    second)."""
    p = torch.nan_to_num(torch.from_numpy(np.ascontiguousarray(maps, dtype=np.float32)))
    lq, lk = maps.shape[2], maps.shape[3]
    # only p > 0 counts (an approximation such as Nystrom's can give negative weights)
    ent = -torch.where(p > 0, p * torch.log(p.clamp_min(1e-38)), 0.0).sum(-1, dtype=torch.float64)
    i = torch.arange(lq)[:, None] + (lk - lq)  # absolute key index of each query
    dist = (p * (i - torch.arange(lk)[None, :]).abs().float()).sum(-1, dtype=torch.float64)
    missing = np.isnan(maps).all(axis=(2, 3))
    ent, dist = ent.mean(-1).numpy(), dist.mean(-1).numpy()
    ent[missing] = np.nan
    dist[missing] = np.nan
    return ent.astype(np.float32), dist.astype(np.float32)
