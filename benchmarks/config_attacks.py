"""Crafted checkpoint configs against the loader and a served app: how long a refusal takes, and whether the
app still answers other visitors.

    python -m benchmarks.config_attacks [--root DIR] [--wait S] [--no-serve]

``--root``: the checkout whose ``models.hf`` and ``app.py`` run (default: this one; an older checkout
measures the code before a change). Each in-process case runs ``models.hf.plan`` in a subprocess under
``timeout --wait`` (a loader that loops is killed, and the line says so). Then ``python app.py`` from
``--root`` is served on 127.0.0.1 under an 8 GiB address-space limit, two 2^40-layer Qwen2 configs are
uploaded at once, and ``/analyze`` of the bundled model is timed before and after them. Everything goes
to 127.0.0.1; the server is killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_AS = 8 << 30
QWEN2_BOMB = {
    "model_type": "qwen2",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 1 << 40,
    "intermediate_size": 64,
    "vocab_size": 120,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 0,
}
SMALL = {**QWEN2_BOMB, "num_hidden_layers": 2}
CASES = {  # name -> config.json text
    "qwen2 2^40 layers, sliding window": json.dumps(QWEN2_BOMB),
    "model_type a list": json.dumps({**SMALL, "model_type": ["qwen2"]}),
    "5,000-digit vocab_size": json.dumps(SMALL).replace('"vocab_size": 120', '"vocab_size": ' + "9" * 5000),
    "NaN literal": json.dumps(SMALL)[:-1] + ', "rms_norm_eps": NaN}',
    "nesting 100,000 deep": json.dumps(SMALL)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
}
PLAN = """
import sys, time
sys.path.insert(0, sys.argv[1])
from models.hf import plan
t = time.perf_counter()
try:
    plan(sys.argv[2])
    print("accepted", end="")
except Exception as e:
    print(f"{type(e).__name__}: {str(e)[:90]}", end="")
print(f" | {(time.perf_counter() - t) * 1000:.1f} ms")
"""


def folder(parent: Path, name: str, config_text: str) -> Path:
    import torch
    from safetensors.torch import save_file

    out = parent / name.replace(" ", "_").replace(",", "").replace("^", "")
    out.mkdir()
    (out / "config.json").write_text(config_text)
    save_file({"model.embed_tokens.weight": torch.zeros(120, 32)}, str(out / "model.safetensors"))
    return out


def in_process(root: Path, tmp: Path, wait: float) -> None:
    print(f"in-process models.hf.plan ({root}), each under timeout {wait:.0f} s:")
    for name, text in CASES.items():
        started = time.perf_counter()
        command = ["timeout", str(wait), sys.executable, "-c", PLAN, str(root), str(folder(tmp, name, text))]
        run = subprocess.run(command, capture_output=True, text=True, cwd=root)
        said = run.stdout.strip() or (run.stderr.strip().splitlines() or [""])[-1][:120]
        if run.returncode == 124:
            said = f"still running after {time.perf_counter() - started:.0f} s: killed"
        print(f"  {name:36s} {len(text.encode()):>8,} B  {said}")


def served(root: Path, tmp: Path, wait: float) -> None:
    from gradio_client import Client, handle_file

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS)),
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(url + "config", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit("the app did not start") from None
                time.sleep(0.5)
        cfg = json.load(urllib.request.urlopen(url + "config", timeout=30))
        comps = {c["id"]: c for c in cfg["components"]}
        dep = next(d for d in cfg["dependencies"] if d.get("api_name") == "upload_checkpoint")

        def args(files):
            return [
                [handle_file(str(p)) for p in files]
                if comps[c]["type"] == "uploadbutton"
                else comps[c]["props"].get("value")
                for c in dep["inputs"]
                if comps[c]["type"] != "state"
            ]

        def timed(job, label):
            started = time.perf_counter()
            try:
                out = job.result(timeout=wait)
                shown = "" if not isinstance(out, (list, tuple)) else " " + str(out[1])[:90].replace("\\", "")
                print(f"  {label}: answered in {time.perf_counter() - started:.2f} s{shown}")
            except Exception as e:
                print(f"  {label}: no answer within {wait:.0f} s ({type(e).__name__})")

        def analyze(label):
            timed(
                Client(url, verbose=False).submit("", "The quick brown fox.", "=>", "bundled", api_name="/analyze"),
                f"/analyze of the bundled model {label}",
            )

        print(f"served app ({root}) under RLIMIT_AS 8 GiB, two 2^40-layer Qwen2 uploads at once:")
        analyze("before the uploads")
        jobs = []
        for i in range(2):  # two digests: (1 << 40) and (1 << 40) - 1 layers
            f = folder(tmp, f"upload{i}", json.dumps({**QWEN2_BOMB, "num_hidden_layers": (1 << 40) - i}))
            jobs.append(Client(url, verbose=False).submit(*args(sorted(f.iterdir())), fn_index=dep["id"]))
        for i, job in enumerate(jobs):
            timed(job, f"upload {i}")
        analyze("after the uploads")
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ":" in line
        )
        print(f"  server alive: {proc.poll() is None}, peak RSS {int(status['VmHWM'].split()[0]) / 1024:.0f} MB")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # our own process group only
        proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--wait", type=float, default=60.0, help="seconds before a case counts as hung")
    parser.add_argument("--no-serve", action="store_true", help="in-process cases only")
    a = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="config-attacks-") as tmp:
        in_process(a.root.resolve(), Path(tmp), a.wait)
        if not a.no_serve:
            served(a.root.resolve(), Path(tmp), a.wait)
    return 0


if __name__ == "__main__":
    sys.exit(main())
