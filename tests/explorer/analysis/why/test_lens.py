"""The logit lens against a plain re-implementation of the forward, and its last row against the model's own
output (bit for bit)."""

import pytest
import torch
from plain_forward import PLAIN, perturbed, plain_run, sample_ids

from explorer.analysis.why.lens import logit_lens
from models import ConfigError, ModelConfig, build_model


def test_rows_match_a_plain_forward_and_the_last_row_is_the_model_output():
    model, ids = perturbed(), sample_ids()
    lens = logit_lens(model, ids, k=3)
    ref = plain_run(model, ids)
    assert lens.rows == ("embedding", "layer 0", "layer 1")
    for r, x in enumerate(ref["streams"]):
        logp = torch.log_softmax(model.final_norm(x.float()) @ model.head.weight.T, -1).double()
        lp = logp[:-1].gather(1, ids[0, 1:, None]).squeeze(1)
        torch.testing.assert_close(lens.target_prob[r].double(), lp.exp(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(lens.loss[r].double(), -lp.mean(), atol=1e-5, rtol=1e-5)
        rank = (logp[:-1] > lp[:, None] + 1e-9).sum(1)
        assert torch.equal(lens.target_rank[r], rank)
        assert torch.equal(lens.top_ids[r, :, 0], logp.argmax(-1))
    own = torch.log_softmax(model(ids).logits[0].float(), -1)
    assert torch.equal(lens.target_prob[-1], own[:-1].gather(1, ids[0, 1:, None]).squeeze(1).exp())
    assert torch.equal(lens.top_probs[-1], own.topk(3, -1).values.exp())


def test_post_ln_reads_each_block_output_and_json_is_plain():
    model = perturbed(norm_placement="post")
    ids = sample_ids(3)
    lens = logit_lens(model, ids)
    out = model(ids, return_attention=False)
    assert "post-LN" in lens.stream
    assert torch.equal(lens.top_ids[2], torch.log_softmax(out.logits[0].float(), -1).topk(5, -1).indices)
    # the row after layer 0 is the head applied to layer 1's input, which the model records independently
    hidden = out.hidden_states[1][0]
    assert torch.equal(lens.top_ids[1, :, 0], (model.head(hidden)).argmax(-1))
    js = lens.to_json()
    assert len(js["loss_per_layer"]) == 3 and len(js["top_tokens"][0]) == 30 and js["unit"] == "nats per token"


def test_encoder_only_scores_the_token_itself():
    cfg = ModelConfig(**{**PLAIN, "architecture": "encoder_only", "causal": False})
    model = build_model(cfg).eval()
    ids = sample_ids(4)
    lens = logit_lens(model, ids)
    own = torch.log_softmax(model(ids).logits[0].float(), -1)
    assert torch.equal(lens.target_prob[-1], own.gather(1, ids[0, :, None]).squeeze(1).exp())
    assert torch.equal(lens.loss[-1], -own.gather(1, ids[0, :, None]).mean())


def test_other_layer_structures_are_refused():
    model = build_model(ModelConfig(**{**PLAIN, "layer": "macaron"})).eval()
    with pytest.raises(ConfigError) as e:
        logit_lens(model, sample_ids())
    assert e.value.field == "layer"
