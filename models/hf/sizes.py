"""Every size in a checkpoint's ``config.json``, checked against the catalogue's ranges in one place, before
any family code reads the config.

A family's code loops and allocates by the sizes it reads (per-layer attention kinds, weight rules, the
model on the meta device), and ``ModelConfig.validate`` sees them only after that code has run: a
``num_hidden_layers`` of 2^40 would make a loop of 2^40 steps first. So ``check(family, hf)`` runs right
after the family is known: each config key a family maps onto a catalogue size (its ``NAMES``, catalogue
field -> config key) must be an integer in that field's ``SIZE_RANGES`` range, and each size a family
reads without a catalogue field (its ``SIZES``: ``{key: (lo, hi, meaning)}``) in its own range. An
absent or null key takes the family's default, a small constant. Refusals name the config key, the
catalogue field and the range.
"""

from __future__ import annotations

from ..config import SIZE_RANGES
from ..errors import ConfigError


def table(family) -> dict:
    """``{config.json key: (lo, hi, meaning)}``: every size the family module ``family`` reads."""
    out = {}
    for field, key in family.NAMES.items():
        if field in SIZE_RANGES:
            lo, hi = SIZE_RANGES[field]
            out.setdefault(key, (lo, hi, f"the catalogue's {field}"))
    out.update(family.SIZES)
    return out


def check(family, hf: dict) -> None:
    """Refuse the first size of ``hf`` (config.json) outside its range; ``family`` is the family's module."""
    for key, (lo, hi, meaning) in table(family).items():
        value = hf.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            shown = value if isinstance(value, (int, float)) else str(value)[:40]
            raise ConfigError(f"config.json: {key}", shown, f"an integer in [{lo}, {hi}] ({meaning})")
