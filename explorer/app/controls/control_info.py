"""The one-line explanation under each category dropdown: what the selected variant does.

The line is the selected variant's ``summary`` from its registry record (the same sentence the
catalogue document and the Model tab use), so a variant registered later explains itself. Memories
whose effect the Attention tab cannot show add why its maps look as they do: kNN-LM and SPALM act
after the last attention layer (on the next-token distribution, on the final hidden state), the
Memorizing Transformer's retrieval is gated in beside the drawn local map, and Transformer-XL /
compressive memories only change the maps once the text is longer than a segment plus its memory.
A category no chosen variant reads (a norm under placement ``none``) says so first.
"""

from __future__ import annotations

from models import registries

UNUSED = "not used by the current choices (no variant reads it)"
# what the Attention tab shows for memories that change little or nothing there (measured on the
# default config: xl / compressive maps equal memory "none" for a text within segment_len + mem_len
# bytes; knn, knn_lm, spalm maps are each segment's own causal attention)
MEMORY_ATTENTION_NOTES = {
    "xl": "Attention tab: each segment also attends the previous `mem_len` tokens, so the maps equal no "
    "memory until the text is longer than `segment_len` + `mem_len` bytes.",
    "compressive": "Attention tab: the maps equal no memory until the text is longer than `segment_len` + "
    "`mem_len` bytes; then older tokens appear as compressed memory columns.",
    "knn": "Attention tab: the maps are each segment's local attention; the retrieved past keys and "
    "values are gated in beside them by one layer (its reach: Variant views).",
    "knn_lm": "Attention tab: the retrieval changes the next-token distribution, not attention; the maps "
    "only show the text cut into segments of `segment_len` that do not attend each other.",
    "spalm": "Attention tab: the retrieved tokens are mixed into the final hidden state, after the last "
    "attention; the maps only show the segments of `segment_len` that do not attend each other.",
}


def summary(category: str, key) -> str | None:
    """The registry's one-sentence summary of ``key`` in ``category`` (None for an unknown key)."""
    variant = registries().get(category, {}).get(key) if isinstance(key, str) else None
    return variant.summary if variant is not None else None


def choice_info(category: str, key, unused: bool = False) -> str | None:
    """The info line of ``category``'s dropdown while ``key`` is selected."""
    parts = [UNUSED + "."] if unused else []
    text = summary(category, key)
    if text:
        parts.append(text)
    if category == "memory" and key in MEMORY_ATTENTION_NOTES:
        parts.append(MEMORY_ATTENTION_NOTES[key])
    return " ".join(parts) or None
