"""The registries of ``ModelConfig``'s choices, and ``choices()`` for the dropdowns.

The records themselves (``Variant``) live in the leaf ``models.variant``; each family module owns
its dict. This module only gathers them, so it imports the families and nothing imports it back
except the config (to validate a choice) and the package.
"""
from __future__ import annotations

from . import architectures, attention, ffn, layers, memory, norms, positions
from .variant import Variant, register

__all__ = ["Variant", "register", "registries", "choices"]


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
