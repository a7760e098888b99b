"""Llama 4's attention terms against float64 references written from the formulas: the weightless per-head
query/key RMS norm of the RoPE layers (``qk_norm="rms_rope"``, models/qkv.py) and the NoPE layers' query
temperature ``1 + s log1p(floor((p + 1) / floor))`` (``attn_temp_floor`` / ``attn_temp_scale``,
models/temperature.py), tested past the floor (causal: a layer without positions is causal-only); the
per-layer split of a schedule; refusals by name."""

import math

import pytest
import torch

from models import ModelConfig, build_model
from models.errors import ConfigError
from models.temperature import query_factors

V, D, HEADS = 30, 16, 2


def _model(**kw):
    cfg = ModelConfig(
        **{"vocab_size": V, "d_model": D, "n_heads": HEADS, "n_layers": 1, "ffn": "none", "norm": "rmsnorm", **kw}
    )
    torch.manual_seed(0)
    model = build_model(cfg.validate()).eval()
    with torch.no_grad():  # norms start at 1: move them so their gains matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return cfg, model


def _rms64(x, g=None, eps=1e-5):
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if g is None else y * g


def _rope64(x, base):
    """Rotate-half RoPE in float64: pair ``(k, k + d/2)`` turned by ``p * base^(-2k/d)``; ``x (h, L, d)``."""
    d, L = x.shape[-1], x.shape[-2]
    theta = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)  # (d/2,)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * theta  # (L, d/2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def _reference(cfg, model, tokens, temp=None, qk_rms=False, rope_base=None):
    """One pre-norm attention layer and the head, float64, for one row of ``tokens``."""
    W = {n: p.detach().double() for n, p in model.named_parameters()}
    a = "stack.blocks.0.attn."
    x = W["embed.weight"][tokens]  # (L, d)
    L, dh = x.shape[0], D // HEADS
    n = _rms64(x, W["stack.blocks.0.res_attn.norm.weight"])
    q, k, v = (
        (n @ W[a + f"{p}_proj.weight"].T).view(L, HEADS, dh).transpose(0, 1) for p in ("q", "k", "v")
    )  # (h, L, d_h)
    if qk_rms:
        q, k = _rms64(q), _rms64(k)
    if rope_base is not None:
        q, k = _rope64(q, rope_base), _rope64(k, rope_base)
    if temp is not None:
        floor, scale = temp
        f = torch.tensor([1 + scale * math.log1p(math.floor((p + 1) / floor)) for p in range(L)], dtype=torch.float64)
        q = q * f[:, None]
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if cfg.causal:
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(L, D) @ W[a + "out_proj.weight"].T
    h = x + o
    return _rms64(h, W["final_norm.weight"]) @ W["head.weight"].T


def test_query_factors_match_the_formula_past_the_floor():
    p = torch.arange(0, 60)
    got = query_factors(p, 7, 0.3)
    want = [1 + 0.3 * math.log1p(math.floor((i + 1) / 7)) for i in range(60)]
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)
    assert got[:6].eq(1).all() and got[6] > 1  # a no-op below the floor: position 6 is the 7th token


def test_nope_temperature_matches_the_float64_layer():
    """Causal only: a layer without positions is refused bidirectional (``position="none"``'s check)."""
    cfg, model = _model(position="none", attn_temp_floor=3, attn_temp_scale=0.8)
    tokens = torch.randint(0, V, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(tokens).logits.double()
    for row in range(2):
        want = _reference(cfg, model, tokens[row], temp=(3, 0.8))
        assert float((got[row] - want).abs().max()) < 1e-5
        untuned = _reference(cfg, model, tokens[row])
        assert float((got[row] - untuned).abs().max()) > 1e-3  # the reference without it differs


@pytest.mark.parametrize("causal", [True, False])
def test_rms_rope_qk_norm_matches_the_float64_layer(causal):
    cfg, model = _model(position="rope", rope_base=100.0, qk_norm="rms_rope", causal=causal)
    assert not any("q_norm" in n for n, _ in model.named_parameters())  # no gain: no parameter
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = model(tokens).logits.double()
    for row in range(2):
        want = _reference(cfg, model, tokens[row], qk_rms=True, rope_base=100.0)
        assert float((got[row] - want).abs().max()) < 1e-5
        plain = _reference(cfg, model, tokens[row], rope_base=100.0)
        assert float((got[row] - plain).abs().max()) > 1e-3


def test_a_schedule_puts_the_norm_on_rope_layers_and_the_temperature_on_nope_layers():
    cfg = ModelConfig(
        d_model=D,
        n_heads=HEADS,
        n_layers=4,
        attention="chunked",
        attention_chunk_size=3,
        layer_schedule="chunked*3,full:nope",
        qk_norm="rms_rope",
        attn_temp_floor=2,
    ).validate()
    kinds = [(c.position, c.qk_norm, c.attn_temp_floor) for c in (cfg.layer_config(i) for i in range(4))]
    assert kinds == [("rope", "rms_rope", None)] * 3 + [("none", "none", 2)]
    model = build_model(cfg)
    assert [hasattr(b.attn, "q_norm") for b in model.stack.blocks] == [True, True, True, False]
    out = model(torch.randint(0, 256, (2, 9)))
    out.logits.sum().backward()  # forward and backward through both kinds
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(qk_norm="rms_rope", position="alibi"), "qk_norm"),
        (dict(qk_norm="rms_rope", position="none"), "qk_norm"),
        (dict(attn_temp_floor=8), "attn_temp_floor"),  # rope in every layer: no NoPE layer to tune
        (dict(position="none", attn_temp_floor=8, attn_temp_scale=-1.0), "attn_temp_scale"),
        (dict(position="none", attn_temp_floor=0), "attn_temp_floor"),
        (dict(position="none", attn_temp_floor=8, layer="funnel"), "attn_temp_floor"),
    ],
)
def test_llama4_attention_refusals_name_the_field(fields, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(d_model=D, n_heads=HEADS, **fields).validate()
    assert e.value.field == field


@torch.no_grad()
def test_head_circuits_read_the_gainless_norm_in_rope_layers_only():
    """The explorer's token-level QK circuit normalises each head's query and key without a gain in the RoPE
    layer and not at all in the NoPE layer (formula written here); composition folds no gain."""
    from explorer.analysis.why.circuits import _ov_qk, head_circuits

    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        norm="rmsnorm",
        layer_schedule="full,full:nope",
        qk_norm="rms_rope",
    ).validate()
    model = build_model(cfg).eval()
    c = head_circuits(model, tokens=tuple(range(40)))
    dh, h = 8, 3  # query head 3 reads K/V head 1
    for layer, normed in ((0, True), (1, False)):
        blk = model.stack.blocks[layer]
        u = blk.res_attn.norm(model.embed.weight).double()
        q = (u @ blk.attn.q_proj.weight.double().T)[:, h * dh : (h + 1) * dh]
        k = (u @ blk.attn.k_proj.weight.double().T)[:, dh : 2 * dh]
        if normed:
            q, k = _rms64(q, eps=cfg.norm_eps), _rms64(k, eps=cfg.norm_eps)
        torch.testing.assert_close(c.qk[layer, h], q @ k.T / math.sqrt(dh))
        wq, wk = blk.attn.q_proj.weight.double()[h * dh : (h + 1) * dh], blk.attn.k_proj.weight.double()[dh : 2 * dh]
        fold = torch.diag(blk.res_attn.norm.weight.double())
        torch.testing.assert_close(_ov_qk(model, layer, h)[1], fold.T @ wq.T @ wk @ fold)
