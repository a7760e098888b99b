"""Position encodings against the catalogue's formulas (section 4) and naive per-(i, j) loops."""

import math

import pytest
import torch

from kernels.reference import attention_ref
from models.config import ConfigError, ModelConfig
from models.positions import POSITION, alibi_slopes, apply_rope, sinusoidal_table, t5_relative_bucket

KEYS = list(POSITION)
TINY = dict(d_model=16, n_heads=2, n_layers=2, max_len=32, max_relative=2, t5_num_buckets=8, t5_max_distance=16)


def tiny_cfg(position, **kw):
    return ModelConfig(**{**TINY, "position": position, **kw})


def build(position, **kw):
    torch.manual_seed(0)
    cfg = tiny_cfg(position, **kw)
    return cfg, POSITION[position].build(cfg)


# ---------------------------------------------------------------------------- every registry entry
@pytest.mark.parametrize("key", KEYS)
def test_variant_metadata(key):
    v = POSITION[key]
    assert v.key == key and v.paper and v.summary and v.build is not None
    fields = set(ModelConfig().to_dict())
    assert set(v.params) <= fields


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("key", KEYS)
def test_embed_modify_shapes_and_gradients(key, causal):
    if key == "none" and not causal:
        pytest.skip("none is rejected for bidirectional models")
    cfg, mod = build(key, causal=causal)
    B, L, d, h, dh = 2, 5, cfg.d_model, cfg.n_heads, cfg.d_head
    x = torch.randn(B, L, d, requires_grad=True)
    y = mod.embed(x, torch.arange(L))
    assert y.shape == x.shape
    q = torch.randn(B, h, 3, dh, requires_grad=True)
    k = torch.randn(B, 1, L, dh, requires_grad=True)  # GQA: one K/V head
    v = torch.randn(B, 1, L, dh)
    total = y.sum()
    for layer in range(cfg.n_layers):
        q2, k2, mods = mod.modify(q, k, layer, k_start=4)
        assert q2.shape == q.shape and k2.shape == k.shape
        assert set(mods) <= {"alibi_slopes", "rel_bias", "rel_k", "rel_v", "pair_bias"}
        if "rel_bias" in mods:
            assert mods["rel_bias"].shape == (h, 2 * L - 1)
        out, _ = attention_ref(q2, k2, v, causal=causal, **mods)
        assert out.shape == (B, h, 3, dh) and torch.isfinite(out).all()
        total = total + out.square().sum()
    total.backward()
    assert q.grad is not None and x.grad is not None
    for name, p in mod.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("key", KEYS)
def test_checks_accept_default_combination(key):
    check = POSITION[key].check
    if check is not None:
        check(tiny_cfg(key, causal=True))


# ---------------------------------------------------------------------------- checks and errors
def test_none_rejects_bidirectional():
    with pytest.raises(ConfigError) as e:
        POSITION["none"].check(tiny_cfg("none", causal=False))
    assert e.value.field == "position" and "causal=True" in str(e.value)


def test_rope_rejects_odd_head_width():
    with pytest.raises(ConfigError) as e:
        POSITION["rope"].check(tiny_cfg("rope", d_model=6, n_heads=2))
    assert e.value.field == "d_model" and "n_heads" in str(e.value)


def test_learned_past_max_len_is_clear_error():
    cfg, mod = build("learned", max_len=8)
    mod.embed(torch.zeros(1, 8, cfg.d_model), torch.arange(8))  # exactly max_len is fine
    with pytest.raises(ConfigError) as e:
        mod.embed(torch.zeros(1, 9, cfg.d_model), torch.arange(9))
    msg = str(e.value)
    assert e.value.field == "max_len" and "max_len=8" in msg and "L=9" in msg


def test_learned_adds_table_rows():
    cfg, mod = build("learned")
    x = torch.randn(2, 4, cfg.d_model)
    pos = torch.tensor([3, 4, 5, 6])
    torch.testing.assert_close(mod.embed(x, pos), x + mod.table.weight[3:7])
    assert mod.table.weight.std() < 0.05


# ---------------------------------------------------------------------------- sinusoidal
@pytest.mark.parametrize("dim", [1, 6, 7])
def test_sinusoidal_table_formula(dim):
    table = sinusoidal_table(12, dim)
    assert table.shape == (12, dim) and table.dtype == torch.float32
    for i in range(12):
        for c in range(dim):
            k2 = c - c % 2
            angle = i / 10000 ** (k2 / dim)
            want = math.sin(angle) if c % 2 == 0 else math.cos(angle)
            assert abs(table[i, c].item() - want) < 1e-6


def test_sinusoidal_embed_uses_absolute_positions():
    cfg, mod = build("sinusoidal")
    x = torch.randn(1, 3, cfg.d_model)
    torch.testing.assert_close(mod.embed(x, torch.tensor([5, 6, 7])), x + sinusoidal_table(8, cfg.d_model)[5:])


# ---------------------------------------------------------------------------- rope
def test_rope_pairs_rotate_half():
    x = torch.randn(3, 4)
    pos = torch.tensor([0, 1, 7])
    out = apply_rope(x, pos, base=100.0)
    for i, p in enumerate(pos.tolist()):
        for kk in range(2):  # dim k pairs with k + d/2, angle p * base^(-2k/d)
            a = p * 100.0 ** (-2 * kk / 4)
            x1, x2 = x[i, kk].item(), x[i, kk + 2].item()
            assert abs(out[i, kk].item() - (x1 * math.cos(a) - x2 * math.sin(a))) < 1e-5
            assert abs(out[i, kk + 2].item() - (x2 * math.cos(a) + x1 * math.sin(a))) < 1e-5


def test_rope_relative_property_and_norm():
    torch.manual_seed(1)
    q, k = torch.randn(8), torch.randn(8)

    def dot(m, n):
        qm = apply_rope(q[None], torch.tensor([m]))
        kn = apply_rope(k[None], torch.tensor([n]))
        return (qm * kn).sum().item()

    for m, n in [(0, 0), (5, 2), (30, 9)]:
        shifted = dot(m + 11, n + 11)
        assert abs(dot(m, n) - shifted) < 1e-4
    assert abs(dot(5, 2) - dot(2, 5)) > 1e-3  # depends on the sign of m - n, not just |m - n|
    x = torch.randn(2, 3, 10, 8)
    torch.testing.assert_close(apply_rope(x, torch.arange(10) * 13).norm(dim=-1), x.norm(dim=-1))


def test_rope_modify_positions_from_k_start():
    cfg, mod = build("rope")
    q, k = torch.randn(1, 2, 2, cfg.d_head), torch.randn(1, 2, 5, cfg.d_head)
    q2, k2, mods = mod.modify(q, k, 0, k_start=3)
    assert mods == {}
    torch.testing.assert_close(k2, apply_rope(k, torch.arange(3, 8)))
    torch.testing.assert_close(q2, apply_rope(q, torch.tensor([6, 7])))


# ---------------------------------------------------------------------------- alibi
HAND_SLOPES = {  # BLOOM / reference values worked by hand as powers of two
    1: [-8],
    2: [-4, -8],
    3: [-4, -8, -2],
    4: [-2, -4, -6, -8],
    5: [-2, -4, -6, -8, -1],
    6: [-2, -4, -6, -8, -1, -3],
    7: [-2, -4, -6, -8, -1, -3, -5],
    8: [-1, -2, -3, -4, -5, -6, -7, -8],
    12: [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5],
}


def _reference_slopes(n):
    """The ALiBi repository's recursive formulation (geometric sequence start * ratio^i)."""

    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + _reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", sorted(HAND_SLOPES))
def test_alibi_hand_values(n):
    want = torch.tensor([2.0**e for e in HAND_SLOPES[n]])
    torch.testing.assert_close(alibi_slopes(n), want)


@pytest.mark.parametrize("n", range(1, 33))
def test_alibi_rule(n):
    got = alibi_slopes(n)
    assert got.shape == (n,) and got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(_reference_slopes(n), dtype=torch.float32))
    assert len(set(got.tolist())) == n  # every head a distinct slope


def test_alibi_slopes_are_a_buffer():
    cfg, mod = build("alibi", n_heads=4)
    assert list(mod.parameters()) == []
    torch.testing.assert_close(mod.modify(None, None, 0)[2]["alibi_slopes"], alibi_slopes(4))


# ---------------------------------------------------------------------------- t5 buckets
def _hf_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """HF transformers' T5Attention._relative_position_bucket, written out independently."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


# relative_position = j - i: negative = key before the query
T5_BIDIR = {
    0: 0,
    -1: 1,
    -7: 7,
    -8: 8,
    -11: 8,
    -12: 9,
    -16: 10,
    -32: 12,
    -64: 14,
    -127: 15,
    -128: 15,
    -1000: 15,
    1: 17,
    7: 23,
    8: 24,
    12: 25,
    128: 31,
    5000: 31,
}
T5_CAUSAL = {0: 0, 1: 0, 50: 0, -1: 1, -15: 15, -16: 16, -20: 17, -32: 21, -64: 26, -128: 31, -9999: 31}


@pytest.mark.parametrize("bidirectional,table", [(True, T5_BIDIR), (False, T5_CAUSAL)])
def test_t5_bucket_hand_values(bidirectional, table):
    rel = torch.tensor(list(table))
    got = t5_relative_bucket(rel, bidirectional=bidirectional)
    assert got.tolist() == list(table.values())


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("nb,md", [(32, 128), (8, 16), (10, 40)])
def test_t5_bucket_matches_hf(bidirectional, nb, md):
    rel = torch.arange(-300, 301)
    got = t5_relative_bucket(rel, bidirectional, nb, md)
    assert torch.equal(got, _hf_bucket(rel, bidirectional, nb, md))
    assert got.min() >= 0 and got.max() == nb - 1


# ---------------------------------------------------------------------------- mods vs naive loops
B, H, LQ, LK = 1, 2, 3, 5


def _naive(q, k, v, causal, score, value_add=None):
    """softmax_j(score(n, i_abs, j, qi, kj)) then sum_j p (v_j + value_add(i_abs, j))."""
    out = torch.zeros(B, H, LQ, q.shape[-1], dtype=torch.float64)
    for n in range(H):
        for i in range(LQ):
            ia = i + LK - LQ
            s = [score(n, ia, j, q[0, n, i], k[0, n, j]) if not (causal and j > ia) else -math.inf for j in range(LK)]
            p = torch.softmax(torch.tensor(s, dtype=torch.float64), 0)
            for j in range(LK):
                vj = v[0, n, j] + (value_add(ia, j) if value_add is not None else 0)
                out[0, n, i] += p[j] * vj.double()
    return out


def _qkv(dh):
    torch.manual_seed(3)
    return (torch.randn(B, H, LQ, dh), torch.randn(B, H, LK, dh), torch.randn(B, H, LK, dh))


@pytest.mark.parametrize("causal", [True, False])
def test_shaw_matches_paper(causal):
    cfg, mod = build("shaw", causal=causal)  # max_relative = 2 < LK, so clipping is exercised
    q, k, v = _qkv(cfg.d_head)
    sc = 1 / math.sqrt(cfg.d_head)
    ak, av = mod.rel_k[1][0].detach(), mod.rel_v[1][0].detach()
    clip = lambda ia, j: max(-2, min(2, j - ia)) + 2  # noqa: E731
    q2, k2, mods = mod.modify(q, k, 1)
    got, _ = attention_ref(q2, k2, v, causal=causal, **mods)
    want = _naive(
        q,
        k,
        v,
        causal,
        lambda n, ia, j, qi, kj: sc * (qi @ (kj + ak[clip(ia, j)])).item(),
        lambda ia, j: av[clip(ia, j)],
    )
    torch.testing.assert_close(got.double().detach(), want, atol=1e-5, rtol=1e-5)
    assert not torch.equal(mod.rel_k[0], mod.rel_k[1])  # one table per layer


@pytest.mark.parametrize("causal", [True, False])
def test_t5_matches_paper(causal):
    cfg, mod = build("t5", causal=causal)
    q, k, v = _qkv(cfg.d_head)
    sc = 1 / math.sqrt(cfg.d_head)
    table = mod.bias.weight.detach()  # (buckets, h)
    bucket = lambda ia, j: _hf_bucket(torch.tensor(j - ia), not causal, 8, 16).item()  # noqa: E731
    q2, k2, mods = mod.modify(q, k, 0)
    got, _ = attention_ref(q2, k2, v, causal=causal, **mods)
    want = _naive(q, k, v, causal, lambda n, ia, j, qi, kj: sc * (qi @ kj).item() + table[bucket(ia, j), n].item())
    torch.testing.assert_close(got.double().detach(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mods["rel_bias"], mod.modify(q, k, 1)[2]["rel_bias"])  # shared by layers


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_matches_paper(causal):
    cfg, mod = build("alibi", causal=causal)
    q, k, v = _qkv(cfg.d_head)
    sc, m = 1 / math.sqrt(cfg.d_head), [2**-4, 2**-8]
    q2, k2, mods = mod.modify(q, k, 0)
    got, _ = attention_ref(q2, k2, v, causal=causal, **mods)
    want = _naive(q, k, v, causal, lambda n, ia, j, qi, kj: sc * (qi @ kj).item() - m[n] * abs(ia - j))
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_rope_matches_paper(causal):
    cfg, mod = build("rope", causal=causal)
    q, k, v = _qkv(cfg.d_head)
    sc, start = 1 / math.sqrt(cfg.d_head), 7
    rot = lambda x, p: apply_rope(x[None], torch.tensor([p]))[0]  # noqa: E731
    q2, k2, mods = mod.modify(q, k, 0, k_start=start)
    got, _ = attention_ref(q2, k2, v, causal=causal, **mods)
    want = _naive(q, k, v, causal, lambda n, ia, j, qi, kj: sc * (rot(qi, ia + start) @ rot(kj, j + start)).item())
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_xl_matches_paper(causal, scale):
    cfg, mod = build("xl", causal=causal)
    q, k, v = _qkv(cfg.d_head)
    sc = 1 / math.sqrt(cfg.d_head) if scale is None else scale
    u, vb = mod.u.detach(), mod.v.detach()
    w_r = mod.w_r[1].weight.detach()  # (h * d_h, d)

    def r(dist):  # sinusoid of width d_model at signed distance i - j
        d = cfg.d_model
        return torch.tensor(
            [
                math.sin(dist / 10000 ** ((c - c % 2) / d))
                if c % 2 == 0
                else math.cos(dist / 10000 ** ((c - c % 2) / d))
                for c in range(d)
            ]
        )

    def score(n, ia, j, qi, kj):
        wr = (w_r @ r(ia - j)).view(H, cfg.d_head)[n]
        return sc * ((qi + u[n]) @ kj + (qi + vb[n]) @ wr).item()

    q2, k2, mods = mod.modify(q, k, 1, scale=scale)
    got, _ = attention_ref(q2, k2, v, causal=causal, scale=scale, **mods)
    want = _naive(q, k, v, causal, score)
    torch.testing.assert_close(got.double().detach(), want, atol=1e-5, rtol=1e-5)


def test_rope_accepts_per_sequence_positions_and_python_ints():
    """HF-style position_ids [B, L] rotate each sequence by its own positions."""
    from models.positions import apply_rope, t5_relative_bucket

    x = torch.randn(2, 3, 6, 8)
    pos = torch.stack([torch.arange(6), torch.arange(6) + 4])
    out = apply_rope(x, pos)
    for b in range(2):
        torch.testing.assert_close(out[b], apply_rope(x[b : b + 1], pos[b])[0])
    assert int(t5_relative_bucket(-5)) == int(t5_relative_bucket(torch.tensor(-5)))


# ---------------------------------------------------------------------------- degenerate T5 / float64
@pytest.mark.parametrize(
    "changes,field",
    [
        ({"t5_num_buckets": 2, "causal": False}, "t5_num_buckets"),
        ({"t5_num_buckets": 3, "causal": False}, "t5_num_buckets"),
        ({"t5_num_buckets": 32, "t5_max_distance": 8, "causal": False}, "t5_max_distance"),  # max_exact = 8
        ({"t5_num_buckets": 32, "t5_max_distance": 4, "causal": False}, "t5_max_distance"),
        ({"t5_num_buckets": 32, "t5_max_distance": 16, "causal": True}, "t5_max_distance"),  # max_exact = 16
    ],
)
def test_degenerate_t5_buckets_are_config_errors(changes, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(position="t5", **changes).validate()
    assert e.value.field == field
    with pytest.raises(ValueError):
        t5_relative_bucket(
            torch.arange(-40, 41), not changes["causal"], changes["t5_num_buckets"], changes.get("t5_max_distance", 128)
        )


@pytest.mark.parametrize("causal,nb,md", [(False, 4, 2), (True, 2, 2), (True, 32, 17), (False, 32, 9)])
def test_smallest_valid_t5_settings_give_in_range_monotone_buckets(causal, nb, md):
    cfg = ModelConfig(
        position="t5", causal=causal, t5_num_buckets=nb, t5_max_distance=md, n_layers=1, d_model=16, n_heads=2
    ).validate()
    from models import build_model

    build_model(cfg)(torch.zeros(1, 40, dtype=torch.long))
    got = t5_relative_bucket(torch.arange(-60, 1), not causal, nb, md)  # j - i <= 0: looking back
    assert got.min() >= 0 and got.max() < nb
    dist_order = got.flip(0)  # distance 0, 1, 2, ...
    assert (dist_order[1:] >= dist_order[:-1]).all()  # farther never maps to a nearer bucket
    assert torch.equal(got, _hf_bucket(torch.arange(-60, 1), not causal, nb, md))


def test_float64_positions_are_computed_in_float64():
    """RoPE and the sinusoidal embedding keep a float64 input's precision (errors < 1e-12)."""
    L, d = 300, 16
    x = torch.randn(2, 3, L, d, dtype=torch.float64)
    pos = torch.arange(L) * 37  # large angles: float32 angles would be off by ~1e-4 rad
    got = apply_rope(x, pos)
    assert got.dtype == torch.float64
    half = d // 2
    theta = torch.tensor([10000.0 ** (-2 * k / d) for k in range(half)], dtype=torch.float64)
    ang = pos.double()[:, None] * theta
    c, s = ang.cos(), ang.sin()
    want = torch.cat([x[..., :half] * c - x[..., half:] * s, x[..., half:] * c + x[..., :half] * s], -1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)

    cfg = ModelConfig(position="sinusoidal", d_model=d, n_heads=2)
    enc = POSITION["sinusoidal"].build(cfg)
    p = torch.arange(L) * 31
    got = enc.embed(torch.zeros(1, L, d, dtype=torch.float64), p)[0]
    want = torch.tensor(
        [
            [
                math.sin(i / 10000 ** (2 * (c // 2) / d)) if c % 2 == 0 else math.cos(i / 10000 ** (2 * (c // 2) / d))
                for c in range(d)
            ]
            for i in p.tolist()
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
