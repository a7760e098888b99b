"""The circuits of each head of a small-vocabulary model, read from the weights alone (Elhage et al. 2021,
"A Mathematical Framework for Transformer Circuits").

Per head ``h`` of layer ``l`` (``W_Q^h, W_K^h, W_V^h``: its rows of the projections, ``(d_h, d)``; ``W_O^h``:
its columns of the output projection, ``(d, d_h)``; ``W_E (V, d)`` the embedding, ``W_U (V, d)`` the head):

- OV circuit ``N(W_E) W_V^hT W_O^hT G W_U^T`` ``(V, V)``: row ``s``, column ``t`` is how much attending to
  token ``s`` raises the logit of ``t``.
- QK circuit ``N(W_E) W_Q^hT W_K^h N(W_E)^T / sqrt(d_h)`` ``(V, V)``: the score a query token gives a key token,
  with rotary encodings at offset 0 (same position: the part of the score that depends on the tokens alone).

Norm handling (stated, since a circuit through a norm is not linear): ``N`` is the block's own attention
pre-norm applied to each token's embedding, as if the residual stream held that embedding alone (the
first block's input, less any position embedding); ``G`` folds the final norm's gain ``gamma`` and, for
LayerNorm, its centring (``I - 11^T/d``) into the unembedding, leaving out its scale (one positive number
per position, which rescales a row but never reorders it) and its bias. Without a pre-norm (post-LN, ReZero,
none) ``N`` is the identity; without a final norm ``G`` is. A query/key norm (``qk_norm``: per head or over
the whole projection, ``models/qkv.py``) is applied exactly in the token-level QK circuit (each token's
projected query and key normalised as the model does); the composition scores fold its gains into
``W_Q`` / ``W_K`` and leave out its scale, as for ``N``.

Copying scores of the OV circuit restricted to ``tokens`` (default: the printable ASCII bytes and newline):
``eigen`` is Elhage et al.'s ``sum(lambda) / sum(|lambda|)`` over its eigenvalues (1: a pure copier; real
part of the sum); ``diagonal`` is the fraction of rows whose largest entry is on the diagonal (the head
raises most the very token it attends to).

Composition (between a head ``a`` of an earlier layer and ``b`` of a later one), with ``W_OV^a = W_O^a W_V^a``
and ``W_QK^b = W_Q^bT W_K^b`` (``d x d``, each read side folding its block's pre-norm gain and centring):
``K: |W_QK^b W_OV^a|_F / (|W_QK^b|_F |W_OV^a|_F)`` (``a`` writes what ``b``'s keys read: the induction
circuit's test), ``Q: |W_QK^bT W_OV^a|_F / (...)``, ``V: |W_OV^b W_OV^a|_F / (...)``. ``baseline`` is the mean
score of random Gaussian matrices of the same shapes and ranks (Elhage et al. compare with it too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from models import ConfigError
from models.attention import ATTENTION

MAX_VOCAB = 256
PRINTABLE = (10,) + tuple(range(32, 127))
KINDS = ("K", "Q", "V")


def check(cfg, tokens=None) -> None:
    """``ConfigError`` for a model without head circuits here, or a vocabulary too large to read whole
    (``tokens`` then names at most ``MAX_VOCAB`` of them: ``frequent_tokens``)."""
    if cfg.vocab_size > MAX_VOCAB and (tokens is None or len(tokens) > MAX_VOCAB):
        raise ConfigError(
            "vocab_size",
            cfg.vocab_size,
            f"at most {MAX_VOCAB} (byte-level models) for full "
            f"circuits; a larger vocabulary is read on at most {MAX_VOCAB} chosen tokens "
            "(the most frequent of a text: frequent_tokens)",
        )
    check_structure(cfg)


def check_structure(cfg) -> None:
    """``ConfigError`` for a model whose heads have no circuits here (any vocabulary: a composition reads
    ``d x d`` matrices only)."""
    if cfg.architecture != "decoder_only":
        why = (
            ": cross-attention heads read the encoder's stream, not the decoder's, so token-to-token OV/QK "
            "products and one stream's composition do not describe them"
            if cfg.architecture == "encoder_decoder"
            else ""
        )
        raise ConfigError("architecture", cfg.architecture, f"'decoder_only' for head circuits{why}")
    if cfg.layer != "standard":
        raise ConfigError("layer", cfg.layer, "'standard' of a decoder_only model for head circuits")
    for i in range(cfg.n_layers):  # every layer's own attention (a layer schedule's kinds: hybrids)
        key = cfg.layer_config(i).attention
        caps = ATTENTION[key].caps
        if not getattr(caps, "own_projections", None):
            continue
        where = f" (layer {i} of layer_schedule={cfg.layer_schedule!r})" if cfg.layer_schedule else ""
        how = (
            "is a recurrent mixer: its heads read a decaying state through projections of its own (no "
            "per-head W_Q, W_K of a softmax score), so token-to-token QK and OV circuits do not describe it"
            if getattr(caps, "rows_sum_to_one", True) is None
            else "forms its keys and values from a shared latent and a shared RoPE key"
        )
        raise ConfigError(
            "layer_schedule" if cfg.layer_schedule and key != cfg.attention else "attention",
            cfg.layer_schedule if cfg.layer_schedule and key != cfg.attention else cfg.attention,
            f"an attention with per-head W_Q, W_K, W_V matrices in every layer for head circuits: {key}{where} {how}",
        )


def _kv(cfg, h: int) -> int:
    return h // (cfg.n_heads // cfg.kv_heads)


def _pre_norm(model, layer: int):
    """The norm applied to the attention input of ``layer`` (pre-LN, sandwich), else None (post-LN's norm
    comes after the residual sum: the next block reads its output, which the circuit starts from)."""
    res = model.stack.blocks[layer].res_attn
    return {"pre": getattr(res, "norm", None), "sandwich": getattr(res, "norm_in", None)}.get(model.cfg.norm_placement)


def _fold(norm, cfg) -> torch.Tensor:
    """``F (d, d)``: the linear part of a norm, ``x -> gamma * (x - mean(x))`` (LayerNorm) or ``gamma * x``
    (RMSNorm), its scale left out; the identity without a norm."""
    d = cfg.d_model
    if norm is None or not hasattr(norm, "weight"):
        return torch.eye(d, dtype=torch.float64)
    m = torch.diag(norm.weight.detach().double())
    if cfg.norm == "layernorm":
        m = m @ (torch.eye(d, dtype=torch.float64) - 1.0 / d)  # centre, then scale by gamma
    return m


def _head_weights(model, layer: int, h: int) -> tuple:
    cfg, attn = model.cfg, model.stack.blocks[layer].attn
    dh, kv = cfg.d_head, _kv(cfg, h)
    rows = lambda lin, i: lin.weight.detach().double()[i * dh : (i + 1) * dh]  # noqa: E731  (d_h, d)
    wo = attn.out_proj.weight.detach().double()[:, h * dh : (h + 1) * dh]  # (d, d_h)
    return rows(attn.q_proj, h), rows(attn.k_proj, kv), rows(attn.v_proj, kv), wo


def _qk_gains(model, layer: int, h: int) -> tuple:
    """``(g_q, g_k)`` ``(d_h,)`` of head ``h``'s query/key norm (its slice of the whole-projection gains for
    ``qk_norm="all"``), or ``(None, None)`` without a gain (no norm, or ``qk_norm="rms_rope"``)."""
    cfg, attn = model.cfg, model.stack.blocks[layer].attn
    if getattr(getattr(attn, "q_norm", None), "weight", None) is None:  # none, or Llama 4's gainless norm
        return None, None
    dh, kv = cfg.d_head, _kv(cfg, h)
    gq, gk = attn.q_norm.weight.detach().double(), attn.k_norm.weight.detach().double()
    if cfg.qk_norm == "all":
        gq, gk = gq[h * dh : (h + 1) * dh], gk[kv * dh : (kv + 1) * dh]
    return gq, gk


def _queries_keys(model, layer: int, e: torch.Tensor) -> tuple:
    """Every head's query and key of the embedded tokens ``e (T, d)``, through the layer's query/key norm:
    ``(h, T, d_h)``, ``(h_kv, T, d_h)`` (projection weights only, as every circuit here)."""
    attn = model.stack.blocks[layer].attn
    wq, wk = attn.q_proj.weight.detach().double(), attn.k_proj.weight.detach().double()
    with torch.no_grad():
        return attn.normed_heads((e @ wq.T)[None], "q")[0], attn.normed_heads((e @ wk.T)[None], "k")[0]


def _embedded(model, layer: int) -> torch.Tensor:
    """``N(W_E)``: each token's embedding through ``layer``'s attention pre-norm ``(V, d)``."""
    e = model.embed.weight.detach()
    norm = _pre_norm(model, layer)
    with torch.no_grad():
        return (norm(e) if norm is not None else e).double()


def _unembed(model) -> torch.Tensor:
    """``G W_U^T`` ``(d, V)``."""
    fold = _fold(model.final_norm if hasattr(model.final_norm, "weight") else None, model.cfg)
    return fold.T @ model.head.weight.detach().double().T


@dataclass(frozen=True)
class HeadCircuits:
    tokens: tuple  # token ids the matrices' rows and columns are
    ov: torch.Tensor  # (n_layers, n_heads, T, T)
    qk: torch.Tensor  # (n_layers, n_heads, T, T)
    eigen: torch.Tensor  # (n_layers, n_heads) sum(lambda) / sum(|lambda|)
    diagonal: torch.Tensor  # (n_layers, n_heads) fraction of rows whose maximum is the diagonal

    def to_json(self, label=None, matrices: bool = False) -> dict:
        from explorer.runtime.tokens import token_label

        label = label or token_label
        out = {
            "tokens": [label(t) for t in self.tokens],
            "copying_eigen": self.eigen.tolist(),
            "copying_diagonal": self.diagonal.tolist(),
            "measures": {
                "copying_eigen": "sum of the OV circuit's eigenvalues / sum of their moduli",
                "copying_diagonal": "fraction of OV rows whose largest entry is the diagonal",
            },
        }
        if matrices:
            out["ov"], out["qk"] = self.ov.float().tolist(), self.qk.float().tolist()
        return out


def frequent_tokens(ids: torch.Tensor, n: int = 64) -> tuple:
    """The ``n`` most frequent token ids of ``ids`` (most frequent first, ties by id): the rows and columns of
    a large-vocabulary model's circuits."""
    values, counts = torch.unique(ids.flatten(), return_counts=True)
    order = sorted(range(len(values)), key=lambda i: (-int(counts[i]), int(values[i])))[:n]
    return tuple(int(values[i]) for i in order)


def head_circuits(model, tokens: tuple | None = None) -> HeadCircuits:
    """Every head's OV and QK circuit on ``tokens`` (default: the printable ASCII bytes and newline), and its
    copying scores (see the module docstring)."""
    cfg = model.cfg
    check(cfg, tokens)
    tokens = PRINTABLE if tokens is None else tuple(tokens)
    idx = torch.tensor(tokens, dtype=torch.long)
    if len(idx) < 2 or idx.min() < 0 or idx.max() >= cfg.vocab_size:
        raise ConfigError("tokens", list(tokens)[:8], f"at least 2 token ids in 0..{cfg.vocab_size - 1}")
    unembed = _unembed(model)[:, idx]  # (d, T)
    ovs, qks, eig, diag = [], [], [], []
    for layer in range(cfg.n_layers):
        e = _embedded(model, layer)[idx]  # (T, d)
        queries, keys = _queries_keys(model, layer, e)  # (h, T, d_h), (h_kv, T, d_h)
        for h in range(cfg.n_heads):
            wq, wk, wv, wo = _head_weights(model, layer, h)
            ov = (e @ wv.T) @ (wo.T @ unembed)  # (T, T)
            qk = queries[h] @ keys[_kv(cfg, h)].T / math.sqrt(cfg.d_head)
            lam = torch.linalg.eigvals(ov)
            ovs.append(ov), qks.append(qk)
            eig.append(float(lam.sum().real / lam.abs().sum()))
            diag.append(float((ov.argmax(1) == torch.arange(len(idx))).double().mean()))
    shape = (cfg.n_layers, cfg.n_heads)
    return HeadCircuits(
        tuple(int(t) for t in tokens),
        torch.stack(ovs).view(*shape, len(idx), len(idx)),
        torch.stack(qks).view(*shape, len(idx), len(idx)),
        torch.tensor(eig).view(shape),
        torch.tensor(diag).view(shape),
    )


def _ov_qk(model, layer: int, h: int) -> tuple:
    """``(W_OV, W_QK)`` ``(d, d)`` of one head, each read side folding the block's pre-norm."""
    fold = _fold(_pre_norm(model, layer), model.cfg)
    wq, wk, wv, wo = _head_weights(model, layer, h)
    gq, gk = _qk_gains(model, layer, h)
    if gq is not None:  # the query/key norm's gains, its scale left out
        wq, wk = gq[:, None] * wq, gk[:, None] * wk
    return wo @ wv @ fold, fold.T @ wq.T @ wk @ fold


def _score(m: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """``|m|_F / (|a|_F |b|_F)``; 0 when a head writes or reads nothing (a zero matrix)."""
    den = float(torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b))
    return float(torch.linalg.matrix_norm(m)) / den if den > 0 else 0.0


@dataclass(frozen=True)
class Composition:
    kind: str  # "K", "Q" or "V"
    earlier: int
    later: int
    scores: torch.Tensor  # (n_heads earlier, n_heads later)
    baseline: float  # mean score of random matrices of the same shapes and ranks

    def top(self, n: int = 5) -> list:
        """The ``n`` highest ``((earlier head, later head), score)`` pairs."""
        flat = self.scores.flatten()
        order = flat.argsort(descending=True)[:n]
        H = self.scores.shape[1]
        return [((int(i) // H, int(i) % H), float(flat[i])) for i in order]

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "earlier_layer": self.earlier,
            "later_layer": self.later,
            "scores": self.scores.tolist(),
            "random_baseline": self.baseline,
            "top": [{"earlier_head": a, "later_head": b, "score": s} for (a, b), s in self.top()],
            "measure": f"{self.kind}-composition: Frobenius-norm ratio (Elhage et al. 2021)",
        }


def composition(model, earlier: int = 0, later: int = 1, kind: str = "K", draws: int = 20) -> Composition:
    """``kind``-composition scores of every head of layer ``earlier`` with every head of layer ``later``."""
    cfg = model.cfg
    check_structure(cfg)
    if kind not in KINDS:
        raise ConfigError("kind", kind, f"one of {list(KINDS)}")
    if not (isinstance(earlier, int) and isinstance(later, int) and 0 <= earlier < later < cfg.n_layers):
        raise ConfigError("layers", f"{earlier} -> {later}", f"0 <= earlier < later < {cfg.n_layers}")
    first = [_ov_qk(model, earlier, h)[0] for h in range(cfg.n_heads)]
    second = [_ov_qk(model, later, h) for h in range(cfg.n_heads)]
    reader = {"K": lambda ov, qk: qk, "Q": lambda ov, qk: qk.T, "V": lambda ov, qk: ov}[kind]
    scores = torch.tensor([[_score(reader(*s) @ a, reader(*s), a) for s in second] for a in first])
    return Composition(kind, earlier, later, scores, _baseline(cfg.d_model, cfg.d_head, draws))


def _baseline(d: int, dh: int, draws: int) -> float:
    g = torch.Generator().manual_seed(0)

    def low_rank():
        return torch.randn(d, dh, generator=g, dtype=torch.float64) @ torch.randn(
            dh, d, generator=g, dtype=torch.float64
        )

    vals = []
    for _ in range(draws):
        a, b = low_rank(), low_rank()
        vals.append(_score(b @ a, b, a))
    return sum(vals) / len(vals)
