"""Was the machine quiet while a benchmark measured? Measured, not guessed from the load average.

``BusyWatch`` is a context manager around the measuring part of a benchmark. On Linux it reads the
CPU time the whole machine spent busy (``/proc/stat``: user, nice, system, irq, softirq and steal,
which is time a hypervisor gave to other guests) at the start and at the end, and the CPU time of
this process and every process it started (``/proc/<pid>/stat``: utime + stime, plus cutime + cstime
for the children each one reaped), sampled five times a second so that processes which end
meanwhile are counted too. What the machine spent that this process tree did not is *other work*: its
average over the wall time, in cores, says how much of the machine the benchmark had to share.

``note()`` gives one line for the benchmark's output. When other work averaged more than
``BUSY_CORES`` cores the line says the figures are not stable. Elsewhere (macOS, Windows) the 1-minute
load average before the run is what there is, and the line says so.
"""

from __future__ import annotations

import os
import threading
import time

BUSY_CORES = 0.25  # other processes' average use, in cores, above which timings are called unstable
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine_busy_s() -> float | None:
    """CPU seconds the machine spent busy since boot (all cores), or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _proc_stats() -> dict:
    """{(pid, start time): (ppid, own cpu seconds, reaped children's cpu seconds)} of every process
    readable in /proc. The start time tells a reused pid apart; own is utime + stime, the children's
    is cutime + cstime: what the process's children (and theirs, when waited for) spent, added when
    the process reaps them."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        rest = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and brackets
        out[(int(name), int(rest[19]))] = (
            int(rest[1]),
            (int(rest[11]) + int(rest[12])) / _TICK,
            (int(rest[13]) + int(rest[14])) / _TICK,
        )
    return out


def _tree(stats: dict, root: int) -> list:
    """The keys ``(pid, start)`` of ``root`` and all its live descendants in ``stats``."""
    children: dict = {}
    for key, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(key)
    mine = [key for key in stats if key[0] == root]
    todo = list(mine)
    while todo:
        for key in children.get(todo.pop()[0], ()):
            mine.append(key)
            todo.append(key)
    return mine


class _TreeSampler:
    """CPU seconds this process tree spent since the start, sampled every ``interval`` seconds by a
    daemon thread. Each process counts its own time and its reaped children's (cutime), so a child
    that the tree waits for is counted whole, to its last tick, when its parent reaps it; such a
    child's own samples then drop out (its parent's figure holds them). Sampling is what counts
    the processes that end without a parent in the tree to reap them: a browser's renderers,
    orphaned when the browser closes, are reaped by init, and their time never reaches any
    ``cutime`` of this tree. A process once seen in the tree stays counted after it is re-parented;
    what such an orphan spends after its last sample, or a process that lives and ends between
    two samples without a parent in the tree, is missed (under ``interval`` each) and shows as
    other work."""

    def __init__(self, root: int, interval: float = 0.2):
        self.root, self.interval = root, interval
        self.first: dict = {}  # {key: cpu (own + reaped children's) at the start}
        self.last: dict = {}  # {key: cpu at its latest sample}
        self.parent: dict = {}  # {key: its parent's key, while that parent was in the tree}
        self.reaped: set = set()  # keys gone while their parent in the tree lived: held in its cutime
        self._sample()
        self.first = dict(self.last)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy-watch", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        stats = _proc_stats()
        by_pid = {pid: (pid, start) for pid, start in stats}
        # once seen in the tree, a process stays ours when its parent leaves and it is re-parented
        ours = set(_tree(stats, self.root)) | (self.last.keys() & stats.keys())
        for key in ours:
            self.last[key] = stats[key][1] + stats[key][2]
        for key in ours:
            parent = by_pid.get(stats[key][0])
            self.parent[key] = parent if parent in self.last else None
        for key in self.last.keys() - stats.keys() - self.reaped:
            if self.parent.get(key) in stats:  # it ended and its parent, still here, reaped it
                self.reaped.add(key)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum((0.0 if key in self.reaped else cpu) - self.first.get(key, 0.0) for key, cpu in self.last.items())


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


class BusyWatch:
    """``with BusyWatch() as w: ...`` then ``w.other_cores`` / ``w.busy`` / ``w.note()``."""

    def __init__(self, threshold_cores: float = BUSY_CORES):
        self.threshold = threshold_cores
        self.cores = os.cpu_count() or 1
        self.other_cores: float | None = None  # other work's average, in cores (None: not measurable)
        self.own_cores: float | None = None  # this process tree's average, in cores
        self.seconds = 0.0

    def __enter__(self) -> BusyWatch:
        self.load_before = _load()
        self._machine0 = _machine_busy_s()
        self._tree = _TreeSampler(os.getpid()) if self._machine0 is not None else None
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = max(time.monotonic() - self._t0, 1e-6)
        if self._tree is None:
            return
        own = self._tree.stop()
        machine1 = _machine_busy_s()
        if machine1 is None:
            return
        self.own_cores = own / self.seconds
        self.other_cores = max(0.0, machine1 - self._machine0 - own) / self.seconds

    @property
    def busy(self) -> bool:
        """True when the figures should not be trusted: other work above the threshold (measured),
        or, where that cannot be measured, a load average above the core count before the run."""
        if self.other_cores is not None:
            return self.other_cores > self.threshold
        return self.load_before is not None and self.load_before > self.cores

    def note(self) -> str:
        """One line for a benchmark's output: how busy the machine was, and what that means."""
        if self.other_cores is not None:
            head = (
                f"machine: other processes used {self.other_cores:.2f} of {self.cores} cores on average "
                f"over these {self.seconds:.{0 if self.seconds >= 10 else 1}f} s (this benchmark {self.own_cores:.2f})"
            )
        elif self.load_before is not None:
            head = f"machine: load average {self.load_before:.2f} on {self.cores} cores before the run"
        else:
            return "machine: how busy it was cannot be read on this system"
        if self.busy:
            return (
                head
                + ": TOO BUSY for stable figures, the times include waiting for other work; rerun on a quiet machine"
            )
        return head + ": quiet enough for stable figures"
