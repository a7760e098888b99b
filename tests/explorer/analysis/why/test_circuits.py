"""Head circuits: the OV and QK matrices against the modules' own calls, the copying scores on a constructed
copier, and composition scores on constructed aligned and orthogonal heads (Frobenius-norm ratio 1 and 0)."""

import math

import pytest
import torch
from plain_forward import PLAIN, perturbed

from explorer.analysis.why.circuits import composition, frequent_tokens, head_circuits
from models import ConfigError, ModelConfig, build_model

BARE = dict(PLAIN, norm_placement="none", attn_bias="none", vocab_size=8, position="none")


@torch.no_grad()
def test_ov_and_qk_match_the_modules_with_the_norms_linear_part():
    model = perturbed(position="rope")
    c = head_circuits(model, tokens=tuple(range(40)))
    blk = model.stack.blocks[1]
    u = blk.res_attn.norm(model.embed.weight)  # (V, d): each embedding through the block's pre-norm
    h, dh = 2, 8
    v = (u @ blk.attn.v_proj.weight.T)[:, h * dh : (h + 1) * dh]
    write = v @ blk.attn.out_proj.weight[:, h * dh : (h + 1) * dh].T  # (V, d)
    g = model.final_norm.weight
    ov = ((write - write.mean(-1, keepdim=True)) * g) @ model.head.weight.T
    torch.testing.assert_close(c.ov[1, h].float(), ov, atol=1e-5, rtol=1e-4)
    q = (u @ blk.attn.q_proj.weight.T)[:, h * dh : (h + 1) * dh]
    k = (u @ blk.attn.k_proj.weight.T)[:, h * dh : (h + 1) * dh]
    torch.testing.assert_close(c.qk[1, h].float(), q @ k.T / math.sqrt(dh), atol=1e-5, rtol=1e-4)
    flipped = perturbed(position="rope")
    flipped.stack.blocks[0].attn.v_proj.weight.neg_()
    torch.testing.assert_close(head_circuits(flipped, tuple(range(40))).eigen[0], -c.eigen[0], atol=1e-6, rtol=0)


@torch.no_grad()
def test_post_ln_circuits_start_from_the_embedding_itself():
    model = perturbed(norm_placement="post")  # its norms sit after the residual sums, none before attention
    c = head_circuits(model, tokens=tuple(range(40)))
    a = model.stack.blocks[1].attn
    ov = model.embed.weight @ a.v_proj.weight[:8].T @ a.out_proj.weight[:, :8].T @ model.head.weight.T
    torch.testing.assert_close(c.ov[1, 0].float(), ov, atol=1e-5, rtol=1e-4)


@torch.no_grad()
def test_a_constructed_copier_scores_one():
    model = build_model(ModelConfig(**BARE)).eval()
    eye = torch.eye(32)
    model.embed.weight.copy_(eye[:8])
    model.head.weight.copy_(eye[:8])
    attn = model.stack.blocks[0].attn
    attn.v_proj.weight.zero_(), attn.out_proj.weight.zero_()
    attn.v_proj.weight[:8] = eye[:8]  # head 0 reads dimensions 0..7
    attn.out_proj.weight[:, :8] = eye[:, :8]  # and writes them back
    c = head_circuits(model, tokens=tuple(range(8)))
    torch.testing.assert_close(c.ov[0, 0], torch.eye(8, dtype=torch.float64))
    assert float(c.eigen[0, 0]) == pytest.approx(1.0) and float(c.diagonal[0, 0]) == 1.0
    attn.out_proj.weight[:, :8] = -eye[:, :8]  # an anti-copier
    assert float(head_circuits(model, tuple(range(8))).eigen[0, 0]) == pytest.approx(-1.0)


@torch.no_grad()
def test_k_composition_is_one_for_aligned_heads_and_zero_for_orthogonal_ones():
    model = build_model(ModelConfig(**BARE)).eval()
    a0, a1 = model.stack.blocks[0].attn, model.stack.blocks[1].attn
    for lin in (a0.v_proj, a0.out_proj, a1.q_proj, a1.k_proj):
        lin.weight.zero_()
    e = torch.eye(32)
    a0.v_proj.weight[0] = e[1]  # layer 0 head 0: W_OV = e2 e1^T (reads dim 1, writes dim 2)
    a0.out_proj.weight[2, 0] = 1.0
    a1.q_proj.weight[8] = e[3]  # layer 1 head 1: W_QK = e3 e2^T (its keys read dim 2)
    a1.k_proj.weight[8] = e[2]
    k = composition(model, 0, 1, "K")
    assert float(k.scores[0, 1]) == pytest.approx(1.0) and k.top(1)[0][0] == (0, 1)
    assert float(composition(model, 0, 1, "Q").scores[0, 1]) == pytest.approx(0.0)  # queries read dim 3
    a1.k_proj.weight[8] = e[4]  # keys now read a dimension layer 0 does not write
    assert float(composition(model, 0, 1, "K").scores[0, 1]) == pytest.approx(0.0)
    assert 0 < k.baseline < 1 and k.to_json()["top"][0]["score"] == pytest.approx(1.0)


def test_a_large_vocabulary_is_read_on_the_most_frequent_tokens_of_a_text():
    model = perturbed(vocab_size=1000)
    ids = torch.tensor([[5, 9, 9, 700, 9, 5, 3, 700, 700, 700]])
    assert frequent_tokens(ids, 3) == (700, 9, 5)
    c = head_circuits(model, frequent_tokens(ids, 3))
    other = head_circuits(model, (5, 9, 700))  # the same tokens in the other order
    torch.testing.assert_close(c.ov, other.ov.flip(-1, -2))
    torch.testing.assert_close(c.qk, other.qk.flip(-1, -2))
    with pytest.raises(ConfigError) as e:
        head_circuits(model)
    assert e.value.field == "vocab_size"


@pytest.mark.parametrize(
    "fields, call, field",
    [
        ({"vocab_size": 1000}, lambda m: head_circuits(m), "vocab_size"),
        ({"layer": "macaron"}, lambda m: head_circuits(m), "layer"),
        ({}, lambda m: composition(m, 1, 1), "layers"),
        ({}, lambda m: composition(m, kind="X"), "kind"),
        ({}, lambda m: head_circuits(m, tokens=(0, 40)), "tokens"),
    ],
)
def test_requests_outside_the_circuits_are_refused(fields, call, field):
    model = build_model(ModelConfig(**{**PLAIN, **fields})).eval()
    with pytest.raises(ConfigError) as e:
        call(model)
    assert e.value.field == field
