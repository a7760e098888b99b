"""A real answer against its declared type (``explorer.app.server.api_types``), recursively: a ``TypedDict``'s keys
within its declared keys and its required keys present, every value of its annotated type (``list[...]``,
``dict[str, ...]``, unions, ``Literal``, ``str`` / ``int`` / ``float`` / ``bool`` / None). ``Shapes`` also
records which keys of each ``TypedDict`` the answers had, so a test can require that every declared key was
seen (a key the code stopped producing fails too)."""

import types
from collections import defaultdict
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict


class Shapes:
    def __init__(self):
        self.seen: dict = defaultdict(set)  # TypedDict -> the keys some answer had

    def check(self, value, hint, path: str = "answer") -> None:
        """``AssertionError`` naming the path of the first value that does not match ``hint``."""
        if hint is Any:
            return
        if is_typeddict(hint):
            assert isinstance(value, dict), f"{path}: {type(value).__name__}, expected {hint.__name__}"
            keys = set(value)
            declared = set(hint.__required_keys__) | set(hint.__optional_keys__)
            assert keys <= declared, f"{path}: keys not in {hint.__name__}: {sorted(keys - declared)}"
            missing = set(hint.__required_keys__) - keys
            assert not missing, f"{path}: required keys of {hint.__name__} missing: {sorted(missing)}"
            self.seen[hint] |= keys
            hints = get_type_hints(hint)
            for k in keys:
                self.check(value[k], hints[k], f"{path}.{k}")
            return
        origin = get_origin(hint)
        if origin in (Union, types.UnionType):
            errors = []
            for option in get_args(hint):
                trial = Shapes()
                try:
                    trial.check(value, option, path)
                except AssertionError as exc:
                    errors.append(str(exc))
                    continue
                for td, keys in trial.seen.items():
                    self.seen[td] |= keys
                return
            raise AssertionError(f"{path}: {value!r:.80} matches no option of {hint}: {errors}")
        if origin is Literal:
            assert value in get_args(hint), f"{path}: {value!r} not one of {get_args(hint)}"
            return
        if origin is list:
            assert isinstance(value, list), f"{path}: {type(value).__name__}, expected a list"
            (item,) = get_args(hint)
            for i, v in enumerate(value):
                self.check(v, item, f"{path}[{i}]")
            return
        if origin is dict:
            assert isinstance(value, dict), f"{path}: {type(value).__name__}, expected a dict"
            key_type, item = get_args(hint)
            for k, v in value.items():
                assert isinstance(k, key_type), f"{path}: key {k!r} is not {key_type.__name__}"
                self.check(v, item, f"{path}[{k!r}]")
            return
        if hint is None or hint is type(None):
            assert value is None, f"{path}: {value!r:.80}, expected None"
            return
        if hint is float:  # a JSON number: an int is a float's value too
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif hint is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif hint in (str, bool):
            ok = isinstance(value, hint)
        else:
            raise AssertionError(f"{path}: no check for the annotation {hint!r}")
        assert ok, f"{path}: {value!r:.80} ({type(value).__name__}), expected {getattr(hint, '__name__', hint)}"

    def unseen(self, *roots, skip=()) -> dict:
        """``{TypedDict name: declared keys no answer had}`` over every ``TypedDict`` reachable from ``roots``
        (not through those in ``skip``, checked elsewhere)."""
        out = {}
        for td in reachable(roots, skip):
            missing = (set(td.__required_keys__) | set(td.__optional_keys__)) - self.seen.get(td, set())
            if missing:
                out[td.__name__] = missing
        return out


def reachable(roots, skip=()) -> list:
    """Every ``TypedDict`` in the annotations of ``roots``, roots included, each once (none of ``skip``)."""
    found, todo = [], list(roots)
    while todo:
        hint = todo.pop()
        if is_typeddict(hint):
            if hint in found or hint in skip:
                continue
            found.append(hint)
            todo.extend(get_type_hints(hint).values())
        else:
            todo.extend(a for a in get_args(hint) if not isinstance(a, (str, int, float, bool)) and a is not None)
    return found
