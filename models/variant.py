"""The records shared by every family (a leaf module): ``Variant``, ``Param`` and ``gather``.

- ``Variant``: one per dropdown choice. Everything the rest of the code needs to know about a
  variant is on it: the factory, the config fields it reads, its own combination check, the
  parameters it adds (for the size estimate that runs before anything is allocated) and its
  capabilities (``models.capabilities``).
- ``Param``: one per ``ModelConfig`` field, declared beside the variant (or family) that reads it:
  type, default, library range, the interactive app's cap, label, choices. ``models.config`` builds
  ``ModelConfig`` from its own core records plus every record a registered variant lists, so
  adding a parameter is one record, listed in the variant's ``params``.
- ``gather(*groups)``: the one way a family builds its registry dict ``{key: record}`` from its
  modules' ``VARIANTS`` tuples, refusing a key given twice.

Invariant: a field is declared by exactly one ``Param`` object; a variant that shares a field with
another lists that same object (or, for a core field of ``models.config``, its name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

_TYPES = (int, float, bool, str)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
_NONE = ("", "none", "null")  # text an optional field reads as None


@dataclass(frozen=True)
class Param:
    """One ``ModelConfig`` field and every fact about it.

    ``range``: ``(lo, hi)`` an integer field accepts in the library (``SIZE_RANGES``): far past any
    experiment and far below what would take gigabytes, so beyond it a value is a typo (sizes
    multiplied by the model's width are bounded again by ``MAX_PARAMS``; bounds on a product of
    fields live in the variant's check). ``cap``: the largest value the interactive app accepts
    (``SIZE_LIMITS``); None for a field that is no size. ``label``: the app's control label (None:
    the name). ``choices``: the values of a string field that is no registry category.
    ``optional``: None is a value (the field's default rule, e.g. ``d_ff=None``: the FFN's rule).
    ``surgery``: changing this field keeps a trained model's weights valid (a pattern's sizes, the
    softcap, RoPE's base and scale, ``n_kv_heads`` by merging or repeating K/V heads): the explorer
    then keeps the trained weights and shows what the change does (``models.surgery``).
    """

    name: str
    type: type
    default: Any
    range: tuple | None = None
    cap: float | None = None
    label: str | None = None
    choices: tuple = ()
    optional: bool = False
    surgery: bool = False

    def __post_init__(self):
        if self.type not in _TYPES:
            raise TypeError(f"Param {self.name!r}: type must be one of {[t.__name__ for t in _TYPES]}")

    @property
    def annotation(self) -> str:
        """The dataclass annotation: ``"int"``, ``"Optional[int]"``, ..."""
        return f"Optional[{self.type.__name__}]" if self.optional else self.type.__name__

    def coerce(self, value: Any) -> Any:
        """``value`` as this field's type (``"8"`` -> 8, ``"false"`` -> False, ``"none"`` -> None when
        optional); ConfigError naming the field when it has no such meaning."""
        name, base = self.name, self.type
        if value is None or (self.optional and isinstance(value, str) and value.strip().lower() in _NONE):
            if self.optional:
                return None
            raise ConfigError(name, value, f"a value of type {base.__name__} (None is not allowed)")
        if base is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
                return value.strip().lower() in _TRUE
            raise ConfigError(name, value, "true or false")
        if base is str:
            if isinstance(value, str):
                return value
            raise ConfigError(name, value, "a string")
        what = "an integer" if base is int else "a number"
        if isinstance(value, bool):
            raise ConfigError(name, value, what)
        if base is int:
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return base(value.strip())
            except ValueError:
                pass
        raise ConfigError(name, value, what)


def split_params(params: tuple) -> tuple:
    """``(names, records)`` of a ``params`` tuple mixing ``Param`` records and field names."""
    names = tuple(p.name if isinstance(p, Param) else p for p in params)
    return names, tuple(p for p in params if isinstance(p, Param))


@dataclass(frozen=True)
class Variant:
    key: str
    paper: str  # primary reference, e.g. "Press et al. 2022 (ALiBi)"
    summary: str  # one sentence for the Model tab
    build: Any = None  # factory: class or function, family-specific signature
    # The config fields this variant reads (shown in the UI while it is chosen): given as Param
    # records or as names of fields declared elsewhere; stored as names, the records in param_records.
    params: tuple = ()
    check: Callable | None = None  # check(cfg) raises ConfigError for a bad value or combination
    n_params: Callable | None = None  # n_params(cfg) -> parameters this variant adds to the model
    caps: Any = None  # capabilities: PositionCaps / AttentionCaps / MemoryCaps
    # True when a model trained with another surgery-safe variant of the family can switch to this one
    # and keep its weights: it adds no weights and reads the same projections (``models.surgery``)
    surgery: bool = False
    param_records: tuple = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        names, records = split_params(self.params)
        object.__setattr__(self, "params", names)
        object.__setattr__(self, "param_records", tuple(dict.fromkeys(self.param_records + records)))


def gather(*groups) -> dict:
    """``{key: record}`` of every record in ``groups`` (tuples such as a module's ``VARIANTS``), in
    order; a key given twice raises ``KeyError`` (the later record would silently replace the first)."""
    out = {}
    for group in groups:
        for record in group:
            if record.key in out:
                raise KeyError(f"duplicate registry key {record.key!r}")
            out[record.key] = record
    return out
