"""The config's fields are its ``Param`` records: one record per field and one field per record,
declared once, with the facts every view reads; a config is immutable, hashable and validated once."""

import dataclasses

import pytest

from models import ConfigError, ModelConfig, registries
from models.config import CORE, FIELDS, SIZE_RANGES
from models.variant import Param, Variant, gather

DATACLASS_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}


def _listed_records() -> list:
    """``(variant key, record)`` of every record a registered variant lists."""
    return [(v.key, p) for reg in registries().values() for v in reg.values() for p in v.param_records]


def test_every_field_has_a_record_and_every_record_a_field():
    assert set(DATACLASS_FIELDS) == set(FIELDS)
    declared = {p.name for p in CORE} | {p.name for _, p in _listed_records()}
    assert declared == set(DATACLASS_FIELDS)
    for name, f in DATACLASS_FIELDS.items():
        p = FIELDS[name]
        assert f.default == p.default and f.type == p.annotation, name
        assert getattr(ModelConfig(), name) == p.default


def test_a_field_is_declared_once_and_shared_by_reference():
    by_name = {}
    for key, p in _listed_records():
        assert by_name.setdefault(p.name, p) is p, f"{p.name} declared again by {key}"
        assert FIELDS[p.name] is p
    assert not by_name.keys() & {p.name for p in CORE}, "a variant re-declares a core field"
    for reg in registries().values():
        for v in reg.values():  # a name without a record refers to a field declared elsewhere
            assert set(v.params) <= set(FIELDS), v.key
            assert {p.name for p in v.param_records} <= set(v.params)


def test_every_integer_field_has_a_range_and_an_interactive_cap():
    ints = {name for name, p in FIELDS.items() if p.type is int}
    assert ints == set(SIZE_RANGES)
    for name in ints:
        p = FIELDS[name]
        lo, hi = p.range
        assert lo <= hi and (p.default is None and p.optional or lo <= p.default <= hi), name
    uncapped = {name for name in ints if FIELDS[name].cap is None}
    assert uncapped == {"seed"}, "every integer size needs the app's cap (the seed is no size)"
    for name in ints - uncapped:
        assert FIELDS[name].cap >= FIELDS[name].range[0], name


def test_string_choices_and_defaults_are_consistent():
    for name, p in FIELDS.items():
        if p.choices:
            assert p.type is str and p.default in p.choices, name
        assert p.coerce(p.default) == p.default, name


@pytest.mark.parametrize(
    "typ,value,expected",
    [
        (int, "8", 8),
        (int, " 8 ", 8),
        (int, 8.0, 8),
        (float, "0.5", 0.5),
        (float, 3, 3.0),
        (bool, "false", False),
        (bool, "Yes", True),
        (str, "x", "x"),
    ],
)
def test_param_coerces_text_of_the_right_meaning(typ, value, expected):
    got = Param("f", typ, None, optional=True).coerce(value)
    assert got == expected and type(got) is typ


@pytest.mark.parametrize(
    "typ,value",
    [(int, "8.5"), (int, 2.5), (int, True), (float, "x"), (float, False), (bool, 1), (bool, "maybe"), (str, 3)],
)
def test_param_refuses_values_of_no_meaning_naming_the_field(typ, value):
    with pytest.raises(ConfigError) as e:
        Param("f", typ, None).coerce(value)
    assert e.value.field == "f"
    assert Param("f", typ, None, optional=True).coerce("none") is None
    with pytest.raises(ConfigError):
        Param("f", typ, 0).coerce(None)


def test_gather_refuses_a_duplicate_key():
    a = Variant("a", "P 2020", "A.")
    assert list(gather((a,), (Variant("b", "P 2020", "B."),))) == ["a", "b"]
    with pytest.raises(KeyError):
        gather((a,), (Variant("a", "Q 2021", "Another a."),))


def test_a_variant_keeps_its_records_through_a_copy():
    p = Param("my_size", int, 3, range=(1, 9), cap=5)
    v = Variant("v", "P 2020", "V.", params=(p, "causal"))
    assert v.params == ("my_size", "causal") and v.param_records == (p,)
    w = dataclasses.replace(v, summary="W.")
    assert w.params == v.params and w.param_records == (p,)


# ---------------------------------------------------------------------------- immutability
def test_a_config_is_frozen_and_replace_returns_a_new_one():
    cfg = ModelConfig(n_layers=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layers = 3
    other = cfg.replace(n_layers=3)
    assert (cfg.n_layers, other.n_layers) == (2, 3)
    assert other == ModelConfig(n_layers=3) and other != cfg


def test_equal_configs_hash_equal_and_serve_as_cache_keys():
    a, b = ModelConfig(window="8", causal="true"), ModelConfig(window=8, causal=True)
    assert a == b and hash(a) == hash(b)
    assert {a: "cached"}[b] == "cached"
    assert len({ModelConfig(), ModelConfig(), ModelConfig(seed=1)}) == 2


def test_validate_runs_its_checks_once_per_instance(monkeypatch):
    import models.config as config

    calls = []
    real = config.check_combination
    monkeypatch.setattr(config, "check_combination", lambda cfg, regs: calls.append(cfg) or real(cfg, regs))
    cfg = ModelConfig(n_layers=2)
    assert cfg.validate() is cfg and cfg.validate() is cfg
    assert len(calls) == 1
    fresh = ModelConfig(n_layers=2)
    assert fresh == cfg and hash(fresh) == hash(cfg)  # validity is not part of equality or hashing
    fresh.validate()
    assert len(calls) == 2
    assert set(cfg.to_dict()) == set(FIELDS)  # nor of the dict


def test_an_invalid_config_stays_invalid_on_every_call():
    cfg = ModelConfig(n_kv_heads=3)
    for _ in range(2):
        with pytest.raises(ConfigError) as e:
            cfg.validate()
        assert e.value.field == "n_kv_heads"
