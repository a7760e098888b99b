"""Hostile ``tokenizer.json`` files beside a valid tiny checkpoint (``tests/tiny_checkpoint.py``).

``ATTACKS``: name -> the changes made to the tiny checkpoint's own BPE tokenizer. Each is refused when
the tokenizer is read (it expands, panics or aborts on the probe texts). ``LATE``: attacks that pass
those probes and strike only on a text they are waiting for (``LATE_TEXT``). ``hostile_checkpoint
(folder, name)`` writes the tiny checkpoint with that tokenizer and returns the folder.
"""

import base64
import json
from pathlib import Path

from tiny_checkpoint import bpe_tokenizer_json, make_checkpoint


def _split(regex: str) -> dict:
    return {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}}


def _replace(char: str, n: int) -> dict:
    """A normalizer that writes ``n`` b's for each ``char`` (the expanding tokenizer: 20,000 per 'a')."""
    return {"normalizer": {"type": "Replace", "pattern": {"String": char}, "content": "b" * n}}


def _precompiled(junk: bytes) -> dict:
    return {"normalizer": {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(junk).decode()}}


ATTACKS = {
    "expanding normalizer": _replace("a", 20_000),
    "Split regex (a+)+$": _split("(a+)+$"),
    r"Split regex (\w+\s?)*$": _split(r"(\w+\s?)*$"),
    "junk Precompiled charsmap (empty)": _precompiled(b"\x00" * 8),  # panics: index out of bounds
    "junk Precompiled charsmap (huge)": _precompiled(b"\xff\xff\xff\x7f" + b"\x00" * 16),  # aborts: 4 GB asked
    "expanding decoder": {"decoder": {"type": "Replace", "pattern": {"String": "Ġ"}, "content": "x" * 20_000}},
}
LATE_TEXT = "Ж" * 16_383 + "!"  # no probe holds a Ж: the late attacks pass the vetting and strike on this text
LATE = {
    "expanding normalizer on Ж": _replace("Ж", 20_000),
    "Split regex (Ж+)+$": _split("(Ж+)+$"),
}


def hostile_json(changes: dict) -> str:
    return json.dumps({**json.loads(bpe_tokenizer_json()), **changes})


def hostile_checkpoint(folder, name: str) -> Path:
    """The tiny checkpoint in ``folder`` with the tokenizer of ``ATTACKS[name]`` (or ``LATE[name]``)."""
    folder = Path(folder)
    make_checkpoint(folder)
    (folder / "tokenizer.json").write_text(hostile_json({**ATTACKS, **LATE}[name]), encoding="utf-8")
    return folder
