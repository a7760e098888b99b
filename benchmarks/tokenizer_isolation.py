"""What running a checkpoint's tokenizer in a worker process costs, and what hostile tokenizers do to a server.

``python -m benchmarks.tokenizer_isolation`` times ``models.hf.Tokenizer`` (a worker process per
tokenizer, ``models.hf.tokenizer_process``) against the ``tokenizers`` package in process: construction
(start, build, vet on the probes) and the median encode / decode of a 256-token text, for the tests'
tiny BPE and a synthetic 150 K-token byte-level BPE (the size of Llama 3's or Qwen2's), with the
worker's resident memory.

``--attacks [--root FOLDER] [--limit-as 4G]`` serves ``python app.py`` from ``FOLDER`` (default: this
checkout; give an older checkout to measure it before a change) under an address-space limit (``RLIMIT_AS``, set before
``exec``), one fresh server per attack, uploads the tiny Llama with a hostile ``tokenizer.json``
(``tests/tokenizer_attacks.py``) over HTTP, calls ``/analyze`` on it with the text that strikes, and prints per attack:
how the upload and the call were answered, the seconds to the answer, the server's peak RSS (sampled every 50 ms,
``VmHWM`` while it lives) and whether it is alive. Ends with the ``machine:`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from kernels.tools.busy import BusyWatch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
TEXT = "The quick brown fox jumps over the lazy dog; attention maps show which token reads which. " * 4
FILES = ("config.json", "model.safetensors", "tokenizer.json")
ATTACK_TEXT = {
    "expanding normalizer": "a" * 16_384,
    "Split regex (a+)+$": "a" * 32 + "!",
    "junk Precompiled charsmap (empty)": "hello",
    "expanding normalizer on Ж": "Ж" * 16_383 + "!",
    "Split regex (Ж+)+$": "Ж" * 16_383 + "!",
}  # the last two pass the probes: they strike on the call


def synthetic_bpe(n_merges: int = 150_000) -> str:
    """A byte-level BPE of 256 + ``n_merges`` tokens (every pair of byte letters, then triples)."""
    from models.hf.tokenizer import byte_alphabet

    letters = list(byte_alphabet().values())
    vocab = {c: i for i, c in enumerate(letters)}
    merges = []
    for a in letters:
        for b in letters:
            if len(merges) < n_merges:
                merges.append([a, b])
                vocab[a + b] = len(vocab)
    for a in letters:
        for b in letters:
            for c in letters:
                if len(merges) >= n_merges:
                    break
                merges.append([a + b, c])
                vocab[a + b + c] = len(vocab)
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": vocab,
                "merges": merges,
            },
        }
    )


def _median_ms(fn, n: int = 50) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def overhead(name: str, spec: str) -> dict:
    from tokenizers import Tokenizer as HFTokenizer

    from models.hf import Tokenizer

    t0 = time.perf_counter()
    ours = Tokenizer.from_bytes(spec.encode())
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = HFTokenizer.from_str(spec)
    built_in_process = time.perf_counter() - t0
    text = TEXT
    while len(theirs.encode(text).ids) < 256:
        text += TEXT
    ids = theirs.encode(text).ids[:256]
    text = theirs.decode(ids)
    with open(f"/proc/{ours._process.pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
    row = dict(
        tokenizer=name,
        json_mb=len(spec) / 1e6,
        vocab=ours.vocab_size,
        tokens=len(theirs.encode(text).ids),
        build_s=built,
        build_in_process_s=built_in_process,
        encode_ms=_median_ms(lambda: ours.encode(text)),
        encode_in_process_ms=_median_ms(lambda: theirs.encode(text, add_special_tokens=False).ids),
        decode_ms=_median_ms(lambda: ours.decode(ids)),
        decode_in_process_ms=_median_ms(lambda: theirs.decode(ids)),
        worker_rss_mb=rss,
    )
    ours.close()
    return row


LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)  # `prlimit --as`, as Python does it


def _bytes(size: str) -> int:
    """'4G' -> 4 GiB (K, M, G, T: powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    size = size.strip().upper()
    return int(float(size[:-1]) * units[size[-1]]) if size[-1:] in units else int(size)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python app.py`` in ``root`` under an address-space limit (``RLIMIT_AS``), its RSS sampled every 50 ms."""

    def __init__(self, root: Path, limit_as: str):
        port = _free_port()
        env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LIMITED, str(_bytes(limit_as)), "app.py"],
            cwd=root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url, self.peak_kb, self._stop = f"http://127.0.0.1:{port}/", 0, threading.Event()
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(self.url + "config", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"the server did not start:\n{self.log.read()[-3000:].decode()}") from None
                time.sleep(0.5)
        self._read()
        threading.Thread(target=self._sample, daemon=True).start()

    def _read(self) -> None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                self.peak_kb = max(self.peak_kb, next(int(line.split()[1]) for line in f if line.startswith("VmHWM")))
        except (OSError, StopIteration):
            pass

    def _sample(self) -> None:
        while not self._stop.is_set() and self.proc.poll() is None:
            self._read()
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


def upload(server: Server, folder: Path) -> tuple:
    from gradio_client import Client, handle_file

    with urllib.request.urlopen(server.url + "config", timeout=30) as r:
        cfg = json.load(r)
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for d in cfg["dependencies"] if d.get("api_name") == "upload_checkpoint")
    sent = Path(tempfile.mkdtemp(prefix="tokenizer-bench-"))
    args = [
        [handle_file(str(shutil.copyfile(folder / n, sent / n))) for n in FILES]
        if comps[c]["type"] == "uploadbutton"
        else comps[c]["props"].get("value")
        for c in dep["inputs"]
        if comps[c]["type"] != "state"
    ]
    out = Client(server.url, verbose=False).predict(*args, fn_index=dep["id"])
    return str((out[0] or {}).get("value") or ""), str(out[1]).replace("\\", "")


def attack(root: Path, limit_as: str, name: str, timeout_s: float) -> dict:
    from gradio_client import Client
    from tokenizer_attacks import hostile_checkpoint

    folder = hostile_checkpoint(Path(tempfile.mkdtemp(prefix="tokenizer-attack-")), name)
    server = Server(root, limit_as)
    row = dict(attack=name, idle_rss_mb=server.peak_kb / 1024)
    try:
        t0 = time.perf_counter()
        weights, said = upload(server, folder)
        row.update(upload_s=time.perf_counter() - t0, upload=said[:240])
        if not weights.startswith("checkpoint:upload:"):  # refused: the id it would have had
            from explorer.analysis.weights.checkpoint_upload import digest

            weights = "checkpoint:upload:" + digest({n: folder / n for n in FILES})
        result, t0 = {}, time.perf_counter()

        def call():
            try:
                Client(server.url, verbose=False).predict("", ATTACK_TEXT[name], "=>", weights, api_name="/analyze")
                result["answer"] = "maps"
            except Exception as e:  # noqa: BLE001  the answer is what is measured
                result["answer"] = str(e)[:240]

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(timeout_s)
        row.update(analyze_s=time.perf_counter() - t0, analyze=result.get("answer", f"no answer in {timeout_s:g} s"))
        time.sleep(0.2)
        row.update(peak_rss_mb=server.peak_kb / 1024, alive=server.proc.poll() is None, exit=server.proc.returncode)
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attacks", action="store_true", help="serve the app and attack it (see the docstring)")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose app.py is served")
    ap.add_argument("--limit-as", default="4G", help="the server's address-space limit (RLIMIT_AS)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for /analyze")
    args = ap.parse_args()
    from tiny_checkpoint import bpe_tokenizer_json

    with BusyWatch() as busy:
        if args.attacks:
            for name in ATTACK_TEXT:
                print(json.dumps(attack(Path(args.root), args.limit_as, name, args.timeout)), flush=True)
        else:
            for name, spec in (("tiny BPE (tests)", bpe_tokenizer_json()), ("byte-level BPE 150K", synthetic_bpe())):
                print(
                    json.dumps(
                        {k: round(v, 4) if isinstance(v, float) else v for k, v in overhead(name, spec).items()}
                    ),
                    flush=True,
                )
    print(busy.note())


if __name__ == "__main__":
    main()
