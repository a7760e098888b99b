"""The registry entry shared by every family: one ``Variant`` per dropdown choice.

Each family module owns one dict ``{key: Variant}``; ``choices()`` and the app's dropdowns are the
keys of those dicts, so registering an entry is all it takes for a variant to appear everywhere.
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
    check: Optional[Callable] = None  # check(cfg) raises ConfigError for a bad combination


def register(registry: dict, variant: Variant) -> Variant:
    if variant.key in registry:
        raise KeyError(f"duplicate registry key {variant.key!r}")
    registry[variant.key] = variant
    return variant


def registries() -> dict:
    """``{category: {key: Variant}}`` for the seven categories of ModelConfig."""
    from . import attention, ffn, layers, memory, norms, positions
    return {
        "attention": attention.ATTENTION,
        "position": positions.POSITION,
        "norm_placement": norms.NORM_PLACEMENT,
        "norm": norms.NORM,
        "ffn": ffn.FFN,
        "memory": memory.MEMORY,
        "layer": layers.LAYER,
    }


def choices() -> dict:
    """``{"attention": [...], "position": [...], ...}``: what is implemented and works."""
    return {cat: list(reg) for cat, reg in registries().items()}
