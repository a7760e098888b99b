"""One app server per test session: ``python app.py`` on 127.0.0.1 and a free port, in a subprocess."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url():
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "PYTHONUNBUFFERED": "1"}  # otherwise exactly the newcomer's `python app.py`
    env.pop("TRITON_INTERPRET", None)  # the app runs as it would in production
    log = open(ROOT / ".pytest_cache" / "app-server.log", "w") if (ROOT / ".pytest_cache").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with code {proc.returncode} (see .pytest_cache/app-server.log)")
            try:
                with urllib.request.urlopen(url + "config", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail("app.py did not start within 120 s")
            time.sleep(0.5)
        yield url
        if proc.poll() is not None:  # the server thread may answer while the main thread died
            pytest.fail(f"app.py died during the session with code {proc.returncode}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # our own process group only
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if log is not subprocess.DEVNULL:
            log.close()
