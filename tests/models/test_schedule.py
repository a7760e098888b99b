"""Per-layer attention schedules (models/schedule.py): cycling, each layer against a uniform model of its
kind (same weights, float64), validation, round trip, parameter and KV-cache counts, surgery."""

import json

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext
from models.footprint import footprint
from models.schedule import SCHEDULES, from_layer_types, layer_kinds, preset, qwen2
from models.surgery import check as surgery_check
from models.surgery import transplant

SMALL = dict(n_layers=5, d_model=32, n_heads=4, max_len=64, vocab_size=64, seed=3)
L = 23


def _cfg(**kw):
    return ModelConfig(**{**SMALL, **kw})


def _block_outputs(model, tokens):
    """``(inputs, outputs)`` of every block of a standard stack, run one by one in float64."""
    ctx = ForwardContext(
        tokens=tokens,
        position=model.position,
        need_weights=False,
        k_start=0,
        memory=None,
        state=None,
        positions=torch.arange(tokens.shape[1]),
        classifier=model.classify,
    )
    x = model.embed_norm(model.position.embed(model.embed(tokens), torch.arange(tokens.shape[1])))
    ins, outs = [], []
    for block in model.stack.blocks:
        ins.append(x)
        x = block(x, ctx, ctx.begin_layer(x))
        outs.append(x)
    return ins, outs


def _run_block(model, l, x, tokens):
    ctx = ForwardContext(
        tokens=tokens,
        position=model.position,
        need_weights=False,
        k_start=0,
        memory=None,
        state=None,
        positions=torch.arange(tokens.shape[1]),
        classifier=model.classify,
    )
    for _ in range(l):  # layer numbers: open the earlier layers' records
        ctx.begin_layer(x)
    return model.stack.blocks[l](x, ctx, ctx.begin_layer(x))


# the uniform model each layer kind must equal: its attention, and the fields that layer changes
CASES = [
    ("sliding_window*3,full", dict(window=4), {"sliding_window": {}, "full": {}}),
    (
        "chunked*3,full:nope",
        dict(attention_chunk_size=5),
        {"chunked": {}, "full:nope": dict(position="none")},
    ),
    (
        "sliding_window*2,full",
        dict(window=3, rope_base=1e6, rope_local_base=1e4),
        {"sliding_window": dict(rope_base=1e4), "full": {}},
    ),
    (
        "block_local,strided:nope,full",
        dict(block_size=4, stride=3),
        {"block_local": {}, "strided:nope": {}, "full": {}},
    ),
]


@pytest.mark.parametrize("schedule,fields,uniform", CASES)
def test_each_layer_equals_the_uniform_model_of_its_kind(schedule, fields, uniform):
    torch.manual_seed(0)
    cfg = _cfg(layer_schedule=schedule, attention="full", **fields).validate()
    model = build_model(cfg).double().eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, L))
    with torch.no_grad():
        ins, outs = _block_outputs(model, tokens)
        assert torch.allclose(model(tokens).logits, model.classify(outs[-1]))
        kinds = layer_kinds(cfg)
        for layer in range(cfg.n_layers):
            kind = kinds[layer]
            extra = dict(uniform[kind.token])
            if kind.nope:
                extra["position"] = "none"
            other = {k: v for k, v in fields.items() if k != "rope_local_base"}
            ucfg = _cfg(attention=kind.attention, **{**other, **extra}).validate()
            ref = build_model(ucfg).double().eval()
            ref.load_state_dict(model.state_dict())  # the same weights: a schedule adds none here
            got = _run_block(ref, layer, ins[layer], tokens)
            torch.testing.assert_close(got, outs[layer], rtol=0, atol=1e-12)


def test_a_layer_differs_from_the_other_kind():
    """The comparison above can fail: a sliding layer is not a full one on a sequence longer than the window."""
    cfg = _cfg(layer_schedule="sliding_window,full", window=3).validate()
    model = build_model(cfg).double().eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, L))
    with torch.no_grad():
        ins, outs = _block_outputs(model, tokens)
        full = build_model(_cfg(window=3)).double().eval()
        full.load_state_dict(model.state_dict())
        assert not torch.allclose(_run_block(full, 0, ins[0], tokens), outs[0], atol=1e-6)


def _rope(t, base):
    """Rotate-half RoPE written out: dim k pairs with k + d/2 and turns by pos * base^(-2k/d)."""
    n, d = t.shape[-2], t.shape[-1]
    inv = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    a, b = t[..., : d // 2], t[..., d // 2 :]
    return t * cos + torch.cat([-b, a], -1) * sin


@pytest.mark.parametrize("local", [1e4, None])
def test_local_layers_rotate_with_rope_local_base_and_nope_layers_not_at_all(local):
    """Gemma 3: local layers RoPE base 10k, global 1M; Llama 4's full layers none (an independent RoPE)."""
    from models.interventions import Interventions

    cfg = _cfg(layer_schedule="sliding_window,full,full:nope", window=4, rope_base=1e6, rope_local_base=local)
    model = build_model(cfg.validate()).double().eval()
    seen = []
    tokens = torch.randint(0, cfg.vocab_size, (1, L))
    with torch.no_grad():
        out = model(tokens, interventions=Interventions(observe_cores=seen.append))
    bases = [local or 1e6, 1e6, None, local or 1e6, 1e6]
    for layer, base in enumerate(bases):
        block = model.stack.blocks[layer]
        h = block.res_attn.norm(out.hidden_states[layer])
        q, k, _ = block.attn.project(h, h)
        want_q, want_k = (q, k) if base is None else (_rope(q, base), _rope(k, base))
        torch.testing.assert_close(seen[layer].q, want_q, rtol=0, atol=1e-12)
        torch.testing.assert_close(seen[layer].k, want_k, rtol=0, atol=1e-12)
    if local is not None:  # the check can fail: the global base rotates otherwise
        assert not torch.allclose(seen[0].q, _rope(model.stack.blocks[0].attn.project(h, h)[0], 1e6))


def test_schedule_cycles_over_the_layers():
    cfg = _cfg(layer_schedule="sliding_window*5,full", n_layers=14)
    expected = (["sliding_window"] * 5 + ["full"]) * 2 + ["sliding_window"] * 2
    assert [k.attention for k in layer_kinds(cfg)] == expected
    model = build_model(cfg)
    assert [b.attn.core.cfg.attention for b in model.stack.blocks] == expected
    assert [cfg.layer_config(i).attention for i in range(14)] == expected
    longer = _cfg(layer_schedule="full*3,sliding_window*9", n_layers=4)  # a period longer than the stack: cut
    assert [k.attention for k in layer_kinds(longer)] == ["full"] * 3 + ["sliding_window"]
    assert _cfg().layer_config(2) is _cfg().layer_config(2) or _cfg().layer_config(2) == _cfg()
    nope = _cfg(layer_schedule="chunked*3,full:nope", n_layers=8)
    assert [k.nope for k in layer_kinds(nope)] == [False, False, False, True] * 2
    assert nope.layer_config(3).position == "none" and nope.layer_config(2).position == "rope"


BAD = [
    ("foo", "foo"),
    ("Full", "Full"),
    ("full*0", "full*0"),
    ("full*", "full*"),
    ("full*01", "full*01"),
    ("full**2", "full**2"),
    ("full*513", "full*513"),
    ("full:rope", "full:rope"),
    ("full:nope:nope", "full:nope:nope"),
    ("full*2:nope", "full*2:nope"),
    ("full, ,sliding_window", ""),
    (",full", ""),
    ("full sliding_window", "full sliding_window"),
    (" ", ""),
    ("full*300,sliding_window*300", "600+ layers in one period"),
    (",".join(["full"] * 65), "65 entries"),
]


@pytest.mark.parametrize("text,token", BAD)
def test_bad_schedules_are_refused_naming_the_field_the_token_and_the_valid_values(text, token):
    with pytest.raises(ConfigError) as e:
        _cfg(layer_schedule=text).validate()
    assert e.value.field == "layer_schedule"
    assert e.value.value == token
    for part in ("sliding_window", "chunked", "nope", "count 1..512", "64 entries", "1024 characters"):
        assert part in e.value.allowed


def test_too_long_text_is_refused():
    with pytest.raises(ConfigError) as e:
        _cfg(layer_schedule="full," * 300 + "full").validate()
    assert e.value.field == "layer_schedule" and "1024 characters" in e.value.allowed


@pytest.mark.parametrize(
    "fields,field,token,words",
    [
        # the model's attention names one of the layers
        (dict(layer_schedule="sliding_window,full", attention="strided"), "attention", "strided", "schedule's keys"),
        # a layer kind fails the checks a whole-model choice meets: chunked is causal only, so it cannot mix
        # with a bidirectional-only key, and not run in a bidirectional model
        (
            dict(layer_schedule="chunked,full", causal=False, position="sinusoidal"),
            "layer_schedule",
            "chunked",
            "causal",
        ),
        (
            dict(layer_schedule="chunked,linformer", attention="linformer", causal=False, position="sinusoidal"),
            "layer_schedule",
            "chunked",
            "causal",
        ),
        (dict(layer_schedule="linformer,chunked", attention="chunked"), "layer_schedule", "linformer", "causal"),
        # a pattern's own check, per layer
        (dict(layer_schedule="fixed,full", stride=4, n_summary=5), "layer_schedule", "fixed", "n_summary"),
        (dict(layer_schedule="sliding_window,full", layer="universal"), "layer_schedule", None, "shared block"),
        (dict(layer_schedule="sliding_window,full", memory="xl"), "layer_schedule", None, "memory"),
        (dict(layer_schedule="full:nope,full", position="sinusoidal"), "layer_schedule", "full:nope", "embeddings"),
        (dict(layer_schedule="full:nope,full", position="t5"), "layer_schedule", "full:nope", "learned tables"),
        (dict(layer_schedule="full:nope,full", causal=False), "layer_schedule", "full:nope", "causal=True"),
        (dict(rope_local_base=1e4), "rope_local_base", 1e4, "without a layer_schedule"),
        (dict(layer_schedule="sliding_window,full", rope_local_base=-1.0), "rope_local_base", -1.0, "positive"),
        (
            dict(layer_schedule="sliding_window,full", rope_local_base=1e4, position="alibi"),
            "rope_local_base",
            1e4,
            "RoPE",
        ),
        (dict(layer_schedule="strided,full", rope_local_base=1e4), "rope_local_base", 1e4, "local pattern"),
        (dict(layer_schedule="sliding_window:nope,full", rope_local_base=1e4), "rope_local_base", 1e4, "local"),
        # a funnel's layers must all be full (its own check, per layer kind)
        (
            dict(layer_schedule="full,sliding_window", layer="funnel", n_layers=4),
            "layer_schedule",
            "sliding_window",
            "funnel",
        ),
    ],
)
def test_combinations_are_refused_with_the_reason(fields, field, token, words):
    with pytest.raises(ConfigError) as e:
        _cfg(**fields).validate()
    assert e.value.field == field
    if token is not None:
        assert e.value.value == token
    assert words in str(e.value)


def test_working_combinations_validate_and_run_backward():
    for fields in [
        dict(layer_schedule="sliding_window,full", window=4),
        dict(layer_schedule="chunked*3,full:nope", attention_chunk_size=4),
        dict(layer_schedule="chunked,full:nope", position="alibi", attention="chunked"),
        dict(layer_schedule="linformer,full", causal=False, position="sinusoidal", attention="full"),
        dict(layer_schedule="linear,sliding_window", attention="linear", window=3, layer="reversible"),
        dict(layer_schedule="full,sliding_window", window=3, architecture="encoder_decoder", n_encoder_layers=3),
    ]:
        cfg = _cfg(**fields).validate()
        model = build_model(cfg)
        tokens = torch.randint(0, cfg.vocab_size, (2, L))
        args = (tokens, tokens.flip(-1)) if cfg.architecture == "encoder_decoder" else (tokens,)
        out = model(*args)
        out.logits.sum().backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad), fields
        assert torch.isfinite(out.logits).all()


def test_round_trip_json_and_hash():
    cfg = _cfg(layer_schedule="sliding_window*5,full", window=8, rope_base=1e6, rope_local_base=1e4).validate()
    d = json.loads(cfg.to_json())
    assert d["layer_schedule"] == "sliding_window*5,full" and d["rope_local_base"] == 1e4
    back = ModelConfig.from_dict(d)
    assert back == cfg and hash(back) == hash(cfg)
    assert ModelConfig.from_dict({**d, "rope_local_base": "none"}).rope_local_base is None  # text of a URL
    assert {cfg: 1}[back] == 1
    assert _cfg().layer_schedule == "" and _cfg().rope_local_base is None  # every config before keeps its meaning


def test_presets_are_valid_named_schedules():
    for name in SCHEDULES:
        fields = preset(name)
        small = {k: min(v, 16) if k in ("window", "attention_chunk_size") else v for k, v in fields.items()}
        cfg = _cfg(**small, n_layers=8).validate()
        assert cfg.layer_schedule == SCHEDULES[name].text
        build_model(cfg)(torch.randint(0, 64, (1, 20)))
    assert preset("gemma3")["rope_local_base"] == 1e4
    assert [k.token for k in layer_kinds(_cfg(**preset("llama4")))][:4] == ["chunked"] * 3 + ["full:nope"]
    assert qwen2(6, 2) == "full*2,sliding_window*4" and qwen2(6, 6) == "" and qwen2(6, 0) == ""
    names = {"a": "full", "b": "chunked"}
    assert from_layer_types(["a", "a", "b", "a"], names) == "full*2,chunked"  # cycled over 4: a a b a
    assert from_layer_types(["b", "a"] * 24, names) == "chunked,full"
    assert from_layer_types(["a"] * 3 + ["b"] * 5, names) == "full*3,chunked*5"
    for types in (["a", "b", "b", "a", "b"], ["b"] * 7, ["a", "b", "a", "a"]):
        text = from_layer_types(types, names)
        kinds = layer_kinds(_cfg(layer_schedule=text, n_layers=len(types), attention=names[types[0]]))
        assert [k.attention for k in kinds] == [names[t] for t in types]
    with pytest.raises(ConfigError):
        preset("gemma9")


def test_parameter_estimate_sums_the_layer_kinds():
    for fields in [
        dict(layer_schedule="linformer,full,full", causal=False, position="sinusoidal", proj_len=8),
        dict(layer_schedule="full,talking_heads", attention="full"),
        dict(layer_schedule="sliding_window*5,full", window=4),
    ]:
        cfg = _cfg(**fields).validate()
        model = build_model(cfg)
        assert cfg.approx_params() == sum(p.numel() for p in model.parameters()), fields
    plain = _cfg(causal=False, position="sinusoidal", proj_len=8)
    mixed = _cfg(layer_schedule="linformer,full,full", causal=False, position="sinusoidal", proj_len=8)
    lin = _cfg(attention="linformer", causal=False, position="sinusoidal", proj_len=8)
    per_layer = (lin.approx_params() - plain.approx_params()) // plain.n_layers
    assert mixed.approx_params() == plain.approx_params() + 2 * per_layer  # layers 0 and 3 of 5 are linformer


def test_footprint_counts_the_widest_layer_kind():
    window = _cfg(attention="sliding_window", window=4)
    mixed = _cfg(layer_schedule="sliding_window,full", window=4)
    full = _cfg()
    L = 512
    fw = [footprint(c, "forward", L).activation_bytes for c in (window, mixed, full)]
    assert fw[0] < fw[1] == fw[2]


def test_surgery_moves_weights_between_schedules_of_weightless_layers():
    a = _cfg().validate()
    b = _cfg(**{**preset("gemma3"), "window": 4}).validate()
    surgery_check(a, b)
    state = build_model(a).state_dict()
    model = transplant(state, a, b)
    assert all(torch.equal(p, state[n]) for n, p in model.named_parameters())
    with pytest.raises(ConfigError) as e:
        surgery_check(a, _cfg(layer_schedule="full,talking_heads").validate())
    assert e.value.field == "layer_schedule"
    c = _cfg(layer_schedule="full,talking_heads").validate()
    surgery_check(c, _cfg(layer_schedule="sliding_window,talking_heads", attention="sliding_window").validate())
