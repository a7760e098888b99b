"""``triton`` is needed only on CUDA Linux: with it made unimportable, ``import models`` and the
CPU forward / backward of every mechanism family still work (macOS / Windows CPU installs).

Runs in subprocesses whose ``sys.meta_path`` starts with a finder that raises ImportError for
``triton`` and its submodules, so nothing in this test process is affected: one runs a few models
and the kernels' CPU entry points directly, the other runs the model catalogue's tests (every
registry key forward and backward, causality, the encoder-decoder) under pytest.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    class NoTriton(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ImportError(f"{name} blocked for this test")
            return None

    sys.meta_path.insert(0, NoTriton())
    try:
        import triton  # noqa: F401
        raise SystemExit("the blocker does not work")
    except ImportError:
        pass
""")

SCRIPT = BLOCKER + textwrap.dedent("""
    import torch
    import models
    import kernels
    from models import ModelConfig, build_model
    assert not any(m == "triton" or m.startswith("triton.") for m in sys.modules), "triton imported"

    configs = [
        dict(),
        dict(attention="linear", causal=True),
        dict(attention="linear", causal=False),
        dict(attention="sliding_window", window=8, position="rope", norm="rmsnorm"),
        dict(position="alibi", n_kv_heads=1),
    ]
    for extra in configs:
        cfg = ModelConfig(n_layers=1, d_model=32, n_heads=2, max_len=64, **extra)
        model = build_model(cfg)
        tokens = torch.randint(0, cfg.vocab_size, (2, 24))
        out = model(tokens)
        out.logits.float().sum().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), extra
        assert torch.isfinite(out.logits).all(), extra
    # The kernels' own CPU entry points, directly.
    from kernels.linear_attention import linear_attention
    q = torch.rand(1, 2, 20, 8, requires_grad=True)
    linear_attention(q, q, torch.randn(1, 2, 20, 8), causal=True).sum().backward()
    assert not any(m == "triton" or m.startswith("triton.") for m in sys.modules), "triton imported"
    print("OK", len(configs))
""")


def _run(script: str, timeout: int) -> subprocess.CompletedProcess:
    """``python -c script`` from the repository root, without the interpreter flag (as on a CPU laptop)."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_models_run_on_cpu_without_triton():
    res = _run(SCRIPT, timeout=600)
    assert res.returncode == 0 and "OK 5" in res.stdout, res.stdout[-2000:] + res.stderr[-4000:]


CATALOGUE_TESTS = ["tests/models/test_catalogue.py", "tests/models/test_encdec.py"]
PYTEST_SCRIPT = BLOCKER + textwrap.dedent(f"""
    import pytest
    code = pytest.main(["-q", "-p", "no:cacheprovider", *{CATALOGUE_TESTS!r}])
    assert not any(m == "triton" or m.startswith("triton.") for m in sys.modules), "triton imported"
    raise SystemExit(int(code))
""")


@pytest.mark.slow
def test_the_catalogue_tests_pass_without_triton():
    res = _run(PYTEST_SCRIPT, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert " passed" in res.stdout, res.stdout[-2000:]
