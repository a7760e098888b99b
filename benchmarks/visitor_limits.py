"""One visitor against the others: session floods, queue floods, heavy jobs, big bodies, bare uploads,
echoed values and a path handed to the upload handler, measured against a served app.

    python -m benchmarks.visitor_limits [--root DIR] [--json out.json]

Starts ``python app.py`` from ``--root`` (default: this checkout) on 127.0.0.1 with
``EXPLORER_CLIENT_ADDRESS=forwarded-first`` and a fresh ``GRADIO_TEMP_DIR``; each visitor names its
address in ``X-Forwarded-For`` (an app that ignores it sees one address for all). Prints, per attack,
the time it took, the server's peak RSS during it, what another visitor got, and the files left.
Loops are bounded and go to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Peak:
    """The server's peak RSS while the block runs (sampled every 20 ms)."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def __enter__(self):
        self.start = rss_mb(self.pid)
        self.t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.seconds = time.perf_counter() - self.t0
        self.end = rss_mb(self.pid)


def headers(ip: str) -> dict:
    return {"X-Forwarded-For": ip}


def files_under(folder: str) -> tuple[int, int]:
    n = size = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(dirpath, name))
                n += 1
            except OSError:
                pass
    return n, size


def event_data(url, api, **by_elem_id) -> tuple[int, list, bool]:
    """An event's ``fn_index``, its inputs (the components' values from ``/config``, ``by_elem_id``
    replacing some) and whether it is queued."""
    config = httpx.get(url + "config", timeout=30).json()
    dep = next(d for d in config["dependencies"] if d.get("api_name") == api)
    comps = {c["id"]: c.get("props", {}) for c in config["components"]}
    data = [by_elem_id.get(comps[i].get("elem_id"), comps[i].get("value")) for i in dep["inputs"]]
    return dep["id"], data, dep.get("queue") is not False


def event(c, url, api, session, **by_elem_id) -> str:
    """Run the page's event ``api`` in ``session`` as the page would -> its answer's text."""
    fn, data, queued = event_data(url, api, **by_elem_id)
    body = {"data": data, "fn_index": fn, "session_hash": session}
    if not queued:
        r = c.post(url + f"gradio_api/run/{api}", json=body)
        return f"HTTP {r.status_code} {r.text}"
    r = c.post(url + "gradio_api/queue/join", json=body)
    if r.status_code != 200:
        return f"HTTP {r.status_code} {r.text[:200]}"
    with c.stream("GET", url + f"gradio_api/queue/data?session_hash={session}") as stream:
        for line in stream.iter_lines():
            if "process_completed" in line:
                return line
    return ""


def session_flood(url, _client_cls=None):
    with httpx.Client(timeout=120, headers=headers("10.0.0.1")) as victim:
        session = "victim" + secrets.token_hex(6)
        event(victim, url, "pin_config", session)
        before = event(victim, url, "compare", session)
        t0 = time.perf_counter()
        with httpx.Client(timeout=30, headers=headers("10.0.0.2")) as c:
            codes = [
                c.post(url + "gradio_api/run/undo", json={"data": [], "session_hash": secrets.token_hex(8)}).status_code
                for _ in range(250)
            ]
        flood_s = time.perf_counter() - t0
        after = event(victim, url, "compare", session)
    return {
        "flood_s": round(flood_s, 2),
        "codes": sorted(set(codes)),
        "victim_pinned_before": '"success":true' in before and "Nothing pinned" not in before,
        "victim_pinned_after": '"success":true' in after and "Nothing pinned" not in after,
    }


def queue_flood(url, n=30):
    text = "the quick brown fox " * 12
    with httpx.Client(timeout=30, headers=headers("10.0.0.3")) as c:
        joined = [
            c.post(url + "gradio_api/call/analyze", json={"data": ["{}", text + str(i), "|", "bundled"]}).status_code
            for i in range(n)
        ]
    other = []
    with httpx.Client(timeout=120, headers=headers("10.0.0.4")) as c:
        for _i in range(5):
            t0 = time.perf_counter()
            r = c.post(url + "gradio_api/call/analyze", json={"data": ["{}", "hello world", "|", "bundled"]})
            if r.status_code == 200:
                event = r.json()["event_id"]
                body = c.get(url + f"gradio_api/call/analyze/{event}").text
                other.append(("ok" if "event: complete" in body else "error", round(time.perf_counter() - t0, 2)))
            else:
                other.append((r.status_code, round(time.perf_counter() - t0, 2)))
    return {"attacker_codes": {str(k): joined.count(k) for k in set(joined)}, "other_visitor": other}


def heavy_jobs(url):
    def export(ip):
        with httpx.Client(timeout=120, headers=headers(ip)) as c:
            r = c.post(url + "gradio_api/call/export", json={"data": ["{}", "hello", "|", "bundled"]})
            if r.status_code != 200:
                return str(r.status_code)
            body = c.get(url + f"gradio_api/call/export/{r.json()['event_id']}").text
            return "file" if "event: complete" in body else ("busy: " + body.split("data:")[-1].strip()[:60])

    with cf.ThreadPoolExecutor(4) as pool:
        mine = [pool.submit(export, "10.0.0.5") for _ in range(3)]
        time.sleep(0.3)
        other = pool.submit(export, "10.0.0.6")
        return {"three_from_one_address": [f.result() for f in mine], "other_visitor": other.result()}


def big_bodies(url, n=8, size=100 << 20):
    payload = b"{" + b" " * (size - 2) + b"}"

    def post(_):
        try:
            with httpx.Client(timeout=60, headers=headers("10.0.0.7")) as c:
                return c.post(
                    url + "gradio_api/queue/join", content=payload, headers={"Content-Type": "application/json"}
                ).status_code
        except httpx.HTTPError as e:
            return type(e).__name__

    with cf.ThreadPoolExecutor(n) as pool:
        return {"codes": list(pool.map(post, range(n)))}


def bare_uploads(url, tmp, n=20, size=24 << 20):
    blob = os.urandom(size)
    codes = []
    with httpx.Client(timeout=60, headers=headers("10.0.0.8")) as c:
        for i in range(n):
            codes.append(
                c.post(url + "gradio_api/upload", files={"files": (f"b{i}.bin", blob[:-1] + bytes([i]))}).status_code
            )
    return {"codes": {str(k): codes.count(k) for k in set(codes)}, "files_kept": files_under(tmp)}


def echo(url):
    with httpx.Client(timeout=60, headers=headers("10.0.0.9")) as c:
        r = c.post(url + "gradio_api/call/analyze", json={"data": ["{}", "hi", "|", "x" * 900_000]})
        if r.status_code != 200:
            return {"join": r.status_code, "answer_bytes": len(r.content)}
        body = c.get(url + f"gradio_api/call/analyze/{r.json()['event_id']}").text
        j = c.post(url + "gradio_api/queue/join", json={"data": [], "session_hash": [1] * 150_000})
        d = event(c, url, "preset", secrets.token_hex(8), preset="x" * 900_000)
        return {
            "error_answer_bytes": len(body),
            "validation_status": j.status_code,
            "validation_bytes": len(j.content),
            "dropdown_answer": d[:60],
            "dropdown_bytes": len(d),
        }


def foreign_path(url, tmp):
    """Visitor A uploads a file; visitor B hands its path to the checkpoint upload handler."""
    with httpx.Client(timeout=60, headers=headers("10.0.0.10")) as c:
        path = c.post(url + "gradio_api/upload", files={"files": ("config.json", b'{"model_type": "llama"}')}).json()[0]
    with httpx.Client(timeout=60, headers=headers("10.0.0.11")) as c:
        said = event(
            c,
            url,
            "upload_checkpoint",
            secrets.token_hex(8),
            **{"checkpoint-upload": [{"path": path, "meta": {"_type": "gradio.FileData"}, "orig_name": "config.json"}]},
        )
    return {"others_upload_still_there": os.path.exists(path), "answer": said[-160:]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="explorer-bench-uploads-")
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_TEMP_DIR": tmp,
        "EXPLORER_CLIENT_ADDRESS": "forwarded-first",
        "PYTHONUNBUFFERED": "1",
    }
    log = tempfile.NamedTemporaryFile("w", prefix="explorer-bench-", suffix=".log")
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=args.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/"
    results = {}
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(url + "config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        attacks = [
            ("session flood (250 posts)", lambda: session_flood(url)),
            ("30 queue joins from one address", lambda: queue_flood(url)),
            ("3 heavy jobs from one address", lambda: heavy_jobs(url)),
            ("8 bodies of 100 MB", lambda: big_bodies(url)),
            ("20 bare uploads of 24 MB", lambda: bare_uploads(url, tmp)),
            ("900 kB value echoed", lambda: echo(url)),
            ("another visitor's upload path", lambda: foreign_path(url, tmp)),
        ]
        for name, attack in attacks:
            with Peak(proc.pid) as peak:
                try:
                    out = attack()
                except Exception as e:  # an attack that breaks the harness is a result too
                    out = {"harness_error": f"{type(e).__name__}: {str(e)[:120]}"}
            out.update(
                seconds=round(peak.seconds, 2),
                rss_start_mb=round(peak.start),
                rss_peak_mb=round(peak.peak),
                rss_end_mb=round(peak.end),
                server_alive=proc.poll() is None,
            )
            results[name] = out
            print(f"{name}: {json.dumps(out)}", flush=True)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        log.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
