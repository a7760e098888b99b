"""What a reproduction costs: its wall time and the peak memory it adds, measured on two CPU cores.

Each reproduction module states its ``COST``, measured by ``python -m benchmarks.repro_costs`` (a fresh
process per reproduction, one intra-op thread; the peak is the growth of the process's peak resident
memory over its resident memory once everything is imported). The app shows the time to a visitor
before a run and holds the bytes in the server's memory pool while it runs.
"""

from __future__ import annotations

from typing import NamedTuple


class Cost(NamedTuple):
    seconds: float  # wall time of the full (not quick) run
    peak_bytes: int  # peak resident memory it adds
