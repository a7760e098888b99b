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

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # pytest then tears the session down: app servers and the AOT job stop


signal.signal(signal.SIGTERM, _interrupt)

AOT_TEST = "test_aot.py::test_aot_check_full"
AOT_JOB = pytest.StashKey()


BROWSER_DIR = Path(__file__).resolve().parent / "browser"


def pytest_collection_modifyitems(session, config, items):
    """Mark every test under tests/browser ``browser`` (they serve the app, most drive Chromium), and
    start the ahead-of-time compile check in the background when its test is selected (see
    tests/aot_job.py); the test waits for it."""
    for item in items:
        if BROWSER_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)
    aot = [item for item in items if item.nodeid.endswith(AOT_TEST)]
    if aot:
        from aot_job import AotJob
        config.stash[AOT_JOB] = AotJob()
        items[:] = [item for item in items if item not in aot] + aot  # read its result last


def pytest_unconfigure(config):
    job = config.stash.get(AOT_JOB, None)
    if job is not None:
        job.stop()


@pytest.fixture(scope="session")
def aot_result(request):
    """(return code, stdout, stderr) of the full ``python -m kernels.aot_check`` run."""
    job = request.config.stash.get(AOT_JOB, None)
    if job is None:  # not started after collection (an unusual plugin order): run it now
        from aot_job import AotJob
        job = request.config.stash[AOT_JOB] = AotJob()
    return job.result()
