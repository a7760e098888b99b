"""``models.meta.on_meta``: a model built there has exactly the real model's tensors (names, shapes,
dtypes) and no storage; its initialisers are skipped (so the first meta build of a process imports no
torch._dynamo); the mode is thread-local, so a real build on another thread is untouched."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import torch

from models import ModelConfig, build_model
from models.meta import materialize, on_meta

CONFIGS = [
    ModelConfig(),
    ModelConfig(attention="sliding_window", position="alibi", n_kv_heads=2),
    ModelConfig(ffn="moe"),
    ModelConfig(norm_placement="rezero", layer="universal"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.attention}-{c.ffn}-{c.layer}")
def test_meta_build_has_the_real_models_tensors(cfg):
    with on_meta():
        meta = build_model(cfg)
    real = build_model(cfg)
    got = {k: (tuple(t.shape), t.dtype, t.is_meta) for k, t in meta.state_dict().items()}
    want = {k: (tuple(t.shape), t.dtype, True) for k, t in real.state_dict().items()}
    assert got == want


def test_first_meta_build_imports_no_dynamo():
    code = (
        "import sys; from models import ModelConfig, build_model; from models.meta import on_meta\n"
        "with on_meta(): build_model(ModelConfig())\n"
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_other_threads_build_real_weights_meanwhile():
    seen = {}

    def other():
        torch.manual_seed(0)
        seen["w"] = torch.nn.Linear(8, 8).weight

    with on_meta():
        t = threading.Thread(target=other)
        t.start()
        t.join()
        inside = torch.nn.Linear(8, 8).weight
    assert inside.is_meta
    assert not seen["w"].is_meta and seen["w"].abs().sum() > 0  # initialised on the other thread


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.attention}-{c.ffn}-{c.layer}")
def test_materialize_gives_the_real_models_tensors_on_the_cpu(cfg):
    """As ``to_empty``: the real model's names, shapes and dtypes, real storage; loading the real model's weights
    into it gives the real model's outputs (for a model without buffers: as with ``to_empty``, a buffer that is
    not in the state dict stays unset, so the checkpoint loader builds such a model for real)."""
    with on_meta():
        meta = build_model(cfg)
    real = build_model(cfg).eval()
    model = materialize(meta, "cpu")
    assert model is meta
    got = {k: (tuple(t.shape), t.dtype, t.device.type) for k, t in model.state_dict().items()}
    assert got == {k: (tuple(t.shape), t.dtype, "cpu") for k, t in real.state_dict().items()}
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in model.parameters())
    if any(True for _ in real.buffers()):
        return
    model.load_state_dict(real.state_dict())
    ids = torch.randint(0, cfg.vocab_size, (1, 12))
    torch.testing.assert_close(model.eval()(ids).logits, real(ids).logits)


def test_materialize_imports_no_sympy():
    """``to_empty`` imported sympy (through torch's symbolic shapes) on first use: 0.3-0.4 s of a cold start."""
    code = (
        "import sys; from models import ModelConfig, build_model; from models.meta import materialize, on_meta\n"
        "with on_meta(): m = build_model(ModelConfig())\n"
        "materialize(m, 'cpu')\n"
        "print('sympy' in sys.modules, next(m.parameters()).device)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False cpu"
