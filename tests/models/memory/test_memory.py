"""Memory (catalogue section 7): explicit state, segment processing, retrieval, no leaks."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.memory import MemoryState
from models.memory.knn import gather_values, knn_retrieve

BASE = dict(
    n_layers=2,
    d_model=32,
    n_heads=4,
    max_len=128,
    segment_len=16,
    mem_len=16,
    cmem_len=8,
    n_memory=2,
    knn_size=24,
    knn_k=4,
    compression_rate=2,
    window=8,
)
KINDS = ["xl", "compressive", "knn", "tokens"]


def _model(**kw):
    return build_model(ModelConfig(**{**BASE, **kw})).eval()


def _tokens(B=2, n=40, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _state_tensors(state):
    for name in ("mem", "cmem"):
        yield from getattr(state, name)
    for name in ("mem_pos", "cmem_ids", "cmem_first", "knn_keys", "knn_values", "knn_pos"):
        if getattr(state, name) is not None:
            yield getattr(state, name)


@pytest.mark.parametrize("kind,extra", [("xl", {}), ("compressive", {"compression": "conv"}), ("knn", {})])
def test_no_gradient_reaches_stored_memory(kind, extra):
    model = build_model(ModelConfig(**{**BASE, "memory": kind, **extra}))
    out = model(_tokens())
    assert all(not t.requires_grad and t.grad_fn is None for t in _state_tensors(out.state))
    out2 = model(_tokens(seed=1), state=out.state)
    (out2.logits.pow(2).mean() + out2.aux_loss).backward()
    assert all(t.grad is None for t in _state_tensors(out.state))


def test_conv_compression_learns_from_the_reconstruction_loss_only():
    model = build_model(ModelConfig(**{**BASE, "memory": "compressive", "compression": "conv"}))
    out = model(_tokens())
    assert out.aux_loss > 0
    out.aux_loss.backward()
    assert model.memory.conv[0].weight.grad.abs().sum() > 0
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.stack.parameters())


@pytest.mark.parametrize("kind", ["xl", "compressive", "knn"])
def test_memory_never_exceeds_its_configured_length(kind):
    cfg = ModelConfig(**{**BASE, "memory": kind, "compression_rate": 3})
    model = build_model(cfg).eval()
    state = None
    for n, seed in ((7, 0), (40, 1), (23, 2), (5, 3), (64, 4)):
        out = model(_tokens(n=n, seed=seed), state=state)
        state = out.state
        sizes = state.memory_len()
        assert sizes["mem"] <= cfg.mem_len and sizes["cmem"] <= cfg.cmem_len and sizes["knn"] <= cfg.knn_size
        for m in state.mem:
            assert m.shape[1] == sizes["mem"]
        for c in state.cmem:
            assert c.shape[1] == sizes["cmem"]
        if kind == "knn":
            assert state.knn_keys.shape[2] == state.knn_values.shape[2] == sizes["knn"]
        for info in out.layers:
            assert info.memory_len <= cfg.mem_len + cfg.cmem_len + cfg.knn_size
    assert state.pos == 7 + 40 + 23 + 5 + 64
    if kind == "knn":  # FIFO: the store holds the most recent knn_size positions
        assert state.knn_pos.tolist() == list(range(state.pos - cfg.knn_size, state.pos))
    if kind == "xl":
        assert state.mem_pos.tolist() == list(range(state.pos - cfg.mem_len, state.pos))


def test_knn_retrieve_equals_brute_force_top_k():
    g = torch.Generator().manual_seed(0)
    B, h, hkv, L, S, d, k = 2, 4, 2, 5, 30, 8, 6
    q = torch.nn.functional.normalize(torch.randn(B, h, L, d, generator=g), dim=-1)
    keys = torch.nn.functional.normalize(torch.randn(B, hkv, S, d, generator=g), dim=-1)
    values = torch.randn(B, hkv, S, d, generator=g)
    scores, index = knn_retrieve(q, keys, k)
    got = gather_values(values, index)
    for b in range(B):
        for n in range(h):
            for i in range(L):
                sims = [(float(q[b, n, i] @ keys[b, n // (h // hkv), s]), s) for s in range(S)]
                best = [s for _, s in sorted(sims, reverse=True)[:k]]
                assert index[b, n, i].tolist() == best
                torch.testing.assert_close(got[b, n, i], values[b, n // (h // hkv), best])


def test_knn_layer_retrieves_the_brute_force_top_k_of_its_store():
    model = _model(memory="knn", n_kv_heads=2)
    state = model(_tokens(n=32)).state
    captured = {}
    attn = model.stack.attention(model.memory.layer)
    handle = attn.q_proj.register_forward_hook(lambda m, i, o: captured.setdefault("q", o))
    out = model(_tokens(n=16, seed=5), state=state)
    handle.remove()
    info = out.layers[model.memory.layer]
    B, L, _ = captured["q"].shape
    q = torch.nn.functional.normalize(captured["q"].view(B, L, 4, 8).transpose(1, 2), dim=-1)
    keys = state.knn_keys.repeat_interleave(2, dim=1)  # (B, h, S, d_h)
    brute = (q @ keys.transpose(-1, -2)).topk(4, dim=-1).indices
    assert torch.equal(info.knn_index, brute)
    assert (info.knn_positions < state.pos).all()  # only the past is retrieved
    assert (info.reach >= out.state.pos - 16 - info.knn_positions.amin(dim=(1, 3))).all()


@pytest.mark.parametrize("kind", KINDS)
def test_two_states_used_alternately_do_not_affect_each_other(kind):
    model = _model(memory=kind)
    a1, a2, b1, b2 = (_tokens(n=20, seed=s) for s in range(4))
    alone = model(a2, state=model(a1).state)
    sa = model(a1).state
    sb = model(b1).state
    snapshot = [t.clone() for t in _state_tensors(sa)]
    model(b2, state=sb)
    mixed = model(a2, state=sa)
    torch.testing.assert_close(mixed.logits, alone.logits, rtol=0, atol=0)
    assert all(torch.equal(x, y) for x, y in zip(snapshot, _state_tensors(sa)))  # never mutated


def test_new_state_is_an_explicit_reset_and_batch_mismatch_is_an_error():
    model = _model(memory="xl")
    t = _tokens()
    fresh = model(t).logits
    used = model(t, state=model(t).state).logits
    assert not torch.allclose(fresh, used)
    torch.testing.assert_close(model(t, state=model.new_state(2)).logits, fresh)
    with pytest.raises(ConfigError, match="state"):
        model(t, state=model.new_state(3))
    with pytest.raises(ConfigError, match="state"):
        _model()(t, state=model.new_state(2))
    assert _model().new_state() is None


@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "xl", "shaw", "none"])
@pytest.mark.parametrize("kind", ["xl", "compressive"])
def test_xl_segments_with_full_causal_attention_equal_the_whole_sequence(position, kind):
    """Causal full attention: segment 1's hidden states are those of the whole-sequence run, so
    segment 2 attending [memory; itself] at continuing positions is exactly the whole run (memory
    long enough to hold everything); the merged attention maps equal the whole run's too."""
    cfg = dict(position=position, mem_len=48, cmem_len=8)
    plain = _model(**cfg)
    mem = _model(memory=kind, **cfg)
    mem.load_state_dict(plain.state_dict(), strict=False)
    t = _tokens(n=40)
    ref = plain(t, return_attention=True)
    got = mem(t, return_attention=True)
    torch.testing.assert_close(got.logits, ref.logits, rtol=1e-4, atol=1e-4)
    for a, b in zip(got.attentions, ref.attentions):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # the same across two calls: the second call's logits are the whole run's tail
    first = mem(t[:, :24])
    second = mem(t[:, 24:], state=first.state)
    torch.testing.assert_close(second.logits, ref.logits[:, 24:], rtol=1e-4, atol=1e-4)


def test_xl_first_segment_is_memoryless_and_memory_changes_the_second():
    plain = _model()
    mem = _model(memory="xl", mem_len=8)
    mem.load_state_dict(plain.state_dict(), strict=False)
    t = _tokens(n=32)
    out = mem(t)
    torch.testing.assert_close(out.logits[:, :16], plain(t[:, :16]).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out.logits[:, 16:], plain(t[:, 16:]).logits, atol=1e-4)
    info = out.layers[0]
    assert info.memory_len == 8  # the last segment saw 8 memories
    pos = torch.arange(32)
    expected = torch.cat([pos[:16], pos[16:] - 8])  # back to segment start, then to the oldest memory
    assert torch.equal(info.reach[0], expected)


def test_knn_first_segment_equals_the_memoryless_model():
    plain = _model()
    mem = _model(memory="knn")
    mem.load_state_dict(plain.state_dict(), strict=False)
    t = _tokens(n=32)
    out = mem(t)
    torch.testing.assert_close(out.logits[:, :16], plain(t[:, :16]).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out.logits[:, 16:], plain(t[:, 16:]).logits, atol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_memory_tokens_are_visible_to_every_position(causal):
    model = _model(memory="tokens", attention="sliding_window", causal=causal)
    out = model(_tokens(n=24), return_attention=True)
    for a in out.attentions:
        assert a.shape == (2, 4, 24, 2 + 24)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 24))
        assert (a[..., :2] > 0).all()


@pytest.mark.parametrize("kind", KINDS)
def test_causal_memory_models_leak_nothing(kind):
    model = _model(memory=kind, mem_len=8, knn_size=16)
    t = _tokens(1, 40)
    base = model(t).logits
    for pos in (3, 17, 30, 39):
        t2 = t.clone()
        t2[0, pos] = (t2[0, pos] + 1) % 256
        out = model(t2).logits
        torch.testing.assert_close(out[:, :pos], base[:, :pos], rtol=0, atol=1e-5)
        assert not torch.allclose(out[:, pos:], base[:, pos:])


@pytest.mark.parametrize("kind", ["xl", "compressive", "knn"])
def test_multi_segment_attention_rows_sum_to_one(kind):
    model = _model(memory=kind)
    state = model(_tokens(n=20)).state
    out = model(_tokens(n=40, seed=1), return_attention=True, state=state)
    for info, a in zip(out.layers, out.attentions):
        assert a.shape[:3] == (2, 4, 40) and a.shape[3] == info.key_ids.numel()
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 40))


def test_invalid_memory_combinations_are_rejected_with_a_reason():
    for pos in ("sinusoidal", "learned"):
        with pytest.raises(ConfigError, match="position"):
            ModelConfig(**{**BASE, "memory": "xl", "position": pos}).validate()
    with pytest.raises(ConfigError, match="causal"):
        ModelConfig(**{**BASE, "memory": "knn", "causal": False}).validate()
    with pytest.raises(ConfigError, match="compression_rate"):
        ModelConfig(**{**BASE, "memory": "compressive", "compression_rate": 32}).validate()
    for attention in ("linear", "lsh", "routing", "adaptive_span"):
        with pytest.raises(ConfigError, match="pattern") as e:
            ModelConfig(**{**BASE, "memory": "xl", "attention": attention, "position": "rope"}).validate()
        assert e.value.field == "memory"
    ModelConfig(**{**BASE, "memory": "knn", "position": "learned"}).validate()
    ModelConfig(**{**BASE, "memory": "tokens", "causal": False, "position": "sinusoidal"}).validate()


def test_state_is_a_memory_state_and_positions_continue_across_calls():
    model = _model(memory="xl")
    s1 = model(_tokens(n=10)).state
    assert isinstance(s1, MemoryState) and s1.pos == 10
    s2 = model(_tokens(n=7), state=s1).state
    assert s2.pos == 17 and s1.pos == 10
