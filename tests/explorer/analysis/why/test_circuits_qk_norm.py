"""Head circuits of a model with a query/key norm (``qk_norm``): the token-level QK circuit normalises each
token's projected query and key as the model does (per head, or over the whole projection), written here from
the RMSNorm formula; the composition scores fold the norm's gains."""

import math

import pytest
import torch

from explorer.analysis.why.circuits import _ov_qk, head_circuits
from models import ModelConfig, build_model


def _rms(t, g, eps):
    return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * g


@pytest.mark.parametrize("kind", ["head", "all"])
@torch.no_grad()
def test_qk_circuit_applies_the_query_key_norm(kind):
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, qk_norm=kind, norm="rmsnorm")
    model = build_model(cfg.validate()).eval()
    g = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
    c = head_circuits(model, tokens=tuple(range(40)))
    blk = model.stack.blocks[1]
    a = blk.attn
    u = blk.res_attn.norm(model.embed.weight).double()  # (V, d)
    q, k = u @ a.q_proj.weight.double().T, u @ a.k_proj.weight.double().T  # (V, 32), (V, 16)
    eps, dh, h = cfg.norm_eps, 8, 3
    if kind == "all":
        q, k = _rms(q, a.q_norm.weight.double(), eps), _rms(k, a.k_norm.weight.double(), eps)
        qh, kh = q[:, h * dh : (h + 1) * dh], k[:, dh : 2 * dh]  # query head 3 reads K/V head 1
    else:
        qh = _rms(q[:, h * dh : (h + 1) * dh], a.q_norm.weight.double(), eps)
        kh = _rms(k[:, dh : 2 * dh], a.k_norm.weight.double(), eps)
    torch.testing.assert_close(c.qk[1, h], qh @ kh.T / math.sqrt(dh))
    gq = a.q_norm.weight.double()[:dh] if kind == "head" else a.q_norm.weight.double()[h * dh : (h + 1) * dh]
    gk = a.k_norm.weight.double()[:dh] if kind == "head" else a.k_norm.weight.double()[dh : 2 * dh]
    wq, wk = a.q_proj.weight.double()[h * dh : (h + 1) * dh], a.k_proj.weight.double()[dh : 2 * dh]
    fold = torch.diag(blk.res_attn.norm.weight.double())
    torch.testing.assert_close(_ov_qk(model, 1, h)[1], fold.T @ (gq[:, None] * wq).T @ (gk[:, None] * wk) @ fold)
