"""One typed record of what a forward pass reads out of, or writes into, its blocks.

TransformerLens names every intermediate activation so that caching, ablation and patching are one
mechanism; here the same is a frozen record passed as ``model(tokens, interventions=Interventions(...))``
(it travels in the ``ForwardContext``; no module keeps it, no hook is registered). Its points, per
block of the standard layer structure:

- ``replace_heads[(layer, head)]``: the head's result ``z_h`` (``(B, L, d_h)``: its attention-weighted
  values, before the output projection) is replaced by ``"zero"`` or a tensor broadcastable to
  ``(B, L, d_h)``. The head's output in the residual stream is ``z_h W_O^h`` (``W_O^h``: the output
  projection's columns of head ``h``), linear in ``z_h``, so replacing ``z_h`` replaces that output:
  zero ablation (``"zero"``), mean ablation (the mean of ``z_h`` over a reference text: a ``(d_h,)``
  tensor) and activation patching (``z_h`` of another run, ``(B, L, d_h)``) are this one field.
  Replacing ``z_h`` rather than ``z_h W_O^h`` keeps the output projection's own matmul, so patching
  every head with the clean run's results gives the clean run's attention output bit for bit.
- ``replace_ffn[layer]``: the FFN sublayer's output (``(B, L, d)``, before it joins the residual stream).
- ``replace_resid[layer]``: the residual stream entering block ``layer``; ``layer = n_layers`` is the
  stack's output (what the final norm reads).
- ``cache=True``: every block's ``LayerInfo`` keeps ``head_results`` ``(B, h, L, d_h)``, ``head_outputs``
  ``(B, h, L, d)`` (``z_h W_O^h`` per head: their sum over heads plus the output bias is the attention
  sublayer's output), ``ffn_output`` ``(B, L, d)`` and ``output`` ``(B, L, d)`` (the stream leaving the
  block; ``input`` is always kept). Caching changes no arithmetic: the logits are the plain call's.
- ``observe_cores``: a read point at every attention core call, for code outside the model that needs
  what a core receives without asking for the ``L x L`` maps (``return_attention`` keeps ``q``, ``k`` too,
  beside them). The callable gets one :class:`CoreInputs` (the ``models.blocks.Attention`` whose core
  runs, the post-position ``q (B, h, L, d_h)``, ``k`` and ``v (B, h_kv, Lk, d_h)``, and the position
  encoding's score modifiers as a read-only mapping) just before the core runs, in call order (a layer
  structure that applies one layer several times calls it each time). Contract: it only reads (the
  tensors are the core's own, not copies: never modify them in place); its return value is ignored; an
  exception it raises ends the forward and propagates out of the model call as it is (a reader with what
  it needs stops the pass that way). It changes no arithmetic. Unlike the points above it is defined on
  every layer structure and architecture (an encoder-decoder: both stacks' self-attention cores; the
  cross-attention has no core), but not with a memory (the call is split in segments and the kNN layer
  wraps its core call). The long-context pooled maps (``models.long_context``) and the long-context
  zoom read each core's ``q``, ``k`` through it.

For an ``encoder_decoder`` (``models/encdec.py``) the fields above are the decoder's (the stack the
output head reads; ``replace_heads`` its causal self-attention heads, ``replace_resid[0]`` its summed
target embeddings), and two more points exist:

- ``replace_cross[(layer, head)]``: decoder layer ``layer``'s cross-attention head result
  ``(B, Lt, d_h)``, as ``replace_heads`` (cached as ``LayerInfo.cross_head_results`` /
  ``cross_head_outputs``). Everything the decoder learns about the source arrives through these heads.
- ``encoder``: a record of the same type for the encoder stack (its heads, FFNs and residual stream,
  at the source's length ``Ls``); it may not itself hold ``replace_cross``, ``observe_cores`` (the outer
  record's observer sees both stacks) or an ``encoder``. The encoder's blocks are cached when either
  record asks (``cache``).

The block points are defined on the standard layer structure without a memory: other structures
reorder, share or repeat their sublayers, so "the output of head h of layer l" is not one tensor there.
``check`` says so by ``ConfigError`` naming the field.

What else reaches inside a forward, and why it is not this record:

- ``ModelConfig.ablate_heads`` (the Surgery controls) zeroes head results as ``replace_heads`` ``"zero"``
  does, through the same function (:func:`replace_head_results`, called by ``models.blocks.Attention``
  before the record's own points, which win for a head both name). It stays a config field because it
  is configuration, not a per-call request: it travels in share links, checkpoints and the Surgery
  tables, holds in training as in every other forward, and is defined on every layer structure,
  architecture and memory, where the record's block points are not.
- ``ForwardContext.attention_hook`` (``models.context``) replaces a core call with the model's own
  computation: the Memorizing Transformer's kNN layer, and an encoder-decoder's key padding. It is part
  of what the model computes, chosen by its config, not a reading or a change made from outside.
- ``return_attention`` (``ctx.need_weights``) is an output: the effective maps, and with them each
  layer's ``q``, ``k`` and score modifiers in ``LayerInfo`` (detached references, for the views that redo
  exact softmax on them).
- No forward hook is registered in ``models``. In ``explorer`` three remain, each for work on a plain
  call of any model that changes no value (``tests/models/test_interventions_hooks.py`` lists them
  with their reasons): the stop ``Guard`` on every module (``explorer.runtime.stopping``), the
  attention-core timer of the latency sweep (``explorer.analysis.cost.core_timer``) and the per-application
  recorder of shared layers' output linears (``explorer.analysis.gradients.norms``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import torch

from .errors import ConfigError
from .qkv import value_layout

Value = torch.Tensor | str  # "zero" or a tensor broadcastable to the replaced activation
ZERO = "zero"
ARCHITECTURES = ("decoder_only", "encoder_only", "encoder_decoder")


@dataclass(frozen=True, eq=False)
class CoreInputs:
    """What one attention core call receives, as ``Interventions.observe_cores`` sees it (read only)."""

    attn: Any  # the models.blocks.Attention whose core runs (.core, .layer, .cfg)
    q: torch.Tensor  # (B, h, L, d_h) post-position queries
    k: torch.Tensor  # (B, h_kv, Lk, d_h) post-position keys (Lk - L: a memory prefix, none here)
    v: torch.Tensor  # (B, h_kv, Lk, d_h) values
    mods: Mapping  # the position encoding's score modifiers (kernels.attention's keywords)
    # a core that owns its projections (AttentionCaps.own_projections) gets its own layout instead: MLA's
    # q (B, h, L, dn + dr), k = its cache (B, 1, Lk, kv_lora_rank + qk_rope_head_dim), v = the latent; Mamba-2's
    # q = C, k = B (B, G, L, N), v = x after its convolution (B, h_ssm, L, P), mods = {"dt": (B, h_ssm, L), "z": gate};
    # Gated DeltaNet's q, k (B, h_v, L, d_k) convolved, L2-normed, q scaled, repeated to the value heads,
    # v (B, h_v, L, d_v), mods = its own inputs beta, g (B, h_v, L) and the gate z (B, h_v, L, d_v)


@dataclass(frozen=True, eq=False)
class Interventions:
    replace_heads: Mapping = field(default_factory=dict)  # {(layer, head): "zero" | (B|1, L|1, d_h) tensor}
    replace_ffn: Mapping = field(default_factory=dict)  # {layer: "zero" | (B|1, L|1, d) tensor}
    replace_resid: Mapping = field(default_factory=dict)  # {layer in 0..n_layers: (B|1, L|1, d) tensor}
    cache: bool = False
    # encoder_decoder only: the decoder's cross-attention heads, and the encoder stack's own record
    replace_cross: Mapping = field(default_factory=dict)  # {(layer, head): "zero" | (B|1, Lt|1, d_h) tensor}
    encoder: Interventions | None = None
    # every attention core call: CoreInputs -> None, before the core runs (module docstring)
    observe_cores: Callable[[CoreInputs], Any] | None = None

    def __post_init__(self):
        for name in ("replace_heads", "replace_ffn", "replace_resid", "replace_cross"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def check(self, cfg, batch: int, length: int, source_length: int | None = None) -> None:
        """``ConfigError`` naming the field for a model the record is not defined on, or a point or value
        out of range for ``cfg`` and a ``(batch, length)`` input (an encoder-decoder: ``length`` is the
        target's, ``source_length`` the source's). A record that only observes is defined on every model
        without a memory."""
        if self.observe_cores is not None and not callable(self.observe_cores):
            raise ConfigError(
                "observe_cores", type(self.observe_cores).__name__, "None or a callable of one CoreInputs"
            )
        if self.observes_only:
            if cfg.memory != "none":
                raise ConfigError(
                    "memory",
                    cfg.memory,
                    "'none' for observe_cores (a memory splits the call in "
                    "segments and its kNN layer wraps the core call)",
                )
            return
        check_model(cfg)
        if cfg.architecture != "encoder_decoder":
            for name in ("replace_cross", "encoder"):
                if getattr(self, name):
                    raise ConfigError(
                        name,
                        "given",
                        f"empty with architecture={cfg.architecture!r}: only an "
                        "encoder_decoder has cross-attention heads and an encoder stack",
                    )
            self._check_stack(cfg, batch, length)
            return
        from .architectures import decoder_config, encoder_config

        dec = decoder_config(cfg)
        self._check_stack(dec, batch, length)
        _check_heads("replace_cross", self.replace_cross, dec, batch, length)
        if self.encoder is not None:
            if not isinstance(self.encoder, Interventions):
                raise ConfigError("encoder", type(self.encoder).__name__, "None or an Interventions record")
            for name in ("replace_cross", "encoder"):
                if getattr(self.encoder, name):
                    raise ConfigError(f"encoder.{name}", "given", "empty: the encoder has no cross-attention")
            if self.encoder.observe_cores is not None:
                raise ConfigError(
                    "encoder.observe_cores", "given", "None: the outer record's observer sees both stacks"
                )
            self.encoder._check_stack(encoder_config(cfg), batch, length if source_length is None else source_length)

    def _check_stack(self, cfg, batch: int, length: int) -> None:
        """The points of one stack of ``cfg.n_layers`` standard blocks."""
        _check_heads("replace_heads", self.replace_heads, cfg, batch, length)
        for name, points, top in (
            ("replace_ffn", self.replace_ffn, cfg.n_layers - 1),
            ("replace_resid", self.replace_resid, cfg.n_layers),
        ):
            for layer, value in points.items():
                if not isinstance(layer, int) or not 0 <= layer <= top:
                    raise ConfigError(name, str(layer)[:40], f"a layer index in 0..{top}")
                _check_value(name, value, cfg.d_model, batch, length, zero=name == "replace_ffn")

    @property
    def observes_only(self) -> bool:
        """Whether the record only observes the cores (no replacement, no cache, no encoder record)."""
        return self.observe_cores is not None and not (
            self.replace_heads
            or self.replace_ffn
            or self.replace_resid
            or self.replace_cross
            or self.cache
            or self.encoder is not None
        )

    def for_encoder(self) -> Interventions:
        """The record the encoder stack runs with: ``encoder`` (or an empty one), caching when either asks,
        with this record's core observer."""
        enc = self.encoder if self.encoder is not None else Interventions()
        if self.cache and not enc.cache:
            enc = replace(enc, cache=True)
        return enc if self.observe_cores is None else replace(enc, observe_cores=self.observe_cores)

    # -- applied by the blocks (models.blocks, models.encdec, models.layers.standard)
    def at_core(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mods: Mapping) -> None:
        """Show ``attn``'s core inputs to ``observe_cores`` (when set), just before the core runs."""
        if self.observe_cores is not None:
            self.observe_cores(CoreInputs(attn, q, k, v, MappingProxyType(mods)))

    def at_heads(self, attn, out: torch.Tensor, info) -> torch.Tensor:
        """``out (B, h, L, d_h)``, the heads' results of ``attn``'s layer, with this layer's replacements;
        records them (and each head's ``z_h W_O^h``) in ``info`` when caching."""
        out = replace_head_results(self.replace_heads, attn.layer, out)
        if self.cache:
            info.head_results = out
            info.head_outputs = head_outputs(attn, out)
        return out

    def at_cross(self, attn, out: torch.Tensor, info) -> torch.Tensor:
        """The same for the cross-attention heads of decoder layer ``attn.layer`` (``out (B, h, Lt, d_h)``)."""
        out = replace_head_results(self.replace_cross, attn.layer, out)
        if self.cache:
            info.cross_head_results = out
            info.cross_head_outputs = head_outputs(attn, out)
        return out

    def at_ffn(self, layer: int, y: torch.Tensor, info) -> torch.Tensor:
        """The FFN output ``y (B, L, d)`` of ``layer`` with its replacement; recorded when caching."""
        value = self.replace_ffn.get(layer)
        if value is not None:
            y = torch.zeros_like(y) if isinstance(value, str) else value.to(y.dtype).expand_as(y)
        if self.cache:
            info.ffn_output = y
        return y

    def at_resid(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The residual stream entering ``layer`` (``n_layers``: leaving the stack) with its replacement."""
        value = self.replace_resid.get(layer)
        return x if value is None else value.to(x.dtype).expand_as(x)


def replace_head_results(points: Mapping, layer: int, out: torch.Tensor) -> torch.Tensor:
    """``out (B, h, L, d_h)`` with the heads of ``layer`` in ``points`` (``{(layer, head): "zero" | tensor}``)
    replaced (a copy when any is): the record's ``replace_heads`` / ``replace_cross`` and the config's
    ``ablate_heads`` (:func:`ablation_points`) alike."""
    mine = {h: v for (l, h), v in points.items() if l == layer}
    if mine:
        out = out.clone()
        for h, value in mine.items():
            out[:, h] = 0 if isinstance(value, str) else value.to(out.dtype)
    return out


def ablation_points(cfg) -> dict:
    """``cfg.ablate_heads`` as head points: ``{(layer, head): "zero"}`` (empty when it names none)."""
    return {(layer, head): ZERO for layer, heads in cfg.ablated.items() for head in heads} if cfg.ablate_heads else {}


def _check_heads(name: str, points: Mapping, cfg, batch: int, length: int) -> None:
    if points and name == "replace_heads":
        check_head_layout(cfg)
    for key, value in points.items():
        ok = isinstance(key, tuple) and len(key) == 2 and all(isinstance(i, int) for i in key)
        if not ok or not (0 <= key[0] < cfg.n_layers and 0 <= key[1] < cfg.n_heads):
            raise ConfigError(
                name, str(key)[:40], f"(layer, head) with 0 <= layer < {cfg.n_layers} and 0 <= head < {cfg.n_heads}"
            )
        _check_value(name, value, cfg.d_head, batch, length, zero=True)


def check_model(cfg) -> None:
    """``ConfigError`` naming the field when ``cfg``'s model has no intervention points (see the module docstring)."""
    if cfg.architecture not in ARCHITECTURES:
        raise ConfigError("architecture", cfg.architecture, f"one of {list(ARCHITECTURES)} for interventions")
    if cfg.layer != "standard":
        raise ConfigError(
            "layer",
            cfg.layer,
            "'standard': interventions (cached, ablated or patched head "
            "and FFN outputs) are defined on the standard layer structure's blocks",
        )
    if cfg.memory != "none":
        raise ConfigError("memory", cfg.memory, "'none' for interventions (a memory splits the call in segments)")


def layer_heads(cfg) -> list:
    """``(heads, width)`` of each layer's head results ``z_h``: ``(n_heads, d_head)``, or what a core with its
    own projections says (``AttentionCaps.own_projections``: Mamba-2's ``ssm_heads``, Gated DeltaNet's value
    heads; ``models.qkv.value_layout``), read from each layer's own config (a layer schedule's kinds)."""
    from .attention import ATTENTION  # late: the registry imports the blocks, which import this module

    out = []
    for i in range(cfg.n_layers):
        c = cfg.layer_config(i)
        own = getattr(ATTENTION[c.attention].caps, "own_projections", None) if c.attention in ATTENTION else None
        out.append(value_layout(c, own(c)) if own else (c.n_heads, c.d_head))
    return out


def check_head_layout(cfg) -> None:
    """``ConfigError`` naming ``attention`` when a layer's heads are not ``n_heads`` of width ``d_head``: the
    per-head points (``replace_heads``) and the grids read from them are ``(layer, head)`` with one head layout
    for the whole model. A recurrent mixer with a head count of its own (Mamba-2's ``ssm_heads``, Gated
    DeltaNet's ``delta_value_heads``) fits when that count and width are the model's."""
    if cfg.architecture != "decoder_only":
        return  # an encoder-decoder's heads are the model's own layout (no core with its own projections there)
    for i, layout in enumerate(layer_heads(cfg)):
        if layout != (cfg.n_heads, cfg.d_head):
            key = cfg.layer_config(i).attention
            raise ConfigError(
                "attention",
                key,
                f"heads of one layout for per-head views: layer {i} ({key}) has {layout[0]} heads of width "
                f"{layout[1]}, the model n_heads={cfg.n_heads} of d_head={cfg.d_head}; give the mixer "
                "n_heads heads of width d_head",
            )


def head_outputs(attn, out: torch.Tensor) -> torch.Tensor:
    """Each head's write to the residual stream, ``z_h W_O^h``: ``out (B, h, L, d_h)`` -> ``(B, h, L, d)``.
    Summed over heads, plus the output projection's bias, it is ``attn.merge(out)`` (to float rounding)."""
    d, h, dh = attn.out_proj.weight.shape[0], attn.n_heads, attn.d_head
    w = attn.out_proj.weight.view(d, h, dh)  # (d, h, d_h): W_O^h = w[:, h]
    return torch.einsum("bhlk,dhk->bhld", out, w.to(out.dtype))


def _check_value(name: str, value, width: int, batch: int, length: int, zero: bool) -> None:
    if isinstance(value, str):
        if zero and value == ZERO:
            return
        raise ConfigError(name, value[:40], "'zero' or a tensor" if zero else "a tensor")
    if not isinstance(value, torch.Tensor) or value.dim() > 3 or value.dim() == 0 or value.shape[-1] != width:
        raise ConfigError(
            name,
            tuple(getattr(value, "shape", ())) or type(value).__name__,
            f"a tensor broadcastable to (batch={batch}, length={length}, {width})",
        )
    lead = (1,) * (3 - value.dim()) + tuple(value.shape[:-1])
    if lead[0] not in (1, batch) or lead[1] not in (1, length) or not torch.isfinite(value).all():
        raise ConfigError(
            name, tuple(value.shape), f"a finite tensor broadcastable to (batch={batch}, length={length}, {width})"
        )
