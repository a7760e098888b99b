"""The architecture choice: encoder-decoder against torch.nn.Transformer, cross-attention and padding
properties, decoder causality, the encoder-only head, the refusals and their reasons."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from models import ConfigError, ModelConfig, build_model, choices
from models.architectures import ARCHITECTURE
from models.attention import PATTERNS

SMALL = dict(
    n_layers=2,
    d_model=32,
    n_heads=4,
    d_ff=64,
    max_len=64,
    window=4,
    stride=4,
    block_size=4,
    n_global=1,
    n_random=1,
    chunk_size=4,
    n_features=16,
    proj_len=16,
    n_landmarks=4,
    max_span=8,
    span_ramp=2,
)
ENCDEC = dict(SMALL, architecture="encoder_decoder", causal=True)


def _tokens(B, n, seed):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _build(**kw):
    cfg = ModelConfig(**kw)
    try:
        cfg.validate()
    except ConfigError as e:
        pytest.skip(f"invalid combination (rejected with a reason): {e}")
    return cfg, build_model(cfg)


# ---------------------------------------------------------------------------- against torch.nn.Transformer
def _transplant(model, ref, pre: bool):
    """Copy ``ref``'s weights into ``model`` (their attention biases zeroed: our projections have none)."""

    def attn(ours, theirs):
        q, k, v = theirs.in_proj_weight.detach().chunk(3, dim=0)  # (d, d) each
        ours.q_proj.weight.copy_(q), ours.k_proj.weight.copy_(k), ours.v_proj.weight.copy_(v)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        theirs.in_proj_bias.zero_(), theirs.out_proj.bias.zero_()

    def norm(ours, theirs):
        ours.weight.copy_(theirs.weight), ours.bias.copy_(theirs.bias)

    def ffn(ours, layer):
        ours.w1.weight.copy_(layer.linear1.weight), ours.w1.bias.copy_(layer.linear1.bias)
        ours.w2.weight.copy_(layer.linear2.weight), ours.w2.bias.copy_(layer.linear2.bias)

    with torch.no_grad():
        for ours, theirs in zip(model.encoder.blocks, ref.encoder.layers):
            attn(ours.attn, theirs.self_attn)
            ffn(ours.ffn, theirs)
            norm(ours.res_attn.norm, theirs.norm1), norm(ours.res_ffn.norm, theirs.norm2)
        for ours, theirs in zip(model.decoder.blocks, ref.decoder.layers):
            attn(ours.attn, theirs.self_attn), attn(ours.cross, theirs.multihead_attn)
            ffn(ours.ffn, theirs)
            norm(ours.res_attn.norm, theirs.norm1), norm(ours.res_cross.norm, theirs.norm2)
            norm(ours.res_ffn.norm, theirs.norm3)
        if pre:  # a pre-LN stack ends with a norm: ours takes the reference's final norms
            norm(model.enc_norm, ref.encoder.norm), norm(model.dec_norm, ref.decoder.norm)
        else:  # post-LN has none: the reference's are removed
            ref.encoder.norm, ref.decoder.norm = nn.Identity(), nn.Identity()


# torch's reference warns that norm_first turns its nested-tensor path off: the test turns it off anyway
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")
@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_decoder_equals_torch_transformer_in_float64(placement, padded):
    cfg = ModelConfig(
        **{
            **ENCDEC,
            "position": "sinusoidal",
            "norm_placement": placement,
            "norm": "layernorm",
            "ffn": "relu",
            "n_encoder_layers": 2,
            "n_decoder_layers": 3,
        }
    ).validate()
    model = build_model(cfg).double().eval()
    torch.manual_seed(0)
    ref = (
        nn.Transformer(
            d_model=32,
            nhead=4,
            num_encoder_layers=2,
            num_decoder_layers=3,
            dim_feedforward=64,
            dropout=0.0,
            batch_first=True,
            norm_first=placement == "pre",
        )
        .double()
        .eval()
    )
    ref.encoder.use_nested_tensor = False  # the plain path: padded rows stay in the batch
    _transplant(model, ref, pre=placement == "pre")
    src, tgt = _tokens(3, 11, 1), _tokens(3, 14, 2)
    mask = torch.ones(3, 11, dtype=torch.bool)
    if padded:
        mask[0, 7:] = False
        mask[2, 4:] = False
    pos, two_k = torch.arange(20, dtype=torch.float64)[:, None], torch.arange(0, 32, 2, dtype=torch.float64)
    pe = torch.stack([torch.sin(pos / 10000 ** (two_k / 32)), torch.cos(pos / 10000 ** (two_k / 32))], -1)
    pe = pe.flatten(1)  # (20, 32): PE[p, 2k] = sin, PE[p, 2k + 1] = cos (Vaswani 2017, float64)
    emb = model.embed.weight.detach()
    src_x, tgt_x = emb[src] + pe[:11], emb[tgt] + pe[:14]  # positions added outside the reference
    with torch.no_grad():
        want = ref(
            src_x,
            tgt_x,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(14, dtype=torch.float64),
            src_key_padding_mask=~mask if padded else None,
            memory_key_padding_mask=~mask if padded else None,
            tgt_is_causal=True,
        )  # (B, Lt, d)
        got = model(src, tgt, src_mask=mask if padded else None).logits
    torch.testing.assert_close(got, want @ model.head.weight.detach().T, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- properties
def test_cross_attention_rows_sum_to_one_over_the_source_and_never_see_padding():
    cfg, model = _build(**ENCDEC, position="rope")
    src, tgt = _tokens(2, 9, 3), _tokens(2, 12, 4)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 5:] = False
    out = model(src, tgt, src_mask=mask, return_attention=True)
    assert len(out.cross_attentions) == cfg.n_layers and len(out.encoder_attentions) == cfg.n_layers
    for a in out.cross_attentions:
        assert a.shape == (2, cfg.n_heads, 12, 9)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, cfg.n_heads, 12))
        assert (a[1, :, :, 5:] == 0).all() and (a[0] > 0).all()
    for a in out.encoder_attentions:  # padding receives no attention in the encoder either
        assert a.shape == (2, cfg.n_heads, 9, 9)
        assert (a[1, :, :, 5:] == 0).all()
    # what sits in the padding cannot change the output
    src2 = src.clone()
    src2[1, 5:] = (src2[1, 5:] + 7) % 256
    torch.testing.assert_close(model(src2, tgt, src_mask=mask).logits, out.logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attention", ["full", "sliding_window", "longformer"])
def test_a_padded_source_gives_what_the_unpadded_source_gives(attention):
    """Padding at the end of a sequence == running that sequence alone (patterns whose rule does not
    depend on the length; BigBird's random blocks do), the pattern's own mask applied too."""
    cfg, model = _build(**ENCDEC, attention=attention, position="t5")
    model.eval()
    src, tgt = _tokens(2, 13, 5), _tokens(2, 6, 6)
    mask = torch.ones(2, 13, dtype=torch.bool)
    mask[0, 8:] = False
    padded = model(src, tgt, src_mask=mask).logits
    alone = model(src[:1, :8], tgt[:1]).logits
    torch.testing.assert_close(padded[:1], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(padded[1:], model(src[1:], tgt[1:]).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "alibi", "t5", "shaw"])
def test_decoder_never_sees_future_targets_and_encoder_sees_the_whole_source(position):
    cfg, model = _build(**ENCDEC, position=position)
    model.eval()
    src, tgt = _tokens(1, 10, 7), _tokens(1, 15, 8)
    base = model(src, tgt).logits
    for pos in (0, 6, 14):
        t2 = tgt.clone()
        t2[0, pos] = (t2[0, pos] + 1) % 256
        out = model(src, t2).logits
        torch.testing.assert_close(out[:, :pos], base[:, :pos], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, pos:], base[:, pos:])
    s2 = src.clone()
    s2[0, -1] = (s2[0, -1] + 1) % 256  # the last source token reaches every target position
    assert not torch.isclose(model(s2, tgt).logits[0, 0], base[0, 0]).all()


def test_long_targets_in_query_chunks_equal_the_dense_reference():
    """Lt > Ls: the kernel path (chunks of Ls queries) == the weights path (dense reference)."""
    cfg, model = _build(**ENCDEC, position="alibi", n_kv_heads=2)
    src, tgt = _tokens(2, 5, 9), _tokens(2, 17, 10)
    torch.testing.assert_close(
        model(src, tgt).logits, model(src, tgt, return_attention=True).logits, rtol=1e-5, atol=1e-5
    )


def test_layers_are_tagged_by_stack_and_aux_loss_sums_both():
    cfg, model = _build(**ENCDEC, ffn="moe", n_experts=3, n_encoder_layers=3, n_decoder_layers=1)
    out = model(_tokens(2, 8, 1), _tokens(2, 5, 2))
    assert [i.stack for i in out.layers] == ["encoder"] * 3 + ["decoder"]
    assert [i.index for i in out.layers] == [0, 1, 2, 0]
    losses = [i.ffn_loss for i in out.layers]
    assert all(isinstance(x, torch.Tensor) for x in losses)
    torch.testing.assert_close(out.aux_loss, sum(losses))


def test_t5_biases_are_one_table_per_stack_bidirectional_in_the_encoder():
    cfg, model = _build(**ENCDEC, position="t5")
    assert model.enc_position.bidirectional and not model.dec_position.bidirectional
    n_tables = sum(1 for n, _ in model.named_parameters() if n.endswith("position.bias.weight"))
    assert n_tables == 2


# ---------------------------------------------------------------------------- every key and combination
@pytest.mark.parametrize("key", choices()["architecture"])
def test_every_architecture_runs_forward_and_backward(key):
    cfg, model = _build(**SMALL, architecture=key, causal=key != "encoder_only")
    src = _tokens(2, 9, 1)
    out = model(src, _tokens(2, 7, 2)) if ARCHITECTURE[key].caps.cross_attention else model(src)
    (out.logits.pow(2).mean() + out.aux_loss).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads), "every parameter gets a gradient"
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())


ENC_DEC_KEYS = [
    pytest.param(cat, key, id=f"{cat}-{key}")
    for cat in ("attention", "position", "norm_placement", "norm", "ffn")
    for key in choices()[cat]
]


@pytest.mark.parametrize("cat,key", ENC_DEC_KEYS)
def test_encoder_decoder_with_every_choice_runs_or_is_refused_with_a_reason(cat, key):
    kw = {**ENCDEC, cat: key, "n_encoder_layers": 1, "n_decoder_layers": 2}
    if cat == "attention" and key not in ("full",):
        kw["position"] = "rope"  # the encoding every mechanism honours
    cfg, model = _build(**kw)
    out = model(_tokens(2, 10, 1), _tokens(2, 8, 2), return_attention=True)
    assert out.logits.shape == (2, 8, 256) and torch.isfinite(out.logits).all()
    (out.logits.pow(2).mean() + out.aux_loss).backward()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(cfg.approx_params(), rel=0.1)


def test_decoder_only_default_keeps_its_meaning():
    cfg = ModelConfig(**SMALL)
    assert cfg.architecture == "decoder_only" and cfg.approx_params() == ModelConfig(**SMALL).approx_params()
    model = build_model(cfg)
    assert isinstance(model.head, nn.Linear) and model.head.bias is None
    assert model(_tokens(1, 5, 0)).encoder_attentions is None


def test_encoder_only_head_is_the_masked_lm_formula():
    cfg, model = _build(**SMALL, architecture="encoder_only", causal=False, position="learned")
    h = model.head
    x = torch.randn(2, 5, 32)
    y = F.gelu(x @ h.dense.weight.T + h.dense.bias)
    mu, var = y.mean(-1, keepdim=True), y.var(-1, unbiased=False, keepdim=True)
    y = (y - mu) / torch.sqrt(var + 1e-5) * h.norm.weight + h.norm.bias
    torch.testing.assert_close(h(x), y @ h.decoder.weight.T + h.decoder.bias, rtol=1e-5, atol=1e-5)
    t = _tokens(1, 12, 3)
    t2 = t.clone()
    t2[0, -1] = (t2[0, -1] + 1) % 256  # bidirectional: the last token changes the first prediction
    assert not torch.allclose(model(t).logits[0, 0], model(t2).logits[0, 0])


# ---------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "kw,field,words",
    [
        (dict(architecture="encoder_only", causal=True), "causal", "both directions"),
        (dict(architecture="encoder_only", causal=False, memory="tokens"), "memory", "encoder"),
        (dict(architecture="encoder_decoder", causal=False), "causal", "decoder"),
        (dict(architecture="encoder_decoder", memory="xl", position="rope"), "memory", "encoder"),
        (dict(architecture="encoder_decoder", layer="reversible"), "layer", "three"),
        (dict(architecture="encoder_decoder", layer="universal"), "layer", "one stack"),
        (dict(architecture="encoder_decoder", layer="gated", norm_placement="pre"), "layer", "cross-attention"),
        (dict(architecture="encoder_decoder", layer="early_exit"), "layer", "cross-attention"),
        (dict(architecture="encoder_decoder", position="none"), "position", "encoder"),
        (dict(architecture="encoder_decoder", attention="adaptive_span", position="rope"), "causal", "encoder"),
        (dict(architecture="encoder_decoder", n_encoder_layers=0), "n_encoder_layers", "512"),
        (dict(architecture="encoder_decoder", n_decoder_layers=513), "n_decoder_layers", "512"),
        (dict(architecture="transformer"), "architecture", "encoder_decoder"),
    ],
)
def test_combinations_that_make_no_sense_are_refused_naming_the_reason(kw, field, words):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**SMALL, **kw}).validate()
    assert e.value.field == field and words in str(e.value)


def test_calls_with_the_wrong_inputs_are_clear_errors():
    cfg, model = _build(**ENCDEC)
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 4, 0))
    assert e.value.field == "tgt" and "model(src, tgt" in str(e.value)
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 4, 0), _tokens(2, 4, 0))
    assert e.value.field == "tgt"
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 4, 0), _tokens(1, 4, 0), src_mask=torch.ones(1, 5, dtype=torch.bool))
    assert e.value.field == "src_mask"
    with pytest.raises(ConfigError) as e:
        model(torch.tensor([[0, 300]]), _tokens(1, 4, 0))
    assert e.value.field == "src"


def test_padding_with_a_mechanism_that_takes_no_key_mask_is_refused():
    cfg, model = _build(**ENCDEC, attention="lsh", position="rope")
    mask = torch.ones(1, 8, dtype=torch.bool)
    model(_tokens(1, 8, 0), _tokens(1, 4, 0), src_mask=mask)  # no padding: fine
    mask[0, 6:] = False
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 8, 0), _tokens(1, 4, 0), src_mask=mask)
    assert e.value.field == "src_mask" and "lsh" in str(e.value)


@st.composite
def _encdec_cases(draw):
    c = choices()
    kw = dict(
        SMALL,
        architecture="encoder_decoder",
        causal=True,
        n_layers=1,
        attention=draw(st.sampled_from(c["attention"])),
        position=draw(st.sampled_from(c["position"])),
        norm_placement=draw(st.sampled_from(c["norm_placement"])),
        norm=draw(st.sampled_from(c["norm"])),
        ffn=draw(st.sampled_from(c["ffn"])),
        n_kv_heads=draw(st.sampled_from([None, 1, 2])),
        n_encoder_layers=draw(st.integers(1, 2)),
        n_decoder_layers=draw(st.integers(1, 2)),
        seed=draw(st.integers(0, 99)),
    )
    ls, lt = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    real = draw(st.integers(1, ls))  # real source tokens of the first sequence; the rest is padding
    return kw, ls, lt, real


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_encdec_cases())
def test_random_encoder_decoders_are_refused_or_run_with_exact_cross_attention(case):
    kw, ls, lt, real = case
    cfg = ModelConfig(**kw)
    try:
        cfg.validate()
    except ConfigError as e:
        assert e.field in ModelConfig().to_dict() and "is not valid" in str(e)
        return
    model = build_model(cfg)
    src, tgt = _tokens(2, ls, kw["seed"]), _tokens(2, lt, kw["seed"] + 1)
    mask = None
    if cfg.attention in PATTERNS:
        mask = torch.ones(2, ls, dtype=torch.bool)
        mask[0, real:] = False
    out = model(src, tgt, src_mask=mask, return_attention=True)
    assert out.logits.shape == (2, lt, 256) and torch.isfinite(out.logits).all()
    assert len(out.layers) == model.enc_cfg.n_layers + model.dec_cfg.n_layers
    for a in out.cross_attentions:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, cfg.n_heads, lt))
        if mask is not None:
            assert (a[0, :, :, real:] == 0).all()
    (out.logits.pow(2).mean() + out.aux_loss).backward()
