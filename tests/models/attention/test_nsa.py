"""nsa (Native Sparse Attention, Yuan et al. 2025): the sublayer against a float64 per-query loop written here from
the paper's formulas (compression MLP, eq. 9's block importance summed over a GQA group, top-n with the initial
and two local blocks, the window, sigmoid gates), with and without RoPE; the block-sparse selected branch against
the dense masks (outputs and gradients); gradcheck; the layout; the drawn map; refusals by name."""

import math

import pytest
import torch

import kernels
from kernels import selection_layout
from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext, LayerInfo

BASE = dict(attention="nsa", position="none", d_model=32, n_heads=4, n_layers=1, max_len=64)
T = 37
SHAPES = [  # (l, d, l', n, w): l' = d = l; l' > l > d; l' < l; l' = l = 2d; l >> l'
    dict(nsa_cmp_block=4, nsa_cmp_stride=4, nsa_slc_block=4, nsa_slc_top_n=4, window=5),
    dict(nsa_cmp_block=4, nsa_cmp_stride=2, nsa_slc_block=8, nsa_slc_top_n=3, window=3),
    dict(nsa_cmp_block=6, nsa_cmp_stride=2, nsa_slc_block=4, nsa_slc_top_n=5, window=7),
    dict(nsa_cmp_block=8, nsa_cmp_stride=4, nsa_slc_block=8, nsa_slc_top_n=3, window=9),
    # l >> l': before its first complete compression block a query's blocks all score 0 (ties: the later block)
    dict(nsa_cmp_block=12, nsa_cmp_stride=2, nsa_slc_block=2, nsa_slc_top_n=4, window=3),
]


def _model(**kw):
    cfg = ModelConfig(**{**BASE, **kw}).validate()
    return cfg, build_model(cfg).double()


def _x(cfg, seed=1, B=2, L=T):
    return torch.randn(B, L, cfg.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _run(model, x, need_weights=True):
    attn = model.stack.blocks[0].attn
    ctx = ForwardContext(tokens=torch.zeros(x.shape[:2], dtype=torch.long), position=model.position)
    ctx.need_weights = need_weights
    info = LayerInfo(index=0)
    return attn(x, ctx, info), info


def _rope(x, base):
    """Rotate-half RoPE of ``x [T, m]`` at positions 0..T-1, element by element."""
    m = x.shape[-1]
    out = x.clone()
    for t in range(x.shape[0]):
        for i in range(m // 2):
            ang = t * base ** (-2 * i / m)
            c, s = math.cos(ang), math.sin(ang)
            out[t, i] = x[t, i] * c - x[t, i + m // 2] * s
            out[t, i + m // 2] = x[t, i + m // 2] * c + x[t, i] * s
    return out


def _gelu(z):
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


def _phi(comp, block):
    """The compression MLP on one block of keys ``[l, d_h]``."""
    z = (block + comp.pos).reshape(-1)
    return comp.fc2.weight @ _gelu(comp.fc1.weight @ z + comp.fc1.bias) + comp.fc2.bias


def _softmax(scores):
    return torch.softmax(torch.stack(scores), 0) if scores else None


def _reference(attn, x, cfg):
    """Output ``(B, T, d)``, drawn map ``(B, h, T, T)`` and the selected blocks ``{(b, g, t): set}``."""
    with torch.no_grad():
        return _reference_loops(attn, x, cfg)


def _reference_loops(attn, x, cfg):
    core = attn.core
    B, L, _ = x.shape
    h, hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
    G = h // hkv
    lb, ld, ls, n_top, w = cfg.nsa_cmp_block, cfg.nsa_cmp_stride, cfg.nsa_slc_block, cfg.nsa_slc_top_n, cfg.window
    q_all = x @ core.q_proj.weight.T  # (B, T, h dh)
    k_all = x @ core.k_proj.weight.T  # (B, T, 3 hkv dh): [cmp | slc | win] heads
    v_all = x @ core.v_proj.weight.T
    gates = torch.sigmoid(x @ core.branch_gate.weight.T + core.branch_gate.bias)  # (B, T, 3 h)
    rot = (lambda z: _rope(z, cfg.rope_base)) if cfg.position == "rope" else (lambda z: z)
    outs = torch.zeros(B, L, h * dh, dtype=x.dtype)
    maps = torch.zeros(B, h, L, L, dtype=x.dtype)
    chosen = {}
    for b in range(B):
        q = [rot(q_all[b, :, n * dh : (n + 1) * dh]) for n in range(h)]
        kb = [rot(k_all[b, :, e * dh : (e + 1) * dh]) for e in range(3 * hkv)]
        vb = [v_all[b, :, e * dh : (e + 1) * dh] for e in range(3 * hkv)]
        for g in range(hkv):
            kc, ks, kw = kb[g], kb[hkv + g], kb[2 * hkv + g]
            vc, vs, vw = vb[g], vb[hkv + g], vb[2 * hkv + g]
            starts = range(0, L - lb + 1, ld)  # every compression block of the sequence
            ck_all = [_phi(core.k_compress, kc[i : i + lb]) for i in starts]
            cv_all = [_phi(core.v_compress, vc[i : i + lb]) for i in starts]
            for t in range(L):
                blocks = [i for i in range(len(ck_all)) if i * ld + lb - 1 <= t]
                ck, cv = ck_all[: len(blocks)], cv_all[: len(blocks)]
                p_cmp = {}
                for n in range(g * G, (g + 1) * G):
                    p = _softmax([q[n][t] @ c / math.sqrt(dh) for c in ck])
                    p_cmp[n] = [] if p is None else list(p)
                # eq. (9) at block j's last stride chunk, summed over the group's heads (eq. 10)
                cands = [j for j in range(-(-L // ls)) if j * ls <= t]
                imp = {}
                for j in cands:
                    tot = 0.0
                    for m in range(ls // ld):
                        for nn in range(lb // ld):
                            i = (ls // ld) * (j + 1) - 1 - m - nn
                            if 0 <= i < len(blocks):
                                tot += sum(float(p_cmp[n][i]) for n in p_cmp)
                    imp[j] = tot
                own = t // ls
                forced = {j for j in (0, own, own - 1) if j in cands}
                rest = sorted((j for j in cands if j not in forced), key=lambda j: (-imp[j], -j))
                sel = forced | set(rest[: max(0, n_top - len(forced))])
                chosen[(b, g, t)] = sel
                slc_keys = [j for j in range(t + 1) if j // ls in sel]
                win_keys = list(range(max(0, t - w + 1), t + 1))
                for n in range(g * G, (g + 1) * G):
                    gc, gs, gw = gates[b, t, 3 * n], gates[b, t, 3 * n + 1], gates[b, t, 3 * n + 2]
                    o = torch.zeros(dh, dtype=x.dtype)
                    row = torch.zeros(L, dtype=x.dtype)
                    if blocks:
                        p = torch.stack(p_cmp[n])
                        o = o + gc * (p[:, None] * torch.stack(cv)).sum(0)
                        for i, pi in zip(blocks, p):
                            row[i * ld : i * ld + lb] += gc * pi / lb
                    for keys, kk, vv, gate in ((slc_keys, ks, vs, gs), (win_keys, kw, vw, gw)):
                        p = _softmax([q[n][t] @ kk[j] / math.sqrt(dh) for j in keys])
                        o = o + gate * (p[:, None] * vv[keys]).sum(0)
                        row[keys] += gate * p
                    outs[b, t, n * dh : (n + 1) * dh] = o
                    maps[b, n, t] = row / ((gc if blocks else 0.0) + gs + gw)
    return outs @ attn.out_proj.weight.T, maps, chosen


@pytest.mark.parametrize("shape", range(len(SHAPES)))
@pytest.mark.parametrize("n_kv", [None, 2])
@pytest.mark.parametrize("position", ["none", "rope"])
def test_sublayer_equals_the_formulas(shape, n_kv, position):
    cfg, model = _model(**SHAPES[shape], n_kv_heads=n_kv, position=position)
    attn = model.stack.blocks[0].attn
    x = _x(cfg)
    want, maps, chosen = _reference(attn, x, cfg)
    got, info = _run(model, x)  # maps requested: the dense masks
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(info.attention, maps, rtol=0, atol=1e-10)
    with kernels.record_backends() as ran:
        sparse, _ = _run(model, x, need_weights=False)  # the block-sparse selected branch and window
    assert ran and all("block-sparse" in r for r in ran), ran
    torch.testing.assert_close(sparse, want, rtol=0, atol=1e-10)
    # the selection prunes: some query keeps fewer blocks than it may choose from (else the test could not fail)
    cands = {
        key: len([j for j in range(-(-T // cfg.nsa_slc_block)) if j * cfg.nsa_slc_block <= key[2]]) for key in chosen
    }
    assert any(len(s) < cands[key] for key, s in chosen.items())
    # the product's selection is the reference's
    core = attn.core
    q, k, v, _ = core.project(x, x, model.position, 0)
    parts = core._parts(q, k, v)
    sel = core.select(core.compressed(parts[0], parts[2][0], parts[3][0])[1])
    for (b, g, t), s in chosen.items():
        assert set(torch.nonzero(sel[b, g, t]).flatten().tolist()) == s


@pytest.mark.parametrize("shape", range(len(SHAPES)))
@pytest.mark.parametrize("L", [T, 16, 5])
def test_block_sparse_and_dense_agree_forward_and_backward(shape, L):
    """The selected branch through kernels.attention's block layout against the dense masks: outputs and
    the gradients of q, k, v (gate logits included), in float64, at lengths that are not a multiple of l'."""
    cfg, model = _model(**SHAPES[shape], n_kv_heads=2)
    core = model.stack.blocks[0].attn.core
    q, k, v, _ = core.project(_x(cfg, seed=4, L=L), _x(cfg, seed=4, L=L), model.position, 0)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    cot = torch.randn(2, cfg.n_heads, L, cfg.d_head, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    grads = []
    for fn in (lambda *a: core.dense(*a)[0], core.sparse):
        out = fn(q, k, v)
        grads.append((out, *torch.autograd.grad((out * cot).sum(), (q, k, v))))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert grads[0][2].abs().sum() > 0 and grads[0][3].abs().sum() > 0


def test_gradcheck_tiny():
    cfg, model = _model(d_model=8, n_heads=2, n_kv_heads=1, **SHAPES[1])
    core = model.stack.blocks[0].attn.core
    q, k, v, _ = core.project(_x(cfg, seed=7, B=1, L=11), _x(cfg, seed=7, B=1, L=11), model.position, 0)
    inputs = tuple(t.detach().requires_grad_() for t in (q, k, v))
    # fast mode: the Jacobian against finite differences along random directions (every input, one pass each)
    assert torch.autograd.gradcheck(core.sparse, inputs, eps=1e-6, atol=1e-6, fast_mode=True)
    assert torch.autograd.gradcheck(lambda *a: core.dense(*a)[0], inputs, eps=1e-6, atol=1e-6, fast_mode=True)


def test_every_parameter_gets_a_gradient_through_the_model():
    cfg, model = _model(**SHAPES[3], position="rope", n_kv_heads=2, n_layers=2)
    tokens = torch.randint(0, 256, (2, 29), generator=torch.Generator().manual_seed(0))
    model(tokens).logits.pow(2).mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())


def test_layout_is_the_selected_tokens():
    """``selection_layout``: each (batch, K/V head) segment's rows visit exactly their selected blocks' keys
    up to the query, block-diagonal across segments; padding rows visit nothing."""
    B, hkv, L, ls = 2, 3, 10, 4
    n_s = 3
    gen = torch.Generator().manual_seed(2)
    sel = torch.rand(B, hkv, L, n_s, generator=gen) < 0.5
    t = torch.arange(L)
    sel[..., t, t // ls] = True  # the own block is always selected
    sel &= torch.arange(n_s) <= (t // ls)[:, None]
    dense = selection_layout(sel, ls).to_dense()
    Lp = n_s * ls
    want = torch.zeros(B * hkv * Lp, B * hkv * Lp, dtype=torch.bool)
    for s in range(B * hkv):
        b, g = divmod(s, hkv)
        for i in range(L):
            for j in range(i + 1):
                want[s * Lp + i, s * Lp + j] = bool(sel[b, g, i, j // ls])
    assert torch.equal(dense, want)


def test_drawn_map_rows_are_distributions_and_the_gates_matter():
    cfg, model = _model(**SHAPES[0])
    out = model(torch.randint(0, 256, (1, 21), generator=torch.Generator().manual_seed(3)), return_attention=True)
    att = out.attentions[0]
    torch.testing.assert_close(att.sum(-1), torch.ones_like(att.sum(-1)), rtol=0, atol=1e-10)
    assert torch.all(att.triu(1) == 0)  # nothing from the future
    core = model.stack.blocks[0].attn.core
    with torch.no_grad():
        core.branch_gate.bias[1::3] += 5.0  # open the selected branch's gate
    moved = model(torch.randint(0, 256, (1, 21), generator=torch.Generator().manual_seed(3)), return_attention=True)
    assert (moved.logits - out.logits).abs().max() > 1e-6


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(nsa_cmp_block=6, nsa_cmp_stride=4), "nsa_cmp_block"),
        (dict(nsa_cmp_block=8, nsa_cmp_stride=4, nsa_slc_block=6), "nsa_slc_block"),
        (dict(nsa_cmp_block=4, nsa_cmp_stride=8, nsa_slc_block=8), "nsa_cmp_stride"),
        (dict(nsa_slc_top_n=2), "nsa_slc_top_n"),
        (dict(causal=False), "causal"),
        (dict(softcap=30.0), "softcap"),
        (dict(position="alibi"), "position"),
        (dict(attn_sinks=True), "attn_sinks"),
        (dict(qk_norm="head"), "qk_norm"),
    ],
)
def test_refusals_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **kw}).validate()
    assert e.value.field == field


@pytest.mark.parametrize("L", [1, 5, 12])
def test_short_sequences_equal_the_formulas(L):
    """Before any complete compression block (L < l: the cmp branch is empty), at exactly one block, and a
    window longer than the sequence."""
    cfg, model = _model(**{**SHAPES[4], "window": 20}, n_kv_heads=2, position="rope")
    x = _x(cfg, seed=9, L=L)
    want, maps, _ = _reference(model.stack.blocks[0].attn, x, cfg)
    got, info = _run(model, x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(info.attention, maps, rtol=0, atol=1e-10)
    torch.testing.assert_close(_run(model, x, need_weights=False)[0], want, rtol=0, atol=1e-10)


def test_long_context_maps_take_the_dense_effective_map():
    from models.long_context import pooled_maps

    cfg, model = _model(n_layers=2)
    tokens = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(6))
    res = pooled_maps(model, tokens, max_cells=8)
    assert res.method == "dense effective map" and len(res.maps) == 2 and "nsa" in res.notes[0]
    for m in res.maps:  # the drawn rows are distributions: each query cell's mass sums to one
        torch.testing.assert_close(m.mass.sum(-1), torch.ones_like(m.mass.sum(-1)), rtol=0, atol=1e-5)
