"""mla and differential through the shared kernels (``kernels.attention``; models/attention/padded.py).

Without maps both cores run their softmax products through the dispatcher: on a CPU SDPA (or the block-sparse
PyTorch path with a soft cap), on CUDA the Triton flash kernel, with query/key and value widths zero-padded to one
kernel width. Here, against float64 plain-PyTorch references written from the papers' formulas (independent of
the product code): the CPU path's output and gradients (float64), lengths that are not multiples of 16 / 64, with
keys before the queries (a cache / memory), causal and not, with and without a soft cap, GQA for differential; the
Triton route forced onto CPU tensors in the interpreter (float32, tiny sizes: the same launcher and kernels a GPU
runs); the dense path kept for the maps; the padded widths of the defaults among the AOT-compiled ones.
"""

from __future__ import annotations

import copy
import importlib
import math

import pytest
import torch

import kernels
from kernels.backend import triton_reason
from models import ModelConfig
from models.attention import ATTENTION
from models.attention.padded import KERNEL_HEAD_DIMS, padded_width
from models.context import ForwardContext

dispatch = importlib.import_module("kernels.attention")  # the module (the package's ``attention`` is the function)

# (Lq, Lk): equal lengths off the 16 / 64 grid, queries after earlier keys (a memory prefix), one decoding query
LENGTHS = [(7, 7), (17, 17), (70, 70), (5, 21), (1, 33)]
MLA_SMALL = dict(kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)


def _ctx(need_weights: bool) -> ForwardContext:
    return ForwardContext(tokens=None, position=None, need_weights=need_weights)


def _allowed(lq: int, lk: int, causal: bool) -> torch.Tensor:
    """Query ``i`` sits at key position ``i + lk - lq``; causal keeps keys at or before it."""
    i, j = torch.arange(lq)[:, None] + (lk - lq), torch.arange(lk)[None, :]
    return (j <= i) if causal else torch.ones(lq, lk, dtype=torch.bool)


def _softmax_av(q, k, v, scale, allowed, softcap):
    """``softmax(cap(scale q.k), masked) v`` on ``[B, h, L, .]``, written out."""
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~allowed, -math.inf)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    return torch.einsum("bhij,bhjd->bhid", p, v)


# --------------------------------------------------------------------------- mla
def _mla(causal, absorb, softcap=None, dtype=torch.float64, **kw):
    cfg = ModelConfig(
        attention="mla",
        position="rope",
        d_model=30,
        n_heads=3,
        causal=causal,
        softcap=softcap,
        mla_absorb=absorb,
        **{**MLA_SMALL, **kw},
    ).validate()
    torch.manual_seed(0)
    return cfg, ATTENTION["mla"].build(cfg).to(dtype)


def _mla_inputs(cfg, lq, lk, dtype=torch.float64, seed=0):
    """``q (B, h, Lq, dn + dr)`` and the latent ``c (B, Lk, r)`` and shared rotated key ``kr (B, Lk, dr)``."""
    g = torch.Generator().manual_seed(seed)
    dq = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim

    def mk(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64).to(dtype).requires_grad_()

    return mk(2, cfg.n_heads, lq, dq), mk(2, lk, cfg.kv_lora_rank), mk(2, lk, cfg.qk_rope_head_dim)


def _mla_reference(q, c, kr, w_kvb, cfg):
    """DeepSeek-V2 eq. (MLA): per head ``k_n = [c W_UK,n^T, k^R]``, ``v_n = c W_UV,n^T``,
    ``o_n = softmax(q_n k_n^T / sqrt(dn + dr)) v_n``."""
    h, dn, dr, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    w = w_kvb.reshape(h, dn + dv, cfg.kv_lora_rank)
    keys = torch.cat([torch.einsum("blr,hdr->bhld", c, w[:, :dn]), kr[:, None].expand(-1, h, -1, -1)], dim=-1)
    values = torch.einsum("blr,hvr->bhlv", c, w[:, dn:])
    allowed = _allowed(q.shape[2], c.shape[1], cfg.causal)
    return _softmax_av(q, keys, values, 1.0 / math.sqrt(dn + dr), allowed, cfg.softcap)


def _mla_call(core, q, c, kr, need_weights=False):
    """The core as the sublayer calls it: ``k = [c, RoPE(k^R)] (B, 1, Lk, r + dr)``, ``v = c (B, 1, Lk, r)``."""
    k = torch.cat([c, kr], dim=-1)[:, None]
    return core(q, k, c[:, None], {}, _ctx(need_weights))


def _grads(out, ins, seed=5):
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
    return torch.autograd.grad(out, ins, do)


@pytest.mark.parametrize("lq,lk", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize("softcap", [None, 3.0])
def test_mla_kernel_path_equals_the_formula_on_cpu(lq, lk, causal, absorb, softcap):
    cfg, core = _mla(causal, absorb, softcap)
    q, c, kr = _mla_inputs(cfg, lq, lk)
    with kernels.record_backends() as ran:
        out, probs, aux = _mla_call(core, q, c, kr)
    assert probs is None and aux == {}
    assert ran == ["torch-cpu block-sparse" if softcap else "sdpa (cpu)"]  # one call, the dispatcher's CPU path
    w = core.kv_b_proj.weight
    want = _mla_reference(q, c, kr, w, cfg)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-10)
    ins = (q, c, kr, w)
    for name, a, b in zip(("q", "c", "k_rope", "kv_b_proj"), _grads(out, ins), _grads(want, ins)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=name)


@pytest.mark.parametrize("absorb", [False, True])
def test_mla_maps_keep_the_dense_path_and_agree_with_the_kernel_path(absorb):
    cfg, core = _mla(True, absorb, 4.0)
    q, c, kr = _mla_inputs(cfg, 17, 17)
    with kernels.record_backends() as ran:
        out_w, probs, aux = _mla_call(core, q, c, kr, need_weights=True)
    assert ran == [] and probs.shape == (2, 3, 17, 17) and {"q", "k"} <= set(aux)
    out, _, _ = _mla_call(core, q, c, kr)
    torch.testing.assert_close(out, out_w, rtol=0, atol=1e-10)


# --------------------------------------------------------------------------- differential
def _diff(causal, softcap=None, dtype=torch.float64, layer=2):
    cfg = ModelConfig(
        attention="differential", position="sinusoidal", d_model=32, n_heads=4, causal=causal, softcap=softcap
    ).validate()
    torch.manual_seed(0)
    core = ATTENTION["differential"].build(cfg, layer).to(dtype)
    core.subln.weight.data.uniform_(0.5, 1.5)
    return cfg, core


def _diff_inputs(h, h_kv, lq, lk, dh, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)

    def mk(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64).to(dtype).requires_grad_()

    return mk(2, h, lq, dh), mk(2, h_kv, lk, dh), mk(2, h_kv, lk, dh)


def _diff_reference(core, q, k, v, causal, softcap):
    """Ye et al. 2025: ``A = softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))``, the head
    ``(1 - lambda_init) RMSNorm(A V)``, ``lambda = exp(lq1.lk1) - exp(lq2.lk2) + lambda_init``; query head ``n``
    reads K/V head ``n // (h / h_kv)``."""
    h, dh = q.shape[1], q.shape[-1]
    d = dh // 2
    rep = h // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    allowed = _allowed(q.shape[2], k.shape[2], causal)
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * core.layer)  # the paper's l - 1 = the 0-based layer
    lam = torch.exp(core.lambda_q1 @ core.lambda_k1) - torch.exp(core.lambda_q2 @ core.lambda_k2) + lam_init
    o1 = _softmax_av(q[..., :d], k[..., :d], v, 1.0 / math.sqrt(d), allowed, softcap)
    o2 = _softmax_av(q[..., d:], k[..., d:], v, 1.0 / math.sqrt(d), allowed, softcap)
    o = o1 - lam * o2
    return (1 - lam_init) * o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * core.subln.weight


@pytest.mark.parametrize("lq,lk", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("h_kv", [4, 2])
@pytest.mark.parametrize("softcap", [None, 3.0])
def test_differential_kernel_path_equals_the_formula_on_cpu(lq, lk, causal, h_kv, softcap):
    cfg, core = _diff(causal, softcap)
    q, k, v = _diff_inputs(4, h_kv, lq, lk, cfg.d_head)
    with kernels.record_backends() as ran:
        out, probs, aux = core(q, k, v, {}, _ctx(False))
    assert probs is None and aux == {}
    assert ran == 2 * ["torch-cpu block-sparse" if softcap else "sdpa (cpu)"]  # one call per softmax map
    want = _diff_reference(core, q, k, v, causal, softcap)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-10)
    ins = (q, k, v, core.lambda_q1, core.lambda_k2, core.subln.weight)
    names = ("q", "k", "v", "lambda_q1", "lambda_k2", "subln")
    for name, a, b in zip(names, _grads(out, ins), _grads(want, ins)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=name)


def test_differential_maps_keep_the_dense_path_and_agree_with_the_kernel_path():
    cfg, core = _diff(True, 4.0)
    q, k, v = _diff_inputs(4, 1, 9, 13, cfg.d_head)
    with kernels.record_backends() as ran:
        out_w, probs, _ = core(q, k, v, {}, _ctx(True))
    assert ran == [] and probs.shape == (2, 4, 9, 13)
    torch.testing.assert_close(core(q, k, v, {}, _ctx(False))[0], out_w, rtol=0, atol=1e-10)


def test_the_sublayers_train_through_the_kernel_path():
    """A whole model (no maps requested) forward and backward, every parameter reached."""
    from models import build_model

    for fields in (dict(attention="mla", position="rope", **MLA_SMALL), dict(attention="differential")):
        cfg = ModelConfig(d_model=32, n_heads=4, n_layers=2, max_len=32, **fields).validate()
        model = build_model(cfg)
        with kernels.record_backends() as ran:
            model(torch.randint(0, 256, (2, 19))).logits.sum().backward()
        assert ran and all(name == "sdpa (cpu)" for name in ran), fields
        assert all(p.grad is not None for p in model.parameters()), fields


# --------------------------------------------------------------------------- widths
def test_padded_widths_of_the_defaults_are_compiled_ahead_of_time():
    """MLA's defaults: naive 32 + 16 against 32 -> 64, absorbed 64 + 16 against 64 -> 128; differential's defaults
    (d_model 128, 4 heads): halves of 16 against 32 -> 32. Every one is a launcher width whose dense kernels
    (plain and with modifiers, forward and backward) kernels.tools.aot_check compiles in every dtype."""
    pytest.importorskip("triton")
    from kernels.tools.aot_check import _flash_specs
    from kernels.triton.flash.launcher import DTYPES, HEAD_DIMS

    assert KERNEL_HEAD_DIMS == HEAD_DIMS
    mla = ModelConfig(attention="mla", position="rope").validate()
    diff = ModelConfig(attention="differential").validate()
    dq = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    widths = {
        "mla naive": padded_width(dq, mla.v_head_dim),
        "mla absorbed": padded_width(mla.kv_lora_rank + mla.qk_rope_head_dim, mla.kv_lora_rank),
        "differential": padded_width(diff.d_head // 2, diff.d_head),
    }
    assert widths == {"mla naive": 64, "mla absorbed": 128, "differential": 32}
    names = [spec[0] for spec in _flash_specs(False)]
    for w in set(widths.values()):
        for dtype in DTYPES:
            tt = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
            for kern in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"):
                for mod in ("", " mod"):
                    assert any(n.startswith(f"{kern} {tt} d{w} dense{mod} ") for n in names), (kern, tt, w, mod)


def test_padded_width_rounds_up_to_a_kernel_width_or_keeps_the_larger():
    assert [padded_width(a, b) for a, b in ((10, 5), (33, 8), (48, 32), (80, 64), (129, 64), (192, 128))] == [
        32,
        64,
        64,
        128,
        129,
        192,
    ]


# --------------------------------------------------------------------------- Triton (interpreter)
@pytest.fixture
def triton_route(monkeypatch):
    """Every ``kernels.attention`` call takes the Triton route on CPU tensors (the interpreter), as on CUDA."""
    pytest.importorskip("triton")

    def forced(device, q, k, v, block_mask=None, rel_k=None, rel_v=None, sinks=None):
        return triton_reason(
            device, "flash.launcher", q, k, v, block_mask=block_mask, rel_k=rel_k, rel_v=rel_v, sinks=sinks, force=True
        )

    monkeypatch.setattr(dispatch, "_triton_reason", forced)


def _float_copies(ts):
    return [t.detach().float().requires_grad_() for t in ts]


@pytest.mark.parametrize(
    "absorb,lq,lk,causal,softcap,kw",
    [
        (False, 19, 19, True, None, {}),  # widths 10 / 5 -> 32
        (True, 5, 21, False, 3.0, {}),  # widths 16 / 12 -> 32, MQA over the latent, soft cap
        (False, 9, 9, True, None, dict(kv_lora_rank=20, qk_nope_head_dim=40, qk_rope_head_dim=8, v_head_dim=24)),
        (True, 1, 9, True, None, dict(kv_lora_rank=60, qk_nope_head_dim=8, qk_rope_head_dim=8)),  # 68 / 60 -> 128
    ],
)
def test_mla_in_the_triton_kernel(triton_route, absorb, lq, lk, causal, softcap, kw):
    cfg, core = _mla(causal, absorb, softcap, dtype=torch.float32, **kw)
    q64, c64, kr64 = _mla_inputs(cfg, lq, lk, seed=3)
    q, c, kr = _float_copies((q64, c64, kr64))
    with kernels.record_backends() as ran:
        out, _, _ = _mla_call(core, q, c, kr)
    assert ran == ["triton (interpreter)"]
    w = core.kv_b_proj.weight
    w64 = w.detach().double().requires_grad_()
    want = _mla_reference(q64, c64, kr64, w64, cfg)
    torch.testing.assert_close(out.double(), want, rtol=2e-4, atol=2e-4)
    got_g = _grads(out, (q, c, kr, w))
    want_g = _grads(want, (q64, c64, kr64, w64))
    for name, a, b in zip(("q", "c", "k_rope", "kv_b_proj"), got_g, want_g):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-3, msg=name)


@pytest.mark.parametrize(
    "h_kv,lq,lk,causal,softcap",
    [(4, 19, 19, True, None), (2, 6, 23, False, 3.0), (1, 17, 17, False, None)],
)
def test_differential_in_the_triton_kernel(triton_route, h_kv, lq, lk, causal, softcap):
    cfg, core = _diff(causal, softcap, dtype=torch.float32)
    q64, k64, v64 = _diff_inputs(4, h_kv, lq, lk, cfg.d_head, seed=4)
    q, k, v = _float_copies((q64, k64, v64))
    with kernels.record_backends() as ran:
        out, _, _ = core(q, k, v, {}, _ctx(False))
    assert ran == 2 * ["triton (interpreter)"]
    ref = copy.deepcopy(core).double()  # the same parameters in float64
    want = _diff_reference(ref, q64, k64, v64, causal, softcap)
    torch.testing.assert_close(out.double(), want, rtol=2e-4, atol=2e-4)
    for name, a, b in zip(("q", "k", "v"), _grads(out, (q, k, v)), _grads(want, (q64, k64, v64))):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-3, msg=name)


def _close_half(got, want, tol, name):
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * scale, msg=name)


@pytest.mark.parametrize("absorb", [False, True])
def test_mla_and_differential_in_the_half_precision_triton_kernel(triton_route, absorb):
    """fp16 (what a GPU runs under autocast; the interpreter's bf16 dot is broken, tests/kernels/conftest.py):
    MLA's default widths (64 naive, 128 absorbed) and differential's 32, forward and backward against float64."""
    cfg, core = _mla(True, absorb, dtype=torch.float16, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16)
    q, c, kr = (t.detach().half().requires_grad_() for t in _mla_inputs(cfg, 11, 11, seed=6))
    ref = [t.detach().double().requires_grad_() for t in (q, c, kr)]
    with kernels.record_backends() as ran:
        out, _, _ = _mla_call(core, q, c, kr)
    want = _mla_reference(*ref, core.kv_b_proj.weight.detach().double(), cfg)
    assert ran == ["triton (interpreter)"] and out.dtype == torch.float16
    _close_half(out, want, 2e-2, "mla out")
    for name, a, b in zip(("q", "c", "k_rope"), _grads(out, (q, c, kr)), _grads(want, ref)):
        _close_half(a, b, 3e-2, f"mla d{name}")

    dcfg = ModelConfig(attention="differential", d_model=128, n_heads=4, causal=True).validate()
    torch.manual_seed(0)
    dcore = ATTENTION["differential"].build(dcfg, 1).half()
    qkv = [t.detach().half().requires_grad_() for t in _diff_inputs(4, 2, 11, 11, dcfg.d_head, seed=7)]
    ref = [t.detach().double().requires_grad_() for t in qkv]
    with kernels.record_backends() as ran:
        out, _, _ = dcore(*qkv, {}, _ctx(False))
    want = _diff_reference(copy.deepcopy(dcore).double(), *ref, True, None)
    assert ran == 2 * ["triton (interpreter)"] and out.dtype == torch.float16
    _close_half(out, want, 3e-2, "differential out")
    for name, a, b in zip(("q", "k", "v"), _grads(out, qkv), _grads(want, ref)):
        _close_half(a, b, 5e-2, f"differential d{name}")
