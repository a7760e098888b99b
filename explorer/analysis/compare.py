"""A/B comparison of two configurations: what differs, and their gradient norms in one figure.

No gradio here (``explorer.app.tabs.compare`` wires it). A is the pinned configuration, B the one on
screen; the attention maps of each are ``plots.attention_grid`` figures drawn side by side.
"""
from __future__ import annotations


from models import ModelConfig


def config_diff(a: ModelConfig, b: ModelConfig) -> list:
    """``[(field, value in A, value in B)]`` for every ModelConfig field that differs, in field order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in da if da[k] != db.get(k)]


