"""Architecture surgery: move a trained model's weights to another config that can read them.

Most dropdown changes leave every weight's shape and meaning alone: a pattern and its sizes, the
attention sinks, a mechanism that reads the same Q/K/V projections (linear, Performer, routing, ...),
the softcap, RoPE's base and position scale, ``max_len`` of a relative position, the number of K/V
heads. The registry says which: a ``Param`` with ``surgery=True`` may change freely, and a category
(``attention``, ...) may change between two variants that both have ``surgery=True``. A
``layer_schedule`` may change when every layer keeps its attention or moves between two such variants
(``models.schedule.surgery_safe``: Gemma 3's 5:1 schedule on a trained full-attention model).
``changed_fields(a, b)`` lists what differs; ``check(a, b)`` raises ``ConfigError`` naming the first
field that needs other weights; ``transfer(params, a, b)`` returns the parameters for ``b``, and
``transplant(params, a, b)`` builds the model of ``b`` holding them (its buffers, such as Performer's
random features or RoPE tables, are its own).

K/V heads: going from ``h_a`` to ``h_b`` K/V heads where ``h_b`` divides ``h_a``, each new head is the
mean of the ``h_a / h_b`` consecutive heads its query heads read (Ainslie et al. 2023, GQA, section
2.1: "mean-pooling all the original heads"); where ``h_a`` divides ``h_b`` each head is repeated, which
changes nothing (query head ``n`` reads K/V head ``n // (h / h_kv)``, ``models.attention.common``).
Every other tensor is copied unchanged: surgery never modifies the source weights.
"""

from __future__ import annotations

import torch

from .config import CATEGORIES, FIELDS
from .errors import ConfigError
from .registry import registries
from .schedule import FIELD as SCHEDULE
from .schedule import surgery_safe

__all__ = ["changed_fields", "check", "safe_field", "transfer", "transplant"]

KV_NAMES = ("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")


def changed_fields(a, b) -> list:
    """The config fields whose values differ between ``a`` and ``b``, in field order."""
    return [name for name in FIELDS if getattr(a, name) != getattr(b, name)]


def safe_field(name: str, old, new) -> bool:
    """Whether changing field ``name`` from ``old`` to ``new`` keeps trained weights valid."""
    if name in CATEGORIES:
        family = registries()[name]
        return bool(getattr(family.get(old), "surgery", False) and getattr(family.get(new), "surgery", False))
    return bool(FIELDS[name].surgery)


def _surgery_fields() -> list:
    return [n for n, p in FIELDS.items() if p.surgery]


def check(a, b) -> None:
    """Raise ``ConfigError`` for the first field of ``b`` whose change from ``a`` needs other weights."""
    for name in changed_fields(a, b):
        old, new = getattr(a, name), getattr(b, name)
        if name == SCHEDULE:  # safe or not by the layers' kinds, not by the field
            if not surgery_safe(a, b):
                safe = [k for k, v in registries()["attention"].items() if v.surgery]
                raise ConfigError(
                    name,
                    new,
                    f"a schedule whose layers keep the trained attention or use one of {safe} where it had one",
                )
            continue
        if not safe_field(name, old, new):
            if name in CATEGORIES:
                safe = [k for k, v in registries()[name].items() if v.surgery]
                valid = (
                    f"the trained {old!r} or a variant that reads the same weights: {safe}"
                    if safe
                    else f"the trained {old!r} (no other {name} reads these weights)"
                )
            else:
                valid = f"the trained {old!r}; fields a trained model can change: {', '.join(_surgery_fields())}"
            raise ConfigError(name, new, valid)
    ha, hb = a.kv_heads, b.kv_heads
    if ha != hb and ha % hb and hb % ha:
        raise ConfigError(
            "n_kv_heads",
            b.n_kv_heads,
            f"a divisor or multiple of the trained {ha} K/V heads (merged by mean-pooling or repeated)",
        )
    if ha != hb and a.qk_norm == "all":  # the key norm's gains span every K/V head's features together
        raise ConfigError(
            "n_kv_heads",
            b.n_kv_heads,
            f"the trained {ha} K/V heads: with qk_norm='all' the key norm is taken over all K/V heads' features "
            "at once, so another number of heads normalises other vectors with gains that have no counterpart",
        )


def _regroup(w: torch.Tensor, ha: int, hb: int) -> torch.Tensor:
    """A K or V projection weight ``[ha * d_h, d]`` (or its bias ``[ha * d_h]``) as ``hb`` heads: mean of
    groups, or repeats."""
    d_h, rest = w.shape[0] // ha, tuple(w.shape[1:])
    heads = w.reshape(ha, d_h, *rest)
    if hb < ha:
        heads = heads.reshape(hb, ha // hb, d_h, *rest).mean(dim=1)
    else:
        heads = heads.repeat_interleave(hb // ha, dim=0)
    return heads.reshape(hb * d_h, *rest)


def transfer(state: dict, a, b, copy: bool = True) -> dict:
    """The parameters of ``b`` from those of a model of ``a`` (``check(a, b)`` first); ``state`` is
    not modified (every tensor is a new one; ``copy=False``: the unchanged ones are ``state``'s own, for a
    caller that only reads them, such as a pretrained checkpoint shared by every session)."""
    check(a, b)
    ha, hb = a.kv_heads, b.kv_heads
    out = {}
    for name, tensor in state.items():
        if ha != hb and name.endswith(KV_NAMES) and tensor.dim() in (1, 2) and tensor.shape[0] == ha * a.d_head:
            out[name] = _regroup(tensor, ha, hb)
        else:
            out[name] = tensor.clone() if copy else tensor
    return out


def transplant(state: dict, a, b) -> torch.nn.Module:
    """The model of ``b`` (eval mode) holding the trained parameters ``state`` (``named_parameters``
    of a model of ``a``, no buffers).

    Raises ``ConfigError`` when ``b`` needs weights ``state`` lacks or has another shape, or would drop
    one (a variant flagged ``surgery`` that grew weights is caught here, naming the parameter).
    """
    from .model import build_model  # the model imports the registries this module reads at import

    moved = transfer(state, a, b)
    model = build_model(b).eval()
    params = dict(model.named_parameters())
    changed = changed_fields(a, b) or ["attention"]
    field, value = changed[0], getattr(b, changed[0])
    for name, p in params.items():
        t = moved.get(name)
        if t is None or tuple(t.shape) != tuple(p.shape):
            have = "none" if t is None else f"shape {tuple(t.shape)}"
            raise ConfigError(
                field,
                value,
                f"a choice that reads the trained weights ({name} needs shape "
                f"{tuple(p.shape)}; the trained model has {have})",
            )
    lost = sorted(set(moved) - set(params))
    if lost:
        raise ConfigError(field, value, f"a choice that reads every trained weight ({lost[0]} would be dropped)")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(moved[name].to(p.dtype))
    return model
