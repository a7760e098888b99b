"""Xiong et al. 2020's Theorem 1, measured by ``explorer.analysis.gradients.depth_scaling`` and checked against an
independent plain-PyTorch computation: ``nn.TransformerEncoderLayer`` (post-LN: ``norm_first=False``,
pre-LN: ``norm_first=True`` plus a final LayerNorm), Xavier-uniform init, a causal mask, the next-token
loss on random tokens, and the gradient norm of the last layer's second FFN matrix (``linear2.weight``)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from explorer.analysis import clear_caches
from explorer.analysis.gradients import depth_scaling as ds
from explorer.analysis.gradients import depth_stored
from explorer.analysis.gradients.norms import gradient_norms
from explorer.analysis.weights.bundled import bundled_weights
from explorer.runtime import budget
from models import ModelConfig, choices

D, HEADS, SEQ, BATCH, SEEDS = 64, 4, 32, 4, 2
# the catalogue's closest config to a stack of nn.TransformerEncoderLayer: full causal attention, no
# position encoding, ReLU FFN of width 4d, LayerNorm, no dropout
EQUIVALENT = ModelConfig(
    d_model=D,
    n_heads=HEADS,
    d_ff=4 * D,
    ffn="relu",
    position="none",
    attention="full",
    norm="layernorm",
    dropout=0.0,
    causal=True,
)


def plain_last_w2_grad(depth: int, norm_first: bool, seed: int, vocab: int = 256) -> float:
    """The reference: ‖∂loss/∂W2‖ of the last nn.TransformerEncoderLayer, Xavier init, causal LM loss."""
    torch.manual_seed(seed)
    layers = nn.ModuleList(
        nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0, batch_first=True, norm_first=norm_first)
        for _ in range(depth)
    )
    embed, head = nn.Embedding(vocab, D), nn.Linear(D, vocab)
    final = nn.LayerNorm(D) if norm_first else nn.Identity()  # pre-LN ends with a norm, as in the paper
    for p in nn.ModuleList([embed, layers, head]).parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    tokens = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    mask = nn.Transformer.generate_square_subsequent_mask(SEQ)
    x = embed(tokens)
    for layer in layers:
        x = layer(x, src_mask=mask, is_causal=True)
    logits = head(final(x))
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    (grad,) = torch.autograd.grad(loss, [layers[-1].linear2.weight])
    return float(grad.norm())


def plain_ratio(norm_first: bool, deep: int = 16, shallow: int = 2) -> float:
    mean = lambda depth: sum(plain_last_w2_grad(depth, norm_first, s) for s in range(SEEDS)) / SEEDS  # noqa: E731
    return mean(deep) / mean(shallow)


@pytest.fixture(scope="module")
def plain():
    return {"post": plain_ratio(False), "pre": plain_ratio(True)}


@pytest.fixture(scope="module")
def ours():
    return ds.depth_scaling(
        EQUIVALENT, depths=(2, 16), seeds=SEEDS, seq_len=SEQ, batch=BATCH, placements=("post", "pre", "rezero")
    )


def test_the_plain_reference_shows_theorem_1(plain):
    # post-LN's last-layer gradient does not shrink with depth; pre-LN's shrinks like 1/sqrt(L)
    assert plain["post"] >= 0.8
    assert abs(plain["pre"] - math.sqrt(2 / 16)) < 0.12


def test_our_models_follow_the_plain_reference(plain, ours):
    ratio = {p: r["last"][1] / r["last"][0] for p, r in ours["placements"].items() if p in ("post", "pre")}
    assert ratio["post"] >= 0.8 and abs(ratio["pre"] - math.sqrt(2 / 16)) < 0.12
    for p in ("post", "pre"):
        assert abs(ratio[p] - plain[p]) < 0.25 * plain[p], (p, ratio[p], plain[p])
    assert ours["placements"]["post"]["slope"] > -0.1 and ours["placements"]["pre"]["slope"] < -0.35


def test_the_placements_asked_are_measured_and_rezero_is_exactly_zero(ours):
    assert list(ours["placements"]) == ["post", "pre", "rezero"]
    assert ours["placements"]["rezero"]["last"] == [0.0, 0.0]  # alpha = 0: the branch gets no gradient
    assert ours["parameter"] == "stack.blocks.{L-1}.ffn.w2.weight" and ours["quantity"] == "ffn_out"
    for r in ours["placements"].values():
        assert len(r["profile"]) == 2 and [len(p) for p in r["profile"]] == [2, 16]
        assert r["profile"][1][-1] == pytest.approx(r["last"][1])


def test_one_seed_at_the_configs_own_depth_is_the_gradients_tab_number():
    cfg = EQUIVALENT.replace(n_layers=3)
    r = ds.depth_scaling(cfg, depths=(3,), seeds=1, seq_len=SEQ, batch=BATCH)
    ref = gradient_norms(cfg, seq_len=SEQ, batch=BATCH, seed=0)
    assert r["placements"]["pre"]["profile"][0] == pytest.approx(ref["ffn_out"], rel=1e-6)


def test_a_trained_bundle_is_a_point_at_its_own_depth():
    cfg = ModelConfig()  # the 'default' bundle's config (pre-LN); with post-LN it is the 'post_ln' bundle's
    r = ds.depth_scaling(cfg, bundled_weights(cfg), depths=(2,), seeds=1)
    assert {"pre", "post"} <= set(r["trained"])
    pre = r["trained"]["pre"]
    assert pre["depth"] == cfg.n_layers and pre["label"] == "'default' bundle"
    want = gradient_norms(cfg, seq_len=ds.SEQ_LEN, batch=ds.BATCH, seed=0, weights=bundled_weights(cfg))
    assert pre["last"] == pytest.approx(want["ffn_out"][-1])


def test_a_wide_config_is_narrowed_and_says_so():
    wide = ModelConfig(d_model=512, n_heads=8, n_kv_heads=4, d_ff=1024)
    cfg, notes = ds.sweep_config(wide, max_d_model=128)
    assert (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff) == (128, 8, 4, 256)
    assert "d_model 128" in notes[0] and "512" in notes[0]
    assert ds.sweep_config(ModelConfig(d_model=64), 128) == (ModelConfig(d_model=64), [])


def test_depths_over_the_memory_budget_are_skipped_saying_why(monkeypatch):
    small = EQUIVALENT.replace(d_model=32, n_heads=2, d_ff=128)
    shallow = budget.predict(small.replace(n_layers=2), "gradients", SEQ, BATCH)
    deep = budget.predict(small.replace(n_layers=24), "gradients", SEQ, BATCH)
    monkeypatch.setattr(budget, "request_budget", lambda: (shallow + deep) // 2)
    r = ds.depth_scaling(small, depths=(2, 24), seeds=1, seq_len=SEQ, batch=BATCH, placements=("post",))
    assert r["placements"]["post"]["depths"] == [2]
    assert "budget" in r["placements"]["post"]["skipped"]["24"]
    monkeypatch.setattr(budget, "request_budget", lambda: shallow // 2)
    r = ds.depth_scaling(small, depths=(2, 24), seeds=1, seq_len=SEQ, batch=BATCH)  # nothing fits
    assert r["placements"] == {} and set(r["skipped"]) == set(choices()["norm_placement"])
    assert "budget" in r["skipped"]["pre"]


def test_loglog_slope_recovers_a_power_law():
    depths = [2, 4, 8, 16]
    assert ds.loglog_slope(depths, [3 * d**-0.5 for d in depths]) == pytest.approx(-0.5)
    assert ds.loglog_slope(depths, [0.0, None, 1.0, 0.0]) is None  # fewer than two positive points


def test_the_stored_landing_sweep_is_what_the_code_computes():
    stored = depth_stored.stored_values()
    _, _, requests, _, _ = ds.sweep_requests(ModelConfig())  # the config the page opens with
    assert (
        set(requests) == set(choices()["norm_placement"]) >= {"post", "pre", "sandwich", "rezero", "none", "res_post"}
    )
    assert all(depth_stored.key_text(r.key) in stored for r in requests.values())  # start-up computes none
    for placement in ("post", "pre"):
        req = requests[placement]
        value = stored[depth_stored.key_text(req.key)]
        cfg, depths, seeds, seq_len, batch = req.args
        some = (depths[0], depths[-1])  # each depth is its own models: a subset recomputes exactly
        fresh = ds.compute_depth_scaling(cfg, some, seeds, seq_len, batch)
        for i, depth in enumerate(some):
            k = depths.index(depth)
            assert fresh["last"][i] == pytest.approx(value["last"][k], rel=1e-4), (placement, depth)
            assert fresh["profile"][i] == pytest.approx(value["profile"][k], rel=1e-4), (placement, depth)


def test_the_landing_sweep_is_read_not_computed(monkeypatch):
    clear_caches()

    def computed(*args):
        raise AssertionError("the stored sweep was computed again")

    monkeypatch.setattr(ds, "compute_depth_scaling", computed)
    r = ds.depth_scaling(ModelConfig(n_layers=6, seed=3))  # neither the depth nor the seed moves the curve
    _, _, requests, _, _ = ds.sweep_requests(ModelConfig())
    want = depth_stored.stored_values()[depth_stored.key_text(requests["pre"].key)]
    assert r["placements"]["pre"]["last"] == want["last"]
