"""The tokenizer's worker process: one per tokenizer, answers like the ``tokenizers`` package does in
process, capped in memory, killed past its deadline, always reaped, stopped when the tokenizer is
dropped or closed, and gone when the process that started it is killed."""

import gc
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import time

import pytest
from tiny_checkpoint import bpe_tokenizer_json
from tokenizers import Tokenizer as HFTokenizer

from models import ConfigError
from models.hf import Tokenizer
from models.hf.tokenizer_process import MEMORY_BYTES, WORKER, WORKER_ENV
from models.hf.tokenizer_worker import ALARM_MARGIN_S, HEAD

TEXT = "The password is Xq7Rv9Lm2; naïve café — 東京 🙂\n\tend"


@pytest.fixture(scope="module")
def spec() -> str:
    return bpe_tokenizer_json()


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, waiting to be reaped, counts as not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def reaped(pid: int) -> bool:
    """Whether ``pid`` is gone for good: not running and not a zombie left for this process to wait for."""
    return not os.path.exists(f"/proc/{pid}")


def test_answers_match_the_package_in_process(spec):
    reference = HFTokenizer.from_str(spec)  # the test process may run it: it wrote this tokenizer itself
    tok = Tokenizer.from_bytes(spec.encode())
    ids = tok.encode(TEXT)
    assert ids == reference.encode(TEXT).ids
    assert tok.decode(ids) == reference.decode(ids) == TEXT
    assert tok.vocab_size == reference.get_vocab_size(with_added_tokens=True)
    assert [tok.token(i) for i in range(tok.vocab_size)] == [reference.id_to_token(i) for i in range(tok.vocab_size)]
    tok.close()


def test_the_worker_limits_its_own_address_space(spec):
    tok = Tokenizer.from_bytes(spec.encode())
    pid = tok._process.pid
    with open(f"/proc/{pid}/limits") as f:
        line = next(row for row in f if row.startswith("Max address space"))
    assert line.split()[3:5] == [str(MEMORY_BYTES)] * 2  # soft and hard
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != MEMORY_BYTES  # this process keeps its own
    tok.close()


def test_a_killed_worker_is_reaped_and_replaced(spec):
    tok = Tokenizer.from_bytes(spec.encode())
    pid = tok._process.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ConfigError, match="tokenizer.json.*SIGKILL"):
        tok.encode(TEXT)
    assert reaped(pid)
    assert tok.decode(tok.encode(TEXT)) == TEXT  # a new worker, started on the next call
    assert tok._process.pid != pid
    tok.close()


def test_a_call_past_its_deadline_kills_the_worker(spec, monkeypatch):
    tok = Tokenizer.from_bytes(spec.encode())
    pid = tok._process.pid
    monkeypatch.setattr(Tokenizer, "CALL_SECONDS", 1e-4)
    with pytest.raises(ConfigError, match="tokenizer.json.*longer than"):
        tok.encode(TEXT * 2000)
    assert reaped(pid)
    tok.close()


def test_close_and_drop_stop_the_worker(spec):
    tok = Tokenizer.from_bytes(spec.encode())
    pid = tok._process.pid
    tok.close()
    assert reaped(pid)
    with pytest.raises(ConfigError, match="closed"):
        tok.encode("x")
    tok = Tokenizer.from_bytes(spec.encode())
    pid = tok._process.pid
    del tok
    gc.collect()
    assert reaped(pid)


def test_a_pickled_tokenizer_is_read_again_in_a_worker_of_its_own(spec):
    tok = Tokenizer.from_bytes(spec.encode())
    copy = pickle.loads(pickle.dumps(tok))
    assert copy._process.pid != tok._process.pid and copy.encode(TEXT) == tok.encode(TEXT)
    tok.close()
    copy.close()


SERVER = """
import sys, time
from models.hf import Tokenizer
tok = Tokenizer.from_bytes(sys.stdin.buffer.read())
print(tok._process.pid, flush=True)
time.sleep(3600)
"""


def test_workers_end_with_the_process_that_started_them(spec):
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=os.getcwd(),
        start_new_session=True,
    )
    server.stdin.write(spec.encode())
    server.stdin.close()
    pid = int(server.stdout.readline())
    os.kill(server.pid, signal.SIGKILL)  # the server only, not its group: the worker must notice by itself
    server.wait()
    server.stdout.close()
    deadline = time.monotonic() + 30
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)


def test_a_worker_whose_parent_cannot_kill_it_ends_at_its_own_alarm(spec):
    """A worker busy when its server died: no one reads its answer (a few MB: more than the pipe holds),
    its alarm ends it past the deadline."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(MEMORY_BYTES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, **WORKER_ENV},
    )

    def send(header, payload=b""):
        data = json.dumps(header).encode()
        worker.stdin.write(HEAD.pack(len(data), len(payload)) + data + payload)
        worker.stdin.flush()

    send({"op": "load", "deadline_s": 60}, spec.encode())
    n_head, _ = HEAD.unpack(worker.stdout.read(HEAD.size))
    assert "ok" in json.loads(worker.stdout.read(n_head))
    started = time.monotonic()
    send({"op": "encode", "text": "x" * (1 << 20), "deadline_s": 0.2})  # stdin stays open
    assert worker.wait(timeout=30) == -signal.SIGALRM
    assert time.monotonic() - started < 0.2 + ALARM_MARGIN_S + 2
    worker.stdin.close()
    worker.stdout.close()
