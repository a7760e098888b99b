"""A/B comparison of two configurations: which fields differ (the Compare tab's table, ``/compare_ab``)."""
from __future__ import annotations

from models import ModelConfig


def config_diff(a: ModelConfig, b: ModelConfig) -> list:
    """``[(field, value in A, value in B)]`` for every ModelConfig field that differs, in field order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in da if da[k] != db.get(k)]
