"""``kernels.backend``: the one Triton-or-PyTorch decision of every dispatcher."""

import sys

import torch

from kernels import attention_backend, pooled_backend
from kernels.backend import triton_backend_name, triton_reason


def test_cpu_tensors_take_the_torch_path_without_importing_the_kernel_module():
    before = set(sys.modules)
    assert triton_reason("cpu", "norms") == "not a CUDA tensor"
    assert "kernels.triton.norms" not in set(sys.modules) - before


def test_forced_kernels_ask_their_module():
    x = torch.zeros(1, 1, 4, 8)
    assert triton_reason("cpu", "norms", force=True) is None  # no unsupported_reason: always runs
    assert triton_reason("cpu", "linear_attention", x, x, force=True) is None
    wide = torch.zeros(1, 1, 4, 128)
    assert "above 64" in triton_reason("cpu", "linear_attention", wide, wide, force=True)


def test_cuda_arguments_the_kernel_refuses_name_the_reason():
    q = torch.empty(1, 1, 8, 64, device="meta")
    assert "rel_k" in triton_reason("cuda", "flash.launcher", q, q, q, rel_k=torch.zeros(1))
    assert triton_reason("cuda", "flash.launcher", q, q, q) is None


def test_names():
    assert triton_backend_name("cpu") == "triton (interpreter)"
    assert attention_backend("cpu") == "sdpa (cpu)"
    assert attention_backend("cpu", softcap=30.0) == "torch-cpu block-sparse"
    q = torch.zeros(1, 1, 4, 8)
    assert pooled_backend(q, q) == "torch-cpu block-sparse"
