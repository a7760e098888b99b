"""Every registry key has its complete record; capabilities refuse what does not fit; the size
estimate matches the built model.

Parametrized over the registries, so a new entry is checked the day it is registered.
"""

import dataclasses

import pytest
import torch

from models import ConfigError, ModelConfig, build_model, registries
from models.attention import ATTENTION, PATTERNS
from models.capabilities import (
    KINDS,
    LEARNED_SINK,
    SCORE_BIAS,
    AttentionCaps,
    MemoryCaps,
    PositionCaps,
    check_combination,
    refused_modifiers,
)
from models.config import CATEGORIES, SIZE_RANGES
from models.context import ForwardContext, LayerInfo
from models.variant import Variant

FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}
CAPS_TYPE = {"attention": AttentionCaps, "position": PositionCaps, "memory": MemoryCaps}
ALL_KEYS = [pytest.param(cat, key, id=f"{cat}-{key}") for cat, reg in registries().items() for key in reg]


@pytest.mark.parametrize("cat,key", ALL_KEYS)
def test_every_key_has_its_record_fields(cat, key):
    v = registries()[cat][key]
    assert isinstance(v, Variant) and v.key == key
    assert isinstance(v.paper, str) and len(v.paper) > 3, "paper missing"
    assert isinstance(v.summary, str) and len(v.summary) > 15 and v.summary.endswith("."), "summary missing"
    assert v.build is not None or key == "none", "only a 'none' choice may have no module"
    assert set(v.params) <= FIELDS, f"params name unknown config fields: {set(v.params) - FIELDS}"
    assert v.check is None or callable(v.check)
    assert v.n_params is None or callable(v.n_params)
    if cat in CAPS_TYPE:
        assert isinstance(v.caps, CAPS_TYPE[cat]), f"{cat} records declare their capabilities"
    if cat == "position":
        assert v.caps.produces <= KINDS
        assert not (v.caps.relative and v.caps.absolute)
    if cat == "attention":
        assert v.caps.accepts <= KINDS | {LEARNED_SINK}  # the position kinds, and learned sinks (attn_sinks)
        assert KINDS <= v.caps.accepts or v.caps.refuses_because, "a refusal states its reason"
        assert v.caps.causal_modes and v.caps.causal_modes <= {True, False}
        assert v.caps.causal_modes == {True, False} or v.caps.causal_reason, "a refusal states its reason"


@pytest.mark.parametrize("key", list(PATTERNS))
def test_every_pattern_is_one_complete_record(key):
    p = PATTERNS[key]
    assert callable(p.rule) and callable(p.bounds) and p.paper and p.summary
    assert set(p.params) <= FIELDS
    v = ATTENTION[key]
    assert (v.paper, v.summary) == (p.paper, p.summary) and set(v.params) <= set(p.params)


def test_every_integer_field_has_a_cap():
    ints = {f.name for f in dataclasses.fields(ModelConfig) if "int" in str(f.type)}
    assert ints == set(SIZE_RANGES)
    for name, (lo, hi) in SIZE_RANGES.items():
        default = getattr(ModelConfig(), name)
        assert default is None or lo <= default <= hi, name
        if name != "seed":
            assert hi <= 1 << 20, name


# ---------------------------------------------------------------------------- capabilities
def _regs_with(cat, key, variant):
    regs = registries()
    return {**regs, cat: {**regs[cat], key: variant}}


def test_a_new_bias_encoding_nobody_lists_is_refused_by_linear_mechanisms():
    """The refusal comes from the capabilities alone: no mechanism names the new encoding."""
    new = Variant(
        "my_bias",
        "Someone 2030",
        "A brand new additive score bias.",
        build=None,
        caps=PositionCaps(produces=frozenset({SCORE_BIAS}), relative=True),
    )
    regs = _regs_with("position", "my_bias", new)
    for att in ATTENTION:
        cfg = ModelConfig(attention=att, position="my_bias", causal=True in ATTENTION[att].caps.causal_modes)
        caps = ATTENTION[att].caps
        if SCORE_BIAS in caps.accepts:
            check_combination(cfg, regs)
        else:
            with pytest.raises(ConfigError) as e:
                check_combination(cfg, regs)
            assert e.value.field == "position" and "score_bias" in str(e.value) and caps.refuses_because in str(e.value)


def test_a_modifier_outside_the_declared_capabilities_is_refused_at_run_time():
    """If an encoding hands a mechanism a modifier it does not accept, the sublayer raises."""
    cfg = ModelConfig(attention="linear", position="rope", n_layers=1, d_model=16, n_heads=2).validate()
    model = build_model(cfg)

    class Sneaky(torch.nn.Module):
        def embed(self, x, pos):
            return x

        def modify(self, q, k, layer, k_start=0, scale=None):
            return q, k, {"rel_bias": torch.zeros(q.shape[1], 2 * k.shape[2] - 1)}

    tokens = torch.zeros(1, 5, dtype=torch.long)
    ctx = ForwardContext(tokens=tokens, position=Sneaky())
    with pytest.raises(ConfigError) as e:
        model.stack.blocks[0].attn(torch.randn(1, 5, 16), ctx, LayerInfo(index=0))
    assert e.value.field == "position" and "score_bias" in str(e.value)
    assert refused_modifiers({"rel_bias": 0, "alibi_slopes": 0}, ATTENTION["lsh"].caps) == set()
    assert refused_modifiers({"rel_k": 0}, ATTENTION["lsh"].caps) == {"relative_kv"}
    assert refused_modifiers({"unheard_of": 0}, ATTENTION["full"].caps) == {"unheard_of"}


@pytest.mark.parametrize("memory", ["xl", "compressive"])
@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_segment_memories_refuse_absolute_positions_by_capability(memory, position):
    with pytest.raises(ConfigError) as e:
        ModelConfig(memory=memory, position=position).validate()
    assert e.value.field == "position" and "rope" in str(e.value)


def test_layer_info_rejects_unknown_fields():
    info = LayerInfo(index=0)
    with pytest.raises(AttributeError):
        info.spann = torch.zeros(2)  # a typo cannot add a field no view reads
    with pytest.raises(AttributeError):
        info.record(bucket=torch.zeros(2))
    with pytest.raises(TypeError):
        info.record_ffn({"expert_count": torch.zeros(2)})


# ---------------------------------------------------------------------------- size estimate
SMALL = dict(
    n_layers=2,
    d_model=32,
    n_heads=4,
    max_len=64,
    proj_len=8,
    segment_len=16,
    mem_len=8,
    cmem_len=4,
    n_memory=3,
    knn_size=32,
    knn_k=2,
    n_experts=3,
    chunk_size=8,
    n_features=8,
    n_landmarks=4,
)
_FIX = {
    ("attention", "linformer"): dict(causal=False, position="rope"),
    ("attention", "nystrom"): dict(causal=False, position="rope"),
    ("attention", "linear"): dict(position="rope"),
    ("attention", "performer"): dict(position="rope"),
    ("attention", "lsh"): dict(position="rope"),
    ("attention", "routing"): dict(position="rope"),
    ("attention", "clustered"): dict(causal=False, position="rope"),
    ("attention", "isab"): dict(causal=False, position="rope"),
    ("attention", "luna"): dict(causal=False, position="rope"),
    ("attention", "synthesizer_dense"): dict(position="sinusoidal"),
    ("attention", "synthesizer_random"): dict(position="sinusoidal"),
    ("attention", "mla"): dict(n_kv_heads=None),  # no K/V heads: one shared latent (refused with a reason)
    ("position", "none"): dict(causal=True),
    ("architecture", "encoder_only"): dict(causal=False),
}
EXTRA = {
    ("position", "t5"): dict(t5_num_buckets=16),
    ("memory", "compressive"): dict(compression="conv"),
    ("layer", "universal"): dict(act=True),
    ("layer", "gated"): dict(norm_placement="pre"),
}


@pytest.mark.parametrize("cat,key", ALL_KEYS)
@pytest.mark.parametrize("n_kv", [None, 2])
def test_approx_params_equals_the_built_model(cat, key, n_kv):
    kw = {**SMALL, cat: key, "n_kv_heads": n_kv, **_FIX.get((cat, key), {}), **EXTRA.get((cat, key), {})}
    cfg = ModelConfig(**kw).validate()
    real = sum(p.numel() for p in build_model(cfg).parameters())
    assert abs(cfg.approx_params() - real) <= 0.1 * real, (cfg.approx_params(), real)


def test_linformer_projections_count_once_per_layer_and_the_reported_config_is_refused():
    """A 90-byte config asking for 12 layers of 65536 x 8192 projections (48 GiB) must not validate."""
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict(
            {"attention": "linformer", "causal": False, "proj_len": 65536, "max_len": 8192, "n_layers": 12}
        ).validate()
    assert e.value.field == "proj_len" and "4096" in str(e.value)
    cfg = ModelConfig(attention="linformer", causal=False, position="rope", proj_len=16, max_len=64, n_layers=3)
    base = cfg.replace(attention="full").approx_params()
    assert cfg.approx_params() - base == 3 * 2 * 16 * 64


@pytest.mark.parametrize(
    "field,value",
    [
        ("n_memory", 1 << 16),
        ("max_relative", 1 << 20),
        ("n_clusters", 65536),
        ("n_features", 1 << 14),
        ("knn_size", 1 << 20),
        ("n_buckets", 1 << 16),
        ("n_hashes", 64),
        ("mem_len", 1 << 20),
        ("n_experts", 4096),
        ("t5_num_buckets", 1 << 16),
        ("n_landmarks", 1 << 16),
        ("chunk_size", 1 << 20),
    ],
)
def test_size_fields_past_their_cap_are_refused_naming_the_cap(field, value):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{field: value}).validate()
    lo, hi = SIZE_RANGES[field]
    assert e.value.field == field and str(hi) in str(e.value)


def test_lsh_products_of_sizes_are_capped():
    with pytest.raises(ConfigError) as e:
        ModelConfig(attention="lsh", position="rope", n_buckets=1024, n_hashes=16).validate()
    assert e.value.field == "n_buckets" and "n_hashes" in str(e.value)
    with pytest.raises(ConfigError) as e:
        ModelConfig(attention="lsh", position="rope", n_buckets=256, chunk_size=1024).validate()
    assert e.value.field == "chunk_size" and "16384" in str(e.value)
    ModelConfig(attention="lsh", position="rope", n_buckets=64, n_hashes=8, chunk_size=256).validate()


@pytest.mark.parametrize("cat", CATEGORIES)
def test_every_category_is_a_registry(cat):
    """Each config category has exactly one registry, keyed by the variants' own keys, and it is the
    one validation consults: the default is registered, and a key missing from it is refused naming
    the category and listing the registered keys."""
    assert list(registries()) == list(CATEGORIES)  # no category without a registry, no stray registry
    reg = registries()[cat]
    assert reg and all(isinstance(v, Variant) and v.key == key for key, v in reg.items())
    assert cat in FIELDS and getattr(ModelConfig(), cat) in reg
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{cat: "no_such_variant"}).validate()
    assert e.value.field == cat and e.value.value == "no_such_variant"
    assert all(key in str(e.value) for key in reg)
