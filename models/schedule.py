"""Per-layer attention schedules: which attention (and whether a position encoding) each layer uses.

Families since 2024 mix layer kinds in a short repeating pattern: Gemma 2 (Gemma Team 2024) and
gpt-oss (OpenAI 2025) alternate sliding-window and full layers 1:1, Gemma 3 (Gemma Team 2025) runs
five sliding layers per full one with RoPE base 10k on the local layers and 1M on the global ones,
Llama 4 (Meta 2025) three chunked layers with RoPE per full layer without positions (NoPE), Qwen2
(Yang et al. 2024) full layers below ``max_window_layers`` and sliding ones above. One frozen
``ModelConfig`` holds such a model: the field ``layer_schedule`` is the pattern, and
``cfg.layer_config(i)`` is the one accessor every layer, view and checkpoint reader uses for layer
``i``'s effective config (a uniform model returns ``cfg`` itself).

Grammar of ``layer_schedule`` (``""``: every layer uses ``attention`` and ``position``):

    schedule := entry ("," entry)*          at most MAX_ENTRIES entries and MAX_TEXT characters
    entry    := key (":" modifier)* ["*" count]
    key      := an attention registry key
    modifier := "nope" | "dense"             (each at most once per entry)
    count    := an integer 1 .. MAX_LAYERS  (default 1)

Spaces are allowed around an entry, nowhere inside it. The entries expanded by their counts are one
*period* (at most MAX_LAYERS layers); layer ``i`` takes entry ``i mod period``, so the period is cycled
over ``n_layers`` and may be cut short by it (Gemma 3's 26 layers: four 6-layer periods and two
sliding layers). ``"sliding_window*5,full"`` is Gemma 3; ``"chunked*3,full:nope"`` is Llama 4.

Layer ``i``'s config is ``cfg`` with ``attention`` = its key, ``layer_schedule=""``, and:

- ``:nope``: ``position="none"`` in that layer (and ``qk_norm="none"`` where the model's is ``"rms_rope"``,
  Llama 4's norm of the rotated layers only, ``models.qkv``); the layers that keep their positions get
  ``attn_temp_floor=None`` (Llama 4's query temperature tunes the NoPE layers only, ``models.temperature``).
  Allowed when the model's position encoding has no weights and acts only inside attention (``rope``,
  ``alibi``, ``none``): dropping it in one layer then removes nothing any other layer reads. An absolute
  encoding (added to the embeddings once) or one with learned tables cannot be dropped per layer; refused
  with the reason.
- ``:dense``: ``ffn = dense_ffn`` (a dense FFN key, default ``swiglu``) of width ``d_ff = dense_d_ff``
  (None: the FFN rule's width) in that layer, the model's ``ffn`` in the others: DeepSeek-V3's first
  ``first_k_dense_replace`` layers and Llama 4's layers between its MoE layers. Only with
  ``layer="standard"`` (the structure whose blocks build their FFN from the layer's config) and a model
  FFN that is not ``none``. ``dense_ffn`` / ``dense_d_ff`` other than their defaults without a
  ``:dense`` layer are refused (they would set nothing).
- ``rope_local_base`` (``models.positions.rope``; None: the same base everywhere): ``rope_base`` of
  the layers whose key is a local pattern (``LOCAL``) and that keep their positions (Gemma 3's
  ``rope_local_base_freq``). Only with ``position="rope"`` and a schedule that has such a layer.

Validation (``check``, called by ``ModelConfig.validate``): the grammar, the keys and modifiers; the
model's ``attention`` must be one of the schedule's keys (it names the model where one name is shown);
then every distinct layer kind's config passes the whole-model validation, so each layer's attention
meets the same combination checks as a whole-model choice and causal-only and bidirectional-only keys
never mix (one of them fails the shared ``causal``). A schedule is refused with a layer structure that
shares one block across depth (``universal``) and with a memory (their per-layer state and reach views
read one attention). Every error names ``layer_schedule`` (or the field at fault), the bad token and
the valid values.

``SCHEDULES`` holds the named schedules of real families (``preset(name)``: the fields to set), and
``from_layer_types`` the run-length schedule of a Hugging Face ``layer_types`` list.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import ConfigError

__all__ = [
    "FIELD",
    "LOCAL",
    "MODIFIERS",
    "SCHEDULES",
    "LayerKind",
    "DENSE_FFN_DEFAULT",
    "dense_keys",
    "parse",
    "layer_kinds",
    "layer_config",
    "kind_configs",
    "attention_keys",
    "check",
    "preset",
    "from_layer_types",
    "with_attention",
    "surgery_safe",
]

FIELD = "layer_schedule"
MAX_TEXT = 1024
MAX_ENTRIES = 64
MAX_LAYERS = 512  # the largest n_layers: one period never needs more
# per-layer modifiers -> what they do
MODIFIERS = {
    "nope": "no position encoding in this layer (NoPE, Kazemnejad et al. 2023; Llama 4's global layers)",
    "dense": "a dense FFN in this layer (dense_ffn of width dense_d_ff) instead of the model's ffn (DeepSeek-V3's "
    "first layers, Llama 4's layers between its MoE layers)",
}
# layer structures whose blocks build their FFN from the layer's config: the only ones a ':dense' layer can change
DENSE_LAYERS = ("standard",)
DENSE_FFN_DEFAULT = "swiglu"  # the dense FFN of DeepSeek-V3's and Llama 4's dense layers
# patterns whose keys lie within a fixed span of the query: the layers rope_local_base applies to
LOCAL = ("sliding_window", "dilated_window", "block_local", "chunked")
# layer structures that apply one shared block at every depth: a schedule has nothing to vary there
SHARED_BLOCK = {"universal": "the Universal Transformer applies one shared block at every depth"}
_ENTRY = re.compile(r"([a-z0-9_]+)((?::[a-z0-9_]+)*)(?:\*([0-9]+))?")


@dataclass(frozen=True)
class LayerKind:
    """One layer's kind: its attention key, whether it drops the position encoding, whether its FFN is dense."""

    attention: str
    nope: bool = False
    dense: bool = False

    @property
    def token(self) -> str:
        """The kind as a schedule entry (``"full:nope"``, ``"mla:dense"``)."""
        return self.attention + (":nope" if self.nope else "") + (":dense" if self.dense else "")


def _keys() -> list:
    from .attention import ATTENTION  # late: the attention package is heavy and imports this package's siblings

    return list(ATTENTION)


def grammar() -> str:
    """The valid values, said once for every error of the grammar."""
    return (
        f"comma-separated entries key[:modifier][*count] (e.g. 'sliding_window*5,full', 'chunked*3,full:nope'): "
        f"key one of {_keys()}, modifier one of {list(MODIFIERS)}, count 1..{MAX_LAYERS}; at most "
        f"{MAX_ENTRIES} entries, {MAX_TEXT} characters and {MAX_LAYERS} layers per period; '' = every layer "
        "uses attention and position"
    )


@lru_cache(maxsize=256)
def parse(text: str) -> tuple:
    """One period of ``text`` expanded: a tuple of ``LayerKind``, one per layer; ConfigError naming the
    field and the first bad token otherwise (``""`` is no schedule: an empty tuple)."""
    if not isinstance(text, str):
        raise ConfigError(FIELD, text, grammar())
    if text == "":
        return ()
    if len(text) > MAX_TEXT:
        raise ConfigError(FIELD, text[:40] + "...", grammar())
    entries = text.split(",")
    if len(entries) > MAX_ENTRIES:
        raise ConfigError(FIELD, f"{len(entries)} entries", grammar())
    keys = set(_keys())
    out = []
    for raw in entries:
        entry = raw.strip()
        m = _ENTRY.fullmatch(entry)
        if m is None:
            raise ConfigError(FIELD, entry[:40], grammar())
        key, mods, count = m.group(1), [t for t in m.group(2).split(":") if t], m.group(3)
        if key not in keys:
            raise ConfigError(FIELD, key, grammar())
        for mod in mods:
            if mod not in MODIFIERS:
                raise ConfigError(FIELD, f"{key}:{mod}", grammar())
        if len(set(mods)) != len(mods):
            raise ConfigError(FIELD, entry, f"each modifier at most once per entry; {grammar()}")
        n = 1 if count is None else int(count)
        if not 1 <= n <= MAX_LAYERS or (count is not None and count != str(n)):
            raise ConfigError(FIELD, entry, grammar())
        out.extend([LayerKind(key, "nope" in mods, "dense" in mods)] * n)
        if len(out) > MAX_LAYERS:
            raise ConfigError(FIELD, f"{len(out)}+ layers in one period", grammar())
    return tuple(out)


def layer_kinds(cfg) -> tuple:
    """The kind of each of ``cfg``'s ``n_layers`` layers (the schedule cycled; uniform: ``attention``)."""
    period = parse(cfg.layer_schedule) or (LayerKind(cfg.attention),)
    return tuple(period[i % len(period)] for i in range(cfg.n_layers))


def attention_keys(cfg) -> tuple:
    """The distinct attention keys ``cfg``'s layers use, in first-use order (uniform: ``(attention,)``)."""
    return tuple(dict.fromkeys(k.attention for k in layer_kinds(cfg))) or (cfg.attention,)


def layer_config(cfg, i: int):
    """Layer ``i``'s effective config (``ModelConfig.layer_config``): ``cfg`` itself without a schedule."""
    if not cfg.layer_schedule:
        return cfg
    period = parse(cfg.layer_schedule)
    return _kind_config(cfg, period[int(i) % len(period)])


def kind_configs(cfg) -> tuple:
    """The distinct layer configs of ``cfg``, in first-use order (uniform: ``(cfg,)``)."""
    if not cfg.layer_schedule:
        return (cfg,)
    return tuple(_kind_config(cfg, k) for k in dict.fromkeys(layer_kinds(cfg)))


@lru_cache(maxsize=512)
def _kind_config(cfg, kind: LayerKind):
    from .attention import ATTENTION

    changes = {"attention": kind.attention, FIELD: "", "rope_local_base": None}
    changes.update(dense_ffn=DENSE_FFN_DEFAULT, dense_d_ff=None)  # a schedule's fields, as rope_local_base
    caps = ATTENTION[kind.attention].caps
    own_gate = getattr(caps, "own_gate", False)  # a mixer gating its own output (Gated DeltaNet, Mamba-2)
    if getattr(caps, "own_projections", None) and not (own_gate and cfg.d_model % cfg.n_heads):
        # a core with head widths of its own (MLA): the other layers read head_dim; a mixer keeps it where
        # d_model / n_heads is no whole width (Qwen3-Next's 3 heads of 8 beside d 32): its widths are its own fields
        changes["head_dim"] = None
    if own_gate:  # the model's output gate, query/key norm and RoPE belong to its attention layers: the mixer
        changes["attn_gate"] = "none"  # ignores positions, so its d_model / n_heads need not hold the rotated
        changes["qk_norm"] = "none"  # fraction of the attention layers' heads (Qwen3-Next: 0.25 of 256)
        changes["rope_fraction"] = 1.0
    if kind.dense:
        changes["ffn"] = cfg.dense_ffn
        changes["d_ff"] = cfg.dense_d_ff
    if kind.nope:
        changes["position"] = "none"
        if cfg.qk_norm == "rms_rope":  # Llama 4's query/key norm belongs to the layers that rotate
            changes["qk_norm"] = "none"
    else:
        changes["attn_temp_floor"] = None  # the query temperature tunes only the layers without positions
        if cfg.rope_local_base is not None and kind.attention in LOCAL:
            changes["rope_base"] = cfg.rope_local_base
    return cfg.replace(**changes)


def dense_keys() -> list:
    """The FFN keys a ``:dense`` layer may take: the dense FFNs of ``models.ffn.dense`` (not ``none``)."""
    from .ffn.dense import DENSE_KEYS  # late: the FFN package is heavier than this module's callers need

    return list(DENSE_KEYS)


def _check_dense(cfg, period: tuple) -> None:
    """``dense_ffn`` / ``dense_d_ff`` and the ``:dense`` layers: see the module docstring."""
    keys = dense_keys()
    if cfg.dense_ffn not in keys:
        raise ConfigError("dense_ffn", cfg.dense_ffn, f"one of {keys} (the FFN of a schedule's ':dense' layers)")
    if not any(k.dense for k in period):
        if cfg.dense_d_ff is not None or cfg.dense_ffn != DENSE_FFN_DEFAULT:
            name = "dense_d_ff" if cfg.dense_d_ff is not None else "dense_ffn"
            raise ConfigError(
                name,
                getattr(cfg, name),
                f"{'None' if name == 'dense_d_ff' else repr(DENSE_FFN_DEFAULT)} without a ':dense' layer in "
                "layer_schedule: it sets the FFN of those layers only",
            )
        return
    token = next(k.token for k in period if k.dense)
    if cfg.layer not in DENSE_LAYERS:
        raise ConfigError(
            FIELD,
            token,
            f"no ':dense' layer with layer={cfg.layer!r}: only {list(DENSE_LAYERS)} builds each block's FFN from "
            "its layer's config",
        )
    if cfg.ffn == "none":
        raise ConfigError(
            FIELD, token, "no ':dense' layer with ffn='none': a model without FFNs has no FFN for a layer to replace"
        )


def _nope_positions(regs) -> list:
    """Position encodings a layer may drop: no weights, nothing added to the embeddings."""
    return [k for k, v in regs["position"].items() if v.n_params is None and not getattr(v.caps, "absolute", False)]


def check(cfg, regs) -> None:
    """Refuse a schedule (and ``rope_local_base``) that does not hold; see the module docstring."""
    text = cfg.layer_schedule
    local = cfg.rope_local_base
    if local is not None and not (math.isfinite(local) and local > 0):
        raise ConfigError("rope_local_base", local, "None or a finite positive number (RoPE's base of local layers)")
    _check_dense(cfg, parse(text) if text else ())
    if not text:
        if local is not None:
            raise ConfigError(
                "rope_local_base",
                local,
                "None without a layer_schedule: it is the RoPE base of a schedule's local layers "
                f"({', '.join(LOCAL)}); a uniform model's base is rope_base",
            )
        return
    period = parse(text)
    keys = list(dict.fromkeys(k.attention for k in period))
    if cfg.attention not in keys:
        raise ConfigError(
            "attention",
            cfg.attention,
            f"one of the schedule's keys {keys} with layer_schedule={text!r} (it names the model where one "
            "attention is shown)",
        )
    if cfg.layer in SHARED_BLOCK:
        raise ConfigError(
            FIELD, text, f"'' with layer={cfg.layer!r}: {SHARED_BLOCK[cfg.layer]}, so no layer can differ"
        )
    if cfg.memory != "none":
        raise ConfigError(
            FIELD,
            text,
            f"'' with memory={cfg.memory!r}: a memory's per-layer state and reach are read for one attention; "
            "a schedule with a memory is not built",
        )
    kinds = tuple(dict.fromkeys(layer_kinds(cfg)))
    if any(k.nope for k in period):
        ok = _nope_positions(regs)
        if cfg.position not in ok:
            raise ConfigError(
                FIELD,
                next(k.token for k in period if k.nope),
                f"':nope' only with a position encoding that has no weights and acts inside attention ({ok}): "
                f"position={cfg.position!r} is added to the embeddings or keeps learned tables, which one "
                "layer cannot drop",
            )
    if local is not None:
        if cfg.position != "rope":
            raise ConfigError(
                "rope_local_base", local, f"None with position={cfg.position!r}: it is a base of RoPE's angles"
            )
        if not any(k.attention in LOCAL and not k.nope for k in kinds):
            raise ConfigError(
                "rope_local_base",
                local,
                f"None: no layer of layer_schedule={text!r} (over n_layers={cfg.n_layers}) is a local pattern "
                f"with positions ({', '.join(LOCAL)})",
            )
    for kind in kinds:  # each layer kind meets every check a whole-model choice meets
        try:
            _kind_config(cfg, kind).validate()
        except ConfigError as e:
            raise ConfigError(
                FIELD,
                kind.token,
                f"a layer kind whose config is valid: in its layers {e.field}={e.value!r}: {e.allowed}",
            ) from None


def surgery_safe(a, b) -> bool:
    """Whether every layer of ``a`` keeps its weights' meaning as the same layer of ``b``: the same
    attention key, or two surgery-safe ones (``Variant.surgery``). Dropping or keeping the position
    (``:nope``) changes no weight: only weightless encodings may be dropped."""
    from .attention import ATTENTION

    if a.n_layers != b.n_layers:
        return False
    for ka, kb in zip(layer_kinds(a), layer_kinds(b)):
        if ka.attention != kb.attention and not (ATTENTION[ka.attention].surgery and ATTENTION[kb.attention].surgery):
            return False
    return True


def from_layer_types(types, names: dict) -> str:
    """The schedule of a per-layer list of kinds (e.g. transformers' ``layer_types``): its shortest period
    (``types[i] == types[i mod p]`` for every layer; a period the stack cuts short counts) run-length encoded,
    ``names`` mapping each kind to its schedule entry. ``["sliding", "full"] * 24`` -> ``"sliding_window,full"``."""
    types = list(types)
    p = next(p for p in range(1, len(types) + 1) if all(t == types[i % p] for i, t in enumerate(types)))
    out = []
    for t in types[:p]:
        entry = names[t]
        if out and out[-1][0] == entry:
            out[-1][1] += 1
        else:
            out.append([entry, 1])
    return ",".join(e if n == 1 else f"{e}*{n}" for e, n in out)


def with_attention(text: str, keys: dict) -> str:
    """``text`` with each layer's attention key mapped through ``keys`` (``{old: new}``; keys not in it stay),
    modifiers kept, run-length encoded over one period; ``""`` when every layer is then the same plain kind.
    ``with_attention("chunked*3,full:nope", {"chunked": "sliding_window", "full": "sliding_window"})`` is
    ``"sliding_window*3,sliding_window:nope"``."""
    kinds = [LayerKind(keys.get(k.attention, k.attention), k.nope, k.dense) for k in parse(text)]
    if len(set(kinds)) == 1 and not (kinds[0].nope or kinds[0].dense):
        return ""
    out = []
    for k in kinds:
        if out and out[-1][0] == k.token:
            out[-1][1] += 1
        else:
            out.append([k.token, 1])
    return ",".join(t if n == 1 else f"{t}*{n}" for t, n in out)


@dataclass(frozen=True)
class Schedule:
    """A named schedule of a real family: the pattern, the fields it comes with, the source."""

    text: str
    fields: dict
    source: str


# The families' published settings (config.json of the released checkpoints); sizes beyond the explorer's
# caps are the library's, so the app shrinks them where it must.
SCHEDULES = {
    "gemma2": Schedule(
        "sliding_window,full",
        {"attention": "full", "window": 4096, "softcap": 50.0},
        "Gemma Team 2024 (Gemma 2): local sliding window of 4096 and global layers alternate 1:1; "
        "attention logits soft-capped at 50",
    ),
    "gemma3": Schedule(
        "sliding_window*5,full",
        {
            "attention": "full",
            "window": 1024,
            "position": "rope",
            "rope_base": 1_000_000.0,
            "rope_local_base": 10_000.0,
        },
        "Gemma Team 2025 (Gemma 3): five local layers (window 1024, RoPE base 10k) per global layer (RoPE base 1M)",
    ),
    "gpt_oss": Schedule(
        "sliding_window,full",
        {"attention": "full", "window": 128},
        "OpenAI 2025 (gpt-oss): banded window of 128 tokens and full layers alternate 1:1",
    ),
    "llama4": Schedule(
        "chunked*3,full:nope",
        {"attention": "full", "attention_chunk_size": 8192, "position": "rope", "rope_base": 500_000.0},
        "Meta 2025 (Llama 4): three chunked layers (chunks of 8192, RoPE) per full layer without positions (NoPE)",
    ),
}


def qwen2(n_layers: int, max_window_layers: int) -> str:
    """Qwen2 with ``use_sliding_window``: layers below ``max_window_layers`` full, the rest sliding
    (transformers' ``layer_types``); ``""`` when every layer is of one kind."""
    first = max(0, min(int(max_window_layers), int(n_layers)))
    if first in (0, n_layers):
        return ""
    return from_layer_types(
        ["full"] * first + ["sliding"] * (n_layers - first), {"full": "full", "sliding": "sliding_window"}
    )


def preset(name: str) -> dict:
    """The config fields of the named schedule (``{"layer_schedule": ..., **its fields}``)."""
    if name not in SCHEDULES:
        raise ConfigError("schedule preset", name, f"one of {list(SCHEDULES)}")
    s = SCHEDULES[name]
    return {FIELD: s.text, **s.fields}
