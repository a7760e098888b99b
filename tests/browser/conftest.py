"""Shared app servers for the test session: ``python app.py`` on 127.0.0.1 and a free port, in a subprocess;
one Chromium per run of consecutive test files that use it (per pytest-xdist worker); pages in fresh
browser contexts.

Fixtures: ``app_url`` (the shared app), ``limited_app`` (a second shared app, under an address-space
limit, behind a stand-in proxy, offering a checkpoint: for the files that attack a small host over HTTP
and the checkpoint's), ``serve_app`` (the launcher, for a test that needs a server of its own),
``browser``, ``open_page`` (a ``browser_page.Page`` of the shared app or of any URL, at a viewport,
waiting for the first paint, recording console errors; closed after the test), ``page``
(``open_page()``: the shared app's start page), ``shots_dir``, and ``app_started_s`` and ``one_run_s``
(this run's measures of how loaded the machine is, for deadlines). Without Chromium or Playwright the
tests that need a browser are skipped (under CI, where Chromium must be installed, they fail)."""

import contextlib
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

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # browser_page, the shared Page helper

ROOT = Path(__file__).resolve().parents[2]
LIVE_LOGS = {}  # log name -> log file of each server running now (a failing test's report shows their tails)
STARTED_S = {}  # log name -> seconds its server took to answer, this run: a measure of how loaded the machine is
LIMIT_AS = 8 << 30  # ``limited_app``'s address-space limit: the memory of a small host (a free Space)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(extra_env=None, log_name="app-server.log", command=("app.py",), limit_as=None, info=None):
    """``python app.py`` (or ``python *command``) on 127.0.0.1 and a free port in its own process
    group -> its URL. Its output goes to a temporary log, deleted when the server stops; while it
    runs, a failing test's report ends with the log's last lines. ``limit_as``: an address-space limit
    in bytes (``RLIMIT_AS``, as ``prlimit --as``), standing in for the memory of a small host; ``info``:
    a dict that receives the server's ``pid``."""
    port = _free_port()
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }  # otherwise exactly the newcomer's `python app.py`
    env.pop("TRITON_INTERPRET", None)  # the app runs as it would in production
    log = tempfile.NamedTemporaryFile("w", prefix=f"explorer-{Path(log_name).stem}-", suffix=".log")
    LIVE_LOGS[log_name] = Path(log.name)
    name = " ".join(command)

    def limit():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (int(limit_as), int(limit_as)))

    proc = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=limit,
    )
    if info is not None:
        info["pid"] = proc.pid
    url = f"http://127.0.0.1:{port}/"
    t0 = time.time()
    deadline = t0 + 120
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
        STARTED_S[log_name] = time.time() - t0
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


SHARED = pytest.StashKey()  # the ExitStack of what this folder's tests share: the app


def _shared(config) -> contextlib.ExitStack:
    if SHARED not in config.stash:
        config.stash[SHARED] = contextlib.ExitStack()
    return config.stash[SHARED]


@pytest.fixture(scope="session")
def serve_app():
    """``serve`` above: ``with serve_app(extra_env, log_name, command, limit_as, info) as url`` runs a
    server of the test's own (other settings, another app, a memory limit) for the length of the block."""
    return serve


@pytest.fixture(scope="session")
def app_url(request):
    """The app shared by this folder's tests; stopped once the last of them has run (below)."""
    stack = _shared(request.config)
    request.addfinalizer(stack.close)
    return stack.enter_context(serve())


@pytest.fixture(scope="session")
def app_started_s(app_url) -> float:
    """Seconds the shared app took to start in this run (``STARTED_S``): a baseline of how loaded the
    machine is, for a deadline or a setting that must scale with it."""
    return STARTED_S["app-server.log"]


@pytest.fixture(scope="session")
def one_run_s(app_url) -> float:
    """The deadline for a stopped sweep to give its slot back, from this run's own pace: a stopped sweep
    ends within one run of its model (12 layers of width 512, forward and backward, 256 tokens: about
    1.5 s on a quiet two-core machine), so four times one such run timed here on the shared app, and at
    least 8 s. A sweep that was not stopped holds its slot for the rest of its eight runs, longer than that."""
    import json

    from gradio_client import Client

    big = json.dumps({"n_layers": 12, "d_model": 512, "n_heads": 16, "attention": "sliding_window"})
    t0 = time.perf_counter()
    Client(app_url, verbose=False).predict(big, "256", "forward_backward", api_name="/benchmark")
    return max(8.0, 4 * (time.perf_counter() - t0))


@pytest.fixture(scope="session")
def limited_app(request, tmp_path_factory):
    """A second app shared by this folder's files that need other settings than the newcomer's: those
    that attack a small host over HTTP (uploads, training, floods) and the one of an offered checkpoint.
    ``python app.py`` under ``LIMIT_AS`` of address space, each client named by the first entry of its
    ``X-Forwarded-For`` (the socket's address without one: ``EXPLORER_CLIENT_ADDRESS=forwarded-first``),
    its ``TMPDIR`` a folder of its own, offering a tiny local checkpoint, ``tiny``
    (``tests/tiny_checkpoint.py``: a Llama with a BPE tokenizer) through ``EXPLORER_CHECKPOINTS`` ->
    ``{"url", "pid", "tmp", "limit_as", "offered", "cfg", "tok"}`` (``offered``: the folder holding
    ``tiny``). Each test leaves it as it found it (its uploads refused or its jobs ended); one that
    reads the server's peak memory resets it first."""
    from tiny_checkpoint import make_checkpoint

    tmp = tmp_path_factory.mktemp("limited-app-tmp")
    offered = tmp_path_factory.mktemp("offered")
    _, cfg, tok = make_checkpoint(offered / "tiny")
    info = {}
    env = {"TMPDIR": str(tmp), "EXPLORER_CLIENT_ADDRESS": "forwarded-first", "EXPLORER_CHECKPOINTS": str(offered)}
    stack = _shared(request.config)
    request.addfinalizer(stack.close)
    url = stack.enter_context(serve(env, log_name="limited-app.log", limit_as=LIMIT_AS, info=info))
    return {
        "url": url,
        "pid": info["pid"],
        "tmp": tmp,
        "limit_as": LIMIT_AS,
        "offered": offered,
        "cfg": cfg,
        "tok": tok,
    }


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the last test's fixtures close first
def pytest_runtest_teardown(item, nextitem):
    """Hand the Chromium over to the next test file or close it (``_hand_over``); stop the shared app
    after this folder's last test, not at the end of the session. Not in a pytest-xdist worker: it gets
    this folder's files between others' (``--dist loadfile``), and its session-scoped ``app_url`` would
    stay cached after a close; there the app ends with the session."""
    _hand_over(item, nextitem)
    if hasattr(item.config, "workerinput"):
        return
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


BROWSER = pytest.StashKey()  # (ExitStack, Chromium) of this process's browser while it runs


@pytest.fixture(scope="module")
def browser(request):
    """The process's Chromium (each test opens its own context): launched by the first test file that
    needs it and kept for the files that follow while they need it too, closed before the first test
    of a file that does not (``_hand_over`` below) and at the end of the session. Playwright's sync API
    keeps its event loop set as the thread's running loop while it is started, so a later test of the
    same process that calls ``asyncio.run`` (a ``gradio_client`` call, the app's own handlers) would
    fail: under pytest-xdist a worker runs other folders' files after a browser file."""
    from browser_page import ARGS, CHROMIUM

    held = request.config.stash.get(BROWSER, None)
    if held is not None:
        return held[1]
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install Debian's chromium: see .ci/run)", pytrace=False)
        pytest.skip("chromium is not installed (apt-get install -y chromium); browser tests skipped")
    sync_api = pytest.importorskip("playwright.sync_api")
    stack = contextlib.ExitStack()
    try:
        playwright = stack.enter_context(sync_api.sync_playwright())
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        stack.callback(chromium.close)
    except BaseException:
        stack.close()
        raise
    request.config.stash[BROWSER] = stack, chromium
    return chromium


def _close_browser(config) -> None:
    held = config.stash.get(BROWSER, None)
    if held is not None:
        del config.stash[BROWSER]
        held[0].close()


def _hand_over(item, nextitem) -> None:
    """After a test file's last test (its fixtures already torn down): close the contexts it left open
    in the shared Chromium, and the Chromium itself unless the next test uses it."""
    held = item.config.stash.get(BROWSER, None)
    if held is None or (nextitem is not None and getattr(nextitem, "module", None) is item.module):
        return
    if nextitem is None or "browser" not in nextitem.fixturenames:
        _close_browser(item.config)
        return
    for ctx in list(held[1].contexts):  # a test's context, had it escaped open_page: the next file starts clean
        ctx.close()


def pytest_sessionfinish(session):
    _close_browser(session.config)  # an interrupted run: the Chromium of the test that was running


@pytest.fixture
def open_page(request, browser, shots_dir):
    """``open_page(address="", wait=True, viewport=None, **context_options)`` -> a ``Page`` in a fresh
    browser context (see ``browser_page.Page`` for ``wait``, ``viewport`` and the options). ``address``
    is a query string of the shared app ("?n_layers=8", which starts it if needed) or a whole URL
    (another server's, "about:blank"). Every page opened is closed after the test."""
    from browser_page import Page

    opened = []

    def open_page(address="", **kw):
        if "://" not in address and not address.startswith("about:"):
            address = request.getfixturevalue("app_url") + address
        opened.append(Page(browser, address, shots_dir, **kw))
        return opened[-1]

    yield open_page
    for p in reversed(opened):
        p.close()


@pytest.fixture
def page(open_page):
    """The shared app's start page, its first paint drawn."""
    return open_page()
