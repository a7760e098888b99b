"""Hostile tokenizer.json files (``tests/tokenizer_attacks.py``) beside a valid tiny Llama: each is refused
with a ConfigError naming tokenizer.json, in the worker process, while this process's memory stays where
it was (the expanding normalizer asked for gigabytes and aborted the whole server before)."""

import json
import os

import pytest
from tokenizer_attacks import ATTACKS, LATE, LATE_TEXT, hostile_checkpoint, hostile_json

from models import ConfigError
from models.hf import Tokenizer, load

MB = 1 << 20
ALLOWED_GROWTH = 200 * MB  # this process's peak RSS may grow by this much during one attack


def rss_peak() -> int:
    """This process's peak resident set since the last ``reset_peak`` (``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def reset_peak() -> int:
    """Start a new peak (``/proc/self/clear_refs``: 5) and return the resident set now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss_peak()


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_is_refused_when_the_checkpoint_is_read(tmp_path, name):
    folder = hostile_checkpoint(tmp_path, name)
    before = reset_peak()
    with pytest.raises(ConfigError, match="tokenizer.json") as err:
        load(folder)
    assert rss_peak() - before < ALLOWED_GROWTH
    assert err.value.field == "tokenizer.json"
    reason = str(err.value)
    assert any(word in reason for word in ("panicked", "SIGABRT", "characters out of", "ids out of")), reason


def test_the_expanding_tokenizer_is_the_size_the_attack_used(tmp_path):
    folder = hostile_checkpoint(tmp_path, "expanding normalizer")
    total = sum(p.stat().st_size for p in folder.iterdir())
    assert 100_000 < total < 250_000  # a few hundred kB of upload was enough


@pytest.mark.parametrize("name", sorted(LATE))
def test_a_late_attack_is_refused_on_the_call_and_then_for_good(name):
    tok = Tokenizer.from_bytes(hostile_json(LATE[name]).encode())  # passes the probes
    assert tok.decode(tok.encode("hello")) == "hello"
    before = reset_peak()
    for _ in range(Tokenizer.MAX_FAILURES):
        with pytest.raises(ConfigError, match="tokenizer.json") as err:
            tok.encode(LATE_TEXT)
        assert any(w in str(err.value) for w in ("panicked", "SIGABRT", "tokens out of")), str(err.value)
    with pytest.raises(ConfigError, match="failed 2 times"):  # not started again
        tok.encode("hello")
    assert rss_peak() - before < ALLOWED_GROWTH
    tok.close()


def test_output_per_character_is_bounded_on_every_call():
    """One Ж grows to 20,000 b's: the worker survives it (20,000 characters) but the tokens are refused."""
    tok = Tokenizer.from_bytes(hostile_json(LATE["expanding normalizer on Ж"]).encode())
    with pytest.raises(ConfigError, match="tokens out of 1 characters"):
        tok.encode("Ж")
    assert tok.encode("ab") == tok.encode("ab")  # the worker lives on: a refusal is not a failure
    tok.close()


@pytest.mark.parametrize(
    "data", [b"\xff\xfe{\x00}\x00", '{"model": "é"}'.encode("latin-1"), b'{"model": {"type": "BPE"}, "x": "\xc3"}']
)
def test_a_tokenizer_json_that_is_not_utf8_is_refused_by_name(tmp_path, data):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match="tokenizer.json.*UTF-8") as err:
        Tokenizer.from_file(path)
    assert err.value.field == "tokenizer.json"


def test_a_non_utf8_tokenizer_beside_a_checkpoint_is_refused_by_name(tmp_path):
    folder = hostile_checkpoint(tmp_path, "expanding normalizer")
    (folder / "tokenizer.json").write_bytes(b"\x80" + (folder / "config.json").read_bytes())
    with pytest.raises(ConfigError, match="tokenizer.json.*UTF-8"):
        load(folder)


@pytest.mark.parametrize("text", ["[1, 2", "[]", "null", json.dumps({"model": {"type": "Nope"}})])
def test_json_the_tokenizers_package_cannot_read_is_refused_by_name(text):
    with pytest.raises(ConfigError, match="tokenizer.json"):
        Tokenizer.from_bytes(text.encode())


def test_no_rust_tokenizer_in_this_process(tmp_path):
    """The server process never holds a tokenizers object: only the worker imports the package."""
    import subprocess
    import sys

    folder = hostile_checkpoint(tmp_path, "expanding normalizer")
    (folder / "tokenizer.json").write_text(hostile_json({}), encoding="utf-8")
    code = (
        "import sys; from models.hf import load; ckpt = load(sys.argv[1]); ids = ckpt.tokenizer.encode('hi');"
        "print(ckpt.tokenizer.decode(ids), 'tokenizers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120, cwd=os.getcwd()
    )
    assert out.stdout.split() == ["hi", "False"], out.stderr[-2000:]


def test_a_lone_surrogate_in_the_text_is_refused_as_text():
    """JSON can carry "\\ud800" and UTF-8 cannot: the text is refused by its own name, the tokenizer lives."""
    tok = Tokenizer.from_bytes(hostile_json({}).encode())
    with pytest.raises(ConfigError, match="text=.*Unicode text") as err:
        tok.encode("ab\ud800c")
    assert err.value.field == "text" and tok.decode(tok.encode("abc")) == "abc"
    tok.close()
