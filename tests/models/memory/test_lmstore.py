"""kNN-LM (Khandelwal et al. 2020) and SPALM (Yogatama et al. 2021): the datastore memories
against their formulas, driven the way the model drives a memory (head_input -> head ->
final_logits, then update)."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig
from models.context import ForwardContext, LayerInfo
from models.memory.lmstore import KNNLM, SPALM, StoreState, nearest

V, D = 11, 6


def _cfg(memory, **kw):
    return ModelConfig(
        **{
            "vocab_size": V,
            "d_model": D,
            "n_heads": 2,
            "n_layers": 1,
            "knn_k": 2,
            "knn_size": 8,
            "segment_len": 4,
            "knn_lambda": 0.3,
            **kw,
        }
    )


def _ctx(tokens, state, start=0):
    L = tokens.shape[1]
    ctx = ForwardContext(
        tokens=tokens, position=None, state=state, k_start=start, positions=torch.arange(start, start + L)
    )
    ctx.layers.append(LayerInfo(index=0))
    return ctx


def _store(keys, nxt):
    S = keys.shape[1]
    return StoreState(
        kind="knn_lm", batch_size=keys.shape[0], pos=S, store_keys=keys, store_next=nxt, store_pos=torch.arange(S)
    )


def test_nearest_is_the_brute_force_l2_neighbourhood():
    g = torch.Generator().manual_seed(0)
    q, keys = torch.randn(2, 5, D, generator=g), torch.randn(2, 9, D, generator=g)
    dist, idx = nearest(q, keys, 3)
    for b in range(2):
        for i in range(5):
            every = ((keys[b] - q[b, i]) ** 2).sum(-1)
            want = every.sort()
            torch.testing.assert_close(dist[b, i], want.values[:3], rtol=1e-5, atol=1e-5)
            assert idx[b, i].tolist() == want.indices[:3].tolist()


@pytest.mark.parametrize("cls", [KNNLM, SPALM])
def test_an_empty_store_leaves_hidden_states_and_logits_unchanged(cls):
    mem = cls(_cfg(cls.__name__.lower()))
    state = mem.new_state(2)
    x, logits = torch.randn(2, 4, D), torch.randn(2, 4, V)
    ctx = _ctx(torch.zeros(2, 4, dtype=torch.long), state)
    assert torch.equal(mem.head_input(x, ctx), x)
    assert torch.equal(mem.final_logits(x, logits, ctx), logits)


def test_knn_lm_gives_the_retrieved_token_lambda_plus_its_lm_share():
    cfg = _cfg("knn_lm", knn_k=1)
    mem = KNNLM(cfg)
    h = torch.randn(1, 1, D)
    keys = torch.cat([h[:, 0:1], h[:, 0:1] + 5.0, h[:, 0:1] - 5.0], dim=1)  # the exact context + two far ones
    state = _store(keys, torch.tensor([[7, 2, 3]]))
    logits = torch.randn(1, 1, V)
    out = mem.final_logits(h, logits, _ctx(torch.zeros(1, 1, dtype=torch.long), state))
    p_lm = torch.softmax(logits, -1)
    want = 0.7 * p_lm
    want[..., 7] += 0.3  # k = 1: all kNN mass on the stored next token
    torch.testing.assert_close(out.exp(), want)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(1, 1))


def test_knn_lm_weights_neighbours_by_softmax_of_minus_squared_distance():
    mem = KNNLM(_cfg("knn_lm", knn_k=2, knn_lambda=1.0))
    h = torch.zeros(1, 1, D)
    keys = torch.zeros(1, 3, D)
    keys[0, 0, 0], keys[0, 1, 0], keys[0, 2, 0] = 1.0, 2.0, 10.0  # squared distances 1, 4, 100
    state = _store(keys, torch.tensor([[4, 4, 9]]))  # two neighbours with the same token add up
    keys2 = keys.clone()
    state2 = _store(keys2, torch.tensor([[4, 5, 9]]))
    out = mem.final_logits(h, torch.zeros(1, 1, V), _ctx(torch.zeros(1, 1, dtype=torch.long), state)).exp()
    assert out[0, 0, 4].item() == pytest.approx(1.0, abs=1e-6) and out[0, 0, 9] < 1e-30
    out2 = mem.final_logits(h, torch.zeros(1, 1, V), _ctx(torch.zeros(1, 1, dtype=torch.long), state2)).exp()
    w = torch.softmax(torch.tensor([-1.0, -4.0]), 0)
    assert out2[0, 0, 4].item() == pytest.approx(w[0].item(), rel=1e-5)
    assert out2[0, 0, 5].item() == pytest.approx(w[1].item(), rel=1e-5)


def test_spalm_mixes_the_attended_token_embeddings_with_its_gate():
    mem = SPALM(_cfg("spalm", knn_k=2))
    with torch.no_grad():
        mem.gate_w.normal_()
        mem.gate_b.fill_(0.3)
        mem.token_embed.normal_()
    h = torch.randn(1, 2, D)
    keys = torch.cat([h, h + 0.01, h + 9.0], dim=1)  # (1, 6, D)
    nxt = torch.tensor([[1, 2, 3, 4, 5, 6]])
    z = mem.head_input(h, _ctx(torch.zeros(1, 2, dtype=torch.long), _store(keys, nxt)))
    for i in range(2):
        hi = h[0, i]
        d = ((keys[0] - hi) ** 2).sum(-1)
        toks = nxt[0, d.topk(2, largest=False).indices]
        e = mem.token_embed[toks]  # (2, D)
        m = torch.softmax(e @ hi, 0) @ e
        g = torch.sigmoid(mem.gate_w @ hi + mem.gate_b)
        torch.testing.assert_close(z[0, i], g * hi + (1 - g) * m)
    z.sum().backward()
    assert mem.gate_w.grad.abs().sum() > 0 and mem.token_embed.grad.abs().sum() > 0


def test_update_pairs_each_context_with_the_next_token_across_segments_fifo():
    mem = KNNLM(_cfg("knn_lm", knn_size=5))
    state = mem.new_state(1)
    toks = torch.tensor([[10, 1, 2, 3, 4, 5, 6]])
    hidden = torch.arange(7.0)[None, :, None].expand(1, 7, D)  # h_t = t everywhere
    for s0, s1 in ((0, 4), (4, 7)):
        ctx = _ctx(toks[:, s0:s1], state, s0)
        mem.head_input(hidden[:, s0:s1], ctx)
        state = mem.update(state, ctx, None)
    assert state.pos == 7
    # pairs (h_t, x_{t+1}) for t = 0..5, the last five kept; h_6 waits for its next token
    assert state.store_pos.tolist() == [1, 2, 3, 4, 5]
    assert state.store_keys[0, :, 0].tolist() == [1, 2, 3, 4, 5]
    assert state.store_next[0].tolist() == [2, 3, 4, 5, 6]
    assert state.pending[0, 0].item() == 6


def test_checks_name_their_fields():
    with pytest.raises(ConfigError, match="knn_lambda"):
        from models.memory.lmstore import check_store

        check_store(_cfg("knn_lm", knn_lambda=1.5))
    with pytest.raises(ConfigError, match="causal"):
        check_store(_cfg("knn_lm", causal=False))
    assert math.isclose(_cfg("knn_lm").knn_lambda, 0.3)
