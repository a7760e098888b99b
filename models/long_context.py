"""Pooled attention maps of a whole model at long lengths, and its per-token loss, from one forward.

``pooled_maps(model, tokens)`` runs the model's ordinary forward (no attention weights requested,
so every layer runs its own kernels and nothing holds ``L x L``) with an ``Interventions`` record that
only observes (``observe_cores``, ``models/interventions.py``): at each attention core call it receives
the core's inputs, the post-position ``q``, ``k`` and score modifiers of the position encoding
(``models.blocks.Attention``), and turns them into that layer's pooled map:

- structured patterns (section 1: full, sliding_window, dilated_window, strided, fixed,
  block_local, longformer, bigbird; sinks included): ``kernels.pooled_attention`` with the same
  block layout, causality, soft cap and modifiers (RoPE acts on q, k; ALiBi, T5, Shaw / XL tables
  ride along) that ``PatternAttention`` hands ``kernels.attention``;
- linear and Performer: ``kernels.cpu.pooled_linear`` on the core's own feature maps, analytically;
- recurrent mixers (Mamba-2, Gated DeltaNet: a core with ``implicit_ops``): their implicit attention matrix
  pooled by ``kernels.cpu.pooled_implicit``, the layer's own chunked kernel run on indicator values (signed
  weights, rows that are not probabilities: no entropy);
- every other mechanism (LSH, routing, clustered, Nystrom, ...), and patterns under a position
  encoding with a per-pair bias (DeBERTa, TUPE): its dense effective map (the forward with
  attention weights, ``out.attentions``) pooled the same way, up to ``dense_max_len`` tokens;
  past it a ``ConfigError`` says why (the map exists only as an ``L x L`` matrix).
- models with learned attention sinks (``attn_sinks``, ``models/sinks.py``): the dense effective map
  too (the tiled pooled kernels have no sink term), whose rows sum to ``1 - p_sink``; the sink
  statistic adds the learned sink's share ``p_sink_i = 1 - sum_j p_ij`` to the mass on the first
  ``sink_k`` keys, and the entropy includes the sink's term (``kernels.pooled_dense.pool_probs``).

It also returns the per-token next-token loss of that same forward (causal models), which the
long-context view plots against position. Inside ``with reporting(progress):`` the same observer tells
``progress(fraction)``, at each core call, the share of the model's attention layers before it (a context
variable, per thread and task, so a caller reports a long forward's progress without changing its call).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kernels.cpu.pooled_implicit import pooled_implicit
from kernels.cpu.pooled_linear import pooled_linear
from kernels.pooled import pooled_attention
from kernels.pooled_dense import MAX_CELLS, PooledAttention, pool_probs, pooled_block

from .attention.linear import LinearAttention
from .attention.sparse import PatternAttention, pattern_block_mask
from .blocks import Attention, layer_attentions
from .errors import ConfigError
from .interventions import Interventions
from .sinks import sink_mass

DENSE_MAX_LEN = 2048  # mechanisms without a tiled or analytic map: their dense map up to this length
_PROGRESS: contextvars.ContextVar = contextvars.ContextVar("pooled_maps_progress", default=None)


@contextlib.contextmanager
def reporting(progress):
    """``progress`` (a callable of one float in [0, 1)) hears the enclosed ``pooled_maps`` calls' progress."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


@dataclass
class LongContextMaps:
    """Pooled maps of every attention call of one forward, in call order (one per layer)."""

    maps: list  # PooledAttention per attention call: mass [B, h, n_qp, n_kp] + stats
    layers: list  # the layer index of each map
    loss: torch.Tensor | None  # (B, L - 1) next-token loss in nats at positions 1..L-1; None if not causal
    method: str  # "kernels", "analytic (feature maps)" or "dense effective map"
    notes: list = field(default_factory=list)  # what was left out and why

    @property
    def length(self) -> int:
        return self.maps[0].q_len if self.maps else 0


class _PairBias(Exception):
    """A modifier the tiled pass cannot take (a full per-pair bias): use the dense map."""


def _kind(core) -> str:
    if isinstance(core, PatternAttention):
        return "pattern"
    if isinstance(core, LinearAttention):
        return "linear"
    if hasattr(core, "implicit_ops"):  # a recurrent mixer: its implicit map from its own kernel
        return "implicit"
    return "dense"


def _check(model, tokens) -> None:
    cfg = getattr(model, "cfg", None)
    if cfg is None or not any(isinstance(m, Attention) for m in model.modules()):
        raise ConfigError("model", type(model).__name__, "a model built by models.build_model")
    if cfg.architecture == "encoder_decoder":
        raise ConfigError(
            "architecture",
            cfg.architecture,
            "a single-stack model (decoder_only / encoder_only): pooled maps read one self-attention stack",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none': a memory splits the text into segments with their own keys, "
            "so one pooled map per layer would mix them",
        )
    model.check_tokens(tokens)


def _token_loss(model, logits, tokens):
    if not model.cfg.causal or tokens.shape[1] < 2:
        return None
    return F.cross_entropy(logits[:, :-1].float().transpose(1, 2), tokens[:, 1:].long(), reduction="none")


def pooled_maps(
    model, tokens, max_cells: int = MAX_CELLS, sink_k: int = 4, window: int = 64, dense_max_len: int = DENSE_MAX_LEN
) -> LongContextMaps:
    """Per layer ``[B, h, n_qp, n_kp]`` masses and per-head per-query statistics of ``model`` on
    ``tokens (B, L)``, plus the per-token loss of the same forward (module docstring)."""
    _check(model, tokens)
    if not 1 <= int(max_cells) <= MAX_CELLS:
        raise ConfigError("max_cells", max_cells, f"an integer in [1, {MAX_CELLS}]")
    if int(sink_k) < 0:
        raise ConfigError("sink_k", sink_k, "an integer >= 0")
    if int(window) < 1:
        raise ConfigError("window", window, "an integer >= 1")
    layers = layer_attentions(model)  # a parallel_hybrid layer's map is its attention's (its mixer's is not pooled)
    kinds = {_kind(m.core) for m in layers}
    kw = dict(max_cells=int(max_cells), sink_k=int(sink_k), window=int(window))
    report = _reporter(layers, _PROGRESS.get())
    if model.cfg.attn_sinks:
        reason = (
            "learned attention sinks (attn_sinks): the pooled kernels have no sink term, so the map is the dense one"
        )
    elif kinds != {"dense"}:
        try:
            return _observed(model, tokens, kw, report)
        except _PairBias:
            reason = f"position={model.cfg.position!r} adds a per-pair bias, which exists only as an L x L matrix"
    else:
        reason = f"attention={model.cfg.attention!r} has no tiled or analytic map; its effective map is L x L"
    return _dense(model, tokens, kw, dense_max_len, reason, report)


def _observed(model, tokens, kw, report=None) -> LongContextMaps:
    maps, index, methods = [], [], set()

    def observe(call):
        attn, q, k, mods = call.attn, call.q, call.k, call.mods
        if attn.parallel_mixer:  # the mixer beside a parallel_hybrid layer's attention: the layer's map is the latter's
            return
        if report is not None:
            report(call)
        core = attn.core
        kind = _kind(core)
        if kind == "linear":
            phi_q, phi_k = core.features(q, k)
            lq, lk = q.shape[2], k.shape[2]
            maps.append(
                pooled_linear(
                    phi_q,
                    phi_k,
                    causal=core.cfg.causal,
                    block_q=pooled_block(lq, kw["max_cells"]),
                    block_k=pooled_block(lk, kw["max_cells"]),
                    sink_k=kw["sink_k"],
                    window=kw["window"],
                )
            )
            methods.add("analytic (feature maps)")
        elif kind == "implicit":
            ops = core.implicit_ops(q, k, call.v, mods)  # kernels.cpu.pooled_implicit.ImplicitOps
            B, heads, length = call.v.shape[:3]  # a mixer's values: (B, its heads, L, width)
            maps.append(
                pooled_implicit(
                    ops.apply,
                    ops.band,
                    batch=B,
                    heads=heads,
                    length=length,
                    block_q=pooled_block(length, kw["max_cells"]),
                    sink_k=kw["sink_k"],
                    window=kw["window"],
                    device=call.v.device,
                    dtype=call.v.dtype,
                    blocks=ops.blocks,
                    cells=ops.cells,
                )
            )
            methods.add("implicit (chunked recurrence)")
        elif kind == "pattern":
            if mods.get("pair_bias") is not None:
                raise _PairBias()
            cfg = core.cfg
            extra = {n: mods[n] for n in ("alibi_slopes", "rel_bias", "rel_k") if mods.get(n) is not None}
            if cfg.attention == "full":
                extra["causal"] = cfg.causal
            else:  # the layout holds the causal cut, as in PatternAttention
                extra["block_mask"] = pattern_block_mask(cfg, q.shape[2], k.shape[2] - q.shape[2]).to(q.device)
            maps.append(pooled_attention(q, k, softcap=cfg.softcap, **extra, **kw))
            methods.add("kernels")
        else:
            raise ConfigError("attention", core.cfg.attention, "one mechanism per model")
        index.append(attn.layer)

    with torch.no_grad():
        out = model(tokens, interventions=Interventions(observe_cores=observe))
    return LongContextMaps(
        maps,
        index,
        _token_loss(model, out.logits, tokens),
        " + ".join(sorted(methods)),
        [m.note for m in maps if m.note][:1],
    )


def _reporter(layers, progress):
    """An observer telling ``progress`` the share of ``layers`` before each core call's layer (None: no progress)."""
    if progress is None:
        return None
    order = {id(m): i for i, m in enumerate(layers)}

    def report(call):
        if id(call.attn) in order:  # a parallel_hybrid layer's mixer runs beside its attention: not a layer of its own
            progress(order[id(call.attn)] / max(1, len(layers)))

    return report


def _dense(model, tokens, kw, dense_max_len: int, reason: str, report=None) -> LongContextMaps:
    L = tokens.shape[1]
    if L > dense_max_len:
        raise ConfigError("tokens", f"{L} tokens", f"at most {dense_max_len} tokens: {reason}")
    with torch.no_grad():
        out = model(
            tokens, return_attention=True, interventions=None if report is None else Interventions(observe_cores=report)
        )
    maps = []
    learned = bool(model.cfg.attn_sinks)
    for probs in out.attentions:
        lq, lk = probs.shape[-2:]
        maps.append(
            pool_probs(
                probs.double(),
                pooled_block(lq, kw["max_cells"]),
                pooled_block(lk, kw["max_cells"]),
                sink_k=kw["sink_k"],
                window=kw["window"],
                backend="dense effective map",
                learned_sink=sink_mass(probs.double()) if learned else None,
            )
        )
    maps = [_as_float(m) for m in maps]
    return LongContextMaps(
        maps, list(range(len(maps))), _token_loss(model, out.logits, tokens), "dense effective map", [reason]
    )


def _as_float(m: PooledAttention) -> PooledAttention:
    for name in ("mass", "entropy", "distance", "sink", "local"):
        setattr(m, name, getattr(m, name).float())
    return m
