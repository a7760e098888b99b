"""Was the machine quiet while a benchmark measured? Measured, not guessed from the load average.

``BusyWatch`` is a context manager around the measuring part of a benchmark. On Linux it reads the
CPU time the whole machine spent busy (``/proc/stat``: user, nice, system, irq, softirq and steal,
which is time a hypervisor gave to other guests) at the start and at the end, and the CPU time of
this process and every process it started (``/proc/<pid>/stat``: utime + stime), sampled five times
a second so that children which end meanwhile are counted too. What the machine spent that this process tree did not is *other work*: its
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
    """{(pid, start time): (ppid, own cpu seconds)} of every process readable in /proc. The start
    time tells a reused pid apart; the cpu is utime + stime of the process itself, not of its
    reaped children (those are counted while they live)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        rest = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and brackets
        out[(int(name), int(rest[19]))] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK)
    return out


def _tree(stats: dict, root: int) -> dict:
    """{(pid, start): cpu seconds} of ``root`` and all its live descendants in ``stats``."""
    children: dict = {}
    for key, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(key)
    mine = {key: cpu for key, (_, cpu) in stats.items() if key[0] == root}
    todo = list(mine)
    while todo:
        for key in children.get(todo.pop()[0], ()):
            mine[key] = stats[key][1]
            todo.append(key)
    return mine


class _TreeSampler:
    """CPU seconds this process tree spent since the start, sampled every ``interval`` seconds by a
    daemon thread. Sampling is what counts the processes that end meanwhile: a browser's renderers,
    orphaned when the browser closes, are reaped by init, and their time never reaches any
    ``cutime`` of this tree. A process once seen in the tree stays counted after it is re-parented.
    What a process spends after its last sample, or a child that lives and ends between two
    samples, is missed (under ``interval`` each) and shows as other work."""

    def __init__(self, root: int, interval: float = 0.2):
        self.root, self.interval = root, interval
        self.first = _tree(_proc_stats(), root)  # processes alive at the start count from here
        self.last = dict(self.first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy-watch", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        stats = _proc_stats()
        self.last.update(_tree(stats, self.root))
        # once seen in the tree, a process stays ours when its parent leaves and it is re-parented
        self.last.update({key: stats[key][1] for key in self.last.keys() & stats.keys()})

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum(cpu - self.first.get(key, 0.0) for key, cpu in self.last.items())


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


class BusyWatch:
    """``with BusyWatch() as w: ...`` then ``w.other_cores`` / ``w.busy`` / ``w.note()``."""

    def __init__(self, threshold_cores: float = BUSY_CORES):
        self.threshold = threshold_cores
        self.cores = os.cpu_count() or 1
        self.other_cores: float | None = None  # other work's average, in cores (None: not measurable)
        self.own_cores: float | None = None    # this process tree's average, in cores
        self.seconds = 0.0

    def __enter__(self) -> "BusyWatch":
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
            head = (f"machine: other processes used {self.other_cores:.2f} of {self.cores} cores on average "
                    f"over these {self.seconds:.{0 if self.seconds >= 10 else 1}f} s (this benchmark {self.own_cores:.2f})")
        elif self.load_before is not None:
            head = f"machine: load average {self.load_before:.2f} on {self.cores} cores before the run"
        else:
            return "machine: how busy it was cannot be read on this system"
        if self.busy:
            return head + ": TOO BUSY for stable figures, the times include waiting for other work; rerun on a quiet machine"
        return head + ": quiet enough for stable figures"
