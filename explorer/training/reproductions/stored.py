"""The last full run of each reproduction, stored with the app so the panel shows it at once.

``assets/reproductions/<name>.json`` is a reproduction's result (``explorer.training.reproductions.run``:
settings, rows, reading, and for ``induction`` / ``warmup`` the snapshots the timeline steps through)
plus ``stored``: the machine, date and commit it ran on, and ``replay``: the train loss of each of the
first ``REPLAY_STEPS`` steps of the run's first trainer. ``replay(name)`` recomputes those from the code
as it is now; a test compares them, so a stored run cannot silently drift from the code that would make
it. ``python -m explorer.reproduce NAME --store`` (or ``--store-all``) runs and stores.

All stored runs together stay under ``MAX_TOTAL_BYTES`` (2 MB): the attention snapshots are uint8 levels.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from functools import lru_cache
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
STORE_DIR = ROOT / "assets" / "reproductions"
REPLAY_STEPS = 5
MAX_TOTAL_BYTES = 2 << 20


def path(name: str, directory: Path = STORE_DIR) -> Path:
    return directory / f"{name}.json"


def replay(name: str, steps: int = REPLAY_STEPS) -> list:
    """The train loss of each of the first ``steps`` steps of reproduction ``name``'s first trainer."""
    from explorer.training.reproductions import REPRODUCTIONS

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = REPRODUCTIONS[name].first_trainer(threads=1)
        return [round(trainer.train_step(), 6) for _ in range(steps)]
    finally:
        torch.set_num_threads(old)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def store(result: dict, directory: Path = STORE_DIR) -> Path:
    """Write ``result`` (a full run, never ``--quick``) with its provenance and replay losses."""
    if result["settings"].get("quick"):
        raise ValueError("a quick run is not stored: its settings do not show the effect")
    name = result["name"]
    record = {
        **result,
        "replay": replay(name),
        "stored": {
            "date": datetime.date.today().isoformat(),
            "commit": _commit(),
            "machine": platform.machine(),
            "cpu_threads": result["settings"].get("threads", 1),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    target = path(name, directory)
    target.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    load.cache_clear()
    return target


@lru_cache(maxsize=8)
def load(name: str, directory: Path = STORE_DIR) -> dict | None:
    """The stored run of ``name`` (None without one). Read-only: callers never modify it."""
    p = path(name, directory)
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def provenance(record: dict) -> str:
    """ "stored run of 2026-11-26 (commit 3747bdf0a1b2, x86_64, 1 thread): 15 s"."""
    s = record["stored"]
    return (
        f"stored run of {s['date']} (commit {s['commit']}, {s['machine']}, {s['cpu_threads']} thread(s)): "
        f"{record['wall_s']:.0f} s"
    )
