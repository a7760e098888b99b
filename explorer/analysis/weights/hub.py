"""Hugging Face Hub models for a host that allows downloads (``EXPLORER_HUB_DOWNLOADS=1``).

``download(repo_id, max_bytes)`` asks the Hub for the model's file list with sizes first, refuses a model
without safetensors weights (pickles are never read) or whose weights exceed ``max_bytes``, and only then
fetches ``config.json``, the safetensors (and their index) and ``tokenizer.json`` into the Hub cache
(``EXPLORER_HUB_CACHE``, else ``huggingface_hub``'s default). Every failure, offline included, is a
``ConfigError`` naming the checkpoint. Only ``explorer.analysis.weights.checkpoints`` imports this module, and only
on a host that allows downloads.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from explorer.runtime import settings
from models import ConfigError
from models.hf.files import PICKLES

PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json")


def wanted(name: str) -> bool:
    return "/" not in name and any(fnmatch.fnmatch(name, p) for p in PATTERNS)


def download(repo_id: str, max_bytes: int) -> Path:
    """The local folder of Hub model ``repo_id`` (``owner/name``), sized before it is fetched."""
    from huggingface_hub import HfApi, snapshot_download

    shown = f"hub:{repo_id}"
    try:
        info = HfApi().model_info(repo_id, files_metadata=True)
    except Exception as exc:  # offline, unknown, gated: the Hub client's errors share no useful base class
        raise ConfigError(
            "checkpoint", shown, f"a Hub model this host can reach ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None
    files = {s.rfilename: (s.size or 0) for s in info.siblings or ()}
    weights = {n: size for n, size in files.items() if wanted(n) and n.endswith(".safetensors")}
    if not weights:
        pickles = sorted(n for n in files if os.path.splitext(n)[1].lower() in PICKLES)
        why = f" (it has {pickles[0]}: pickles are never unpickled here)" if pickles else ""
        raise ConfigError("checkpoint", shown, f"a Hub model with safetensors weights{why}")
    total = sum(weights.values())
    if total > max_bytes:
        raise ConfigError(
            "checkpoint",
            shown,
            f"weights of at most {max_bytes / 1e6:.0f} MB on this host (this "
            f"model's safetensors are {total / 1e6:.0f} MB)",
        )
    try:
        path = snapshot_download(repo_id, allow_patterns=list(PATTERNS), cache_dir=settings.hub_cache())
    except Exception as exc:
        raise ConfigError(
            "checkpoint", shown, f"a Hub model this host can download ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None
    return Path(path)
