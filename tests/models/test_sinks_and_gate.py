"""Learned attention sinks (``attn_sinks``, gpt-oss 2025) and gated attention output (``attn_gate``, Qiu et
al. 2025, G1) in built models, against float64 references written from the formulas.

The sink reference is tests/sink_formula.py; the gate reference below recomputes a whole attention
sublayer from its weights: ``out_proj(concat_n(SDPA_n * sigmoid(x W_g)_n))``, ``x`` the sublayer's
(normalised) input, plain softmax attention with an explicit max and sum.
"""

import math

import pytest
import torch
from sink_formula import sink_attention

from models import ConfigError, ModelConfig, build_model, choices
from models.attention import ATTENTION, PATTERNS, pattern_mask

BASE = dict(n_layers=2, d_model=32, n_heads=4, max_len=64, vocab_size=64)


def _model(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(**{**BASE, **kw}).validate()
    model = build_model(cfg).double()
    for name, p in model.named_parameters():  # sinks and gates away from their zero / neutral start
        if name.endswith("sinks"):
            torch.nn.init.normal_(p, 0.0, 1.5)
    return cfg, model


def _capture(model, layer=0):
    """The input and output of layer ``layer``'s attention sublayer on the next forward."""
    attn = [m for m in model.modules() if type(m).__name__ == "Attention"][layer]
    seen = {}
    handle = attn.register_forward_hook(lambda m, args, out: seen.update(x=args[0], y=out))
    return attn, seen, handle


# ---------------------------------------------------------------------------------------------- sinks
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("attention", ["full", "sliding_window", "bigbird"])
def test_sink_maps_sum_below_one_and_match_the_formula(attention, causal):
    cfg, model = _model(
        attn_sinks=True, attention=attention, causal=causal, window=6, block_size=8, n_global=1, position="sinusoidal"
    )
    attn, seen, handle = _capture(model)
    tokens = torch.randint(0, 64, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(tokens, return_attention=True)
        plain = model(tokens)  # no weights requested: the kernels' path (block-sparse on CPU)
    handle.remove()
    torch.testing.assert_close(out.logits, plain.logits)
    probs = out.attentions[0]  # (B, h, L, L)
    rows = probs.sum(-1)
    assert (rows < 1 - 1e-6).all() and (rows > 0).all()
    x = seen["x"]
    q, k, v = attn.project(x, x)
    allowed = torch.ones(30, 30, dtype=torch.bool) if attention == "full" else pattern_mask(cfg, 30)
    _, want = sink_attention(q, k, v, attn.sinks, allowed=allowed, causal=causal)
    torch.testing.assert_close(probs, want)


def test_sink_gradient_in_a_model_matches_autograd_on_the_formula():
    cfg, model = _model(attn_sinks=True, attention="sliding_window", window=5, position="sinusoidal", n_layers=1)
    attn, seen, handle = _capture(model)
    tokens = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(2))
    out = model(tokens)
    handle.remove()
    x = seen["x"].detach()
    y_grad = torch.randn_like(seen["y"])
    (got,) = torch.autograd.grad(seen["y"], attn.sinks, y_grad)
    q, k, v = (t.detach() for t in attn.project(x, x))
    s = attn.sinks.detach().clone().requires_grad_()
    o, _ = sink_attention(q, k, v, s, allowed=pattern_mask(cfg, 24), causal=True)
    y = attn.out_proj(o.transpose(1, 2).reshape(2, 24, -1))
    (want,) = torch.autograd.grad(y, s, y_grad)
    torch.testing.assert_close(got, want)
    assert out.logits.isfinite().all()


def test_sinks_refused_by_name_where_there_is_no_softmax_row_in_kernels():
    """Every attention that is valid without sinks: the section-1 patterns take them, every other
    mechanism refuses ``attn_sinks`` by name, with its reason and the keys that take them."""
    patterns = set(PATTERNS)  # the section-1 patterns (Llama 4's chunked among them)
    assert {"full", "sliding_window", "longformer", "bigbird", "chunked"} <= patterns
    refused = set()
    for key in choices()["attention"]:
        for causal in (True, False):
            try:
                ModelConfig(**BASE, attention=key, causal=causal).validate()
            except ConfigError:
                continue
            if key in patterns:
                ModelConfig(**BASE, attention=key, causal=causal, attn_sinks=True).validate()
                continue
            with pytest.raises(ConfigError) as e:
                ModelConfig(**BASE, attention=key, causal=causal, attn_sinks=True).validate()
            assert e.value.field == "attn_sinks" and "sliding_window" in str(e.value) and key in str(e.value)
            refused.add(key)
    assert {"linear", "performer", "lsh"} <= refused
    err = None
    try:
        ModelConfig(**BASE, attention="linear", attn_sinks=True).validate()
    except ConfigError as e:
        err = str(e)
    assert "no softmax row" in err


# ----------------------------------------------------------------------------------------------- gate
def _sublayer_ref(attn, x, gate, sinks=None, causal=True):
    """A whole attention sublayer from its weights, float64, position "sinusoidal" (no score modifier)."""
    B, L, _ = x.shape
    h, dh = attn.n_heads, attn.d_head

    def heads(w, b, n):
        y = x @ w.T + (0 if b is None else b)
        return y.view(B, L, n, dh).transpose(1, 2)

    q = heads(attn.q_proj.weight, attn.q_proj.bias, h)
    k = heads(attn.k_proj.weight, attn.k_proj.bias, attn.n_kv_heads).repeat_interleave(h // attn.n_kv_heads, 1)
    v = heads(attn.v_proj.weight, attn.v_proj.bias, attn.n_kv_heads).repeat_interleave(h // attn.n_kv_heads, 1)
    a = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if causal:
        a = a.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
    m = a.amax(-1, keepdim=True)
    if sinks is not None:
        m = torch.maximum(m, sinks.view(1, h, 1, 1))
    e = torch.exp(a - m)
    den = e.sum(-1, keepdim=True) + (0 if sinks is None else torch.exp(sinks.view(1, h, 1, 1) - m))
    o = (e / den) @ v  # (B, h, L, dh)
    g = x @ attn.gate_proj.weight.T + (0 if attn.gate_proj.bias is None else attn.gate_proj.bias)
    g = torch.sigmoid(g)  # (B, L, h) or (B, L, h * dh)
    if gate == "headwise":
        o = o * g.transpose(1, 2)[..., None]
    else:  # unit n * dh + e gates dimension e of head n
        o = o * g.view(B, L, h, dh).transpose(1, 2)
    return o.transpose(1, 2).reshape(B, L, h * dh) @ attn.out_proj.weight.T + (
        0 if attn.out_proj.bias is None else attn.out_proj.bias
    )


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_gated_sublayer_matches_the_formula(gate, sinks, causal):
    cfg, model = _model(
        attn_gate=gate, attn_sinks=sinks, causal=causal, position="sinusoidal", n_kv_heads=2, attn_bias="all"
    )
    attn, seen, handle = _capture(model, layer=1)
    tokens = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(3))
    out = model(tokens)
    handle.remove()
    x = seen["x"].detach()
    want = _sublayer_ref(attn, x, gate, attn.sinks if sinks else None, causal)
    torch.testing.assert_close(seen["y"], want)
    out.logits.square().mean().backward()
    for name, p in model.named_parameters():
        if "gate_proj" in name or name.endswith("sinks"):
            assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_headwise_gate_of_zero_weights_halves_the_heads():
    """sigmoid(0) = 1/2 on every head: the sublayer's output (without bias) is half the ungated one."""
    _, gated = _model(attn_gate="headwise", position="sinusoidal")
    _, plain = _model(position="sinusoidal")
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if "gate_proj" not in k})
    for m in gated.modules():
        if type(m).__name__ == "Attention":
            torch.nn.init.zeros_(m.gate_proj.weight)
    a, sa, ha = _capture(gated)
    b, sb, hb = _capture(plain)
    tokens = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(4))
    gated(tokens), plain(tokens)
    ha.remove(), hb.remove()
    torch.testing.assert_close(sa["y"], sb["y"] / 2)


def test_gate_works_with_every_attention():
    """The gate acts on the core's output, whatever the core: forward and gradient for every key."""
    ran = set()
    for key, causal in ((key, causal) for key in choices()["attention"] for causal in (True, False)):
        if key in ran:
            continue
        try:
            cfg = ModelConfig(**{**BASE, "n_layers": 1}, attention=key, causal=causal, attn_gate="elementwise")
            cfg.validate()
        except ConfigError:  # a mechanism that needs other sizes than BASE's: its own tests cover it
            continue
        ran.add(key)
        torch.manual_seed(0)
        model = build_model(cfg)
        out = model(torch.randint(0, 64, (1, 32)))
        out.logits.sum().backward()
        grad = next(p.grad for n, p in model.named_parameters() if "gate_proj" in n)
        assert grad is not None and grad.abs().sum() > 0, key
    # a mixer gating its own output (AttentionCaps.own_gate: Gated DeltaNet) refuses the gate by design
    own_gate = {k for k in choices()["attention"] if getattr(ATTENTION[k].caps, "own_gate", False)}
    assert not own_gate & ran
    assert len(ran) >= len(choices()["attention"]) - len(own_gate) - 3, set(choices()["attention"]) - ran


def test_gate_choices_are_checked():
    with pytest.raises(ConfigError) as e:
        ModelConfig(**BASE, attn_gate="channelwise").validate()
    assert e.value.field == "attn_gate"


# --------------------------------------------------------------------------------- parameter estimate
@pytest.mark.parametrize(
    "kw",
    [
        dict(attn_sinks=True),
        dict(attn_gate="headwise"),
        dict(attn_gate="elementwise", attn_bias="qkv", n_kv_heads=2),
        dict(attn_gate="elementwise", attn_sinks=True, attn_bias="all", attention="sliding_window"),
        dict(attn_gate="headwise", attn_sinks=True, layer="funnel", attention="full", position="rope"),
        dict(attn_gate="headwise", attn_sinks=True, layer="macaron"),
        dict(attn_gate="elementwise", architecture="encoder_decoder", position="t5"),
    ],
)
def test_parameter_estimate_is_exact(kw):
    cfg = ModelConfig(**{**BASE, **kw})
    if kw.get("layer") and kw["layer"] not in choices()["layer"]:
        pytest.skip(f"layer {kw['layer']} not registered")
    model = build_model(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())


def test_funnel_pool_query_layer_uses_sinks_and_gate():
    if "funnel" not in choices()["layer"]:
        pytest.skip("no funnel layer")
    cfg, model = _model(
        layer="funnel", attention="full", position="rope", attn_sinks=True, attn_gate="headwise", n_layers=4
    )
    tokens = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(5))
    out = model(tokens, return_attention=True)
    assert all((a.sum(-1) < 1).all() for a in out.attentions if a is not None)
    out.logits.sum().backward()
    for name, p in model.named_parameters():
        if "gate_proj" in name or name.endswith("sinks"):
            assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------------------ views of sink models
def test_long_context_sink_statistic_counts_the_learned_sink():
    """pooled_maps of a sink model: the dense effective map, its sink statistic = mass on the first
    sink_k keys + the learned sink's share, its entropy over keys and sink (formula: tests/sink_formula.py)."""
    from models.long_context import pooled_maps

    cfg, model = _model(attn_sinks=True, attention="sliding_window", window=7, n_layers=1, position="sinusoidal")
    attn, seen, handle = _capture(model)
    tokens = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(6))
    res = pooled_maps(model, tokens, sink_k=3, window=5)
    handle.remove()
    assert res.method == "dense effective map" and "learned attention sinks" in res.notes[0]
    x = seen["x"]
    q, k, v = attn.project(x, x)
    _, p = sink_attention(q, k, v, attn.sinks, allowed=pattern_mask(cfg, 40), causal=True)
    p_sink = 1 - p.sum(-1)
    ent = -(torch.where(p > 0, p * p.clamp_min(1e-300).log(), 0.0)).sum(-1) - p_sink * p_sink.log()
    (pm,) = res.maps
    torch.testing.assert_close(pm.sink.double(), (p[..., :3].sum(-1) + p_sink).detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pm.entropy.double(), ent.detach(), atol=1e-5, rtol=1e-5)
    assert (pm.sink > p[..., :3].sum(-1).detach().float() + 1e-3).all()  # the learned sink holds real mass


def test_map_summary_and_head_rows_accept_rows_below_one():
    import numpy as np

    from explorer.analysis.maps.attention import rows_ok
    from explorer.analysis.maps.heads import _rows

    att = np.full((1, 1, 4, 4), 0.2)  # rows summing to 0.8: the sink holds 0.2
    assert rows_ok(att, learned_sinks=True) and not rows_ok(att)
    assert not rows_ok(att * 6, learned_sinks=True)  # a row summing to 4.8 is wrong with or without sinks
    head = np.tril(np.full((4, 4), 0.1))  # a sink-dominated head: rows of 0.1 .. 0.4
    assert _rows(head).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kw",
    [
        dict(attention="full", attn_sinks=True, attn_gate="elementwise"),
        dict(attention="sliding_window", window=8, attn_sinks=True, attn_gate="headwise"),
    ],
)
def test_footprint_counts_the_new_weights_and_bounds_the_peak(kw):
    """The memory budget's prediction (models/footprint.py) with sinks and gates: exact weights, and a
    peak that bounds the measured one (a dense sink call runs the block-sparse path, not SDPA)."""
    from kernels.tools.measure import measure_peak
    from models.footprint import footprint, weights

    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, **kw).validate()
    assert weights(cfg)[0] == sum(p.numel() for p in build_model(cfg).parameters())
    tokens = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))

    def backward():
        model = build_model(cfg).train()
        out = model(tokens)
        out.logits.float().logsumexp(-1).mean().backward()
        return out.logits.shape

    _, bwd = measure_peak(backward)
    assert 0 < bwd <= footprint(cfg, "gradients", 48, 2).total
