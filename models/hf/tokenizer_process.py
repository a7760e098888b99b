"""The server's handle on one tokenizer process (``tokenizer_worker.py``): start, call, stop.

``TokenizerProcess()`` starts ``python tokenizer_worker.py <bytes>`` as a plain subprocess (fork and
exec in C, no Python code in between: nothing of the caller's threads or torch state is carried over)
whose address space is capped at ``MEMORY_BYTES`` by the worker itself. ``call(header, payload,
deadline_s)`` sends one request and waits for the answer at most ``deadline_s`` seconds, polling the
pipes (non-blocking, ``select.poll``: any descriptor number); an answer over ``MAX_ANSWER_BYTES`` is
not read. Every way a call can fail raises ``WorkerFailed(reason, fatal)``: the worker answered an
error (``fatal`` after a panic), it died (a Rust abort on a failed allocation is ``SIGABRT``), it took
too long or answered too much (then it is killed). A dead or killed worker is always waited for (no
zombie). ``stop()`` kills and reaps it; so does dropping the handle and the interpreter's exit
(``weakref.finalize``). When the server itself is killed, the worker reads the end of its stdin and
exits; a worker busy at that moment ends at its own alarm.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from .tokenizer_worker import HEAD

WORKER = Path(__file__).with_name("tokenizer_worker.py")
MEMORY_BYTES = 512 << 20  # the worker's address space: ~30 MB idle, a 30 MB tokenizer.json ~300 MB
MAX_ANSWER_BYTES = 64 << 20  # a 262 K vocabulary's pieces are ~5 MB of JSON
WORKER_ENV = {
    "RUST_BACKTRACE": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "RAYON_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
}  # one thread, few malloc arenas: the address space is the tokenizer's


class WorkerFailed(Exception):
    """A tokenizer call that gave no result; ``reason`` says why, ``fatal``: the worker is gone."""

    def __init__(self, reason: str, fatal: bool):
        super().__init__(reason)
        self.reason, self.fatal = reason, fatal


class _Timeout(Exception):
    pass


class _Gone(Exception):
    pass


def _stop(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if it runs, wait for it (reaped: no zombie) and close its pipes."""
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass


def ended(returncode: int, memory_bytes: int) -> str:
    """Why a worker that exited with ``returncode`` stopped, in words."""
    if returncode == -signal.SIGABRT:
        return (
            f"the tokenizer aborted (SIGABRT), most often an allocation past the {memory_bytes >> 20} MB "
            "a tokenizer may use"
        )
    if returncode < 0:
        return f"the tokenizer process was ended by {signal.Signals(-returncode).name}"
    return f"the tokenizer process exited with code {returncode}"


class TokenizerProcess:
    """One worker process and the lock that keeps its requests one at a time."""

    def __init__(self, memory_bytes: int = MEMORY_BYTES):
        self.memory_bytes = int(memory_bytes)
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **WORKER_ENV},
            close_fds=True,
        )
        for pipe in (self.proc.stdin, self.proc.stdout):
            os.set_blocking(pipe.fileno(), False)
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _stop, self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self._finalizer()

    def call(self, header: dict, payload: bytes = b"", deadline_s: float = 10.0):
        """The worker's ``ok`` answer to ``header`` (+ ``payload``), or ``WorkerFailed``."""
        with self._lock:
            if not self.alive():
                self.stop()
                raise WorkerFailed(ended(self.proc.returncode, self.memory_bytes), True)
            deadline = time.monotonic() + deadline_s
            data = json.dumps({**header, "deadline_s": deadline_s}).encode("ascii")
            try:
                self._write(HEAD.pack(len(data), len(payload)) + data + payload, deadline)
                n_head, n_payload = HEAD.unpack(self._read(HEAD.size, deadline))
                if n_head + n_payload > MAX_ANSWER_BYTES:
                    self.stop()
                    raise WorkerFailed(
                        f"the tokenizer's answer of {n_head + n_payload:,} bytes is over {MAX_ANSWER_BYTES:,}", True
                    )
                answer = json.loads(self._read(n_head, deadline))
                self._read(n_payload, deadline)
            except _Timeout:
                self.stop()
                raise WorkerFailed(f"the tokenizer took longer than {deadline_s:g} s", True) from None
            except _Gone:
                self.stop()
                raise WorkerFailed(ended(self.proc.returncode, self.memory_bytes), True) from None
            if "error" in answer:
                if answer.get("panic") or not self.alive():
                    self.stop()
                    raise WorkerFailed(str(answer["error"]), True)
                raise WorkerFailed(str(answer["error"]), False)
            return answer["ok"]

    def _write(self, data: bytes, deadline: float) -> None:
        fd, view = self.proc.stdin.fileno(), memoryview(data)
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        while view:
            self._wait(poller, deadline)
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionError):
                raise _Gone from None

    def _read(self, n: int, deadline: float) -> bytes:
        fd, buf = self.proc.stdout.fileno(), bytearray()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while len(buf) < n:
            self._wait(poller, deadline)
            try:
                chunk = os.read(fd, min(n - len(buf), 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise _Gone
            buf += chunk
        return bytes(buf)

    @staticmethod
    def _wait(poller, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise _Timeout
