"""One app server per test session: ``python app.py`` on 127.0.0.1 and a free port, in a subprocess."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # browser_page, the shared Page helper

ROOT = Path(__file__).resolve().parents[2]
LIVE_LOGS = {}  # log name -> log file of each server running now (a failing test's report shows their tails)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(extra_env=None, log_name="app-server.log", command=("app.py",)):
    """``python app.py`` (or ``python *command``) on 127.0.0.1 and a free port in its own process
    group -> its URL. Its output goes to a temporary log, deleted when the server stops; while it
    runs, a failing test's report ends with the log's last lines."""
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "PYTHONUNBUFFERED": "1", **(extra_env or {})}  # otherwise exactly the newcomer's `python app.py`
    env.pop("TRITON_INTERPRET", None)  # the app runs as it would in production
    log = tempfile.NamedTemporaryFile("w", prefix=f"explorer-{Path(log_name).stem}-", suffix=".log")
    LIVE_LOGS[log_name] = Path(log.name)
    name = " ".join(command)
    proc = subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with code {proc.returncode}:\n{_tail(Path(log.name))}")
            try:
                with urllib.request.urlopen(url + "config", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"{name} did not start within 120 s")
            time.sleep(0.5)
        yield url
        if proc.poll() is not None:  # the server thread may answer while the main thread died
            pytest.fail(f"{name} died during the session with code {proc.returncode}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # our own process group only
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        LIVE_LOGS.pop(log_name, None)
        log.close()  # and deleted


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report ends with the last lines of each running app server's log."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for log_name, path in list(LIVE_LOGS.items()):
            report.sections.append((f"server log {log_name} (last 40 lines)", _tail(path)))


SHARED = pytest.StashKey()  # the ExitStack of what this folder's tests share: the app, the browser


def _shared(config) -> contextlib.ExitStack:
    if SHARED not in config.stash:
        config.stash[SHARED] = contextlib.ExitStack()
    return config.stash[SHARED]


@pytest.fixture(scope="session")
def app_url(request):
    """The app shared by this folder's tests; stopped once the last of them has run (below)."""
    stack = _shared(request.config)
    request.addfinalizer(stack.close)
    return stack.enter_context(serve())


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the last test's fixtures close first
def pytest_runtest_teardown(item, nextitem):
    """Stop the shared app and browser after this folder's last test, not at the end of the session."""
    here = Path(__file__).resolve().parent
    if nextitem is None or here not in Path(nextitem.path).resolve().parents:
        stack = item.config.stash.get(SHARED, None)
        if stack is not None:
            stack.close()


@pytest.fixture(scope="session")
def shots_dir(tmp_path_factory):
    """Where browser tests put screenshots: a temporary folder, so the test command never writes into
    tracked files; ``EXPLORER_SCREENSHOTS=assets/screenshots`` refreshes the README's pictures."""
    target = os.environ.get("EXPLORER_SCREENSHOTS")
    if target:
        path = Path(target) if Path(target).is_absolute() else ROOT / target
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    return str(tmp_path_factory.mktemp("screenshots"))


@pytest.fixture(scope="session")
def browser(request):
    """One Chromium for this folder's tests (each test opens its own context); closed with the app."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from browser_page import ARGS, CHROMIUM
    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    stack = _shared(request.config)
    request.addfinalizer(stack.close)
    p = stack.enter_context(sync_api.sync_playwright())
    return p.chromium.launch(executable_path=CHROMIUM, args=ARGS)


@pytest.fixture
def page(browser, app_url, shots_dir):
    from browser_page import Page
    p = Page(browser, app_url, shots_dir)
    yield p
    p.close()
