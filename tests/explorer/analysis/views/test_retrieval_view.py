"""The ``retrieval`` view: kNN-LM's mixture recomputed from the neighbours and a memory-free copy of the
model; SPALM's gate as a per-position weight in [0, 1]; an empty store says why there are no
neighbours; the figure carries the mixed probabilities."""

import math

import numpy as np
import torch
from view_runs import REPEATED_TEXT, TINY_ROPE, model_run

from explorer.app.tabs.views import LABELS
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig, build_model

IDS = list(REPEATED_TEXT.encode())
L = len(IDS)
STORE = dict(segment_len=16, knn_k=4, knn_size=64)


def test_knn_lm_mixture_is_lambda_knn_plus_rest_model():
    cfg = ModelConfig(memory="knn_lm", knn_lambda=0.3, **STORE, **TINY_ROPE)
    views, out, model = model_run(cfg, IDS)
    v = views.items["retrieval"]
    seg = cfg.segment_len
    assert v.next.shape == (L, cfg.knn_k)
    # independent p_LM: the same weights without a memory, run segment by segment
    plain = build_model(ModelConfig(**{**cfg.to_dict(), "memory": "none"})).eval()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        p_lm = torch.cat(
            [torch.softmax(plain(torch.tensor([IDS[s : s + seg]])).logits.double(), -1) for s in range(0, L, seg)], 1
        )[0].numpy()
    # independent p_kNN: softmax(-distance) summed per stored next token
    p_knn = np.zeros((L, cfg.vocab_size))
    for t in range(seg, L):
        w = np.exp(-v.dist[t] - (-v.dist[t]).max())
        w /= w.sum()
        np.add.at(p_knn[t], v.next[t], w)
    mixed = torch.softmax(out.logits[0].double(), -1).numpy()
    assert np.allclose(v.p_model, p_lm, atol=1e-5)
    assert np.allclose(v.p_mixed, mixed, atol=1e-5)
    assert np.allclose(mixed[seg:], 0.3 * p_knn[seg:] + 0.7 * p_lm[seg:], atol=1e-5)
    assert np.allclose(mixed[:seg], p_lm[:seg], atol=1e-5)  # empty store: the model unchanged
    assert np.allclose(v.mix[seg:], 0.3) and np.allclose(v.mix[:seg], 0)
    # neighbours: contexts of earlier segments, stored with the token that followed them, nearest first
    for t in range(seg, L):
        start = t - t % seg
        assert ((v.pos[t] >= 0) & (v.pos[t] < start)).all()
        assert [IDS[p + 1] for p in v.pos[t]] == v.next[t].tolist()
        assert (np.diff(v.dist[t]) >= -1e-6).all()
    assert (v.next[:seg] == -1).all() and np.isnan(v.dist[:seg]).all()


def test_spalm_gate_is_a_per_position_weight_in_0_1():
    cfg = ModelConfig(memory="spalm", **STORE, **TINY_ROPE)
    seg = cfg.segment_len

    def gate(b):
        def edit(model):
            model.memory.gate_w.zero_()
            model.memory.gate_b.fill_(b)

        return edit

    for b in (-1.5, 2.0):
        v = model_run(cfg, IDS, gate(b))[0].items["retrieval"]
        assert np.allclose(v.mix[seg:], 1 - 1 / (1 + math.exp(-b)), atol=1e-6)  # 1 - g, g = sigmoid(b)
        assert np.allclose(v.mix[:seg], 0)
    seeded = torch.Generator().manual_seed(0)
    views, out, _ = model_run(cfg, IDS, lambda m: m.memory.gate_w.normal_(0, 2.0, generator=seeded))
    v = views.items["retrieval"]
    assert ((v.mix >= 0) & (v.mix <= 1)).all() and np.ptp(v.mix[seg:]) > 1e-3  # varies per position
    assert np.allclose(v.p_mixed, torch.softmax(out.logits[0].double(), -1).numpy(), atol=1e-5)
    assert np.allclose(v.p_mixed[:seg], v.p_model[:seg], atol=1e-6)


def test_retrieval_figure_carries_the_mixture():
    views = model_run(ModelConfig(memory="knn_lm", **STORE, **TINY_ROPE), IDS)[0]
    fig = pv.view_figures(views)["retrieval"]
    v = views.items["retrieval"]
    assert fig.layout.title.text and "retrieval" in pv.PLOT_NAMES and "retrieval" in LABELS
    assert all(ax.title.text is not None for ax in (fig.layout.xaxis, fig.layout.yaxis))
    assert np.allclose(np.asarray(fig.data[3].y, dtype=float), v.top_probs()["mixed"], atol=1e-6)
    assert "λ" in fig.data[4].name
    assert "**knn_lm**" in views_reading(views)


def test_retrieval_before_the_store_fills_says_why_there_are_no_neighbours():
    cfg = ModelConfig(memory="knn_lm", **{**STORE, "segment_len": 64}, **TINY_ROPE)  # the whole text is one segment
    views = model_run(cfg, IDS)[0]
    v = views.items["retrieval"]
    assert not v.retrieved.any() and np.allclose(v.p_mixed, v.p_model)
    assert "store is empty until the first segment (64 tokens)" in views_reading(views)
    assert np.isnan(np.asarray(pv.view_figures(views)["retrieval"].data[0].z, dtype=float)).all()
