"""Fixtures shared by the interpreted Triton kernel tests."""

import numpy as np
import pytest


@pytest.fixture
def bf16_dot(monkeypatch):
    """Let the Triton interpreter multiply bf16 operands.

    The Triton 3.9 interpreter stores bf16 as uint16 and its ``create_dot`` converts only 8-bit
    floats, so a bf16 ``tl.dot`` multiplies raw bit patterns (a 16 x 16 product is off by ~1e10).
    This widens bf16 operands to fp32 first (exact: a bf16 is the top half of an fp32, as the
    tensor cores use it) and otherwise runs the interpreter's own dot.
    """
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    dot = InterpreterBuilder.create_dot

    def widen(x):
        if x.dtype.scalar != tl.bfloat16:
            return x
        return TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    monkeypatch.setattr(
        InterpreterBuilder, "create_dot", lambda self, a, b, d, *args: dot(self, widen(a), widen(b), d, *args)
    )
