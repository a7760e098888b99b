"""The model card's FLOPs count attention on every path: the FlashAttention convention (``4 B h Lq Lk d``
forward, halved for causal; a block-sparse call counts the tiles it computes), whether attention runs
in an aten op (SDPA, counted by its formula) or in a Triton kernel (no aten op: recorded by
``kernels.attention`` itself)."""

import sys

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

import kernels
from explorer.analysis.cost import summary
from models import ModelConfig
from models.attention import pattern_mask

ATTENTION = sys.modules["kernels.attention"]
REAL = kernels.attention


@pytest.mark.parametrize("causal", [False, True])
def test_dense_attention_flops_are_the_flashattention_formula(causal):
    B, h, L, d = 2, 4, 96, 16
    want = 4 * B * h * L * L * d // (2 if causal else 1)
    assert kernels.attention_flops((B, h, L, d), (B, 2, L, d), causal) == want  # GQA: the query heads count


def test_block_sparse_flops_count_the_computed_tiles():
    cfg = ModelConfig(attention="sliding_window", window=40)
    L, block, B, h, d = 300, 64, 1, 2, 8
    mask = pattern_mask(cfg, L)
    bm = kernels.block_mask(mask, block)
    padded = torch.zeros(5 * block, 5 * block, dtype=torch.bool)
    padded[:L, :L] = mask
    tiles = int(padded.view(5, block, 5, block).any(dim=(1, 3)).sum())  # tiles with an allowed pair
    assert kernels.attention_flops((B, h, L, d), (B, h, L, d), block_mask=bm) == 4 * B * h * d * tiles * block * block


def _as_a_triton_kernel(monkeypatch, records: bool = True):
    """``kernels.attention`` as the Triton path behaves for the counter: the work is invisible to aten
    dispatch, and the call records ``attention_flops`` itself (``records=False``: the card before the
    fix, which lost that work)."""

    def hidden(q, k, v, *, causal=False, block_mask=None, **kw):
        with _disable_current_modes():
            out = REAL(q, k, v, causal=causal, block_mask=block_mask, **kw)
        recorder = ATTENTION._FLOPS.get()
        if records and recorder is not None:
            recorder.append(kernels.attention_flops(q.shape, k.shape, causal, block_mask))
        return out

    monkeypatch.setattr(kernels, "attention", hidden)


@pytest.mark.parametrize("causal", [True, False])
def test_the_card_counts_kernel_attention_as_it_counts_sdpa(monkeypatch, causal):
    cfg = ModelConfig(n_layers=2, d_model=64, n_heads=4, causal=causal, seed=91)
    L = 128
    shape = (1, cfg.n_heads, L, cfg.d_head)
    attention = cfg.n_layers * kernels.attention_flops(shape, shape, causal) / L  # per token, by the formula
    on_sdpa = summary._summary(cfg, L)["flops_per_token"]
    _as_a_triton_kernel(monkeypatch, records=False)
    unseen = summary._summary(cfg, L)["flops_per_token"]
    _as_a_triton_kernel(monkeypatch)
    in_kernel = summary._summary(cfg, L)["flops_per_token"]
    assert on_sdpa - unseen == pytest.approx(attention)  # what the GPU path's card left out
    assert in_kernel == pytest.approx(on_sdpa)
