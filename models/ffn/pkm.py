"""Product-key memory FFN (Lample et al. 2019, "Large Memory Layers with Product Keys").

A key-value memory of ``n^2`` slots (``n = pkm_subkeys``) replaces the dense FFN. Per head, the
query ``q = W_q x`` (width ``d_model``) is split in two halves ``q1, q2``; each half is scored against
its own ``n`` sub-keys, and the top ``k = pkm_topk`` of each are kept. The key of slot ``(a, b)`` is
the concatenation of sub-keys ``c1[a], c2[b]``, so its score is ``q1 . c1[a] + q2 . c2[b]``: the
``k`` best slots overall lie among the ``k x k`` products of the two candidate lists (a sum is
maximal only where each term is among its top k), which is what makes the search ``O(n)`` instead of
``O(n^2)``. The ``k`` best products are softmax-normalised and weight their rows of the value table
(``index = a * n + b``), summed by ``F.embedding_bag`` (the paper's EmbeddingBag). ``pkm_heads``
heads have their own query projection and sub-keys and share the value table; their outputs add up.

Deviation: the paper's batch norm on the query is left out (the block's own norm already scales the
input), and the value table is read by every token (no sparse-update optimiser).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant

# the value table has pkm_subkeys^2 rows; top-k of each half's sub-keys; heads sharing the values
PKM_SUBKEYS = Param("pkm_subkeys", int, 32, range=(2, 1024), cap=256)
PKM_TOPK = Param("pkm_topk", int, 8, range=(1, 1024), cap=64)
PKM_HEADS = Param("pkm_heads", int, 1, range=(1, 64), cap=8)


def product_topk(q1: torch.Tensor, q2: torch.Tensor, keys1: torch.Tensor, keys2: torch.Tensor, k: int):
    """Top-``k`` slots of the product keys for queries ``q1, q2 [N, h, d/2]``, sub-keys ``[h, n, d/2]``.

    Returns ``(scores [N, h, k], index [N, h, k])``, index ``a * n + b``, best first.
    """
    n = keys1.shape[1]
    s1 = torch.einsum("thd,hnd->thn", q1, keys1)  # (N, h, n) first-half scores
    s2 = torch.einsum("thd,hnd->thn", q2, keys2)
    v1, i1 = s1.topk(k, dim=-1)  # (N, h, k)
    v2, i2 = s2.topk(k, dim=-1)
    cand = v1[..., :, None] + v2[..., None, :]  # (N, h, k, k) scores of the candidate products
    best, flat = cand.flatten(-2).topk(k, dim=-1)  # (N, h, k) over the k*k candidates
    a = i1.gather(-1, flat // k)
    b = i2.gather(-1, flat % k)
    return best, a * n + b


class ProductKeyMemory(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h, n = cfg.d_model, cfg.pkm_heads, cfg.pkm_subkeys
        self.heads, self.n, self.k, self.half = h, n, cfg.pkm_topk, d // 2
        self.query = nn.Linear(d, h * 2 * self.half, bias=False)
        # sub-keys and values are Parameters (not Linear) so the model's Xavier init leaves them as set here
        self.keys1 = nn.Parameter(torch.randn(h, n, self.half) / math.sqrt(self.half))
        self.keys2 = nn.Parameter(torch.randn(h, n, self.half) / math.sqrt(self.half))
        self.values = nn.Parameter(torch.randn(n * n, d) / math.sqrt(d))  # the paper's N(0, 1/d) init

    def forward(self, x, tokens=None):
        B, L, d = x.shape
        q = self.query(x).view(B * L, self.heads, 2, self.half)  # (BL, h, 2, d/2)
        scores, index = product_topk(q[:, :, 0], q[:, :, 1], self.keys1, self.keys2, self.k)
        weights = torch.softmax(scores.float(), dim=-1).to(x.dtype)  # (BL, h, k)
        # all heads' k slots form one bag per token: the head outputs add up
        y = F.embedding_bag(
            index.reshape(B * L, -1), self.values, mode="sum", per_sample_weights=weights.reshape(B * L, -1)
        )  # (BL, d)
        counts = torch.bincount(index.detach().reshape(-1), minlength=self.n * self.n)  # (n^2,) for the views
        return y.view(B, L, d), {"slot_counts": counts}

    def output_parameters(self) -> list:
        return [self.values]


def _check(cfg) -> None:
    if cfg.d_model % 2:
        raise ConfigError("d_model", cfg.d_model, "an even number with ffn='pkm': the query is split in two halves")
    if cfg.pkm_topk > cfg.pkm_subkeys:
        raise ConfigError(
            "pkm_topk",
            cfg.pkm_topk,
            f"an integer in [1, pkm_subkeys={cfg.pkm_subkeys}]: top-k is taken among each half's sub-keys",
        )


def _n_params(cfg) -> int:
    d, h, n = cfg.d_model, cfg.pkm_heads, cfg.pkm_subkeys
    half = d // 2
    return d * h * 2 * half + 2 * h * n * half + n * n * d


VARIANTS = (
    Variant(
        "pkm",
        "Lample et al. 2019 (product-key memory)",
        "A memory of pkm_subkeys^2 value rows searched through two halves of product keys; top-k softmax read.",
        build=ProductKeyMemory,
        params=(PKM_SUBKEYS, PKM_TOPK, PKM_HEADS),
        check=_check,
        n_params=_n_params,
    ),
)
