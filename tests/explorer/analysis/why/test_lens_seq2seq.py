"""The logit lens and direct logit attribution of an encoder-decoder, read on its decoder. References: the model's
own logits (last row, bit for bit), the same weights with fewer decoder layers (an earlier row), the embedding
through the decoder's final norm and head in plain PyTorch (first row), and the attribution's parts summed
against the model's logit."""

import pytest
import torch

from explorer.analysis.why.attribution import attribute
from explorer.analysis.why.lens import logit_lens
from explorer.analysis.why.seq2seq_ids import START, Seq2SeqIds, pair_ids, reversal_probes
from models import ConfigError, ModelConfig, build_model

SMALL = dict(
    architecture="encoder_decoder",
    d_model=32,
    n_heads=4,
    n_layers=2,
    n_encoder_layers=2,
    max_len=64,
    vocab_size=128,
    position="rope",
    seed=7,
)


def perturbed(**fields):
    model = build_model(ModelConfig(**{**SMALL, **fields}))
    with torch.no_grad():  # non-trivial norms and biases, so that a term forgotten shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def sample(seed=0, n=9):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(48, 112, (n,), generator=g).tolist()
    return pair_ids(src, src[::-1])


@torch.no_grad()
def test_lens_rows_are_the_decoder_read_through_its_final_norm_and_head():
    model, ids = perturbed(attn_bias="all"), sample()
    lens = logit_lens(model, ids, k=3)
    assert lens.rows == ("embedding", "layer 0", "layer 1")
    tgt = ids.target[0]
    assert lens.target_ids == tuple(tgt[1:].tolist()) and lens.positions == tuple(range(len(tgt) - 1))
    assert tgt[0] == START and lens.source == tuple(ids.source[0].tolist())
    own = torch.log_softmax(model(ids.source, ids.target).logits[0].float(), -1)
    assert torch.equal(lens.target_prob[-1], own[:-1].gather(1, tgt[1:, None]).squeeze(1).exp())
    assert torch.equal(lens.top_probs[-1], own.topk(3, -1).values.exp())
    # the embedding row in plain PyTorch (RoPE adds nothing to the stream): head(norm(E[tgt]))
    emb = torch.log_softmax(model.dec_norm(model.embed.weight[tgt]) @ model.head.weight.T, -1)
    torch.testing.assert_close(lens.target_prob[0], emb[:-1].gather(1, tgt[1:, None]).squeeze(1).exp())
    # the row after decoder layer 0 is the output of the same weights with one decoder layer
    short = build_model(ModelConfig(**{**SMALL, "attn_bias": "all", "n_decoder_layers": 1})).eval()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("decoder.blocks.1.")}
    short.load_state_dict(state)
    one = torch.log_softmax(short(ids.source, ids.target).logits[0].float(), -1)
    torch.testing.assert_close(lens.target_prob[1], one[:-1].gather(1, tgt[1:, None]).squeeze(1).exp())
    torch.testing.assert_close(lens.loss[1].double(), -one[:-1].gather(1, tgt[1:, None]).mean().double())
    js = lens.to_json()
    assert js["source_tokens"][0] == chr(ids.source[0, 0]) and "decoder" in js["stream"]


@torch.no_grad()
@pytest.mark.parametrize("fields", [dict(attn_bias="all"), dict(norm="rmsnorm"), dict(norm_placement="none")])
def test_attribution_parts_add_up_to_the_decoder_logit(fields):
    model, ids = perturbed(**fields), sample(1)
    logits = model(ids.source, ids.target).logits[0].double()
    for p in (0, 4, 8):
        a = attribute(model, ids, p)
        assert a.token == int(ids.target[0, p + 1]) and a.cross.shape == (2, 4) and a.heads.shape == (2, 4)
        assert abs(a.logit - float(logits[p, a.token])) < 1e-5
        assert abs(a.total - a.logit) < 1e-4 * max(1.0, abs(a.logit))
        b = attribute(model, ids, p, alternative=5)
        assert abs(b.total - float(logits[p, a.token] - logits[p, 5])) < 1e-4 * max(1.0, abs(b.logit))
    js = attribute(model, ids, 2).to_json()
    assert len(js["cross"]) == 2 and "cross-attention" in js["note"]


@torch.no_grad()
def test_cross_heads_carry_the_source_into_the_logit():
    """With the cross-attention output projections zeroed, the source changes nothing: the cross terms vanish
    and the other terms still add up (the encoder reaches the logit only through the cross heads)."""
    model = perturbed()
    for block in model.decoder.blocks:
        block.cross.out_proj.weight.zero_()
    a = sample(2)
    b = Seq2SeqIds(torch.flip(a.source, [1]), a.target)
    x, y = attribute(model, a, 3), attribute(model, b, 3)
    assert float(x.cross.abs().max()) == 0.0 and torch.equal(x.heads, y.heads) and x.logit == y.logit


def test_the_ids_must_fit_the_arrangement():
    model = perturbed()
    with pytest.raises(ConfigError) as e:
        logit_lens(model, torch.zeros(1, 5, dtype=torch.long))
    assert e.value.field == "ids"


def test_reversal_probes_are_the_reverse_task():
    from explorer.analysis.why import seq2seq_ids
    from explorer.training import tasks

    assert seq2seq_ids.START == tasks.SEP and seq2seq_ids.SYMBOLS == tasks.SYMBOLS
    p = reversal_probes(3, 7, seed=1)
    assert p.source.shape == (3, 7) and p.target.shape == (3, 8)
    assert torch.equal(p.target[:, 1:], p.source.flip(1)) and bool((p.target[:, 0] == START).all())
    assert int(p.source.min()) >= ord("0") and int(p.source.max()) <= ord("o")
