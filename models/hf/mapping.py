"""Weight mapping: each catalogue parameter from the checkpoint tensors it is made of.

A family returns ``{catalogue name: Rule}``. ``Rule(sources, fn)`` reads the checkpoint tensors
``sources`` and returns ``fn(*tensors)``; ``fn`` is plain torch (a transpose, a slice, a sum, a
scale), so it runs on meta tensors too: ``check`` evaluates every rule on tensors of the header's
shapes and compares the result with the model built on the meta device, before a byte is read.
``Tie(target)`` shares another parameter of the model (tied embeddings); ``Zeros()`` fills a
parameter the checkpoint has no counterpart for with zeros, where zero is exactly the checkpoint's
computation (a bias the original layer does not have).

Checkpoint names are first put in canonical form by the family (``canonical(name)``: prefixes such
as ``transformer.`` / ``model.`` / ``bert.`` removed, old spellings renamed) or dropped when the
family knows them as unused (buffers, a pooler the masked-LM logits never read); a tensor that no
rule reads and the family does not know is refused, so no weight is ever silently left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import ConfigError


def same(t: torch.Tensor) -> torch.Tensor:
    return t


@dataclass(frozen=True)
class Rule:
    sources: tuple
    fn: Callable = same


@dataclass(frozen=True)
class Tie:
    target: str  # the catalogue parameter this one is (the same Parameter object)


@dataclass(frozen=True)
class Zeros:
    pass


def canonical_names(entries: dict, canonical: Callable[[str], str | None]) -> dict:
    """``{canonical name: entry}``; ``canonical(name)`` returns None for a tensor the family ignores.
    Two checkpoint names with one canonical form are refused (which one the model reads is unclear)."""
    out = {}
    for name, entry in entries.items():
        key = canonical(name)
        if key is None:
            continue
        if key in out:
            raise ConfigError("weights", name[:80], f"one tensor per weight ({out[key].name!r} is the same weight)")
        out[key] = entry
    return out


def check(rules: dict, tensors: dict, shapes: dict) -> None:
    """Refuse, from shapes alone, a checkpoint that does not fill the model exactly: every model
    parameter has a rule, every rule's tensors exist, every tensor is read by a rule, and each rule's
    result has its parameter's shape. ``tensors``: canonical name -> header entry; ``shapes``: the
    meta model's ``{name: shape}``."""
    missing_rules = sorted(set(shapes) - set(rules))
    if missing_rules:  # the family's mapping and the catalogue disagree: a loader bug, said plainly
        raise ConfigError(
            "weights",
            missing_rules[0],
            "a parameter the loader maps (the checkpoint mapping of this "
            "family does not cover the catalogue model; please report it)",
        )
    used = set()
    for target, rule in rules.items():
        if target not in shapes:
            raise ConfigError(
                "weights",
                target,
                f"a parameter of the catalogue model (mapping error; expected one of {sorted(shapes)[:6]} ...)",
            )
        if isinstance(rule, Tie):
            if tuple(shapes[rule.target]) != tuple(shapes[target]):
                raise ConfigError("weights", target, f"the shape of {rule.target} it is tied to")
            continue
        if isinstance(rule, Zeros):
            continue
        for name in rule.sources:
            if name not in tensors:
                raise ConfigError("weights", name, "a tensor of the checkpoint (it is missing; the config asks for it)")
            used.add(name)
        try:
            out = rule.fn(*(tensors[name].meta() for name in rule.sources))
        except (RuntimeError, IndexError, ValueError) as e:
            raise ConfigError(
                "weights", tensors[rule.sources[0]].name, f"a tensor whose shape the config implies ({e})"
            ) from None
        if tuple(out.shape) != tuple(shapes[target]):
            got = ", ".join(f"{tensors[n].name} {list(tensors[n].shape)}" for n in rule.sources)
            raise ConfigError("weights", got, f"the shapes config.json implies: {target} needs {list(shapes[target])}")
    extra = sorted(set(tensors) - used)
    if extra:
        raise ConfigError(
            "weights",
            tensors[extra[0]].name,
            "only tensors this family's model reads (this one has no "
            "place in it; an unexpected weight is refused rather than dropped)",
        )


def fill(model: torch.nn.Module, rules: dict, tensors: dict, read: Callable, dtype: torch.dtype) -> None:
    """Copy every rule's result into ``model`` (whose parameters and buffers exist but hold no values yet),
    check each source tensor is finite, then tie the tied parameters."""
    # persistent buffers a checkpoint stores (DeepSeek-V3's e_score_correction_bias) are filled like parameters
    params = {**dict(model.named_buffers()), **dict(model.named_parameters(remove_duplicate=False))}
    with torch.no_grad():
        for target, rule in rules.items():
            if isinstance(rule, Tie):
                continue
            if isinstance(rule, Zeros):
                params[target].zero_()
                continue
            values = []
            for name in rule.sources:
                t = read(tensors[name])
                if not finite(t):
                    raise ConfigError("weights", tensors[name].name, "finite values (this tensor holds NaN or Inf)")
                values.append(t.to(dtype))
            params[target].copy_(rule.fn(*values))
    for target, rule in rules.items():
        if isinstance(rule, Tie):
            _set(model, target, params[rule.target])


def finite(t: torch.Tensor) -> bool:
    """Whether every value of ``t`` is finite. A sum is fast and is NaN / Inf whenever a value is; only
    a non-finite sum (which huge finite values can also give) pays for the exact element-wise check."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def _set(model: torch.nn.Module, name: str, param: torch.nn.Parameter) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, attr, param)
