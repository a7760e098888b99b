"""The mechanisms of the catalogue's section 2 (lsh, routing, linear, performer, linformer, nystrom,
adaptive_span) at the level of the attention core, each against an independent reference (formula,
brute force, exact softmax) or a property. The model-level checks (every key, forward/backward, no
leak through the whole model) are in tests/models/test_catalogue.py."""

import math

import pytest
import torch

import kernels
from models import ConfigError
from models.attention.adaptive_span import SPAN_PENALTY
from models.attention.linear import elu_feature, favor_features, orthogonal_gaussian
from models.attention.lowrank import segment_means
from models.attention.lsh import lsh_buckets
from models.context import ForwardContext

SMALL = dict(
    d_model=32,
    n_heads=4,
    n_layers=1,
    max_len=64,
    chunk_size=4,
    n_buckets=4,
    n_hashes=2,
    n_clusters=3,
    n_features=16,
    proj_len=8,
    n_landmarks=4,
    max_span=8,
    span_ramp=4,
)
KEYS = ["lsh", "routing", "linear", "performer", "performer-trig", "linformer", "nystrom", "adaptive_span"]


@pytest.fixture
def core_base():
    """Chunks of 4, 4 buckets x 2 hashes, 3 clusters, 16 features, 8 projected and 4 landmark
    positions, spans up to 8: every approximation is coarse at the test lengths (16 to 32)."""
    return SMALL


@pytest.fixture
def core_aliases():
    """``performer-trig``: the performer with trigonometric features, a case of its own in each grid."""
    return {"performer-trig": {"attention": "performer", "feature_map": "trig"}}


def _qkv(B=2, h=4, L=24, d=8, h_kv=None, lk=None, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    lk = L if lk is None else lk
    q = torch.randn(B, h, L, d, generator=g)
    k = torch.randn(B, h_kv or h, lk, d, generator=g)
    v = torch.randn(B, h_kv or h, lk, d, generator=g)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _run(core, q, k, v, need_weights=False, mods=None):
    return core(q, k, v, mods or {}, ForwardContext(tokens=None, position=None, need_weights=need_weights))


def _params(keys=KEYS, both=True):
    return [
        pytest.param(k, c, id=f"{k}-{'causal' if c else 'bidir'}")
        for k in keys
        for c in ((True, False) if both else (True,))
    ]


@pytest.mark.parametrize("key,causal", _params())
def test_forward_backward_finite_and_weights_path_matches(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = _qkv(grad=True)
    out, probs, aux = _run(core, q, k, v)
    assert out.shape == q.shape and probs is None
    loss = out.pow(2).mean() + aux.get("loss", 0.0)
    loss.backward()
    for t in (q, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in core.parameters() if p.grad is not None)
    out2, probs2, _ = _run(core, q.detach(), k.detach(), v.detach(), need_weights=True)
    torch.testing.assert_close(out2, out.detach(), rtol=1e-4, atol=1e-5)
    assert probs2.shape == (2, 4, 24, 24)


@pytest.mark.parametrize("key,causal", _params())
def test_effective_attention_rows_sum_to_one_and_reproduce_output(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = _qkv()
    out, probs, _ = _run(core, q, k, v, need_weights=True)
    # float32 rounds each weight by eps * |p|: trig features give signed weights whose magnitudes sum to
    # ~1e3 in a row while the row sums to 1, so their rounding, not the normalisation, sets the tolerance
    slack = 1e-5 + probs.abs().sum(-1) * torch.finfo(probs.dtype).eps
    assert ((probs.sum(-1) - 1).abs() <= slack).all()
    if key == "linformer":  # probs spread the proj_len attention over positions through |E| (display only)
        assert (probs >= 0).all()
        return
    if key == "performer-trig":  # signed features: a normaliser near 0 makes the kernel's eps visible
        return
    # every other mechanism's effective matrix is the one that mixes the values (linear maps up to eps)
    torch.testing.assert_close(probs @ v, out, rtol=1e-3, atol=2e-4)


@pytest.mark.parametrize("key", [k for k in KEYS if k not in ("linformer", "nystrom")])
def test_causal_core_leaks_nothing(key, core_for):
    cfg, core = core_for(key, True)
    core.eval()
    q, k, v = _qkv()
    base, _, _ = _run(core, q, k, v)
    for t in (3, 11, 23):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[:, :, t:] = torch.randn_like(x[:, :, t:]) * 3.0  # change the present and the future
        out, _, _ = _run(core, q2, k2, v2)
        torch.testing.assert_close(out[:, :, :t], base[:, :, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, :, t:], base[:, :, t:])


@pytest.mark.parametrize("key,causal", _params([k for k in KEYS if k not in ("lsh", "performer-trig")]))
def test_gqa_equals_mha_with_repeated_kv(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = _qkv(h_kv=2)
    out, _, _ = _run(core, q, k, v)
    ref, _, _ = _run(core, q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("key", ["routing", "linear", "performer", "adaptive_span"])
def test_memory_keys_before_the_queries(key, core_for):
    """Queries are the last Lq of Lk positions: same as the last rows of the full computation."""
    cfg, core = core_for(key, True)
    core.eval()
    q, k, v = _qkv(L=24)
    full, pf, _ = _run(core, q, k, v, need_weights=True)
    part, pp, _ = _run(core, q[:, :, 10:], k, v, need_weights=True)
    torch.testing.assert_close(part, full[:, :, 10:], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pp, pf[:, :, 10:], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------ linear / performer
def test_linear_causal_equals_explicit_cumulative_sums(core_for):
    cfg, core = core_for("linear", True)
    q, k, v = _qkv(B=1, h=2, L=16)
    out, _, _ = _run(core, q, k, v)
    pq, pk = elu_feature(q).double(), elu_feature(k).double()
    ref = torch.empty(1, 2, 16, 8, dtype=torch.float64)
    for i in range(16):
        S = torch.einsum("bhjm,bhjd->bhmd", pk[:, :, : i + 1], v[:, :, : i + 1].double())  # sum_j phi(k_j) v_j^T
        z = pk[:, :, : i + 1].sum(2)  # (B, h, m)
        num = torch.einsum("bhm,bhmd->bhd", pq[:, :, i], S)
        ref[:, :, i] = num / (pq[:, :, i] * z).sum(-1, keepdim=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)


def test_linear_bidirectional_equals_normalised_kernel_formula(core_for):
    cfg, core = core_for("linear", False)
    q, k, v = _qkv(B=1, h=2, L=16)
    out, _, _ = _run(core, q, k, v)
    a = elu_feature(q) @ elu_feature(k).transpose(-1, -2)
    torch.testing.assert_close(out, (a / a.sum(-1, keepdim=True)) @ v, rtol=1e-4, atol=1e-5)


def test_orthogonal_features_have_orthogonal_blocks_and_are_seeded(core_for):
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    w = orthogonal_gaussian(20, 8, g(1))
    for blk in (w[:8], w[8:16]):
        gram = blk @ blk.T
        torch.testing.assert_close(gram, torch.diag(torch.diagonal(gram)), atol=1e-4, rtol=0)
    assert torch.equal(w, orthogonal_gaussian(20, 8, g(1)))
    a, b = core_for("performer", seed=1)[1], core_for("performer", seed=2)[1]
    assert torch.equal(a.W, core_for("performer", seed=1)[1].W) and not torch.equal(a.W, b.W)


@pytest.mark.parametrize("kind", ["positive", "trig"])
def test_random_features_estimate_the_softmax_kernel_without_bias(kind):
    d = 8
    x, y = torch.randn(2, d, generator=torch.Generator().manual_seed(3)) * 0.5
    exact = math.exp(float(x @ y) / math.sqrt(d))
    est = []
    for s in range(300):
        w = orthogonal_gaussian(16, d, torch.Generator().manual_seed(s))
        fx = favor_features(x[None, None, None] * d**-0.25, w, kind, "none")
        fy = favor_features(y[None, None, None] * d**-0.25, w, kind, "none")
        est.append(float((fx * fy).sum()))
    assert abs(sum(est) / len(est) - exact) / exact < 0.03


@pytest.mark.parametrize("feature_map", ["positive", "trig"])
def test_performer_approaches_softmax_as_features_grow(feature_map, core_for):
    q, k, v = _qkv(B=1, h=4, L=32, d=8, seed=5)
    q, k = q * 0.5, k * 0.5
    exact, _ = kernels.attention_ref(q, k, v)
    errs = {}
    for m in (16, 256):
        e = []
        for seed in range(4):
            cfg, core = core_for("performer", False, n_features=m, seed=seed, feature_map=feature_map)
            out, _, _ = _run(core, q, k, v)
            e.append((out - exact).abs().mean())
        errs[m] = float(torch.stack(e).mean())
    assert errs[256] < 0.5 * errs[16], errs


# ------------------------------------------------------------------------ lsh / routing
def _lsh_reference(q, v, rotations, chunk, n_buckets, causal):
    """Brute force: per round, per query, the keys of the same bucket whose within-bucket chunk
    (rank // chunk) is the query's or the previous one; self only without other target."""
    B, h, L, d = q.shape
    kn = q / q.norm(dim=-1, keepdim=True)
    outs, lses = [], []
    for r in range(rotations.shape[0]):
        bk = lsh_buckets(q, rotations[r])
        out = torch.zeros(B, h, L, d)
        lse = torch.zeros(B, h, L)
        for b in range(B):
            for n in range(h):
                rank = {}
                seen = [0] * n_buckets
                for i in range(L):
                    rank[i] = seen[bk[b, n, i]]
                    seen[bk[b, n, i]] += 1
                for i in range(L):
                    keys = [
                        j
                        for j in range(L)
                        if j != i
                        and bk[b, n, j] == bk[b, n, i]
                        and rank[i] // chunk - 1 <= rank[j] // chunk <= rank[i] // chunk
                        and (j <= i or not causal)
                    ]
                    if not keys:
                        out[b, n, i], lse[b, n, i] = v[b, n, i], -1e5
                        continue
                    s = torch.stack([q[b, n, i] @ kn[b, n, j] for j in keys]) / math.sqrt(d)
                    out[b, n, i] = torch.softmax(s, 0) @ v[b, n, keys]
                    lse[b, n, i] = torch.logsumexp(s, 0)
        outs.append(out)
        lses.append(lse)
    w = torch.softmax(torch.stack(lses), 0)
    return (w.unsqueeze(-1) * torch.stack(outs)).sum(0)


@pytest.mark.parametrize("causal", [True, False])
def test_lsh_equals_brute_force_reference(causal, core_for):
    cfg, core = core_for("lsh", causal)
    q, k, v = _qkv(B=1, h=2, L=20)
    out, _, _ = _run(core, q, k, v)
    ref = _lsh_reference(q, v, core.rotations, cfg.chunk_size, cfg.n_buckets, causal)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_lsh_never_attends_outside_its_buckets(causal, core_for):
    cfg, core = core_for("lsh", causal)
    q, k, v = _qkv(L=32)
    _, probs, aux = _run(core, q, k, v, need_weights=True)
    same = torch.zeros(probs.shape, dtype=torch.bool)
    for r in range(cfg.n_hashes):
        b = lsh_buckets(q, core.rotations[r])
        if r == 0:
            assert torch.equal(b, aux["buckets"]) and aux["buckets"].shape == (2, 4, 32)
        same |= b.unsqueeze(-1) == b.unsqueeze(-2)
    off = (probs != 0) & ~same & ~torch.eye(32, dtype=torch.bool)
    assert not off.any()
    if causal:
        assert (probs.triu(1) == 0).all()


def test_lsh_single_round_attends_only_its_bucket(core_for):
    cfg, core = core_for("lsh", True, n_hashes=1)
    q, k, v = _qkv(L=32)
    _, probs, aux = _run(core, q, k, v, need_weights=True)
    b = aux["buckets"]
    outside = (probs != 0) & (b.unsqueeze(-1) != b.unsqueeze(-2))
    assert not outside.any()


@pytest.mark.parametrize("causal", [True, False])
def test_routing_equals_dense_cluster_masked_softmax(causal, core_for):
    cfg, core = core_for("routing", causal)
    q, k, v = _qkv(L=24)
    out, probs, aux = _run(core, q, k, v, need_weights=True)
    cq, ck = aux["clusters"], aux["key_clusters"]
    mask = cq.unsqueeze(-1) == ck.unsqueeze(-2)  # (B, h, L, L)
    if causal:
        mask &= torch.ones(24, 24, dtype=torch.bool).tril()
    s = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    empty = ~mask.any(-1)
    p = p + torch.diag_embed(empty.float())  # a query with no key in its cluster attends itself
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, p @ v, rtol=1e-4, atol=1e-5)
    assert not ((probs != 0) & ~mask & ~torch.eye(24, dtype=torch.bool)).any()  # never outside the cluster


def test_routing_ema_updates_only_in_training(core_for):
    cfg, core = core_for("routing", False, cluster_decay=0.5)
    q, k, v = _qkv(L=24)
    mu0 = core.centroids.clone()
    core.eval()
    _run(core, q, k, v)
    assert torch.equal(core.centroids, mu0)
    core.train()
    _, _, aux = _run(core, q, k, v)
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    for n in range(4):
        for c in range(3):
            vecs = torch.cat([unit(q[:, n])[aux["clusters"][:, n] == c], unit(k[:, n])[aux["key_clusters"][:, n] == c]])
            expect = mu0[n, c] if len(vecs) == 0 else unit(0.5 * mu0[n, c] + 0.5 * vecs.mean(0))
            torch.testing.assert_close(core.centroids[n, c], expect, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ low rank
def test_nystrom_with_a_landmark_per_position_is_exact_softmax(core_for):
    cfg, core = core_for("nystrom", False, n_landmarks=16)
    q, k, v = _qkv(L=16)
    out, probs, _ = _run(core, q, k, v, need_weights=True)
    ref, p = kernels.attention_ref(q, k, v)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(probs, p, rtol=1e-4, atol=1e-4)


def test_nystrom_segments_when_length_is_not_a_multiple(core_for):
    x = torch.arange(10.0).view(1, 1, 10, 1)
    means = segment_means(x, 4)  # segments [0,2) [2,5) [5,7) [7,10)
    torch.testing.assert_close(means.flatten(), torch.tensor([0.5, 3.0, 5.5, 8.0]))
    cfg, core = core_for("nystrom", False, n_landmarks=4)
    out, probs, _ = _run(core, *_qkv(L=10), need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(probs).all()


def test_linformer_equals_its_formula_and_rejects_long_inputs(core_for):
    cfg, core = core_for("linformer", False)
    q, k, v = _qkv(L=24)
    out, probs, _ = _run(core, q, k, v, need_weights=True)
    E, F = core.E[:, :24].detach(), core.F[:, :24].detach()
    a = torch.softmax(q @ (E @ k).transpose(-1, -2) / math.sqrt(8), -1)  # (B, h, L, proj_len)
    torch.testing.assert_close(out, a @ (F @ v), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(probs, a @ (E.abs() / E.abs().sum(-1, keepdim=True)), rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigError) as e:
        _run(core, *_qkv(L=cfg.max_len + 1))
    assert "max_len" in str(e.value) and str(cfg.max_len + 1) in str(e.value)


# ------------------------------------------------------------------------ adaptive span
def test_adaptive_span_with_full_span_is_causal_softmax_and_loss_is_the_formula(core_for):
    cfg, core = core_for("adaptive_span", True, max_span=64)
    q, k, v = _qkv(L=24)
    out, probs, aux = _run(core, q, k, v, need_weights=True)
    ref, p = kernels.attention_ref(q, k, v, causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs, p)
    torch.testing.assert_close(aux["loss"], SPAN_PENALTY * core.z.detach().clamp(0, 64).mean())
    torch.testing.assert_close(aux["span"], torch.full((4,), 64.0))


def test_adaptive_span_mask_is_the_papers_ramp_and_z_learns(core_for):
    cfg, core = core_for("adaptive_span", True, max_span=16, span_ramp=4)
    with torch.no_grad():
        core.z.copy_(torch.tensor([0.0, 2.5, 7.0, 30.0]))  # 30 is clamped to max_span
    q, k, v = _qkv(L=24)
    out, probs, aux = _run(core, q, k, v, need_weights=True)
    z = torch.tensor([0.0, 2.5, 7.0, 16.0])
    x = torch.arange(24)[:, None] - torch.arange(24)[None, :]  # i - j
    m = ((4 + z[:, None, None] - x) / 4).clamp(0, 1)  # (h, L, L)
    _, p = kernels.attention_ref(q, k, v, causal=True)
    pm = p * m
    pm = pm / pm.sum(-1, keepdim=True)  # multiply the softmax weights and renormalise
    torch.testing.assert_close(probs, pm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(aux["span"], z)
    fast, _, aux2 = _run(core, q, k, v)
    torch.testing.assert_close(fast, pm @ v, rtol=1e-4, atol=1e-5)
    (fast.pow(2).sum() + aux2["loss"]).backward()
    # every head has keys on its ramp, so every z gets a gradient, also the one clamped at max_span
    # (straight-through clamp) and the one at 0
    assert core.z.grad is not None and core.z.grad.abs().min() > 0


# ------------------------------------------------------------------------ rejected combinations
@pytest.mark.parametrize(
    "key,field,kw",
    [
        ("linformer", "causal", {"causal": True}),
        ("nystrom", "causal", {"causal": True}),
        ("adaptive_span", "causal", {"causal": False}),
        ("linear", "position", {"position": "alibi"}),
        ("performer", "position", {"position": "t5"}),
        ("linformer", "position", {"position": "shaw", "causal": False}),
        ("lsh", "position", {"position": "xl"}),
        ("routing", "position", {"position": "shaw"}),
        ("lsh", "n_buckets", {"n_buckets": 5}),
        ("linear", "softcap", {"softcap": 30.0}),
    ],
)
def test_invalid_combinations_are_rejected_with_the_reason(key, field, kw, config_for):
    with pytest.raises(ConfigError) as e:
        config_for(key, **kw)
    assert e.value.field == field
    if field == "causal":
        assert "causal" in str(e.value) and key in str(e.value)
    if field == "position":
        assert "rope" in str(e.value)  # names what works


@pytest.mark.parametrize(
    "key,position",
    [
        ("lsh", "alibi"),
        ("lsh", "t5"),
        ("routing", "alibi"),
        ("routing", "t5"),
        ("adaptive_span", "t5"),
        ("adaptive_span", "shaw"),
    ],
)
def test_score_biases_match_the_kernel_convention(key, position, core_for):
    """With every pair allowed (one bucket / cluster, span beyond L) the biased scores are exact softmax."""
    cfg, core = core_for(key, True, n_buckets=2, chunk_size=32, n_clusters=1, max_span=64, position=position)
    q, k, v = _qkv(L=24)
    if key == "lsh":
        k = q / q.norm(dim=-1, keepdim=True)
        core.rotations.zero_()  # every position hashes to bucket 0
    g = torch.Generator().manual_seed(1)
    if position == "alibi":
        mods = {"alibi_slopes": torch.rand(4, generator=g)}
    elif position == "t5":
        mods = {"rel_bias": torch.randn(4, 2 * 24 - 1, generator=g)}
    else:
        mods = {"rel_k": torch.randn(1, 5, 8, generator=g), "rel_v": torch.randn(1, 5, 8, generator=g)}
    out, probs, _ = _run(core, q, k, v, need_weights=True, mods=mods)
    ref, p = kernels.attention_ref(q, k, v, causal=True, **mods)
    if key == "lsh":  # self is excluded unless it is the only key: compare with the diagonal masked out
        mask = ~torch.eye(24, dtype=torch.bool)
        mask[0, 0] = True
        ref, p = kernels.attention_ref(q, k, v, causal=True, mask=mask, **mods)
    torch.testing.assert_close(probs, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_nystrom_keeps_float64_precision(core_for):
    """With a landmark per position Nystrom is exact softmax; in float64 it must be exact to ~1e-10."""
    cfg, core = core_for("nystrom", False, n_landmarks=12)
    q, k, v = [t.double() for t in _qkv(B=1, h=2, L=12, d=8, seed=3)]
    out, probs, _ = _run(core, q, k, v, need_weights=True)
    assert out.dtype == torch.float64
    want = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    torch.testing.assert_close(probs, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(out, want @ v, rtol=0, atol=1e-10)
