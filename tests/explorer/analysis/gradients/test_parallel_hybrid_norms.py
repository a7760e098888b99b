"""Gradient norms of a parallel_hybrid model (attention and Mamba-2 side by side in each layer): one attention
value per layer, and it is the gradient of that layer's attention branch's out_proj (not the mixer's beside it),
checked against a plain autograd of the same loss."""

import math

import torch
import torch.nn.functional as F

from explorer.analysis.gradients.depth_scaling import last_parameter_name
from explorer.analysis.gradients.norms import branch_gradient_norms
from models import ModelConfig, build_model


def test_attention_norms_are_the_attention_branchs_one_per_layer():
    cfg = ModelConfig(layer="parallel_hybrid", n_layers=3, d_model=32, n_heads=4, ssm_heads=8, ssm_head_dim=8)
    model = build_model(cfg)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))

    def loss_fn(logits, t):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), t[:, 1:].flatten())

    got = branch_gradient_norms(model, tokens, loss_fn)
    assert len(got["attn_out"]) == len(got["ffn_out"]) == len(got["residual"]) == 3
    branches = [b.attn.out_proj.weight for b in model.stack.blocks]
    mixers = [b.mixer.out_proj.weight for b in model.stack.blocks]
    grads = torch.autograd.grad(loss_fn(model(tokens).logits, tokens), branches + mixers)
    for i in range(3):
        assert math.isclose(got["attn_out"][i], float(grads[i].norm()), rel_tol=1e-5)
        assert not math.isclose(got["attn_out"][i], float(grads[3 + i].norm()), rel_tol=1e-2)
    assert last_parameter_name(model, "attn_out") == "stack.blocks.2.attn.out_proj.weight"
