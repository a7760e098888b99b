"""The text the language-modelling tasks and the bundled models read, and its held-out split.

``python_docs()`` is the interpreter's own documentation (``pydoc_data.topics``): present wherever
Python is, nothing to download. ``split_corpus(data)`` cuts a text into a training part and a held-out
part that shares no 64-byte run with it (the documentation repeats whole sections between topics, and a
model that memorised them would look better on "held-out" text than it is). The training tasks
(``explorer.training.tasks``) and the analyses that score a bundled model on held-out text
(``explorer.analysis.surgery``) both read it from here.
"""
from __future__ import annotations

import re
from functools import lru_cache

HELDOUT_FRACTION = 0.1

@lru_cache(maxsize=1)
def python_docs() -> bytes:
    """The interpreter's own documentation topics (``pydoc_data.topics``), UTF-8, sorted by topic."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


OVERLAP_WINDOW = 64  # bytes: a held-out paragraph sharing a run this long with the training text is dropped
MIN_PARAGRAPHS = 10


def paragraphs(data: bytes) -> list:
    """The non-blank paragraphs of ``data`` (split at blank lines)."""
    return [p for p in re.split(rb"\n[ \t]*\n", data) if p.strip()]


def windows(data: bytes, width: int = OVERLAP_WINDOW) -> set:
    """Every ``width``-byte substring of ``data``."""
    return {data[i:i + width] for i in range(len(data) - width + 1)}


def overlaps(part: bytes, seen: set, width: int = OVERLAP_WINDOW) -> bool:
    """Whether ``part`` shares a ``width``-byte run with the text whose ``windows`` are ``seen`` (a part
    shorter than ``width`` never does: it is too short to be a copy worth the name)."""
    return any(part[i:i + width] in seen for i in range(len(part) - width + 1))


@lru_cache(maxsize=4)
def split_corpus(data: bytes, fraction: float = HELDOUT_FRACTION) -> tuple:
    """(train, heldout): no held-out paragraph shares a run of ``OVERLAP_WINDOW`` bytes with the training
    part (runs that straddle two held-out paragraphs, about 0.4% of the Python documentation's
    held-out windows, are joins of unrelated paragraphs and are kept).

    The text is cut at a paragraph boundary so that about the last ``fraction`` of its bytes is held
    out; then every held-out paragraph that shares a ``OVERLAP_WINDOW``-byte run with the training part
    (or with an earlier held-out paragraph) is dropped: the Python documentation repeats whole sections
    between topics (8.5% of a plain tail's 64-byte windows occur verbatim in the rest), and a model
    that memorised them would look better on held-out text than it is. A text of fewer than
    ``MIN_PARAGRAPHS`` paragraphs is split as a contiguous tail (there is nothing to deduplicate by)."""
    paras = paragraphs(data)
    if len(paras) < MIN_PARAGRAPHS:
        cut = int(len(data) * (1 - fraction))
        return data[:cut], data[cut:]
    total, k, tail = sum(len(p) + 2 for p in paras), len(paras), 0
    while k > 1 and tail + len(paras[k - 1]) + 2 <= fraction * total:
        k -= 1
        tail += len(paras[k]) + 2
    train = b"\n\n".join(paras[:k])
    seen, held = windows(train), []
    for p in paras[k:]:
        if not overlaps(p, seen):
            held.append(p)
            seen |= windows(p)
    return train, b"\n\n".join(held)
