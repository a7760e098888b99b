"""JSON a checkpoint carries (``config.json``, a safetensors header, the shard index), parsed so that no
value in it can cost more than its few bytes, and refused by name when a value is absurd.

Python's ``json`` turns a 5,000-digit literal into a ``ValueError`` (the int-string limit) that names
nothing, reads ``NaN`` / ``Infinity`` as numbers, and keeps strings and nesting of any size. Here every
number literal is read by a hook that keeps an absurd one as ``Absurd`` instead of converting it, and a
walk (iterative: no recursion a deep document could exhaust) refuses the first ``Absurd`` value, string
past ``max_string`` characters, nesting past ``MAX_DEPTH`` or container past ``MAX_CONTAINERS`` with a
``ConfigError`` naming the file and the value's path (``config.json: rope_scaling.factor``,
``config.json: layer_types[3]``).

One literal is a value in one place: ``Infinity`` at a path of ``infinite`` (config.json: ``time_step_limit[1]``,
the upper clamp of the Mamba-2 step size that Mamba-2 / Falcon-H1 configs write as +inf, meaning no clamp) is
read as ``math.inf``; anywhere else it is refused like every non-finite literal.
"""

from __future__ import annotations

import json
import math

from ..errors import ConfigError

MAX_DIGITS = 20  # an integer literal: 2**64 has 20 digits, and every size of a model is far smaller
MAX_NUMBER_CHARS = 64  # a float literal: 17 significant digits and an exponent need 24
MAX_DEPTH = 32  # config.json nests a few levels (rope_scaling, task_specific_params.translation)
MAX_CONFIG_STRING = 4096  # the longest strings of config.json are paths and class names
MAX_CONTAINERS = 1 << 16  # objects and lists in one file: a safetensors header has three per tensor
CONFIG_INFINITE = frozenset({"time_step_limit[1]"})  # module docstring


class Absurd:
    """A number literal kept as text: too long, or not finite (``NaN``, ``Infinity``, ``1e999``)."""

    def __init__(self, text: str, why: str):
        self.text, self.why = text, why


def _integer(text: str):
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        return Absurd(f"{text[:12]}... ({digits} digits)", f"an integer of at most {MAX_DIGITS} digits")
    return int(text)


def _float(text: str):
    if len(text) > MAX_NUMBER_CHARS:
        return Absurd(f"{text[:12]}... ({len(text)} characters)", f"a number of at most {MAX_NUMBER_CHARS} characters")
    value = float(text)
    return value if math.isfinite(value) else Absurd(text, "a finite number (this literal overflows to infinity)")


def _constant(text: str):
    return Absurd(text, "a finite number (NaN and Infinity are not JSON numbers)")


def _path(parent: str, key) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


def _refuse(name: str, path: str, value, allowed: str):
    shown = path if len(path) <= 160 else path[:157] + "..."
    raise ConfigError(f"{name}: {shown}" if path else name, value, allowed)


def check(data, name: str, max_string: int = MAX_CONFIG_STRING, infinite: frozenset = frozenset()) -> None:
    """Refuse the first absurd value of ``data`` (parsed by ``loads``), by ``name`` and path; an ``Infinity`` at a
    path of ``infinite`` becomes ``math.inf`` in place. Only containers are queued (with their path); a scalar is
    checked where it is met, so the walk costs one type test per value."""
    if not isinstance(data, (dict, list)):
        _scalar(data, name, "", max_string)
        return
    todo, seen = [(data, "", 0)], 1
    while todo:
        value, path, depth = todo.pop()
        if depth >= MAX_DEPTH:
            _refuse(
                name,
                path,
                f"{type(value).__name__} nested {depth} deep",
                f"at most {MAX_DEPTH} levels of nested objects and lists",
            )
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(item, (dict, list)):
                seen += 1
                if seen > MAX_CONTAINERS:
                    _refuse(
                        name,
                        "",
                        f"more than {MAX_CONTAINERS} objects and lists",
                        f"at most {MAX_CONTAINERS} (config.json holds a few, a safetensors header three per tensor)",
                    )
                todo.append((item, _path(path, key), depth + 1))
            elif isinstance(item, Absurd) and item.text == "Infinity" and _path(path, key) in infinite:
                value[key] = math.inf
            elif isinstance(item, (str, Absurd)):
                _scalar(item, name, _path(path, key), max_string)
            if isinstance(key, str) and len(key) > max_string:
                _refuse(
                    name, path, f"{key[:24]}... ({len(key)} characters)", f"keys of at most {max_string} characters"
                )


def _scalar(value, name: str, path: str, max_string: int) -> None:
    if isinstance(value, Absurd):
        _refuse(name, path, value.text, value.why)
    if isinstance(value, str) and len(value) > max_string:
        _refuse(
            name, path, f"{value[:24]}... ({len(value)} characters)", f"a string of at most {max_string} characters"
        )


def loads(raw: bytes, name: str, max_string: int = MAX_CONFIG_STRING, infinite: frozenset = frozenset()):
    """The JSON value of ``raw`` with every value checked (``check``, ``infinite`` its paths where ``Infinity`` is
    read); ConfigError naming ``name`` for text that is not JSON (or not UTF-8) or holds an absurd value."""
    try:
        data = json.loads(raw, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(name, "contents", "valid JSON (UTF-8)") from None
    except RecursionError:  # deeper than the parser's own limit (about a thousand levels)
        raise ConfigError(
            name, "nesting past the parser's limit", f"at most {MAX_DEPTH} levels of nested objects and lists"
        ) from None
    check(data, name, max_string, infinite)
    return data
