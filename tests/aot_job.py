"""The ahead-of-time compile check (``python -m kernels.tools.aot_check``) as a background job.

The full check runs when the kernels changed since its last stamped pass (``full_check_reason``),
a smoke compile (``--quick``) otherwise. The full one takes minutes of CPU on a two-core machine,
so the test session starts the job right after collection, at the lowest CPU priority (nice 19),
and ``tests/kernels/tools/test_aot.py`` waits for its result: the compiles use the cores the other
tests leave idle (the browser tests mostly wait on the app and the browser) instead of adding their
whole time to the run. Its output goes to anonymous temporary files (nothing is left on disk); a
session that ends early kills it.

Under pytest-xdist (``-n 2``) the tests run in worker processes, any of which may draw
``test_aot.py``: the controlling process starts the one job (``SharedAotJob``, before the workers
start) with its output in a temporary folder named by ``EXPLORER_AOT_DIR``, which the workers
inherit; the worker that runs the test waits for the job's exit status file there (``shared_result``).
The controller stops the job and deletes the folder when the session ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1800


def _background() -> None:
    """In the child: its own process group (to stop it whole), the same session as pytest, and nice 19.
    Not a new session: with the kernel's autogroup scheduling (the default on desktop and many server
    kernels) each session is a group that gets an equal share of the CPU whatever its processes'
    nice values, so a job in a session of its own would take half the machine from the tests."""
    os.setpgid(0, 0)
    os.nice(19)


FULL_ENV = "EXPLORER_AOT_FULL"


def full_check_reason(env: bool = True) -> str | None:
    """Why the full check must run (``EXPLORER_AOT_FULL=1``, or the stamp of the last full pass no
    longer matches the kernel sources and triton: ``kernels/tools/aot_stamp.py``); None when a
    smoke compile (``--quick``) will do. ``env=False``: the stamp alone."""
    if env and os.environ.get(FULL_ENV, "") not in ("", "0"):
        return f"{FULL_ENV} is set"
    from kernels.tools.aot_stamp import stale_reason

    return stale_reason()


class AotJob:
    """One ``python -m kernels.tools.aot_check`` run (full, or ``--quick`` when the stamp is current:
    ``full_check_reason``) in its own process group, at the lowest priority."""

    def __init__(self):
        self._start(tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+"))

    def _start(self, out, err) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real compiles
        self.out, self.err = out, err
        self.started = time.monotonic()
        args = [] if full_check_reason() is not None else ["--quick"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernels.tools.aot_check", *args],
            cwd=ROOT,
            env=env,
            stdout=self.out,
            stderr=self.err,
            text=True,
            preexec_fn=_background,
        )

    def result(self) -> tuple[int, str, str]:
        """Wait for the run (at most TIMEOUT_S from its start) -> (return code, stdout, stderr)."""
        left = max(1.0, TIMEOUT_S - (time.monotonic() - self.started))
        try:
            code = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.stop()
            code = -1
        self.out.seek(0)
        self.err.seek(0)
        return code, self.out.read(), self.err.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.close()
        self.err.close()


AOT_DIR_ENV = "EXPLORER_AOT_DIR"


class SharedAotJob(AotJob):
    """The one job of an xdist session, started by the controlling process; its stdout, stderr and exit
    status (written when it ends) in a fresh temporary folder that ``AOT_DIR_ENV`` names to the workers."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="explorer-aot-")
        with open(os.path.join(self.folder, "started"), "w") as f:
            f.write(repr(time.time()))
        self._start(open(os.path.join(self.folder, "out"), "w"), open(os.path.join(self.folder, "err"), "w"))
        threading.Thread(target=self._status, name="aot-status", daemon=True).start()
        os.environ[AOT_DIR_ENV] = self.folder

    def _status(self) -> None:
        code = self.proc.wait()
        with open(os.path.join(self.folder, "rc.tmp"), "w") as f:
            f.write(str(code))
        os.replace(os.path.join(self.folder, "rc.tmp"), os.path.join(self.folder, "rc"))

    def stop(self) -> None:
        super().stop()
        os.environ.pop(AOT_DIR_ENV, None)
        shutil.rmtree(self.folder, ignore_errors=True)


def shared_result(folder: str) -> tuple[int, str, str]:
    """In a worker: wait for the controller's job (at most TIMEOUT_S from its start) -> (code, stdout, stderr);
    -1 when it did not end in time."""
    with open(os.path.join(folder, "started")) as f:
        started = float(f.read())
    rc = os.path.join(folder, "rc")
    while not os.path.exists(rc) and time.time() - started < TIMEOUT_S:
        time.sleep(1.0)
    code = int(open(rc).read()) if os.path.exists(rc) else -1

    def read(name):
        with open(os.path.join(folder, name)) as f:
            return f.read()

    return code, read("out"), read("err")
