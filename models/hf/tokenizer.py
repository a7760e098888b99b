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

The ``tokenizers`` package is never called in this process: a ``tokenizer.json`` is attacker-written
data (a normalizer that grows text by 20,000x, a regex that panics), so it runs in a worker process of
its own (``tokenizer_worker``, driven by ``tokenizer_process``); only its answers come back: ids, text,
and the vocabulary's pieces (read once, when the tokenizer is loaded).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from ..errors import ConfigError
from .tokenizer_process import TokenizerProcess, WorkerFailed

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def byte_alphabet() -> dict:
    """GPT-2's ``bytes_to_unicode``: byte -> the printable character byte-level BPE writes for it."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


CHAR_TO_BYTE = {c: b for b, c in byte_alphabet().items()}


def render(data: bytes) -> str:
    """Bytes of one token as readable text: whitespace drawn, broken UTF-8 and control bytes as <0xNN>."""
    out, i = [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):  # the shortest valid UTF-8 character starting here
            try:
                ch = data[i : i + n].decode("utf-8")
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
    """A checkpoint's ``tokenizer.json``, run in a worker process of its own, and how its pieces are drawn.

    The ``tokenizers`` package runs only in that worker (``tokenizer_process``): memory-capped,
    killed past a deadline, vetted on probe texts when it is read, and every result bounded per input.
    A tokenizer whose worker failed is started again on the next call, at most ``MAX_FAILURES`` times;
    after that every call raises the last reason (a tokenizer that crashes that often is not run again).
    """

    MAX_FAILURES = 2
    LOAD_SECONDS = 30.0  # build and vet: a 12 MB tokenizer.json (262 K tokens) took 4.7 s on a busy machine
    CALL_SECONDS = 10.0  # one encode / decode of at most MAX_CHARS characters
    MAX_CHARS = 1 << 20  # characters one encode reads (the app asks for far fewer)

    def __init__(self, data: bytes, info: dict, process: TokenizerProcess):
        self._data, self._process, self._lock = data, process, threading.Lock()
        self._failures, self._reason = 0, ""
        self.kind = str(info["kind"])
        self.byte_level, self.metaspace = bool(info["byte_level"]), bool(info["metaspace"])
        self.special = {int(i) for i in info["special"]}
        self.tokens = [str(t) for t in info["tokens"]]
        if len(self.tokens) != int(info["vocab_size"]):
            raise ConfigError("tokenizer.json", "contents", "a vocabulary whose ids run from 0 to its size")

    @classmethod
    def from_file(cls, path, max_bytes: int = 64 << 20) -> Tokenizer:
        path = Path(path)
        size = path.stat().st_size
        if size > max_bytes:
            raise ConfigError("tokenizer.json", f"{size} bytes", f"a tokenizer of at most {max_bytes} bytes")
        return cls.from_bytes(path.read_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> Tokenizer:
        """The tokenizer of a ``tokenizer.json``'s bytes: built and vetted in a new worker, or ConfigError."""
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                "tokenizer.json", f"byte {e.start}: {data[e.start : e.start + 4]!r}", "a UTF-8 text file (JSON)"
            ) from None
        process, info = cls._start(data)
        return cls(data, info, process)

    @staticmethod
    def _start(data: bytes):
        try:
            process = TokenizerProcess()
        except OSError as e:  # no process to be had (the host's process or memory limits)
            raise ConfigError(
                "tokenizer.json", "contents", f"a tokenizer this host can start a process for ({e})"
            ) from None
        try:
            info = process.call({"op": "load"}, data, Tokenizer.LOAD_SECONDS)
        except WorkerFailed as e:
            process.stop()
            raise ConfigError(
                "tokenizer.json",
                "contents",
                f"a tokenizer the tokenizers package reads and runs within bounds ({e.reason})"[:400],
            ) from None
        return process, info

    def _call(self, header: dict):
        with self._lock:
            if self._process is None:
                if self._failures >= self.MAX_FAILURES:
                    raise ConfigError(
                        "tokenizer.json",
                        "contents",
                        f"a tokenizer that runs: it failed {self._failures} times ({self._reason})"[:400],
                    )
                self._process, _ = self._start(self._data)
            process = self._process
        try:
            return process.call(header, deadline_s=self.CALL_SECONDS)
        except WorkerFailed as e:
            if e.fatal:
                with self._lock:
                    if self._process is process:
                        self._process, self._failures, self._reason = None, self._failures + 1, e.reason
            raise ConfigError(
                "tokenizer.json", "contents", f"a tokenizer that runs within bounds ({e.reason})"[:400]
            ) from None

    def close(self) -> None:
        """Stop the worker now (dropping the tokenizer does the same)."""
        with self._lock:
            if self._process is not None:
                self._process.stop()
            self._process, self._failures, self._reason = None, self.MAX_FAILURES, "closed"

    def __getstate__(self):
        return {"data": self._data}

    def __setstate__(self, state):
        other = Tokenizer.from_bytes(state["data"])
        self.__dict__.update(other.__dict__)
        other._process = None

    def __deepcopy__(self, memo):
        return self  # nothing of it changes: one worker serves every copy

    @property
    def vocab_size(self) -> int:
        """Ids run from 0 to vocab_size - 1 (added tokens included)."""
        return len(self.tokens)

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        text = str(text)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, which JSON can carry and UTF-8 cannot
            raise ConfigError("text", f"character {e.start}: {text[e.start]!r}", "Unicode text") from None
        if len(text) > self.MAX_CHARS:
            raise ConfigError("text", f"{len(text)} characters", f"at most {self.MAX_CHARS} characters per encode")
        return [int(i) for i in self._call({"op": "encode", "text": text, "special": bool(add_special_tokens)})]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if len(ids) > self.MAX_CHARS:
            raise ConfigError("ids", f"{len(ids)} ids", f"at most {self.MAX_CHARS} ids per decode")
        return str(self._call({"op": "decode", "ids": ids, "skip": bool(skip_special_tokens)}))

    def token(self, i: int) -> str:
        """The raw vocabulary entry of id ``i`` (``Ġthe``, ``##ing``, ``▁the``); '' for an unused id."""
        i = int(i)
        return self.tokens[i] if 0 <= i < len(self.tokens) else ""

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
