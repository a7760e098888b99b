"""The process that runs a checkpoint's ``tokenizer.json``: started by ``models.hf.tokenizer_process``.

A ``tokenizer.json`` is attacker-written data for a program in Rust: a ``Replace`` normalizer can grow
each character into megabytes (the allocation fails and Rust aborts the whole process), a ``Split``
regex can hit the regex engine's retry limit and a junk ``Precompiled`` charsmap can index out of
bounds (both panic: ``pyo3_runtime.PanicException``, a ``BaseException`` that passes every ``except
Exception``). So the ``tokenizers`` package is imported here only, in a child process that limits its
own address space (``RLIMIT_AS``, set first thing) and is killed by its parent past a deadline.

Run as ``python tokenizer_worker.py <address-space bytes>`` (by path, so that neither ``models`` nor
torch is imported: the whole process stays a few tens of MB). Frames on stdin / stdout: a 4-byte
header length, an 8-byte payload length, a JSON header, the payload (the ``tokenizer.json`` bytes of
a ``load``). Requests: ``load`` (build, vet on ``PROBES``, answer the vocabulary's pieces),
``encode``, ``decode``. Each answer is ``{"ok": result}`` or ``{"error": reason, "panic": bool}``;
after a panic or a ``MemoryError`` the worker answers and exits (its state is not trusted again).
stdin's end (the parent is gone) ends it; ``SIGALRM`` (default action: terminate) ends a request that
(and its answer) outlives its deadline by ``ALARM_MARGIN_S`` while the parent cannot (the parent was killed
mid-request). Nothing but this file's frames reaches stdout: fd 1 is moved to a private descriptor and /dev/null takes
its place.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this folder's modules (models.hf's) must not shadow anything imported below

import json  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402

HEAD = struct.Struct(">IQ")  # header length, payload length
MAX_TOKENS_PER_CHAR = 32  # encode: ids per input character (UTF-8 bytes are 4; NFKD's worst is 18)
MAX_NORMALIZED_PER_CHAR = 32  # the normalizer's characters per input character
MAX_CHARS_PER_TOKEN = 1024  # decode: characters per id
SLACK = 64  # special tokens a post-processor adds, whatever the text's length
MAX_VOCAB = 1 << 21  # ids a vocabulary may use (the largest real ones hold ~262 K)
ALARM_MARGIN_S = 1.0  # past its deadline the parent kills the worker; past this too, SIGALRM does
DECODE_CHUNK = 4096  # ids per decode when the whole vocabulary is vetted
PROBES = (  # texts each tokenizer is vetted on: ordinary text, long runs, and backtracking bait
    "a",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "".join(map(chr, range(32, 127))),
    "naïve café — 東京 🙂 ﷺ ｶﾞ ẞ ǅ",
    "\n\t\r  x  \n\n",
    "a" * 32 + "!",
    "a" * 1024 + "!",
    "hello world " * 32 + "!",
    "def main():\n    return 42\n",
    " " * 256,
)


class Refused(Exception):
    """A tokenizer that ran but broke a bound (expansion, ids outside its vocabulary)."""


def read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(fd: int):
    head = read_exact(fd, HEAD.size)
    if head is None:
        return None, None
    n_head, n_payload = HEAD.unpack(head)
    header, payload = read_exact(fd, n_head), read_exact(fd, n_payload)
    if header is None or payload is None:
        return None, None
    return json.loads(header), payload


def write_frame(fd: int, header: dict) -> None:
    data = json.dumps(header).encode("ascii")
    view = memoryview(HEAD.pack(len(data), 0) + data)
    while view:
        view = view[os.write(fd, view) :]


def component_types(component) -> set:
    """Every ``"type"`` in a pipeline component's JSON (a Sequence lists its parts)."""
    if component is None:
        return set()
    found, stack = set(), [json.loads(component.__getstate__())]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                found.add(node["type"])
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return found


class Worker:
    def __init__(self):
        self.tok, self.vocab_size = None, 0

    def load(self, text: str) -> dict:
        from tokenizers import Tokenizer

        self.tok = tok = Tokenizer.from_str(text)
        ids = list(tok.get_vocab(with_added_tokens=True).values())
        self.vocab_size = max([tok.get_vocab_size(with_added_tokens=True), *(i + 1 for i in ids)])
        if self.vocab_size > MAX_VOCAB:
            raise Refused(f"a vocabulary of {self.vocab_size} ids; at most {MAX_VOCAB}")
        for probe in PROBES:
            self.vet(probe)
        for start in range(0, self.vocab_size, DECODE_CHUNK):
            self.decode(list(range(start, min(start + DECODE_CHUNK, self.vocab_size))), False)
        kinds = component_types(tok.pre_tokenizer) | component_types(tok.decoder)
        return {
            "vocab_size": self.vocab_size,
            "kind": type(tok.model).__name__,
            "byte_level": "ByteLevel" in kinds,
            "metaspace": "Metaspace" in kinds,
            "special": sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special),
            "tokens": [tok.id_to_token(i) or "" for i in range(self.vocab_size)],
        }

    def vet(self, probe: str) -> None:
        if self.tok.normalizer is not None:
            n = len(self.tok.normalizer.normalize_str(probe))
            if n > MAX_NORMALIZED_PER_CHAR * len(probe) + SLACK:
                raise Refused(f"its normalizer made {n:,} characters out of {len(probe):,}")
        for special in (False, True):
            self.decode(self.encode(probe, special), not special)

    def encode(self, text: str, special: bool) -> list:
        ids = self.tok.encode(text, add_special_tokens=special).ids
        if len(ids) > MAX_TOKENS_PER_CHAR * len(text) + SLACK:
            raise Refused(
                f"{len(ids):,} tokens out of {len(text):,} characters; at most {MAX_TOKENS_PER_CHAR} per character"
            )
        if ids and not 0 <= min(ids) <= max(ids) < self.vocab_size:
            raise Refused(f"ids outside its vocabulary of {self.vocab_size}")
        return ids

    def decode(self, ids: list, skip: bool) -> str:
        text = self.tok.decode(ids, skip_special_tokens=skip)
        if len(text) > MAX_CHARS_PER_TOKEN * len(ids) + SLACK:
            raise Refused(f"{len(text):,} characters out of {len(ids):,} ids; at most {MAX_CHARS_PER_TOKEN} per id")
        return text

    def handle(self, header: dict, payload: bytes):
        op = header.get("op")
        if op == "load":
            return self.load(payload.decode("utf-8"))
        if self.tok is None:
            raise Refused("no tokenizer loaded")
        if op == "encode":
            return self.encode(str(header["text"]), bool(header.get("special")))
        if op == "decode":
            return self.decode([int(i) for i in header["ids"]], bool(header.get("skip")))
        raise Refused(f"unknown request {op!r}")


def main() -> None:
    limit, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)  # a process may lower its hard limit, never raise it
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves no core file behind
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # terminate, even if the parent ignored it (exec keeps SIG_IGN)
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    worker = Worker()
    while True:
        header, payload = read_frame(0)
        if header is None:
            return  # the parent closed the pipe (it stopped the worker, or it is gone)
        signal.setitimer(signal.ITIMER_REAL, float(header.get("deadline_s", 10)) + ALARM_MARGIN_S)
        fatal = False
        try:
            answer = {"ok": worker.handle(header, payload)}
        except Refused as e:
            answer = {"error": str(e), "panic": False}
        except MemoryError:
            answer, fatal = {"error": "it needed more memory than a tokenizer may use", "panic": False}, True
        except BaseException as e:  # noqa: B036  pyo3_runtime.PanicException is a BaseException
            panic = type(e).__name__ == "PanicException"
            fatal = panic or not isinstance(e, Exception)
            answer = {"error": f"{'it panicked: ' if panic else ''}{type(e).__name__}: {e}"[:400], "panic": panic}
        write_frame(out, answer)  # within the alarm too: an answer nobody reads ends the worker
        signal.setitimer(signal.ITIMER_REAL, 0)
        if fatal:
            os._exit(3)


if __name__ == "__main__":
    main()
