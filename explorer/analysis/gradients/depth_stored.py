"""The landing config's depth sweep, stored with the code so that the app's start-up computes none of it.

The page's first paint draws the Gradients tab for the default config, and its Theorem 1 panel is 70
models at initialisation (``explorer.analysis.gradients.depth_scaling``): several CPU seconds that a Space pays on
every wake-up. ``assets/depth_scaling.json`` holds that sweep's results, each under the exact memo key
of its request (the sweep config's fields that differ from their defaults, ``ModelConfig.delta_json``,
depths, seeds, batch), and ``preload(requests)`` puts the stored value of a request into the memo before
it is fetched. A field added later at its default leaves every key as it was; a changed default or value
only misses (the sweep is computed, as for any other config).
A test recomputes stored depths from the code and compares, so a change to the
models' init or forward cannot leave the file stale silently; ``python -m explorer.analysis.gradients.depth_scaling
--write`` regenerates it (for ``ModelConfig()``, the config the page opens with).
"""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

from explorer.analysis.common.memo import CACHE

STORED = Path(__file__).resolve().parents[3] / "assets" / "depth_scaling.json"


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


def write(sweeps: list, seconds: float, path: Path = STORED) -> dict:
    """Store ``sweeps`` (``[{"key": memo key, "value": computed value}]``, computed from the code by
    ``explorer.analysis.gradients.depth_scaling.store``) with the commit and torch version they were computed at."""
    import torch

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=path.parent
    ).stdout.strip()
    record = {
        "about": "explorer.analysis.gradients.depth_stored: the landing config's depth sweep at initialisation",
        "commit": commit,
        "torch": torch.__version__,
        "seconds": round(seconds, 1),
        "sweeps": [{"key": list(s["key"]), "value": s["value"]} for s in sweeps],
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    stored_values.cache_clear()
    return record
