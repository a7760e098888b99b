"""The tokens the long-context view reads: a held-out passage, a passage with a long-range repeat, or yours.

Every source goes through the one text path (``explorer.runtime.text.model_input``): bytes for a bundled
model, a checkpoint's own tokens through its tokenizer (which runs in its worker process), so a length
of ``L`` is ``L`` tokens of the model's own vocabulary.

- ``heldout``: the start of the documentation corpus's held-out split (``explorer.runtime.corpus``: the
  part the bundles never trained on), repeated from its start when it holds fewer than ``L`` tokens
  (a note says so: a repeat is itself a long-range pattern).
- ``repeat``: held-out text in which one held-out paragraph appears twice, ``REPEAT_DISTANCE`` tokens
  apart (half the length when the passage is shorter than ``2 * REPEAT_DISTANCE``): on the second copy
  an induction head that still works at that distance puts a stripe ``distance`` keys left of the
  diagonal, and the per-token loss drops where the model recalls the first copy.
- ``pasted``: the visitor's own text, at most ``MAX_PASTED_BYTES``; a text of fewer tokens than asked
  is read whole (the length becomes its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.runtime.corpus import paragraphs, python_docs, split_corpus
from explorer.runtime.text import as_text, model_input
from models import ConfigError

SOURCES = ("heldout", "repeat", "pasted")
MAX_PASTED_BYTES = 64 * 1024
REPEAT_DISTANCE = 3072  # tokens between the two copies of the repeated paragraph (at L >= 2 x this)
REPEAT_BYTES = (200, 600)  # the repeated paragraph: a held-out one of this many bytes
MIN_TOKENS = 2  # a next-token loss needs two tokens


@dataclass(frozen=True)
class Passage:
    """The ``(L,)`` token ids a model reads, and what they are."""

    ids: tuple
    source: str
    notes: tuple = ()
    repeat: tuple | None = None  # (first copy's start, second copy's start, copy length) in tokens


def heldout_text() -> str:
    """The documentation corpus's held-out split (the part no bundle trained on), as text."""
    return split_corpus(python_docs())[1].decode("utf-8", errors="ignore")


def _ids(cfg, text: str, n: int, tokenizer) -> tuple:
    """The first ``n`` tokens ``cfg``'s model reads from ``text`` (the one text path)."""
    return model_input(cfg, text, max_bytes=n, tokenizer=tokenizer).ids(_name(cfg))


def _name(cfg) -> str:
    from models.architectures import arrangement

    return arrangement(cfg).inputs[0]


def _filled(cfg, text: str, n: int, tokenizer, notes: list, what: str) -> tuple:
    """``n`` tokens of ``text``, repeated from its start when it holds fewer (said in ``notes``)."""
    ids = _ids(cfg, text, n, tokenizer)
    if len(ids) < n:
        notes.append(
            f"{what} holds {len(ids)} tokens: it is repeated from its start to reach {n}, so past "
            f"position {len(ids)} the text is a copy (a long-range repeat of its own)"
        )
        ids = (ids * (-(-n // len(ids))))[:n]
    return ids


def _repeated_paragraph(text: str) -> str:
    lo, hi = REPEAT_BYTES
    for p in paragraphs(text.encode("utf-8")):
        if lo <= len(p) <= hi:
            return p.decode("utf-8", errors="ignore")
    return text[:lo]


def passage(cfg, length: int, source: str, text=None, tokenizer=None) -> Passage:
    """The tokens of ``source`` at ``length`` tokens for ``cfg``'s model (module docstring); ``ConfigError``
    naming ``source`` or ``text`` when they cannot be used."""
    if source not in SOURCES:
        raise ConfigError("source", str(source)[:40], f"one of {list(SOURCES)}")
    notes = []
    if source == "pasted":
        text = as_text(text)
        size = len(text.encode("utf-8"))
        if size > MAX_PASTED_BYTES:
            raise ConfigError("text", f"{size} bytes", f"at most {MAX_PASTED_BYTES} bytes (64 KB) of pasted text")
        if not text.strip():
            raise ConfigError("text", "empty", "some text to read (the 'pasted' source reads the text box)")
        ids = _ids(cfg, text, length, tokenizer)
        if len(ids) < MIN_TOKENS:
            raise ConfigError("text", f"{len(ids)} token", f"at least {MIN_TOKENS} tokens")
        if len(ids) < length:
            notes.append(f"your text is {len(ids)} tokens: it is read whole (asked: {length})")
        return Passage(ids, source, tuple(notes))
    held = heldout_text()
    if source == "heldout":
        return Passage(_filled(cfg, held, length, tokenizer, notes, "the held-out split"), source, tuple(notes))
    para = _repeated_paragraph(held)
    copy = _ids(cfg, para, max(1, length // 4), tokenizer)
    distance = REPEAT_DISTANCE if length >= 2 * REPEAT_DISTANCE else length // 2
    first = min(256, length // 8)
    filler = _filled(cfg, held.replace(para, ""), length, tokenizer, notes, "the held-out split less the paragraph")
    gap = distance - len(copy)
    ids = filler[:first] + copy + filler[first : first + gap] + copy + filler[first + gap :]
    if distance != REPEAT_DISTANCE:
        notes.append(
            f"at {length} tokens the copies are {distance} tokens apart ({REPEAT_DISTANCE} from "
            f"{2 * REPEAT_DISTANCE} tokens on)"
        )
    return Passage(tuple(ids[:length]), source, tuple(notes), (first, first + distance, len(copy)))
