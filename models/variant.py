"""The registry record shared by every family: one ``Variant`` per dropdown choice (a leaf module).

Each family module owns one dict ``{key: Variant}``; ``choices()`` and the app's dropdowns are the
keys of those dicts, so registering a record is all it takes for a variant to appear everywhere.
Everything the rest of the code needs to know about a variant is on its record: the factory, the
config fields it reads, its own combination check, the parameters it adds (for the size estimate
that runs before anything is allocated) and its capabilities (``models.capabilities``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Variant:
    key: str
    paper: str                      # primary reference, e.g. "Press et al. 2022 (ALiBi)"
    summary: str                    # one sentence for the Model tab
    build: Any = None               # factory: class or function, family-specific signature
    params: tuple = ()              # ModelConfig fields this variant reads (shown in the UI)
    check: Optional[Callable] = None  # check(cfg) raises ConfigError for a bad value or combination
    n_params: Optional[Callable] = None  # n_params(cfg) -> parameters this variant adds to the model
    caps: Any = None                # capabilities: PositionCaps / AttentionCaps / MemoryCaps


def register(registry: dict, variant: Variant) -> Variant:
    if variant.key in registry:
        raise KeyError(f"duplicate registry key {variant.key!r}")
    registry[variant.key] = variant
    return variant
