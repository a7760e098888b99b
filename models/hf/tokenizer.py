"""A checkpoint's tokenizer (``tokenizer.json``, read by the ``tokenizers`` package) and readable pieces.

``Tokenizer.from_file(path)``; ``encode(text) -> [id]`` (no special tokens unless asked),
``decode(ids) -> text``, ``pieces(ids) -> [str]``: each token as a person reads it on a map axis.

Readable pieces: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) stores a token as characters standing
for bytes (``Ġ`` a space, ``Ċ`` a newline); they are turned back into the token's bytes and decoded,
and whitespace is drawn visibly: a space as ``␣``, a newline as ``↵``, a tab as ``⇥``, other control
characters and bytes that are part of a longer UTF-8 character as ``<0xNN>``. SentencePiece-style
pieces (``▁the``, byte fallback ``<0x0A>``) are rendered the same way. WordPiece continuations keep
their ``##`` (they say "glued to the previous piece"); special tokens (``[CLS]``, ``<|endoftext|>``)
are shown as they are.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import ConfigError

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def byte_alphabet() -> dict:
    """GPT-2's ``bytes_to_unicode``: byte -> the printable character byte-level BPE writes for it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


CHAR_TO_BYTE = {c: b for b, c in byte_alphabet().items()}


def _has_type(node, kind: str) -> bool:
    """Whether a tokenizer.json component (or a Sequence of them) is of ``kind``."""
    if isinstance(node, dict):
        if node.get("type") == kind:
            return True
        return any(_has_type(v, kind) for v in node.values() if isinstance(v, (dict, list)))
    if isinstance(node, list):
        return any(_has_type(v, kind) for v in node)
    return False


def render(data: bytes) -> str:
    """Bytes of one token as readable text: whitespace drawn, broken UTF-8 and control bytes as <0xNN>."""
    out, i = [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):  # the shortest valid UTF-8 character starting here
            try:
                ch = data[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            break
        else:
            out.append(f"<0x{data[i]:02X}>")
            i += 1
            continue
        out.append(VISIBLE.get(ch, ch if ch.isprintable() else f"<0x{ord(ch):02X}>" if ord(ch) < 256 else ch))
        i += n
    return "".join(out)


class Tokenizer:
    """The ``tokenizers`` tokenizer of a checkpoint and how its pieces are drawn."""

    def __init__(self, tok, spec: dict):
        self.tok = tok
        self.byte_level = _has_type(spec.get("pre_tokenizer"), "ByteLevel") or _has_type(spec.get("decoder"),
                                                                                          "ByteLevel")
        self.metaspace = _has_type(spec.get("pre_tokenizer"), "Metaspace") or _has_type(spec.get("decoder"),
                                                                                         "Metaspace")
        model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
        self.kind = str(model.get("type", "unknown"))
        self.special = {t.get("id") for t in spec.get("added_tokens") or () if isinstance(t, dict) and t.get("special")}

    @classmethod
    def from_file(cls, path, max_bytes: int = 64 << 20) -> "Tokenizer":
        from tokenizers import Tokenizer as HFTokenizer

        path = Path(path)
        size = path.stat().st_size
        if size > max_bytes:
            raise ConfigError("tokenizer.json", f"{size} bytes", f"a tokenizer of at most {max_bytes} bytes")
        text = path.read_text(encoding="utf-8", errors="strict")
        try:
            spec = json.loads(text)
            tok = HFTokenizer.from_str(text)
        except Exception as e:  # the tokenizers parser's own errors carry no common type
            raise ConfigError("tokenizer.json", "contents", f"a tokenizer the tokenizers package reads ({e})"[:300]) \
                from None
        if not isinstance(spec, dict):
            raise ConfigError("tokenizer.json", type(spec).__name__, "a JSON object")
        return cls(tok, spec)

    @property
    def vocab_size(self) -> int:
        """Ids run from 0 to vocab_size - 1 (added tokens included)."""
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token(self, i: int) -> str:
        """The raw vocabulary entry of id ``i`` (``Ġthe``, ``##ing``, ``▁the``); '' for an unused id."""
        return self.tok.id_to_token(int(i)) or ""

    def piece(self, i: int) -> str:
        """Token ``i`` as a person reads it (see the module docstring)."""
        raw = self.token(i)
        if int(i) in self.special:
            return raw
        if self.byte_level and raw and all(c in CHAR_TO_BYTE for c in raw):
            return render(bytes(CHAR_TO_BYTE[c] for c in raw))
        m = BYTE_PIECE.match(raw)
        if m:  # SentencePiece byte fallback
            return render(bytes([int(m.group(1), 16)]))
        if self.metaspace:
            raw = raw.replace("▁", " ")
        return render(raw.encode("utf-8"))

    def pieces(self, ids) -> list:
        return [self.piece(i) for i in ids]
