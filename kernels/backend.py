"""Triton or PyTorch: the one decision every dispatcher (``kernels/attention.py``, ``pooled.py``,
``linear_attention.py``, ``norms.py``, ``rope.py``) makes, and the name of the backend that ran.

The Triton path runs a call when its tensors are on a CUDA device (or the caller forces it: the
tests run the kernels in the interpreter on CPU tensors), triton imports, and the kernel module's
``unsupported_reason`` (if it has one) accepts the arguments. The kernel module, and with it
triton, is imported only after the device check, so the CPU path never imports triton.
"""

from __future__ import annotations

import importlib

import torch


def triton_reason(device, kernel: str, *args, force: bool = False, **kwargs) -> str | None:
    """None when the Triton kernel module ``kernels.triton.<kernel>`` runs these arguments on
    ``device``, else why the PyTorch path runs them. ``args`` / ``kwargs`` go to the module's
    ``unsupported_reason``."""
    if torch.device(device).type != "cuda" and not force:
        return "not a CUDA tensor"
    try:
        module = importlib.import_module(f".triton.{kernel}", __package__)
    except ImportError as e:  # triton missing (CPU-only installs)
        return f"triton unavailable ({e})"
    check = getattr(module, "unsupported_reason", None)
    return None if check is None else check(*args, **kwargs)


def triton_backend_name(device) -> str:
    """``"triton (sm_90)"`` for a CUDA device; ``"triton (interpreter)"`` otherwise (a timing names
    what actually ran)."""
    device = torch.device(device)
    if device.type != "cuda":
        return "triton (interpreter)"
    major, minor = torch.cuda.get_device_capability(device)
    return f"triton (sm_{major}{minor})"
