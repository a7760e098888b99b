"""The CPU plan is made once per layout: ``BlockMask.to`` keeps the mask (and its memo), the plan
and the fused-window masks are memoised, safely under threads, and the memo changes no result."""

import dataclasses
import threading

import pytest
import torch

from kernels import attention, attention_ref, block_mask, record_backends
from kernels.cpu import plan as cpu_plan
from kernels.cpu.attention import block_sparse_attention
from kernels.cpu.plan import SLIDING, plan


def _window_mask(L, w):
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    return (i - j >= 0) & (i - j < w)


def _qkv(h, L, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, h, L, d, generator=g, dtype=dtype).requires_grad_() for _ in range(3)]


def test_to_same_device_is_the_mask_itself():
    bm = block_mask(_window_mask(64, 9), 16)
    assert bm.to("cpu") is bm
    assert bm.to(torch.device("cpu")) is bm


def test_one_copy_per_other_device():
    bm = block_mask(_window_mask(64, 9), 16)
    meta = bm.to("meta")
    assert meta is not bm and meta.kv_counts.device.type == "meta"
    assert bm.to(torch.device("meta")) is meta  # cached: same object, hence same plan memo
    assert meta.to("meta") is meta


def test_memos_are_not_part_of_identity_and_take_any_key():
    bm = block_mask(_window_mask(64, 9), 16)
    other = dataclasses.replace(bm, plans={}, copies={})
    bm.plans["triton-layout"] = object()  # another backend's memo lives beside the CPU plan
    plan(bm, 64, 64, "cpu")
    assert bm == other and len(bm.plans) == 2
    assert "triton-layout" not in repr(bm)


def test_plan_is_built_once_and_returned_after(monkeypatch):
    built = []
    real = cpu_plan.build_plan
    monkeypatch.setattr(cpu_plan, "build_plan", lambda *a: built.append(1) or real(*a))
    bm = block_mask(_window_mask(200, 40), 16)
    first = plan(bm, 200, 200, torch.device("cpu"))
    assert plan(bm, 200, 200, "cpu") is first
    assert len(built) == 1


def test_concurrent_threads_share_one_plan_and_one_copy():
    """Threads released together on a fresh mask all get the same plan and the same device copy."""
    bm = block_mask(_window_mask(512, 70), 16)
    n = 6
    barrier = threading.Barrier(n)
    plans, copies, errors = [None] * n, [None] * n, []

    def work(t):
        try:
            barrier.wait()
            plans[t] = plan(bm, 512, 512, "cpu")
            copies[t] = bm.to("meta")
        except Exception as e:  # surfaced below: a thread's exception would otherwise vanish
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert all(p is plans[0] for p in plans) and all(c is copies[0] for c in copies)
    assert [k for k in bm.plans if k[0] == "cpu"] == [("cpu", "cpu", 512, 512)]


def test_memoised_window_masks_are_keyed_by_dtype_and_causality():
    """One layout run in fp64 and fp32, causal and not: each call matches the reference, so a mask
    memoised for one combination is never reused for another."""
    L, w = 256, 40
    mask = _window_mask(L, w) | _window_mask(L, w).T
    bm = block_mask(mask, 32)
    groups, _ = plan(bm, L, L, "cpu")
    assert any(g.kind == SLIDING for g in groups)
    for dtype in (torch.float64, torch.float32, torch.float64):
        for causal in (False, True):
            q, k, v = _qkv(2, L, 8, dtype)
            out = block_sparse_attention(q, k, v, bm, causal=causal, scale=0.3)
            ref, _ = attention_ref(q, k, v, mask=mask, causal=causal, scale=0.3)
            torch.testing.assert_close(out, ref, **({"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else {}))
    run = next(g for g in groups if g.kind == SLIDING)
    kept = dict(run.masks)
    assert {key[:2] for key in kept} == {
        (torch.float64, False),
        (torch.float64, True),
        (torch.float32, False),
        (torch.float32, True),
    }
    q, k, v = _qkv(2, L, 8)
    block_sparse_attention(q, k, v, bm, causal=True, scale=0.3)
    assert all(run.masks[key] is kept[key] for key in kept)  # reused, not rebuilt


def test_a_four_layer_sliding_window_model_plans_its_layout_once(monkeypatch):
    """Two forwards of a real 4-layer model: 8 block-sparse attention calls, one plan; the logits
    equal those of a run that plans every call."""
    from models import ModelConfig, build_model
    from models.attention import sparse

    sparse._layout_cached.cache_clear()  # the layout (and its plan memo) is made inside this test
    built = []
    real = cpu_plan.build_plan
    monkeypatch.setattr(cpu_plan, "build_plan", lambda *a: built.append(a[1:3]) or real(*a))
    L = 384
    model = build_model(
        ModelConfig(attention="sliding_window", window=48, n_layers=4, max_len=L, d_model=32, n_heads=2)
    ).eval()
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), record_backends() as ran:
        first = model(tokens).logits
        second = model(tokens).logits
    assert ran == ["torch-cpu block-sparse"] * 8
    assert built == [(L, L)]
    torch.testing.assert_close(second, first, rtol=0, atol=0)

    # Planning every call (no memo) gives the same logits.
    monkeypatch.setattr(cpu_plan, "plan", lambda bm, lq, lk, device: real(bm, lq, lk, device))
    monkeypatch.setattr("kernels.cpu.attention.plan", cpu_plan.plan)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens).logits, first)


@pytest.mark.parametrize("causal", [False, True])
def test_memo_survives_the_public_entry(causal):
    """``kernels.attention`` on a mask moved with ``to(q.device)`` each call (as a layer does) reads
    the plan made by the first call."""
    L = 128
    bm = block_mask(_window_mask(L, 20), 32)
    q, k, v = _qkv(2, L, 8)
    attention(q, k, v, block_mask=bm.to(q.device), causal=causal)
    first = bm.plans[("cpu", "cpu", L, L)]
    out = attention(q, k, v, block_mask=bm.to(q.device), causal=causal)
    assert bm.plans[("cpu", "cpu", L, L)] is first
    torch.testing.assert_close(out, attention_ref(q, k, v, mask=_window_mask(L, 20), causal=causal)[0])


def test_dense_attention_with_a_softcap_plans_its_layout_once(monkeypatch):
    """Without a block mask, a softcap (or relative tables) runs the all-visited layout: made and
    planned once per shape, not per call."""
    from kernels.attention import _dense_layout_on

    _dense_layout_on.cache_clear()  # the layout is made inside this test
    built = []
    real = cpu_plan.build_plan
    monkeypatch.setattr(cpu_plan, "build_plan", lambda *a: built.append(a[1:3]) or real(*a))
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 71, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 83, 8, generator=g, dtype=torch.float64) for _ in range(2))
    outs = [attention(q, k, v, softcap=3.0, causal=causal) for causal in (False, True, False)]
    for out, causal in zip(outs, (False, True, False)):
        torch.testing.assert_close(out, attention_ref(q, k, v, softcap=3.0, causal=causal)[0])
    assert built == [(71, 83)]
