"""Helpers the variant views share: tensors to numpy, rounding for ``summary()``, and whether every
applied layer recorded a field.

Views keep batch element 0 as numpy arrays; summaries are plain lists and numbers so that
``json.dumps`` takes them as they are.
"""

from __future__ import annotations

import numpy as np
import torch


def to_float32(t) -> np.ndarray:
    """A tensor as a float32 numpy array (detached, on the CPU)."""
    return t.detach().float().cpu().numpy()


def to_float64(t) -> np.ndarray:
    """A tensor as a float64 numpy array (detached, on the CPU)."""
    return t.detach().double().cpu().numpy()


def json_round(x, nd: int = 5):
    """JSON-safe rounding of a scalar or nested array (NaN / inf -> None)."""
    a = np.asarray(x)
    if a.ndim == 0:
        v = float(a)
        return round(v, nd) if np.isfinite(v) else None
    return [json_round(v, nd) for v in a]


def round_list(a, nd: int = 4) -> list:
    """``a`` rounded to ``nd`` decimals as a (nested) list of floats."""
    return np.round(np.asarray(a, dtype=np.float64), nd).tolist()


def all_have(layers: list, key: str) -> bool:
    """Whether there are layers and every one recorded the tensor ``LayerInfo.<key>``."""
    return bool(layers) and all(isinstance(getattr(i, key), torch.Tensor) for i in layers)
