"""The fast loop's sample of the suite: ``-m "not browser and not slow and not exhaustive"``.

Most of the suite's count is parametrization: a test run for every registry key, every option, every
shape. The fast loop keeps, of each test function, its first ``PER_FUNCTION`` cases, then adds the fewest
further cases, in collection order, that name every registry key (``models.choices()``) at least once; every
other case is marked ``exhaustive``. So every test function runs, every key of the catalogue is exercised,
and the full command (no ``-m``) still runs everything. The choice depends only on the collected ids, so
every pytest-xdist worker makes the same one.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

PER_FUNCTION = 2
MARK = "exhaustive"


def _registry_keys() -> frozenset:
    from models import choices

    return frozenset(k for keys in choices().values() for k in keys)


def _function(item) -> tuple:
    return (
        str(item.path),
        item.cls.__name__ if getattr(item, "cls", None) else "",
        getattr(item, "originalname", None) or item.name.split("[")[0],
    )


def _named_keys(item, keys: frozenset) -> set:
    spec = getattr(item, "callspec", None)
    if spec is None:
        return set()
    return set(re.split(r"[-\[\],=/ ]+", spec.id)) & keys


def mark_exhaustive(items: list) -> int:
    """Mark the cases the fast loop leaves out; returns how many."""
    keys = _registry_keys()
    groups = defaultdict(list)
    for item in items:
        groups[_function(item)].append(item)
    kept, covered = set(), set()
    for group in groups.values():
        for item in group[:PER_FUNCTION]:
            kept.add(item.nodeid)
            covered |= _named_keys(item, keys)
    for item in items:
        if item.nodeid in kept:
            continue
        new = _named_keys(item, keys) - covered
        if new:
            kept.add(item.nodeid)
            covered |= new
    left = [item for item in items if item.nodeid not in kept]
    for item in left:
        item.add_marker(getattr(pytest.mark, MARK))
    return len(left)
