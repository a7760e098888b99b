"""Where the analyses run, and the ZeroGPU hook.

On a CUDA machine the analyses run on the GPU (our Triton kernels); otherwise on the CPU. On a
Hugging Face ZeroGPU Space the ``spaces`` package provides ``spaces.GPU``, which must wrap every
function that touches the GPU; elsewhere ``gpu`` is the identity decorator.
"""
from __future__ import annotations

import torch

from explorer.runtime import settings

try:  # ZeroGPU Spaces only
    import spaces  # type: ignore

    gpu = spaces.GPU
except ImportError:  # not on a Space: run the function as it is
    def gpu(fn=None, **_kw):
        return fn if fn is not None else (lambda f: f)


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_label(dev: torch.device | None = None) -> str:
    """E.g. ``"CUDA: NVIDIA H100 (sm_90)"`` or ``"CPU (2 threads)"``, shown in the header."""
    dev = device() if dev is None else torch.device(dev)
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        return f"CUDA: {torch.cuda.get_device_name(dev)} (sm_{major}{minor})"
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'s' if n != 1 else ''} per request)"


def configure_threads() -> int:
    """Use ``EXPLORER_THREADS`` (default 1) intra-op threads and return the number.

    The app's requests are small (4 layers, ~128 tokens) and several visitors share two cores:
    one thread per request avoids oversubscription, which on a busy 2-core machine made a
    gradient-norm request 5-20x slower with 2 threads than with 1 (and a 4096-token forward 2x
    slower). The sweep uses the same number and records it.
    """
    n = default_threads()
    torch.set_num_threads(n)
    return n


def default_threads() -> int:
    """``EXPLORER_THREADS`` (``explorer.runtime.settings``)."""
    return settings.threads()
