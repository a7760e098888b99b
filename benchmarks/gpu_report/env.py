"""Environment section: versions, the GPU, its SM count and clocks, which SDPA backends are on."""

from __future__ import annotations

import os
import platform
import subprocess

import torch

from .writer import md_table


def _nvidia_smi() -> dict:
    q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
    try:
        out = (
            subprocess.run(
                ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            )
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(q.split(","), (x.strip() for x in out[0].split(",")))) if out else {}


def collect(device) -> dict:
    import triton

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda (torch)": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", ""),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", "(default ~/.triton/cache)"),
        "cpu threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    if torch.device(device).type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(
            {
                "gpu": p.name,
                "compute capability": f"sm_{p.major}{p.minor}",
                "SMs": p.multi_processor_count,
                "memory GiB": round(p.total_memory / 2**30, 1),
                "L2 MiB": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
            }
        )
        info.update({f"nvidia-smi {k}": v for k, v in _nvidia_smi().items()})
    b = torch.backends.cuda
    info["sdpa backends enabled"] = {
        "flash": b.flash_sdp_enabled(),
        "mem_efficient": b.mem_efficient_sdp_enabled(),
        "math": b.math_sdp_enabled(),
        "cudnn": getattr(b, "cudnn_sdp_enabled", lambda: None)(),
    }
    return info


def run(device) -> tuple[dict, str]:
    info = collect(device)
    rows = [[k, v] for k, v in info.items()]
    return {"info": info}, md_table(["item", "value"], rows)
