"""What a model reads from a text: the one path from the text box, a share link, an upload or an API
call to token ids.

Tokens are bytes: the UTF-8 bytes of the text are the ids. A model whose arrangement reads one sequence
reads the text's first ``MAX_TEXT_BYTES`` bytes; one that reads a source and a target (an
encoder-decoder) splits the text at the first occurrence of its separator and reads at most
``MAX_TEXT_BYTES // 2`` bytes of each side, so the pair costs what one text costs. ``model_input`` is
the only function that does this, and ``check_separator`` the only check of a separator (1 to
``MAX_SEPARATOR_CHARS`` visible characters): the figures, the share link, the API and the export all
read the same ids from the same text.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.tokens import token_label
from models import ConfigError
from models.architectures import arrangement

# A repeated rare word: on its later copies the bundled model's four layer-1 heads read the byte that followed
# an earlier copy (induction 0.32-0.37 over every repeated pair of the text), beside a previous-token head in
# layer 0 and local heads. 110 bytes, so that every structured pattern allows a different set of pairs than
# full attention (``models.attention.pattern_mask``): the third copy sits more than 64 bytes after the second,
# out of a 64-key window's reach; BigBird's random blocks (16 bytes each) have room to land off the window
# (at 89 bytes BigBird allowed exactly full attention's pairs). Each copy is within 128 bytes of the copy
# before it, the length the bundled models were trained at: their induction heads never saw a longer distance.
# No longer: the maps of a redraw grow with the square of the length; the grid and its detail event must stay
# within 500 kB (tests/browser/test_payload.py: 185 bytes sent 893 kB, 128 bytes 583 kB) and the whole chain
# within 650 kB (tests/browser/test_redraw_wire.py: ~600 kB at 110 bytes); under ~100 bytes BigBird allows
# exactly full attention's pairs again.
DEFAULT_TEXT = (
    "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it. Much later, out of a window's reach: Xq7Rv9Lm2."
)
DEFAULT_SEPARATOR = "=>"
# The encoder-decoder's example: a source and its reversal (the alignment is the anti-diagonal), written in the
# symbols its bundle was trained on ('0'..'o': digits, capitals, '_', a-o) at its trained length, 23 symbols. On
# "the quick brown fox" (letters past 'o', 19 symbols) the bundle's decoder lost 7.9 nats per token; on this, 0.0002.
SEQ2SEQ_TEXT = "REVERSE_THIS_TEXT_12345=>54321_TXET_SIHT_ESREVER"
MAX_SEPARATOR_CHARS = 16
CHARS_PER_TOKEN = 64  # characters tokenised per token a checkpoint reads (tokenized_input)


@dataclass(frozen=True)
class ModelInput:
    """The token ids a model reads from one text: ``sequences`` holds ``(name, ids)`` pairs in the
    arrangement's call order (``("tokens", ...)``, or ``("source", ...), ("target", ...)``)."""

    text: str  # the part of the text the model reads (what a share link carries)
    separator: str | None  # where a source / target text splits; None for one sequence
    sequences: tuple  # ((name, tuple of ids), ...)
    truncated: bool  # a side was cut to its byte budget
    pieces: tuple = ()  # ((name, tuple of readable tokens), ...) of a tokenizer's ids; () for bytes

    def ids(self, name: str) -> tuple:
        return dict(self.sequences)[name]

    def labels(self, name: str) -> tuple:
        """The readable token of each id: the tokenizer's pieces, or the bytes made visible."""
        if self.pieces:
            return dict(self.pieces)[name]
        return tuple(token_label(b) for b in self.ids(name))

    @property
    def longest(self) -> int:
        return max(len(ids) for _, ids in self.sequences)


def clip_text(text, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The first ``max_bytes`` UTF-8 bytes of ``text`` (whole characters)."""
    raw = str(text).encode("utf-8")
    if len(raw) <= max_bytes:
        return str(text)
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def check_separator(separator) -> str:
    """The separator as given (never stripped: spaces may be part of it); None is the default.

    Refused with a ``ConfigError``: anything but a string, the empty string, more than ``MAX_SEPARATOR_CHARS``
    characters, control or format characters (a newline, a NUL, a right-to-left override: the box is
    one line, and an invisible separator could not be seen where it splits). The echoed value is cut."""
    if separator is None:
        return DEFAULT_SEPARATOR
    bad = (
        not isinstance(separator, str)
        or not separator
        or len(separator) > MAX_SEPARATOR_CHARS
        or any(unicodedata.category(ch).startswith("C") for ch in separator)
    )
    if bad:
        shown = (
            separator[:MAX_SEPARATOR_CHARS] + "…"
            if isinstance(separator, str) and len(separator) > MAX_SEPARATOR_CHARS
            else separator
        )
        raise ConfigError(
            "separator",
            shown,
            f"a non-empty string of at most {MAX_SEPARATOR_CHARS} visible characters (no control "
            "characters) that occurs in the text between the source and the target",
        )
    return separator


def reads_pair(cfg) -> bool:
    """True when ``cfg``'s model reads a source and a target (its text is split at a separator)."""
    return len(arrangement(cfg).inputs) > 1


def default_text(cfg) -> str:
    """The example text of ``cfg``'s arrangement (a source => target pair for an encoder-decoder)."""
    return SEQ2SEQ_TEXT if reads_pair(cfg) else DEFAULT_TEXT


def as_text(text, default: str | None = None) -> str:
    """A text value from a box or an API call: None (or "" when ``default`` is given) -> ``default`` or
    ""; anything but a string, or a string that is not valid Unicode (a lone surrogate), is refused, naming
    the field."""
    if text is None or (text == "" and default is not None):
        return default or ""
    if not isinstance(text, str):
        raise ConfigError("text", type(text).__name__, "a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (JSON's "\ud800"): no text a model can read
        raise ConfigError("text", f"character {exc.start}", "valid Unicode text (a lone surrogate is not)") from None
    return text


def paired_text(cfg, text: str, separator=None) -> tuple:
    """``(text, note)``: the text an encoder-decoder can read when the user has just switched to one.

    A text without the separator would be refused (``model_input``), which on the first click of
    "encoder_decoder" showed a warning and stale maps: the decoder's example text becomes the
    encoder-decoder's example (with the box's separator); any other text is kept and split at the
    space nearest its middle (source before, target after), and ``note`` says so. A text that
    already holds the separator, or a config that reads one sequence, comes back unchanged (note "").
    """
    if not reads_pair(cfg):
        return text, ""
    sep = check_separator(separator or None)
    if sep in text:
        return text, ""
    if not text.strip() or text == DEFAULT_TEXT:
        return SEQ2SEQ_TEXT.replace(DEFAULT_SEPARATOR, sep), (
            f"An encoder-decoder reads a source and a target: the text is its example, split at {sep!r}."
        )
    mid = len(text) // 2
    spaces = [i for i, ch in enumerate(text) if ch == " " and 0 < i < len(text) - 1]
    cut = min(spaces, key=lambda i: abs(i - mid)) if spaces else max(1, mid)
    src, tgt = text[:cut].rstrip() or text[:cut], text[cut:].lstrip() or text[cut:]
    return f"{src}{sep}{tgt}", (
        f"An encoder-decoder reads a source and a target: {sep!r} was inserted at "
        f"character {len(src)} of your text (source before it, target after); move it "
        "to split elsewhere."
    )


def model_input(cfg, text, separator=None, max_bytes: int = MAX_TEXT_BYTES, tokenizer=None) -> ModelInput:
    """The ids ``cfg``'s model reads from ``text`` (see the module docstring); ``separator`` None or ""
    (an emptied box) is the default. ``ConfigError`` for an empty text, a separator refused or missing
    from the text, or an empty source / target. ``tokenizer``: a pretrained checkpoint's
    (``models.hf.Tokenizer``): the ids are its tokens, at most ``max_bytes`` of them per text
    (``tokenized_input``)."""
    text = as_text(text)
    if tokenizer is not None:
        return tokenized_input(cfg, text, separator, max_bytes, tokenizer)
    names = arrangement(cfg).inputs
    if len(names) == 1:
        raw = text.encode("utf-8")
        if not raw:
            raise ConfigError("text", text, "at least one character")
        return ModelInput(clip_text(text, max_bytes), None, ((names[0], tuple(raw[:max_bytes])),), len(raw) > max_bytes)
    separator = check_separator(separator or None)
    if separator not in text:
        raise ConfigError(
            "separator",
            separator,
            f"a separator present in the text: write the source, then {separator!r}, then the target",
        )
    src, tgt = text.split(separator, 1)
    half = max(1, int(max_bytes) // 2)
    s, t = src.encode("utf-8"), tgt.encode("utf-8")
    if not s or not t:
        side = "source (before" if not s else "target (after"
        raise ConfigError("text", text, f"a non-empty {side} {separator!r})")
    used = clip_text(src, half) + separator + clip_text(tgt, half)
    return ModelInput(
        used, separator, ((names[0], tuple(s[:half])), (names[1], tuple(t[:half]))), len(s) > half or len(t) > half
    )


def tokenized_input(cfg, text: str, separator, max_tokens: int, tokenizer) -> ModelInput:
    """``model_input`` through a checkpoint's tokenizer: the text split like a byte text, each side's first
    ``max_tokens`` tokens (half each for a source and a target), their readable pieces. At most
    ``CHARS_PER_TOKEN * max_tokens`` characters are tokenised (a bound on the work an API call's text can
    ask for; a token of a real vocabulary is far shorter)."""
    names = arrangement(cfg).inputs
    text = text[: CHARS_PER_TOKEN * max_tokens * (2 if len(names) > 1 else 1)]
    if len(names) == 1:
        sides, budget_each = [text], int(max_tokens)
    else:
        separator = check_separator(separator or None)
        if separator not in text:
            raise ConfigError(
                "separator",
                separator,
                f"a separator present in the text: write the source, then {separator!r}, then the target",
            )
        sides, budget_each = text.split(separator, 1), max(1, int(max_tokens) // 2)
    seqs, pieces, used, cut = [], [], [], False
    for name, side in zip(names, sides):
        ids = tokenizer.encode(side)
        if not ids:
            raise ConfigError("text", side[:40], "text that gives at least one token")
        cut = cut or len(ids) > budget_each
        ids = ids[:budget_each]
        seqs.append((name, tuple(ids)))
        pieces.append((name, tuple(tokenizer.pieces(ids))))
        used.append(tokenizer.decode(ids) if len(ids) == budget_each else side)
    return ModelInput(
        (separator or "").join(used) if len(names) > 1 else used[0],
        separator if len(names) > 1 else None,
        tuple(seqs),
        cut,
        tuple(pieces),
    )
