"""A plain re-implementation of a small pre-LN decoder (learned positions, LayerNorm, GELU FFN, full causal
attention) from the model's weights alone: the independent reference of the interpretability tests.

``plain_run(model, ids)`` -> dict with ``streams`` (the residual stream after the embedding and after each
block, ``(L, d)`` each), ``heads`` (per layer ``(h, L, d)``: each head's write ``z_h W_O^h``), ``ffn`` (per
layer ``(L, d)``) and ``logits`` ``(L, V)``, in float64."""

import math

import torch
import torch.nn.functional as F

from models import ModelConfig, build_model

PLAIN = dict(
    d_model=32,
    n_heads=4,
    n_layers=2,
    max_len=64,
    vocab_size=40,
    position="learned",
    norm="layernorm",
    norm_placement="pre",
    ffn="gelu",
    attention="full",
    attn_bias="all",
    seed=5,
)


def perturbed(**fields):
    """A small model of ``PLAIN`` (plus ``fields``) whose norms and biases are not at their initial values."""
    model = build_model(ModelConfig(**{**PLAIN, **fields}))
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return model.eval()


def _ln(x, norm):
    w = norm.weight.detach().double()
    if hasattr(norm, "bias"):
        return F.layer_norm(x, x.shape[-1:], w, norm.bias.detach().double(), norm.eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * w


def plain_run(model, ids, patch=None):
    """``patch``: ``{(layer, head): (L, d)}`` writes that replace those heads' own (activation patching)."""
    cfg = model.cfg
    h, dh = cfg.n_heads, cfg.d_head
    d = lambda t: t.detach().double()  # noqa: E731
    tok = ids[0]
    L = len(tok)
    x = d(model.embed.weight)[tok] + d(model.position.table.weight)[:L]
    streams, heads, ffns = [x], [], []
    mask = torch.ones(L, L).tril().bool()
    for block in model.stack.blocks:
        a = block.attn
        u = _ln(x, block.res_attn.norm)
        q = (u @ d(a.q_proj.weight).T + d(a.q_proj.bias)).view(L, h, dh).transpose(0, 1)
        k = (u @ d(a.k_proj.weight).T + d(a.k_proj.bias)).view(L, h, dh).transpose(0, 1)
        v = (u @ d(a.v_proj.weight).T + d(a.v_proj.bias)).view(L, h, dh).transpose(0, 1)
        s = (q @ k.transpose(1, 2) / math.sqrt(dh)).masked_fill(~mask, float("-inf"))
        z = torch.softmax(s, -1) @ v  # (h, L, dh)
        wo = d(a.out_proj.weight).view(cfg.d_model, h, dh)
        per = torch.stack([z[i] @ wo[:, i].T for i in range(h)])  # (h, L, d)
        for (layer, head), write in (patch or {}).items():
            if layer == block.layer:
                per[head] = write
        x = x + per.sum(0) + d(a.out_proj.bias)
        u = _ln(x, block.res_ffn.norm)
        f = F.gelu(u @ d(block.ffn.w1.weight).T + d(block.ffn.w1.bias)) @ d(block.ffn.w2.weight).T + d(
            block.ffn.w2.bias
        )
        x = x + f
        heads.append(per), ffns.append(f), streams.append(x)
    logits = _ln(x, model.final_norm) @ d(model.head.weight).T
    return {"streams": streams, "heads": heads, "ffn": ffns, "logits": logits}


def sample_ids(seed: int = 2, n: int = 30) -> torch.Tensor:
    return torch.randint(0, PLAIN["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed))
