"""Test-wide setup.

TRITON_INTERPRET must be set before anything imports triton, so that ``@triton.jit`` kernels run
in the interpreter on CPU tensors (the correctness half of the GPU story; the other half,
ahead-of-time compilation for sm_80 / sm_90, runs in a subprocess without it).
"""

import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402

# two threads per process; one per worker when pytest-xdist runs the tests in several processes (the README's -n 2)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # pytest then tears the session down: app servers and the AOT job stop


signal.signal(signal.SIGTERM, _interrupt)

AOT_TEST = "test_aot.py::test_aot_compile"
AOT_JOB = pytest.StashKey()


BROWSER_DIR = Path(__file__).resolve().parent / "browser"


def _xdist_controller(config) -> bool:
    """True in the controlling process of a pytest-xdist run (``-n N``, N > 0): the workers run the tests."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def _selects_aot(config) -> bool:
    """Whether the run's arguments and marker expression select ``test_aot_compile`` (a ``-k`` run
    does not start the shared job: its worker starts its own if it draws the test)."""
    from _pytest.mark.expression import Expression

    if config.option.keyword:
        return False
    if config.option.markexpr and not Expression.compile(config.option.markexpr).evaluate(
        lambda name, **kw: name == "slow"
    ):
        return False
    target = Path(__file__).resolve().parent / "kernels" / "tools" / "test_aot.py"
    args = [Path(str(a).split("::")[0]).resolve() for a in config.args] or [Path.cwd()]
    return any(a == target or a in target.parents for a in args)


def pytest_configure(config):
    """Under xdist the controller starts the ahead-of-time compile job before the workers exist."""
    if _xdist_controller(config) and _selects_aot(config):
        from aot_job import SharedAotJob

        config.stash[AOT_JOB] = SharedAotJob()


def pytest_collection_modifyitems(session, config, items):
    """Mark every test under tests/browser ``browser`` (they serve the app, most drive Chromium), the cases
    the fast loop leaves out ``exhaustive``, and
    start the ahead-of-time compile check in the background when its test is selected (see
    tests/aot_job.py; under xdist the controller started it); the test waits for it."""
    for item in items:
        if BROWSER_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)
    from fast_loop import mark_exhaustive  # the fast loop's sample (tests/fast_loop.py)

    mark_exhaustive(items)
    aot = [item for item in items if item.nodeid.endswith(AOT_TEST)]
    if aot:
        from aot_job import AOT_DIR_ENV, AotJob

        if not os.environ.get(AOT_DIR_ENV) and not hasattr(config, "workerinput"):  # a worker: the fixture starts it
            config.stash[AOT_JOB] = AotJob()
        items[:] = [item for item in items if item not in aot] + aot  # read its result last


def pytest_unconfigure(config):
    job = config.stash.get(AOT_JOB, None)
    if job is not None:
        job.stop()


@pytest.fixture(scope="session")
def aot_result(request):
    """(return code, stdout, stderr) of the ``python -m kernels.tools.aot_check`` run (tests/aot_job.py)."""
    from aot_job import AOT_DIR_ENV, shared_result

    if os.environ.get(AOT_DIR_ENV):  # an xdist worker: the controller's job
        return shared_result(os.environ[AOT_DIR_ENV])
    job = request.config.stash.get(AOT_JOB, None)
    if job is None:  # not started after collection (an unusual plugin order): run it now
        from aot_job import AotJob

        job = request.config.stash[AOT_JOB] = AotJob()
    return job.result()
