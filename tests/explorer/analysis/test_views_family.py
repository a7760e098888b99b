"""The family views against independent references: ISAB / Luna's two steps recomputed from the
layer's weights in plain PyTorch and their product equal to the reported map; Lite's taps equal to
the softmax of its kernel and its convolution share recomputed from an explicit convolution and
softmax; kNN-LM's mixture recomputed from the neighbours and a memory-free copy of the model;
SPALM's gate; the Feedback memory weights; the sandwich order of Press et al. 2020."""
import math

import numpy as np
import pytest
import torch

from explorer.analysis.views import compute_views
from explorer.app.tabs.views import LABELS, views_reading
from explorer.figures import views as pv
from explorer.runtime.tokens import token_label
from models import ConfigError, ModelConfig, build_model
from models.layers_feedback import sublayer_input

TINY = dict(n_layers=2, d_model=16, n_heads=2, position="rope")
TEXT = "the cat sat; the cat sat; the cat sat on the mat"
IDS = list(TEXT.encode())
L = len(IDS)


def _run(cfg, edit=None, ids=IDS):
    """(views, model output, model) for ``ids`` (``TEXT``); ``edit(model)`` may set weights first."""
    model = build_model(cfg).eval()
    if edit is not None:
        with torch.no_grad():
            edit(model)
    with torch.no_grad():
        out = model(torch.tensor([ids]), return_attention=True)
    return compute_views(cfg, out.layers, [token_label(b) for b in ids]), out, model


def _values(block, info, cfg):
    """``V (1, h, L, d_h)`` of a standard block, from the stream entering it (no memory)."""
    x = sublayer_input(block.res_attn, info.input)
    return block.attn.v_proj(x).view(1, L, cfg.n_heads, cfg.d_head).transpose(1, 2)


def _softmax(s):
    return torch.softmax(s.double(), -1)


# ---------------------------------------------------------------------------- isab / luna
@pytest.mark.parametrize("mechanism", ["isab", "luna"])
def test_induced_steps_are_the_two_softmaxes_and_multiply_to_the_map(mechanism):
    cfg = ModelConfig(attention=mechanism, causal=False, n_inducing=5, **TINY)
    views, out, model = _run(cfg)
    v = views.items["induced"]
    h, m, dh = cfg.n_heads, cfg.n_inducing, cfg.d_head
    assert v.pack.shape == (2, h, m, L) and v.unpack.shape == (2, h, L, m)
    scale = 1 / math.sqrt(dh)
    packed = None
    with torch.no_grad():
        for i, (block, info) in enumerate(zip(model.stack.blocks, out.layers)):
            core = block.attn.core
            q, k, val = info.q.double(), info.k.double(), _values(block, info, cfg).double()
            if mechanism == "isab":
                queries = core.inducing.double()[None]  # (1, h, m, d_h)
            else:
                P = core.initial.double()[None] if packed is None else packed
                queries = (P @ core.pack_query.weight.double().T).view(1, m, h, dh).transpose(1, 2)
            a1 = _softmax(queries @ k.transpose(-1, -2) * scale)  # (1, h, m, L)
            gathered = a1 @ val
            if mechanism == "isab":
                keys = gathered @ core.key_of_h.double()
            else:
                flat = gathered.transpose(1, 2).reshape(1, m, h * dh)
                keys = (flat @ core.unpack_key.weight.double().T).view(1, m, h, dh).transpose(1, 2)
                packed = torch.nn.functional.layer_norm(flat + P, (h * dh,), core.norm.weight.double(),
                                                        core.norm.bias.double(), core.norm.eps)
            a2 = _softmax(q @ keys.transpose(-1, -2) * scale)  # (1, h, L, m)
            assert np.allclose(v.pack[i], a1[0].numpy(), atol=1e-5), i
            assert np.allclose(v.unpack[i], a2[0].numpy(), atol=1e-5), i
            reported = info.attention[0].double().numpy()
            assert np.allclose(np.einsum("hlm,hmk->hlk", a2[0].numpy(), a1[0].numpy()), reported, atol=1e-5)
    assert np.allclose(v.effective.sum(-1), 1, atol=1e-5) and (v.effective >= 0).all()
    s = v.summary()
    assert s["max_product_error"] < 1e-5 and s["max_row_sum_error"] < 1e-5


def test_luna_and_isab_refuse_causal_models():
    """Bidirectional only: every point reads the whole sequence, so a causal model is refused (naming the field)."""
    for mechanism in ("isab", "luna"):
        with pytest.raises(ConfigError, match="causal"):
            build_model(ModelConfig(attention=mechanism, causal=True, **TINY))
    # and the map is not causal: the first query puts weight on later keys
    views, _, _ = _run(ModelConfig(attention="luna", causal=False, n_inducing=3, **TINY))
    assert (views.items["induced"].effective[:, :, 0, 1:] > 0).all()


# ---------------------------------------------------------------------------- lite
def _lite_reference(q, k, val, taps, causal):
    """Attention half by plain softmax, convolution half by an explicit tap loop with edge renormalisation."""
    h, Lq, dh = q.shape[1], q.shape[2], q.shape[3]
    a = h // 2
    s = q[:, :a] @ k[:, :a].transpose(-1, -2) / math.sqrt(dh)
    if causal:
        s = s.masked_fill(torch.ones(Lq, Lq, dtype=torch.bool).triu(1), float("-inf"))
    out_a = _softmax(s) @ val[:, :a]
    K = taps.shape[1]
    pad = K - 1 if causal else K // 2
    out_c = torch.zeros_like(val[:, a:])
    for c in range(h - a):
        for t in range(Lq):
            num, den = 0.0, 0.0
            for j in range(K):
                src = t - pad + j
                if 0 <= src < Lq:
                    num = num + taps[c, j] * val[0, a + c, src]
                    den += float(taps[c, j])
            out_c[0, c, t] = num / den
    ea, ec = out_a.pow(2).sum(dim=(1, 3)), out_c.pow(2).sum(dim=(1, 3))
    return (ec / (ea + ec))[0].numpy()


@pytest.mark.parametrize("causal", [True, False])
def test_lite_taps_are_the_kernel_softmax_and_the_share_is_recomputed(causal):
    cfg = ModelConfig(attention="lite", conv_kernel=4, causal=causal, **{**TINY, "n_heads": 4})
    views, out, model = _run(cfg)
    v = views.items["lite"]
    assert v.taps.shape == (2, 2, 4)
    assert v.offsets == ([-3, -2, -1, 0] if causal else [-2, -1, 0, 1])
    with torch.no_grad():
        for i, (block, info) in enumerate(zip(model.stack.blocks, out.layers)):
            w = block.attn.core.kernel.double()
            taps = torch.exp(w) / torch.exp(w).sum(-1, keepdim=True)
            assert np.allclose(v.taps[i], taps.numpy(), atol=1e-6)
            assert np.allclose(v.taps[i].sum(-1), 1)
            share = _lite_reference(info.q.double(), info.k.double(), _values(block, info, cfg).double(), taps, causal)
            assert np.allclose(v.conv_share[i], share, atol=1e-5), i
    assert ((v.conv_share >= 0) & (v.conv_share <= 1)).all()


# ---------------------------------------------------------------------------- knn_lm / spalm
STORE = dict(segment_len=16, knn_k=4, knn_size=64)


def test_knn_lm_mixture_is_lambda_knn_plus_rest_model():
    cfg = ModelConfig(memory="knn_lm", knn_lambda=0.3, **STORE, **TINY)
    views, out, model = _run(cfg)
    v = views.items["retrieval"]
    seg = cfg.segment_len
    assert v.next.shape == (L, cfg.knn_k)
    # independent p_LM: the same weights without a memory, run segment by segment
    plain = build_model(ModelConfig(**{**cfg.to_dict(), "memory": "none"})).eval()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        p_lm = torch.cat([torch.softmax(plain(torch.tensor([IDS[s:s + seg]])).logits.double(), -1)
                          for s in range(0, L, seg)], 1)[0].numpy()
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
    cfg = ModelConfig(memory="spalm", **STORE, **TINY)
    seg = cfg.segment_len

    def gate(b):
        def edit(model):
            model.memory.gate_w.zero_()
            model.memory.gate_b.fill_(b)
        return edit

    for b in (-1.5, 2.0):
        v = _run(cfg, gate(b))[0].items["retrieval"]
        assert np.allclose(v.mix[seg:], 1 - 1 / (1 + math.exp(-b)), atol=1e-6)  # 1 - g, g = sigmoid(b)
        assert np.allclose(v.mix[:seg], 0)
    views, out, _ = _run(cfg, lambda m: m.memory.gate_w.normal_(0, 2.0, generator=torch.Generator().manual_seed(0)))
    v = views.items["retrieval"]
    assert ((v.mix >= 0) & (v.mix <= 1)).all() and np.ptp(v.mix[seg:]) > 1e-3  # varies per position
    assert np.allclose(v.p_mixed, torch.softmax(out.logits[0].double(), -1).numpy(), atol=1e-5)
    assert np.allclose(v.p_mixed[:seg], v.p_model[:seg], atol=1e-6)


# ---------------------------------------------------------------------------- feedback
def test_feedback_weights_are_the_softmax_of_the_layer_parameters():
    cfg = ModelConfig(layer="feedback", max_len=64, **TINY)
    w = [0.5, -1.0, 2.0]  # embedding, layer 1, layer 2
    views, out, model = _run(cfg, lambda m: m.stack.mix.copy_(torch.tensor(w)), ids=IDS[:12])  # one step per token
    v = views.items["feedback"]
    ref = np.exp(w) / np.exp(w).sum()
    assert np.allclose(v.weights, ref, atol=1e-6) and math.isclose(v.weights.sum(), 1, abs_tol=1e-6)
    assert v.summary()["heaviest"] == 2


# ---------------------------------------------------------------------------- sandwich
def _paper_order(n: int, s: int) -> str:
    """Press et al. 2020: s attention sublayers, then n - s interleaved pairs, then s FFN sublayers."""
    return "".join("a" if p < s else "f" if p >= 2 * n - s else "af"[(p - s) % 2] for p in range(2 * n))


@pytest.mark.parametrize("n,s", [(1, 0), (2, 0), (2, 1), (3, 1), (4, 2), (3, 3), (5, 4)])
def test_sandwich_order_is_the_papers(n, s):
    cfg = ModelConfig(layer="sandwich", sandwich_coeff=s, **{**TINY, "n_layers": n})
    v = _run(cfg)[0].items["sandwich"]
    assert v.order == _paper_order(n, s)
    assert v.order.count("a") == n and v.order.count("f") == n
    for j in range(n):  # the j-th FFN runs after the j-th attention
        assert v.layer_of.index(j) < len(v.layer_of) - 1 - v.layer_of[::-1].index(j)
    literal = {(3, 1): "aafaff", (4, 2): "aaafafff", (2, 0): "afaf", (3, 3): "aaafff"}
    if (n, s) in literal:
        assert v.order == literal[(n, s)]


# ---------------------------------------------------------------------------- figures and reading
CONFIGS = {
    "induced": dict(attention="isab", causal=False, n_inducing=4),
    "lite": dict(attention="lite", conv_kernel=3),
    "retrieval": dict(memory="knn_lm", **STORE),
    "feedback": dict(layer="feedback", max_len=64),
    "sandwich": dict(layer="sandwich", sandwich_coeff=1),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_family_figures_carry_the_view(name):
    views = _run(ModelConfig(**{**TINY, **CONFIGS[name]}), ids=IDS[:16] if name == "feedback" else IDS)[0]
    fig = pv.view_figures(views)[name]
    v = views.items[name]
    assert fig.layout.title.text and name in pv.PLOT_NAMES and name in LABELS
    assert all(ax.title.text is not None for ax in (fig.layout.xaxis, fig.layout.yaxis))
    if name == "induced":
        assert np.allclose(np.asarray(fig.data[2].z), v.effective[0, 0], atol=1e-6)
        assert fig.layout.xaxis6.title.text == "key position"  # the bottom row (layer 1) carries the x titles
        assert fig.layout.yaxis.title.text == "layer 0<br>inducing point"
    elif name == "lite":
        assert np.allclose(np.asarray(fig.data[0].z), v.taps.reshape(-1, 3), atol=1e-6)
    elif name == "retrieval":
        assert np.allclose(np.asarray(fig.data[3].y, dtype=float), v.top_probs()["mixed"], atol=1e-6)
        assert "λ" in fig.data[4].name
    elif name == "feedback":
        assert np.allclose(np.asarray(fig.data[0].y), v.weights)
    else:
        assert "".join("af"[z] for z in fig.data[0].z[0]) == v.order
    assert f"**{'isab' if name == 'induced' else 'knn_lm' if name == 'retrieval' else name}**" in views_reading(views)


def test_retrieval_before_the_store_fills_says_why_there_are_no_neighbours():
    cfg = ModelConfig(memory="knn_lm", **{**STORE, "segment_len": 64}, **TINY)  # the whole text is one segment
    views = _run(cfg)[0]
    v = views.items["retrieval"]
    assert not v.retrieved.any() and np.allclose(v.p_mixed, v.p_model)
    assert "store is empty until the first segment (64 tokens)" in views_reading(views)
    assert np.isnan(np.asarray(pv.view_figures(views)["retrieval"].data[0].z, dtype=float)).all()
