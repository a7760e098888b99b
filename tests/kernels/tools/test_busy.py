"""kernels.tools.busy: other processes' CPU is seen as other work, this process tree's own CPU is not.

Each watch runs in a fresh Python process (``_watched``), so that the tree it calls its own is only
what the test starts there, not pytest's other children (the background AOT compile in CI)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernels.tools import busy
from kernels.tools.busy import BusyWatch

ROOT = Path(__file__).resolve().parents[3]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"
# spins for ``s`` seconds of its own CPU, however many other processes share the cores (the tests run beside
# another pytest worker, the AOT compile and app servers): what the watch must count is then known exactly
SPIN_CPU = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _watched(body: str) -> dict:
    """Run ``body`` (Python; it may use ``SPIN.format(s=seconds)``, ``subprocess``, ``sys``, ``time``)
    inside a BusyWatch in a fresh process; return its figures."""
    code = (
        "import json, os, subprocess, sys, time\nfrom kernels.tools.busy import BusyWatch\nSPIN = {spin!r}\n"
        "SPIN_CPU = {spin_cpu!r}\nwith BusyWatch() as w:\n{body}\n"
        "print(json.dumps({{'own': w.own_cores, 'other': w.other_cores, 'busy': w.busy, 'note': w.note(), "
        "'seconds': w.seconds}}))\n"
    )
    code = code.format(spin=SPIN, spin_cpu=SPIN_CPU, body=textwrap.indent(textwrap.dedent(body), "    "))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@linux_only
def test_a_process_outside_the_tree_is_other_work():
    """A spinning process that is not a descendant (its launcher exits at once, so it is
    re-parented before the watch starts) is about one core of other work while the watch sleeps."""
    launcher = (
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {SPIN.format(s=3.0)!r}], "
        "start_new_session=True)"
    )
    subprocess.run([sys.executable, "-c", launcher], check=True)
    r = _watched("time.sleep(2.0)")
    assert r["other"] > 0.6 and r["own"] < 0.3, r["note"]
    assert r["busy"] and "TOO BUSY" in r["note"]
    subprocess.run([sys.executable, "-c", "import time; time.sleep(1.2)"])  # the spinner ends first


@pytest.mark.slow
@linux_only
def test_a_child_process_is_counted_as_the_benchmark_own_work():
    """A benchmark that runs its work in a child (a server, a browser) owns that CPU time: a child that
    spins for 1.5 CPU seconds shows as at least that much of this tree's own use (the Python start-up adds)."""
    r = _watched("subprocess.run([sys.executable, '-c', SPIN_CPU.format(s=1.5)], check=True)")
    assert 1.4 < r["own"] * r["seconds"] < 1.5 + 0.9 * r["seconds"], r["note"]


@pytest.mark.slow
@linux_only
def test_a_grandchild_orphaned_meanwhile_is_still_counted_as_own_work():
    """A browser that closes leaves its renderers to init, which reaps them: their time reaches no
    cutime of this tree. Seen while they were descendants, they still count as the benchmark's."""
    r = _watched("""
        done = f"/tmp/busy-orphan-{os.getpid()}"
        orphan = SPIN_CPU.format(s=1.5) + f"open({done!r}, 'w').close()\\n"
        launcher = ("import subprocess, sys, time; "
                    f"subprocess.Popen([sys.executable, '-c', {orphan!r}]); time.sleep(0.6)")
        subprocess.run([sys.executable, "-c", launcher], check=True)  # leaves while its child spins on
        t = time.time()
        while not os.path.exists(done) and time.time() - t < 30:  # the orphan spins to its end, reaped by init
            time.sleep(0.05)
        time.sleep(0.3)  # a sample after its last CPU tick
        os.remove(done)
    """)
    assert r["own"] * r["seconds"] > 1.2, r["note"]  # most of the orphan's 1.5 CPU seconds, seen while it lived


def test_without_proc_the_load_average_decides(monkeypatch):
    monkeypatch.setattr(busy, "_machine_busy_s", lambda: None)
    cores = BusyWatch().cores
    for load, expect in ((0.1, False), (cores + 1.0, True)):
        monkeypatch.setattr(busy, "_load", lambda load=load: load)
        with BusyWatch() as w:
            pass
        assert w.other_cores is None and w.busy is expect
        assert f"load average {load:.2f}" in w.note()
        assert ("TOO BUSY" in w.note()) is expect
