"""The text the language-modelling tasks and the bundled models read, and its held-out split.

``python_docs()`` is the interpreter's own documentation (``pydoc_data.topics``): present wherever
Python is, nothing to download. ``split_corpus(data)`` cuts a text into a training part and a held-out
part whose scored text (its paragraphs joined as they are read) shares no 64-byte run with it (the
documentation repeats whole sections between topics, and a model that memorised them would look better
on "held-out" text than it is). The training tasks
(``explorer.training.tasks``) and the analyses that score a bundled model on held-out text
(``explorer.analysis.surgery``) both read it from here. ``unigram_loss(train, held)`` is the held-out loss
of a model that knows only the byte frequencies: the floor a language model must get under to have
learned anything about context.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache

HELDOUT_FRACTION = 0.1


@lru_cache(maxsize=1)
def python_docs() -> bytes:
    """The interpreter's own documentation topics (``pydoc_data.topics``), UTF-8, sorted by topic."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


OVERLAP_WINDOW = 64  # bytes: a held-out paragraph that brings a training run this long into the scored text is dropped
SEP = b"\n\n"  # how paragraphs are joined, in both parts
MIN_PARAGRAPHS = 10


def paragraphs(data: bytes) -> list:
    """The non-blank paragraphs of ``data`` (split at blank lines)."""
    return [p for p in re.split(rb"\n[ \t]*\n", data) if p.strip()]


def windows(data: bytes, width: int = OVERLAP_WINDOW) -> set:
    """Every ``width``-byte substring of ``data``."""
    return {data[i : i + width] for i in range(len(data) - width + 1)}


def overlaps(part: bytes, seen: set, width: int = OVERLAP_WINDOW) -> bool:
    """Whether ``part`` shares a ``width``-byte run with the text whose ``windows`` are ``seen`` (a part
    shorter than ``width`` never does: it is too short to be a copy worth the name)."""
    return any(part[i : i + width] in seen for i in range(len(part) - width + 1))


def joins_cleanly(held: bytes, para: bytes, seen: set, width: int = OVERLAP_WINDOW) -> bool:
    """Whether appending ``para`` to the held-out text ``held`` (joined by ``SEP``) adds no ``width``-byte
    window that is in ``seen``: the new windows are those that end inside ``SEP + para``, so the ones that
    straddle the join and the whole of a paragraph shorter than ``width`` are checked too."""
    return not overlaps(held[-(width - 1) :] + SEP + para if held else para, seen, width)


@lru_cache(maxsize=4)
def split_corpus(data: bytes, fraction: float = HELDOUT_FRACTION) -> tuple:
    """(train, heldout): no ``OVERLAP_WINDOW``-byte window of the held-out text, as it is scored (its
    paragraphs joined by ``SEP``), occurs in the training part, and no held-out paragraph shares such a
    run with an earlier one.

    The text is cut at a paragraph boundary so that about the last ``fraction`` of its bytes is held
    out; then the held-out paragraphs are appended one by one, in order, and a paragraph is dropped when
    appending it would bring in a window of the training part (the windows across the join included) or
    when it shares a run with an earlier held-out paragraph: the Python documentation repeats whole
    sections between topics (8.5% of a plain tail's 64-byte windows occur verbatim in the rest), and a
    model that memorised them would look better on held-out text than it is. Checking each paragraph
    alone is not enough: paragraphs shorter than the window are never checked, and dropping the
    paragraphs between two others joins them into runs that were copied whole (the ``with`` statement's
    examples, copied from ``compound``, joined into runs of up to 135 bytes that occur in the training
    part). A text of fewer than ``MIN_PARAGRAPHS`` paragraphs is split as a contiguous tail (there is
    nothing to deduplicate by)."""
    paras = paragraphs(data)
    if len(paras) < MIN_PARAGRAPHS:
        cut = int(len(data) * (1 - fraction))
        return data[:cut], data[cut:]
    total, k, tail = sum(len(p) + len(SEP) for p in paras), len(paras), 0
    while k > 1 and tail + len(paras[k - 1]) + len(SEP) <= fraction * total:
        k -= 1
        tail += len(paras[k]) + len(SEP)
    train = SEP.join(paras[:k])
    trained, kept, held = windows(train), set(), b""
    for p in paras[k:]:
        if joins_cleanly(held, p, trained) and not overlaps(p, kept):
            held = held + SEP + p if held else p
            kept |= windows(p)
    return train, held


def byte_counts(data: bytes) -> list:
    """How often each of the 256 byte values occurs in ``data``."""
    counts = [0] * 256
    for value, n in Counter(data).items():
        counts[value] = n
    return counts


def unigram_entropy(data: bytes) -> float:
    """``-sum_b p(b) ln p(b)`` in nats per byte, ``p`` the byte frequencies of ``data``: the loss of the best
    model that ignores context, scored on the text it counted."""
    n = len(data)
    return -sum(c / n * math.log(c / n) for c in byte_counts(data) if c)


def unigram_loss(train: bytes, held: bytes) -> float:
    """The mean next-byte loss on ``held`` (nats per byte) of a model that predicts every byte by its
    frequency in ``train``, ignoring context, with one extra count per byte value (add-one smoothing, so
    a byte ``train`` lacks costs ``ln(len(train) + 256)``, not infinity). A language model whose held-out
    loss sits at this number has learned only which bytes are common: for the Python documentation's
    split it is 3.30 nats per byte (``unigram_entropy`` of the training part: 3.26), where the post-LN
    bundle trained at lr 3e-3 stalled (3.31)."""
    counts, total = byte_counts(train), len(train) + 256
    return -sum(n * math.log((counts[b] + 1) / total) for b, n in Counter(held).items()) / len(held)
