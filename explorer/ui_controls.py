"""Config controls generated from the ModelConfig dataclass and the registries.

Every ModelConfig field (except the fixed byte-level ``vocab_size``) gets one control chosen by
its type: int -> ``gr.Number(precision=0)``, float -> ``gr.Number``, bool -> ``gr.Checkbox``,
category -> ``gr.Dropdown`` of the registry keys, other str -> ``gr.Dropdown`` of its values.
A parameter control is visible only while a chosen variant lists it in ``Variant.params``, so a
variant registered later brings its own controls without any change here. Optional numbers
(``n_kv_heads``, ``d_ff``, ``softcap``) show 0 for None (a number box cannot be empty): every
such field is a positive size or scale, so 0 is free to mean "default / off".
"""
from __future__ import annotations

from dataclasses import fields

import gradio as gr

from models import ConfigError, ModelConfig, registries
from models.config import CATEGORIES

HIDDEN_FIELDS = ("vocab_size",)          # byte-level tokens: fixed at 256
SIZE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads")
CONTROL_FIELDS = tuple(f.name for f in fields(ModelConfig) if f.name not in HIDDEN_FIELDS)
STR_CHOICES = {"feature_map": ["positive", "trig"], "compression": ["mean", "conv"]}
LABELS = {
    "attention": "Attention", "position": "Position encoding", "norm_placement": "Norm placement",
    "norm": "Norm", "ffn": "Feed-forward", "memory": "Memory", "layer": "Layer structure",
    "causal": "Causal (decoder) mask", "n_layers": "Layers", "d_model": "d_model", "n_heads": "Heads",
    "n_kv_heads": "K/V heads (0 = Heads)", "d_ff": "d_ff (0 = FFN rule)", "seed": "Seed",
    "softcap": "softcap (0 = off)", "max_len": "max_len (positions)",
}


def field_type(name: str) -> tuple:
    """``(base type, optional?)`` of a ModelConfig field from its annotation."""
    f = next(f for f in fields(ModelConfig) if f.name == name)
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    optional = t.startswith("Optional[")
    base = {"int": int, "float": float, "bool": bool, "str": str}[t.removeprefix("Optional[").rstrip("]")]
    return base, optional


def dependent_fields() -> set:
    """Fields some variant lists as a parameter (shown only when a chosen variant reads them)."""
    return {p for reg in registries().values() for v in reg.values() for p in v.params}


def always_visible() -> set:
    always = set(CATEGORIES) | {"causal", "seed"} | set(SIZE_FIELDS)
    return always - (dependent_fields() - {"causal"} - set(SIZE_FIELDS))


def relevant(choice: dict) -> set:
    """Fields read by the chosen variants (``choice``: category -> key); unknown keys read nothing."""
    regs = registries()
    out = set()
    for cat in CATEGORIES:
        variant = regs[cat].get(choice.get(cat))
        if variant is not None:
            out |= set(variant.params)
    return out


def visible_fields(choice: dict) -> set:
    return always_visible() | relevant(choice)


def make_control(name: str, value, visible: bool = True):
    """The widget of one field (created inside the caller's Blocks context)."""
    base, optional = field_type(name)
    label = LABELS.get(name, name)
    kw = dict(label=label, visible=visible, elem_id=f"ctl-{name}")
    if name in CATEGORIES:
        return gr.Dropdown(choices=list(registries()[name]), value=value, **kw)
    if base is bool:
        return gr.Checkbox(value=value, **kw)
    if base is str:
        choices = STR_CHOICES.get(name)
        if choices is None:
            return gr.Textbox(value=value, **kw)
        return gr.Dropdown(choices=choices, value=value, **kw)
    return gr.Number(value=_shown(name, value), precision=0 if base is int else None, **kw)


def _shown(name: str, value):
    """None is shown as 0 in an optional number box."""
    base, optional = field_type(name)
    return 0 if optional and value is None and base in (int, float) else value


def values_to_config(values) -> ModelConfig:
    """Control values (in ``CONTROL_FIELDS`` order) -> ``ModelConfig`` (ConfigError on bad values)."""
    values = list(values)
    if len(values) != len(CONTROL_FIELDS):
        raise ConfigError("controls", len(values), f"{len(CONTROL_FIELDS)} values")
    d = {}
    for name, v in zip(CONTROL_FIELDS, values):
        base, optional = field_type(name)
        if isinstance(v, str) and base in (int, float) and not v.strip():
            v = None
        if optional and base in (int, float) and not isinstance(v, bool) and v == 0:
            v = None
        if isinstance(v, float) and base is int and v.is_integer():
            v = int(v)
        d[name] = v
    return ModelConfig.from_dict(d)


def config_values(cfg: ModelConfig) -> list:
    return [_shown(name, getattr(cfg, name)) for name in CONTROL_FIELDS]


def config_updates(cfg: ModelConfig) -> list:
    """``gr.update`` for every control: the config's value and the visibility its variants imply."""
    shown = visible_fields({c: getattr(cfg, c) for c in CATEGORIES})
    return [gr.update(value=_shown(n, getattr(cfg, n)), visible=n in shown) for n in CONTROL_FIELDS]


def visibility_updates(*category_values) -> list:
    """Visibility of every control given the category dropdowns' values (in ``CATEGORIES`` order)."""
    shown = visible_fields(dict(zip(CATEGORIES, category_values)))
    return [gr.update(visible=n in shown) for n in CONTROL_FIELDS]
