"""Name of the GPU backend that runs, for latency labels (a timing names what actually ran)."""
from __future__ import annotations

import torch


def triton_backend_name(device) -> str:
    """``"triton (sm_90)"`` for a CUDA device; ``"triton (interpreter)"`` otherwise."""
    device = torch.device(device)
    if device.type != "cuda":
        return "triton (interpreter)"
    major, minor = torch.cuda.get_device_capability(device)
    return f"triton (sm_{major}{minor})"
