"""A forward pass that is not finite, said by name instead of drawn.

Weights that are finite but huge (a checkpoint's tensors scaled by 1e30) or a setting that overflows
(``rope_base`` of 1e-30) make float32 activations overflow to Inf and then NaN: the logits, the loss and
the later layers' attention are then numbers of no meaning, and a figure of them is a page of NaN. The
check is split where the data is: ``forward_reading(out)`` runs beside the forward pass (inside a GPU
call: plain values go back, never an exception, which a GPU worker may not return intact) and says where
the pass stopped being finite; ``refuse(...)`` runs on the caller's side and raises a ``ConfigError``
naming that, the largest weight and any setting out of the ordinary, so the page shows a sentence.
"""

from __future__ import annotations

import math

import torch

from explorer.runtime.configs import as_config
from models import ConfigError

FLOAT32_MAX = torch.finfo(torch.float32).max


def forward_reading(out) -> str | None:
    """None when every logit of ``out`` (a ``ModelOutput``) is finite; otherwise where the hidden states
    first stop being finite ("non-finite activations after layer 2 of 4")."""
    if bool(torch.isfinite(out.logits).all()):
        return None
    states = [info.input for info in out.layers if getattr(info, "input", None) is not None]
    for i, h in enumerate(states):  # states[i] enters layer i + 1: it is what layer i put out
        if not bool(torch.isfinite(h).all()):
            return f"non-finite activations after layer {i} of {len(states)}" if i else "non-finite embeddings"
    return "non-finite logits (every layer's input is finite: the last layers or the output head overflow)"


def largest_weight(tensors: dict) -> tuple:
    """``(name, max |w|)`` over ``tensors`` (name -> tensor); ("", 0.0) when there are none."""
    best = ("", 0.0)
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            m = float(t.detach().abs().max())
            if not m <= best[1]:
                best = (name, m)
    return best


def cause(cfg, weights) -> str:
    """What can overflow: the largest weight (against float32's range) and a RoPE base out of the ordinary."""
    parts = []
    if weights is not None:
        name, m = largest_weight(weights.tensors)
        if name:
            parts.append(
                f"the largest weight is {m:.3g} in magnitude ({name}; float32 ends at {FLOAT32_MAX:.3g}, "
                "and a product of a few such weights passes it)"
            )
    base = getattr(cfg, "rope_base", None)
    if getattr(cfg, "position", None) == "rope" and base is not None and not 1.0 <= base <= 1e9:
        parts.append(f"rope_base={base:g} (RoPE bases are from about 1e4 to 1e7)")
    return "; ".join(parts) or "its weights or settings overflow float32"


def refuse(reading: str | None, what: str, cfg, weights) -> None:
    """Raise a ``ConfigError`` naming ``reading`` (``forward_reading``'s), what is not drawn and the cause."""
    if reading is None:
        return
    raise ConfigError(
        "weights",
        reading,
        f"a model whose forward pass stays finite (it overflows float32, so the "
        f"{what} would be NaN and are not shown): {cause(as_config(cfg), weights)}",
    )


def refuse_losses(values, what: str, cfg, weights) -> None:
    """``refuse`` for losses computed elsewhere: a NaN or infinite loss says the logits were not finite."""
    bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        refuse(f"a loss of {bad[0]} (non-finite logits)", what, cfg, weights)
