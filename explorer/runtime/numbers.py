"""One strict reader of the whole numbers a request names: a position, a layer, a count of cells.

``whole_number(value, field, low, high)`` takes an int, a float with a whole value, or a string of either
(``"3"``, ``" 3.0 "``) and refuses everything else with a ``ConfigError`` naming ``field`` and the range:
``NaN``, ``inf``, ``1e400`` (a float overflowing to infinity), ``2.5``, a bool, text that is no number, a
string longer than ``MAX_CHARS``, a value outside ``[low, high]``. No value reaches ``int()`` unchecked, so
none ends as an "internal error".
"""

from __future__ import annotations

import math

from models import ConfigError

MAX_CHARS = 40  # a number's text longer than this is refused unread


def whole_number(value, field: str, low: int | None = None, high: int | None = None, what: str | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (see the module docstring); ``what`` overrides the wording of the
    accepted range in the refusal."""
    wanted = what or (
        "a whole number"
        + (
            f" in {low}..{high}"
            if low is not None and high is not None
            else f" >= {low}"
            if low is not None
            else f" <= {high}"
            if high is not None
            else ""
        )
    )
    shown = str(value)[:20]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(field, shown, wanted)
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > MAX_CHARS:
            raise ConfigError(field, shown, wanted)
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(field, shown, wanted) from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != math.floor(value):
            raise ConfigError(field, shown, wanted)
        value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(field, shown, wanted)
    return value
