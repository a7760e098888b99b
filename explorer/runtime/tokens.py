"""Readable labels of byte tokens (a leaf module: the maps, the encoder-decoder and the Train tab
all label tokens the same way)."""

from __future__ import annotations


def token_label(b: int) -> str:
    """A readable label for one byte token (space and control characters made visible)."""
    if b == 32:
        return "␣"
    if b == 10:
        return "⏎"
    if 33 <= b < 127:
        return chr(b)
    return f"\\x{b:02x}"
