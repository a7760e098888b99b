"""``moe_qwen`` (Qwen2-MoE / Qwen3-Next's sparse block) against transformers' ``Qwen3NextSparseMoeBlock`` with the
same weights, with and without renormalised top-k probabilities; the balancing loss from its definition; the size."""

import pytest
import torch

from models import ModelConfig
from models.ffn import FFN

D, E, H, S = 16, 6, 8, 12


def _cfg(**kw):
    return ModelConfig(
        **{"d_model": D, "n_heads": 2, "ffn": "moe_qwen", "n_experts": E, "top_k": 2, "d_ff": H, "shared_d_ff": S, **kw}
    ).validate()


@pytest.mark.parametrize("norm", [True, False])
def test_moe_qwen_equals_transformers(norm):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextSparseMoeBlock

    hf = Qwen3NextConfig(
        hidden_size=D,
        num_experts=E,
        num_experts_per_tok=2,
        moe_intermediate_size=H,
        shared_expert_intermediate_size=S,
        norm_topk_prob=norm,
    )
    torch.manual_seed(0)
    ref = Qwen3NextSparseMoeBlock(hf).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_()
    ours = FFN["moe_qwen"].build(_cfg(norm_topk_prob=norm)).double()
    with torch.no_grad():
        ours.router.weight.copy_(ref.gate.weight)
        for e, expert in enumerate(ours.experts):
            expert.w.weight.copy_(ref.experts.gate_up_proj[e, :H])
            expert.v.weight.copy_(ref.experts.gate_up_proj[e, H:])
            expert.w2.weight.copy_(ref.experts.down_proj[e])
        ours.shared.w.weight.copy_(ref.shared_expert.gate_proj.weight)
        ours.shared.v.weight.copy_(ref.shared_expert.up_proj.weight)
        ours.shared.w2.weight.copy_(ref.shared_expert.down_proj.weight)
        ours.shared_gate.weight.copy_(ref.shared_expert_gate.weight)
    x = torch.randn(2, 9, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y, aux = ours(x)
    # transformers' router softmax runs in float32 whatever the input (ours: at least float32): float32's tolerance
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)
    probs = torch.softmax(x.reshape(-1, D) @ ours.router.weight.T, -1)
    chosen = probs.topk(2, -1).indices
    f = torch.stack([(chosen == e).double().sum() for e in range(E)]) / chosen.numel()  # share of all assignments
    torch.testing.assert_close(aux["loss"], 1e-3 * E * (f * probs.mean(0)).sum())
    assert aux["expert_counts"].sum() == chosen.numel() and aux["dropped"] == 0


def test_moe_qwen_size_and_backward():
    cfg = _cfg()
    ffn = FFN["moe_qwen"].build(cfg)
    assert sum(p.numel() for p in ffn.parameters()) == FFN["moe_qwen"].n_params(cfg) == D * E + 3 * D * (E * H + S) + D
    y, aux = ffn(torch.randn(3, 5, D))
    (y.sum() + aux["loss"]).backward()
    assert ffn.shared_gate.weight.grad.abs().sum() > 0 and ffn.router.weight.grad.abs().sum() > 0
