"""Test-wide setup.

TRITON_INTERPRET must be set before anything imports triton, so that ``@triton.jit`` kernels run
in the interpreter on CPU tensors (the correctness half of the GPU story; the other half,
ahead-of-time compilation for sm_80 / sm_90, runs in a subprocess without it).
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
