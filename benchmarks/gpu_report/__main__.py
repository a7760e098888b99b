"""Entry point of ``python -m benchmarks.gpu_report`` (see the package docstring)."""

from __future__ import annotations

import os
import sys


def _interpreter_if_no_cuda() -> None:
    """Without CUDA the kernels must run in the Triton interpreter, which is chosen when triton is
    imported: set TRITON_INTERPRET=1 now if triton is not imported yet, else re-execute."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return
    import torch

    if torch.cuda.is_available():
        return
    os.environ["TRITON_INTERPRET"] = "1"
    if "triton" in sys.modules:  # too late for this process
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks.gpu_report", *sys.argv[1:]])


if __name__ == "__main__":
    _interpreter_if_no_cuda()
    from .main import main

    sys.exit(main())
