"""The long-context view's analysis against independent references: the model's own dense attention
(``return_attention=True``) pooled by ``kernels.pool_probs``, the plain forward's per-token loss binned by
hand, the dense rows of a zoomed cell, and the passages' construction."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from explorer.analysis import source
from explorer.analysis.long_context import view as lc
from explorer.analysis.long_context import zoom as lc_zoom
from explorer.analysis.long_context.text import MAX_PASTED_BYTES, heldout_text, passage
from explorer.analysis.weights.bundled import load
from kernels.pooled_dense import pool_probs
from models import ConfigError, ModelConfig, build_model

L = 512  # below the view's lengths: the tests add it to the offered ones


@pytest.fixture(scope="module")
def result():
    mp = pytest.MonkeyPatch()
    mp.setattr(lc, "LENGTHS", (L, *lc.LENGTHS))
    try:
        yield lc.long_context(source.resolve("bundled", ModelConfig()), L, "repeat", change="window")
    finally:
        mp.undo()


def dense(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), return_attention=True)
    return out, torch.stack([a[0] for a in out.attentions]).double()  # (layers, h, L, L)


def test_both_sides_equal_the_dense_maps_pooled_the_same_way(result):
    assert [s.name for s in result.sides] == ["as trained", "64-key sliding window"]
    assert result.trained_length == 128 and result.length == L
    for s in result.sides:
        _, probs = dense(s.model, result.passage.ids)
        ref = pool_probs(probs[None].flatten(1, 2), 64, 64, sink_k=4, window=64)
        n_l, n_h = s.mass.shape[:2]
        np.testing.assert_allclose(s.mass, ref.mass[0].view(n_l, n_h, *ref.mass.shape[-2:]).numpy(), atol=2e-5)
        for name in lc.STATS:
            got = s.stats[name]
            want = getattr(ref, name)[0].view(n_l, n_h, -1).numpy()
            np.testing.assert_allclose(got, want, atol=2e-3 if name == "distance" else 2e-4)
    window = result.sides[1].stats["local"]
    assert np.allclose(window, 1.0, atol=1e-5)  # a 64-key window puts all its mass within 64 keys


def test_the_window_runs_on_the_same_weights_not_another_bundle(result):
    trained = load("default").state
    moved = result.sides[1].model.state_dict()
    assert result.sides[1].config.attention == "sliding_window" and result.sides[1].config.window == 64
    for name, _p in result.sides[1].model.named_parameters():
        assert torch.equal(moved[name].to(trained[name].dtype), trained[name]), name


def test_loss_bins_are_the_mean_of_the_plain_forward_loss(result):
    for s in result.sides:
        with torch.no_grad():
            logits = s.model(torch.tensor([result.passage.ids])).logits[0]
        ids = torch.tensor(result.passage.ids)
        loss = F.cross_entropy(logits[:-1].double(), ids[1:], reduction="none").numpy()  # position t+1's loss
        centres, bins = result.loss_bins(16)
        width = L // 16
        want = [loss[max(0, b * width - 1) : (b + 1) * width - 1].mean() for b in range(16)]
        np.testing.assert_allclose(bins[result.sides.index(s)], want, rtol=1e-4)
        np.testing.assert_allclose(centres, np.arange(16) * width + width / 2)


@pytest.mark.parametrize("side", [0, 1])
def test_zoomed_rows_equal_the_dense_rows(result, side):
    s = result.sides[side]
    _, probs = dense(s.model, result.passage.ids)
    for layer, head, qc, kc in ((1, 2, 7, 2), (3, 0, 5, 5), (0, 3, 6, None)):
        z = lc_zoom.zoom(result, side, layer, head, qc, kc)
        (r0, r1), (c0, c1) = z.rows, z.keys
        np.testing.assert_allclose(z.probs, probs[layer, head, r0:r1, c0:c1].numpy(), atol=1e-5)
        assert z.exact == pytest.approx(z.pooled, abs=1e-5)


@pytest.mark.parametrize(
    "extra",
    [
        dict(position="alibi", attention="sliding_window", window=16),
        dict(position="t5", attention="bigbird", block_size=16),
        dict(position="shaw", attention="longformer", window=16),
        dict(position="rope", attention="full", causal=False, architecture="encoder_only", softcap=5.0),
        dict(position="rope", attention="sliding_window", window=16, attn_sinks=True),  # rows sum below one
    ],
)
def test_exact_rows_follow_every_score_modifier(extra):
    cfg = ModelConfig(n_layers=1, d_model=32, n_heads=2, **extra).validate()
    model = build_model(cfg).eval()
    ids = torch.randint(0, 256, (1, 128))
    got = {}

    def hook(core, args):
        q, k, _v, mods, _ctx = args
        got["rows"] = lc_zoom.exact_rows(core, q, k, mods, 40, 72, 1)

    attn = [m for m in model.modules() if isinstance(m, lc.Attention)][0]
    handle = attn.core.register_forward_pre_hook(hook)
    with torch.no_grad():
        model(ids)
    handle.remove()
    with torch.no_grad():
        ref = model(ids, return_attention=True).attentions[0][0, 1, 40:72].double()
    torch.testing.assert_close(got["rows"], ref, atol=1e-5, rtol=1e-4)


def test_the_repeat_source_places_one_paragraph_twice():
    cfg = ModelConfig()
    p = passage(cfg, 8192, "repeat")
    first, second, n = p.repeat
    assert second - first == 3072 and len(p.ids) == 8192 and n >= 200
    assert p.ids[first : first + n] == p.ids[second : second + n]
    short = passage(cfg, 2048, "repeat")
    assert short.repeat[1] - short.repeat[0] == 1024 and any("1024 tokens apart" in s for s in short.notes)
    held = passage(cfg, 1024, "heldout")
    assert bytes(held.ids) == heldout_text().encode("utf-8")[:1024]


def test_bad_inputs_are_refused_by_name(monkeypatch):
    monkeypatch.setattr(lc, "LENGTHS", (1024, 2048, 4096, 8192, 16384))  # the view's own (the fixture adds 512)
    src = source.resolve("bundled", ModelConfig())
    with pytest.raises(ConfigError, match=r"length.*\[1024, 2048, 4096, 8192, 16384"):
        lc.long_context(src, 3000)
    with pytest.raises(ConfigError, match="source"):
        lc.long_context(src, 1024, "novel")
    with pytest.raises(ConfigError, match="change"):
        lc.long_context(src, 1024, "heldout", change="dilate")
    with pytest.raises(ConfigError, match="text.*65536"):
        passage(ModelConfig(), 1024, "pasted", "x" * (MAX_PASTED_BYTES + 1))
    short = passage(ModelConfig(), 1024, "pasted", "hello there")
    assert short.ids == tuple(b"hello there") and "read whole" in short.notes[0]
    monkeypatch.setenv("EXPLORER_LONG_CONTEXT_MAX_TOKENS", "2048")
    assert lc.allowed_lengths() == [1024, 2048]
    with pytest.raises(ConfigError, match="EXPLORER_LONG_CONTEXT_MAX_TOKENS=2048"):
        lc.check_length(4096)


def test_a_stop_ends_the_view_and_gives_the_memory_back(monkeypatch):
    import time

    from explorer.runtime.pool import POOL
    from explorer.runtime.stopping import Abandoned
    from models.blocks import Attention

    # Each layer lasts three polls of the stop channel's watcher (50 ms), so that every layer's report is
    # seen and the stop lands inside the first model's forward whatever the machine's speed (on a quick
    # machine the four layers could otherwise end between two polls and no stop would be asked in time).
    real = lc.pooled_maps

    def slow_pooled_maps(model, tokens):
        hooks = [
            a.register_forward_pre_hook(lambda *_a: time.sleep(0.15))
            for a in model.modules()
            if isinstance(a, Attention)
        ]
        try:
            return real(model, tokens)
        finally:
            for h in hooks:
                h.remove()

    monkeypatch.setattr(lc, "pooled_maps", slow_pooled_maps)
    src = source.resolve("bundled", ModelConfig())
    seen = []
    held = POOL.held()

    def stop():
        return len(seen) >= 3  # after the third layer reported: inside the first model's forward

    with pytest.raises(Abandoned):
        lc.long_context(src, 1024, "heldout", should_stop=stop, progress=lambda f, msg: seen.append((f, msg)))
    assert POOL.held() == held
    fractions = [f for f, _ in seen]  # per layer, polled across the GPU call's stop token: none skipped past
    assert fractions == sorted(fractions) and fractions[-1] < 1 and all((8 * f).is_integer() for f in fractions)
    assert all(re.fullmatch(r"as trained: layer [0-3] of 4 at 1024 tokens", msg) for f, msg in seen if f < 0.5)
