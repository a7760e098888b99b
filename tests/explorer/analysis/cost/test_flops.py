"""``FlopCount`` counts what ``torch.utils.flop_counter.FlopCounterMode`` counts, without importing torch._dynamo."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from explorer.analysis.cost.flops import FlopCount
from explorer.analysis.cost.summary import sdpa_cpu_flops
from models import ConfigError, ModelConfig, build_model, choices
from models.architectures import arrangement

ROOT = Path(__file__).resolve().parents[4]
SMALL = dict(n_layers=2, d_model=32, n_heads=2)
CUSTOM = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flops}


def _valid(cfg: ModelConfig):
    for c in (cfg, cfg.replace(causal=False)):
        try:
            return c.validate()
        except ConfigError:
            continue
    return None


def _both(cfg: ModelConfig, seq_len: int = 40) -> tuple:
    """(FlopCount total, FlopCounterMode total) of one forward of ``cfg``'s model."""
    model = build_model(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    args = [torch.randint(0, cfg.vocab_size, (1, seq_len), generator=gen) for _ in arrangement(cfg).inputs]
    with torch.no_grad(), FlopCount(CUSTOM) as ours:
        model(*args)
    # the reference with autograd on: its module tracker's hooks fail on some models (luna) under no_grad
    with FlopCounterMode(display=False, custom_mapping=CUSTOM) as ref:
        model(*args)
    return ours.total, ref.get_total_flops()


@pytest.mark.parametrize("attention", choices()["attention"])
def test_every_attention_counts_what_flop_counter_mode_counts(attention):
    cfg = _valid(ModelConfig(attention=attention, **SMALL))
    if cfg is None:
        pytest.skip(f"{attention}: no valid small config")
    ours, ref = _both(cfg)
    assert ours == ref and ours > 0


@pytest.mark.parametrize(
    "change",
    [
        dict(architecture="encoder_decoder"),
        dict(ffn="moe"),
        dict(ffn="pkm"),
        dict(memory="xl"),
        dict(position="alibi"),
        dict(layer="universal"),
        dict(norm_placement="post", norm="rmsnorm"),
    ],
)
def test_other_families_count_what_flop_counter_mode_counts(change):
    cfg = _valid(ModelConfig(**SMALL, **change))
    assert cfg is not None
    ours, ref = _both(cfg)
    assert ours == ref and ours > 0


def test_a_linear_layer_is_two_flops_per_multiply_add():
    lin = torch.nn.Linear(16, 8, bias=False)
    with torch.no_grad(), FlopCount() as c:
        lin(torch.randn(3, 16))
        torch.randn(4, 5) @ torch.randn(5, 6)  # a matmul outside a module counts too
    assert c.total == 2 * 3 * 16 * 8 + 2 * 4 * 5 * 6


def test_the_custom_formula_counts_the_cpu_attention_kernel():
    q = k = v = torch.randn(1, 2, 10, 8)
    with torch.no_grad(), FlopCount(CUSTOM) as c:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(
        out,
        torch.softmax(
            (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(torch.ones(10, 10).triu(1).bool(), float("-inf")), -1
        )
        @ v,
        atol=1e-5,
    )  # the result is untouched
    assert c.total == 4 * 1 * 2 * 10 * 10 * 8 // 2


def test_counting_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\n"
        "from explorer.analysis.cost.flops import FlopCount\n"
        "with torch.no_grad(), FlopCount() as c:\n"
        "    torch.nn.Linear(4, 4)(torch.randn(2, 4)).min()\n"
        "assert c.total == 2 * 2 * 4 * 4, c.total\n"
        "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip().splitlines()[-1] == "no dynamo"
