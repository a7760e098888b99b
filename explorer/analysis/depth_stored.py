"""The landing config's depth sweep, stored with the code so that the app's start-up computes none of it.

The page's first paint draws the Gradients tab for the default config, and its Theorem 1 panel is 70
models at initialisation (``explorer.analysis.depth_scaling``): several CPU seconds that a Space pays on
every wake-up. ``assets/depth_scaling.json`` holds that sweep's results, each under the exact memo key
of its request (the sweep config's JSON, depths, seeds, batch), and ``preload(requests)`` puts the
stored value of a request into the memo before it is fetched. A key names the whole config, so a
config field added or changed since the file was written only misses (the sweep is computed, as for
any other config). A test recomputes stored depths from the code and compares, so a change to the
models' init or forward cannot leave the file stale silently; ``python -m explorer.analysis.depth_stored
--write`` regenerates it (for ``ModelConfig()``, the config the page opens with).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from explorer.analysis.memo import CACHE

STORED = Path(__file__).resolve().parents[2] / "assets" / "depth_scaling.json"


def key_text(key) -> str:
    """A memo key as the file spells it (a tuple and the list read back give the same text)."""
    return json.dumps(key)


@lru_cache(maxsize=1)
def stored_values(path: Path = STORED) -> dict:
    """``{key_text: value}`` of the stored sweeps ({} when the file is missing or unreadable)."""
    try:
        return {key_text(r["key"]): r["value"] for r in json.loads(path.read_text())["sweeps"]}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}


def preload(requests) -> int:
    """Memoise the stored value of every request whose key is stored and not memoised yet; how many."""
    done = 0
    for req in requests:
        value = stored_values().get(key_text(req.key))
        if value is not None and req.key not in CACHE:
            CACHE.put(req.key, json.loads(json.dumps(value)))
            done += 1
    return done


def write(path: Path = STORED) -> dict:
    """Compute the sweep of ``ModelConfig()`` from the code (nothing stored or memoised is read) and store it."""
    import torch

    from explorer.analysis.depth_scaling import sweep_requests
    from models import ModelConfig

    t0 = time.perf_counter()
    _, _, requests, _, _ = sweep_requests(ModelConfig())
    sweeps = [{"key": list(r.key), "value": r.compute()} for r in requests.values()]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=path.parent).stdout.strip()
    record = {"about": "explorer.analysis.depth_stored: the landing config's depth sweep at initialisation",
              "commit": commit, "torch": torch.__version__, "seconds": round(time.perf_counter() - t0, 1),
              "sweeps": sweeps}
    path.write_text(json.dumps(record, indent=1) + "\n")
    stored_values.cache_clear()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"recompute and write {STORED.name}")
    args = parser.parse_args()
    if args.write:
        record = write()
        print(f"wrote {STORED} ({len(record['sweeps'])} placements, {record['seconds']} s)")
    else:
        print(f"{STORED}: {len(stored_values())} stored sweeps")


if __name__ == "__main__":
    main()
