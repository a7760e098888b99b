"""ModelConfig: one immutable record that names every choice, built from ``Param`` records and
validated in one place.

The fields are the core records below (sizes, the category choices, causal, seed, dropout,
softcap) followed by every ``Param`` a registered variant lists (``models.variant``), in registry
order; a field is declared once, beside the variant or family that reads it. ``SIZE_RANGES`` (and
the explorer's caps, labels and choices) are views of those records.

``ModelConfig`` is a frozen dataclass: hashable, ``replace()`` returns a new config. Values of the
right meaning but the wrong type (``window="8"``, ``causal="true"``) are coerced at construction;
a value that cannot be coerced is kept as given, so ``validate()`` names its field. ``validate()``
checks what holds for every model (types, size ranges, head divisibility, the size estimate, the
registry keys, the capability fit of position / attention / memory) and then calls the chosen
variants' own ``check``: a rule that matters to one variant lives on that variant's record. It runs
once per instance (the result is remembered outside the fields) and returns the config.
"""

from __future__ import annotations

import dataclasses
import json
import math

from . import schedule
from .capabilities import check_combination
from .errors import ConfigError
from .ffn.dense import DENSE_KEYS
from .output_gate import GATES, gate_params
from .positions.yarn import check_mscale_all_dim
from .qkv import QK_NORMS, check_qk_norm, projection_params, value_layout
from .registry import registries
from .sinks import sink_params
from .temperature import PARAMS as TEMPERATURE_PARAMS
from .temperature import check_temperature
from .variant import Param

__all__ = ["ModelConfig", "ConfigError", "CATEGORIES", "CORE", "FIELDS", "MAX_PARAMS", "SIZE_RANGES"]

CATEGORIES = ("architecture", "attention", "position", "norm_placement", "norm", "ffn", "memory", "layer")

# The fields every model reads. Capped fields are sizes (the explorer's interactive caps); the
# seed is a label of a random stream, not a size, so it has a range and no cap.
CORE = (
    Param("vocab_size", int, 256, range=(2, 1 << 20), cap=4096),
    Param("max_len", int, 1024, range=(1, 1 << 20), cap=16384, label="max_len (positions)", surgery=True),
    Param("n_layers", int, 4, range=(1, 512), cap=12, label="Layers"),
    Param("d_model", int, 128, range=(1, 1 << 16), cap=512, label="d_model"),
    Param("n_heads", int, 4, range=(1, 4096), cap=16, label="Heads"),
    Param("n_kv_heads", int, None, optional=True, range=(1, 4096), cap=16, label="K/V heads (0 = Heads)", surgery=True),
    # each head's width d_h; None: d_model / n_heads. Checkpoints set it apart (Qwen3 128 at d_model 1024 and 16
    # heads, Gemma 2/3 256, gpt-oss 64): q, k, v project to heads * d_h, the output projection reads it back
    Param("head_dim", int, None, optional=True, range=(1, 4096), cap=256, label="Head width (0 = d_model / heads)"),
    Param("causal", bool, True, label="Causal (decoder) mask"),
    # the category choices (registry keys)
    Param("architecture", str, "decoder_only"),
    Param("attention", str, "full", label="Attention"),
    Param("position", str, "rope", label="Position encoding"),
    Param("norm_placement", str, "pre", label="Norm placement"),
    Param("norm", str, "layernorm", label="Norm"),
    Param("ffn", str, "gelu", label="Feed-forward"),
    Param("memory", str, "none", label="Memory"),
    Param("layer", str, "standard", label="Layer structure"),
    Param("seed", int, 0, range=(0, 2**63 - 1), label="Seed"),
    Param("dropout", float, 0.0),
    Param("softcap", float, None, optional=True, label="softcap (0 = off)", surgery=True),
    # heads whose output is dropped (zeroed before the output projection): "layer.head" pairs, comma-separated
    Param("ablate_heads", str, "", label="Ablated heads (layer.head, ...; empty = none)", surgery=True),
    # per-layer kinds cycled over n_layers, e.g. "sliding_window*5,full" (models/schedule.py: grammar, checks)
    Param(
        "layer_schedule", str, "", label="Layer schedule (key[:nope][:dense][*count], ...; empty = every layer alike)"
    ),
    # the FFN of a schedule's ':dense' layers (DeepSeek-V3's first layers, Llama 4's between its MoE layers)
    Param("dense_ffn", str, schedule.DENSE_FFN_DEFAULT, choices=DENSE_KEYS, label="FFN of ':dense' layers"),
    Param(
        "dense_d_ff", int, None, optional=True, range=(1, 1 << 18), cap=4096, label="d_ff of ':dense' layers (0 = rule)"
    ),
    # What pretrained checkpoints need (models/hf); each default keeps every catalogue model as it was.
    Param("norm_eps", float, 1e-5, label="Norm epsilon (layernorm, rmsnorm)"),
    Param("attn_bias", str, "none", choices=("none", "qkv", "all"), label="Attention projection biases"),
    Param("gelu_approx", str, "none", choices=("none", "tanh"), label="GELU approximation (gelu, geglu, MLM head)"),
    Param("embed_norm", bool, False, label="Norm after the embeddings (BERT)"),
    # RMSNorm of the projected queries and keys before positions (models/qkv.py): per head (Qwen3, Gemma 3),
    # over the whole projection (OLMo 2), or per head without a gain in the RoPE layers only (Llama 4)
    Param(
        "qk_norm",
        str,
        "none",
        choices=QK_NORMS,
        label="Query/key norm (RMSNorm: per head / whole projection / per head, no gain, RoPE layers)",
    ),
    # 2025 attention terms of the self-attention sublayer (models/sinks.py, models/output_gate.py)
    Param("attn_sinks", bool, False, label="Learned attention sinks (gpt-oss)"),
    Param("attn_gate", str, "none", choices=GATES, label="Gated attention output (Qiu et al. 2025)"),
    # Gemma 2 / 3 (Gemma Team 2024, 2025): token embeddings times sqrt(d_model) (cast to the embedding's dtype)
    # before the first layer, and the logits soft-capped, final_softcap * tanh(logits / final_softcap)
    Param("embed_scale", bool, False),
    Param("final_softcap", float, None, optional=True),
    # Llama 4 (Meta 2025): queries of the layers without positions scaled up past attn_temp_floor positions
    # (models/temperature.py)
    *TEMPERATURE_PARAMS,
)
MAX_ABLATED = 256


def _gather_fields() -> dict:
    """``{name: Param}``: the core records, then every record a registered variant lists, in
    registry order. Two different records of one name raise: a field is declared once."""
    out = {p.name: p for p in CORE}
    for registry in registries().values():
        for variant in registry.values():
            for p in variant.param_records:
                if out.setdefault(p.name, p) is not p:
                    raise KeyError(
                        f"config field {p.name!r} is declared twice (again by {variant.key!r}): "
                        "declare it once and list that record"
                    )
    return out


FIELDS = _gather_fields()

MAX_PARAMS = 2_000_000_000

SIZE_RANGES = {name: p.range for name, p in FIELDS.items() if p.type is int}


class _ConfigMethods:
    """The behaviour of ``ModelConfig``; its fields come from ``FIELDS``."""

    def __post_init__(self):
        for name, p in FIELDS.items():
            value = getattr(self, name)
            try:
                coerced = p.coerce(value)
            except ConfigError:
                continue  # kept as given: validate() reports it with the field's name
            if coerced is not value:
                object.__setattr__(self, name, coerced)

    # ------------------------------------------------------------------ derived
    @property
    def d_head(self) -> int:
        """Each head's width: ``head_dim`` when set, else ``d_model / n_heads``."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def ablated(self) -> dict:
        """``{layer: frozenset(heads)}`` of ``ablate_heads`` ("1.2, 1.3" -> {1: {2, 3}}); ConfigError naming
        the field for text that is no list of in-range ``layer.head`` pairs."""
        text = (self.ablate_heads or "").strip()
        if not text:
            return {}
        valid = (
            f"comma-separated layer.head pairs with 0 <= layer < n_layers={self.n_layers} and 0 <= head < "
            f"n_heads={self.n_heads}, e.g. '1.0, 1.3' (at most {MAX_ABLATED})"
        )
        out = {}
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if len(parts) > MAX_ABLATED or len(text) > 8 * MAX_ABLATED:
            raise ConfigError("ablate_heads", text[:40], valid)
        for part in parts:
            layer, dot, head = part.partition(".")
            if (
                not (dot and layer.isdigit() and head.isdigit())
                or int(layer) >= self.n_layers
                or int(head) >= self.n_heads
            ):
                raise ConfigError("ablate_heads", part[:40], valid)
            out.setdefault(int(layer), set()).add(int(head))
        return {k: frozenset(v) for k, v in out.items()}

    def layer_config(self, i: int) -> ModelConfig:
        """Layer ``i``'s effective config: this one without a ``layer_schedule``, else its layer kind's
        (``attention`` = the layer's key, positions and RoPE base per ``models.schedule``)."""
        return schedule.layer_config(self, i)

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def approx_params(self) -> int:
        """Parameter count of the built model, from the registry records (nothing is allocated).

        Embedding + head + final norm are common; each chosen variant's record adds its own
        (``Variant.n_params``), and the layer structure says how many blocks hold them. Unknown
        keys count 0 (``validate`` rejects them right after).
        """
        regs = registries()
        rec = {cat: regs[cat].get(getattr(self, cat)) for cat in CATEGORIES}

        def count(cat, *args) -> int:
            return rec[cat].n_params(self, *args) if rec[cat] is not None and rec[cat].n_params else 0

        norm = count("norm")
        attn = self._attention_params(regs, self)
        has_ffn = rec["ffn"] is not None and rec["ffn"].build is not None
        parts = {
            "attn": attn,
            "ffn": count("ffn") if has_ffn else None,
            "norm": norm,
            "residual": count("norm_placement", norm),
            # one self-attention sublayer of another config (a parallel_hybrid layer's mixer: models/layers/parallel.py)
            "attn_of": lambda other: self._attention_params(regs, other),
        }
        final = rec["norm_placement"] is not None and getattr(rec["norm_placement"].build, "final_norm", False)
        return self._schedule_params(regs, attn) + (
            2 * self.vocab_size * self.d_model
            + (norm if final else 0)
            + (norm if self.embed_norm else 0)
            + count("layer", parts)
            + count("position")
            + count("memory")
            + count("architecture")
        )  # a second stack / another head: the architecture's own count

    @staticmethod
    def _attention_params(regs, cfg) -> int:
        """One self-attention sublayer of ``cfg`` (a model's, or one layer's ``layer_config``): the q, k, v, out
        projections (only ``out_proj`` for a core with its own, MLA's) + the core + learned sinks + output gate."""
        rec = regs["attention"].get(cfg.attention)
        own = getattr(rec.caps, "own_projections", None) if rec is not None else None
        core = rec.n_params(cfg) if rec is not None and rec.n_params else 0
        return projection_params(cfg, own(cfg) if own else None) + core + sink_params(cfg) + gate_params(cfg)

    def _schedule_params(self, regs, uniform: int) -> int:
        """What a schedule adds to the count of ``n_layers`` layers of ``attention``: per layer, its own
        attention sublayer's parameters minus ``uniform``, those of ``attention``'s, and a ``:dense`` layer's
        FFN minus the model's (0 without a schedule)."""
        if not self.layer_schedule:
            return 0
        try:
            kinds = schedule.layer_kinds(self)
        except ConfigError:
            return 0  # validate names the bad schedule
        ffn = regs["ffn"].get(self.ffn)
        ffn_uniform = ffn.n_params(self) if ffn is not None and ffn.n_params else 0
        out = 0
        for i, kind in enumerate(kinds):
            layer = self.layer_config(i)
            out += self._attention_params(regs, layer) - uniform
            if kind.dense:  # a ':dense' layer's FFN instead of the model's
                rec = regs["ffn"].get(layer.ffn)
                out += (rec.n_params(layer) if rec is not None and rec.n_params else 0) - ffn_uniform
        return out

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def delta_json(self) -> str:
        """The fields that differ from their defaults, as sorted JSON: a key that a field added later (at its
        default) leaves unchanged, for results stored with the code (``from_dict`` of it gives this config)."""
        return json.dumps({k: v for k, v in self.to_dict().items() if v != FIELDS[k].default}, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Build from a JSON-like dict; unknown keys and untypable values raise ConfigError.

        Strings are accepted for numeric and boolean fields (URL query strings carry only text).
        """
        if not isinstance(d, dict):
            raise ConfigError("config", type(d).__name__, "a JSON object (dict) of ModelConfig fields")
        unknown = sorted(set(d) - set(FIELDS))
        if unknown:
            raise ConfigError(unknown[0], d[unknown[0]], f"unknown field; valid fields: {', '.join(FIELDS)}")
        return cls(**{k: FIELDS[k].coerce(v) for k, v in d.items()})

    def replace(self, **changes) -> ModelConfig:
        """A new config with ``changes`` (checked like ``from_dict``); this one is unchanged."""
        return ModelConfig.from_dict({**self.to_dict(), **changes})

    # ------------------------------------------------------------------ validation
    def validate(self) -> ModelConfig:
        """Raise ConfigError for the first invalid value or combination; return self when valid.

        A config is immutable, so a successful validation is remembered on the instance (outside
        the fields: not part of equality, hashing or ``to_dict``) and not repeated.
        """
        if self.__dict__.get("_valid"):
            return self
        for name, p in FIELDS.items():
            p.coerce(getattr(self, name))  # a value construction could not coerce raises here
        for name, (lo, hi) in SIZE_RANGES.items():
            val = getattr(self, name)
            if val is not None and not lo <= val <= hi:
                raise ConfigError(name, val, f"an integer in [{lo}, {hi}]")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", self.dropout, "a float in [0, 1)")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ConfigError(
                "d_model",
                self.d_model,
                f"a multiple of n_heads={self.n_heads} (each head gets d_model / n_heads dims), or set head_dim",
            )
        kv = self.kv_heads
        if not 1 <= kv <= self.n_heads or self.n_heads % kv:
            divisors = [x for x in range(1, self.n_heads + 1) if self.n_heads % x == 0]
            raise ConfigError(
                "n_kv_heads", self.n_kv_heads, f"None (MHA) or a divisor of n_heads={self.n_heads}: {divisors}"
            )
        if self.softcap is not None and not (math.isfinite(self.softcap) and self.softcap > 0):
            raise ConfigError("softcap", self.softcap, "None or a finite positive number")
        if self.final_softcap is not None and not (math.isfinite(self.final_softcap) and self.final_softcap > 0):
            raise ConfigError("final_softcap", self.final_softcap, "None or a finite positive number")
        if self.architecture == "encoder_decoder" and (self.embed_scale or self.final_softcap is not None):
            name = "embed_scale" if self.embed_scale else "final_softcap"
            raise ConfigError(
                name,
                getattr(self, name),
                "False / None with architecture='encoder_decoder' (its two stacks embed and classify in "
                "models/encdec.py, which reads neither)",
            )
        if not (math.isfinite(self.norm_eps) and 0 < self.norm_eps <= 0.1):
            raise ConfigError(
                "norm_eps", self.norm_eps, "a number in (0, 0.1] (added to the variance in layernorm / rmsnorm)"
            )
        for name in ("attn_bias", "gelu_approx", "qk_norm", "attn_gate"):  # read by every model, whatever its variants
            if getattr(self, name) not in FIELDS[name].choices:
                raise ConfigError(name, getattr(self, name), f"one of {list(FIELDS[name].choices)}")
        _ = self.ablated  # evaluated for its check: parses and bounds ablate_heads (ConfigError naming the field)
        regs = registries()
        for cat in CATEGORIES:
            key = getattr(self, cat)
            if key not in regs[cat]:
                raise ConfigError(cat, key, f"one of {list(regs[cat])}")
        schedule.parse(self.layer_schedule)  # the grammar and keys first: ConfigError naming layer_schedule
        n_params = self.approx_params()
        if n_params > MAX_PARAMS:
            raise ConfigError(
                "d_model",
                self.d_model,
                f"a size whose model fits in memory: this config has ~{n_params:.2g} parameters "
                f"(limit {MAX_PARAMS:.0e}); lower d_model, n_layers, vocab_size, d_ff, n_experts "
                "or the chosen variants' sizes",
            )
        check_combination(self, regs)
        check_qk_norm(self, regs["attention"][self.attention])
        check_temperature(self)
        own = getattr(regs["attention"][self.attention].caps, "own_projections", None)
        if (
            self.attn_gate == "elementwise"
            and own is not None
            and value_layout(self, own(self))
            != (
                self.n_heads,
                self.d_head,
            )
        ):
            raise ConfigError(
                "attn_gate",
                self.attn_gate,
                f"'none' or 'headwise' with attention={self.attention!r}: its heads return values of "
                f"{own(self)} numbers, not the head width d_head = {self.d_head}, so an elementwise gate has no width",
            )
        if self.rope_fraction != 1.0 and self.position != "rope":  # partial rotation: a rope-only field
            raise ConfigError(
                "rope_fraction",
                self.rope_fraction,
                f"1.0 with position={self.position!r} (only position='rope' rotates dimensions; a fraction "
                "leaves the rest of each head unrotated)",
            )
        if self.yarn_factor is not None and self.position != "rope":  # YaRN: frequencies of RoPE only
            raise ConfigError(
                "yarn_factor", self.yarn_factor, f"None with position={self.position!r} (YaRN rescales RoPE's angles)"
            )
        check_mscale_all_dim(self)  # DeepSeek's YaRN softmax temperature: MLA with YaRN only
        for cat in CATEGORIES:
            variant = regs[cat][getattr(self, cat)]
            if variant.check is not None:
                variant.check(self)
        schedule.check(self, regs)  # each layer kind of a schedule meets the checks above
        object.__setattr__(self, "_valid", True)
        return self


def _field(p: Param) -> tuple:
    return p.name, p.annotation, dataclasses.field(default=p.default)


ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [_field(p) for p in FIELDS.values()],
    bases=(_ConfigMethods,),
    frozen=True,
    namespace={
        "__module__": __name__,
        "__doc__": "Every choice of a model: one field per ``FIELDS`` record, each defaulted "
        "(``ModelConfig(window=8)``); immutable and hashable, ``validate()`` returns it.",
    },
)
