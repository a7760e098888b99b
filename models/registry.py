"""The registries of ``ModelConfig``'s choices, and ``choices()`` for the dropdowns.

The records themselves (``Variant``) live in the leaf ``models.variant``; each family package
gathers its modules' ``VARIANTS`` into its dict with ``variant.gather``. This module only collects
those dicts, so it imports the families and nothing imports it back except the config (to validate
a choice and to collect the fields the variants declare) and the package.
"""

from __future__ import annotations

from . import architectures, attention, ffn, layers, memory, norms, positions
from .variant import Variant, gather

__all__ = ["Variant", "gather", "registries", "choices"]


def registries() -> dict:
    """``{category: {key: Variant}}`` for the categories of ModelConfig."""
    return {
        "architecture": architectures.ARCHITECTURE,
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
