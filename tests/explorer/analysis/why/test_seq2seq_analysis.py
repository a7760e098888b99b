"""The encoder-decoder's experiments against the model called directly and plain autograd."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from explorer.analysis import (
    attention_maps,
    gradient_norms,
    input_batch,
    kv_cache_bytes,
    latency_memory_sweep,
    model_summary,
)
from explorer.runtime.text import model_input
from models import ConfigError, ModelConfig, build_model


def small(**kw):
    base = dict(
        architecture="encoder_decoder",
        n_layers=2,
        n_encoder_layers=2,
        n_decoder_layers=3,
        d_model=32,
        n_heads=2,
        d_ff=64,
        vocab_size=256,
    )
    base.update(kw)
    return ModelConfig(**base)


def split(text, sep, max_bytes=256):
    inp = model_input(small(), text, sep, max_bytes)
    return list(inp.ids("source")), list(inp.ids("target")), inp.truncated


def test_split_at_first_separator_into_bytes():
    src, tgt, cut = split("ab=>c=>é", "=>")
    assert src == list(b"ab") and tgt == list("c=>é".encode()) and not cut
    src, tgt, cut = split("abc | xy", " | ")
    assert bytes(src) == b"abc" and bytes(tgt) == b"xy"
    src, tgt, cut = split("a" * 10 + "|" + "b" * 3, "|", max_bytes=8)
    assert len(src) == 4 and len(tgt) == 3 and cut
    assert split("a=>b", "")[:2] == ([ord("a")], [ord("b")])  # an emptied box is the default separator


@pytest.mark.parametrize(
    "text, sep, field",
    [
        ("no separator here", "=>", "separator"),
        ("=>tgt", "=>", "text"),
        ("src=>", "=>", "text"),
        ("a\nb", "\n", "separator"),
    ],
)
def test_bad_split_names_the_field(text, sep, field):
    with pytest.raises(ConfigError) as err:
        split(text, sep)
    assert err.value.field == field


def test_three_kinds_of_maps_match_the_model():
    cfg = small()
    maps = attention_maps(cfg, "hello=>olleh!!")
    src, tgt = torch.tensor([list(b"hello")]), torch.tensor([list(b"olleh!!")])
    with torch.no_grad():
        out = build_model(cfg).eval()(src, tgt, return_attention=True)
    assert maps.tokens == list("olleh!!") and maps.stacks["cross"].key_tokens == list("hello")
    for got, want in (
        (maps.attention, out.attentions),
        (maps.stacks["encoder"].attention, out.encoder_attentions),
        (maps.stacks["cross"].attention, out.cross_attentions),
    ):
        ref = torch.stack([a[0] for a in want]).numpy()  # (layers, h, Lq, Lk)
        np.testing.assert_allclose(got, ref, atol=1e-6)
    cross = maps.stacks["cross"].attention
    assert cross.shape == (3, 2, 7, 5)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)  # rows sum to one over the source
    assert np.all(np.triu(maps.attention, 1) == 0)  # the decoder never sees a future target token
    assert np.triu(maps.stacks["encoder"].attention, 1).max() > 0  # the encoder is bidirectional
    assert maps.mask_kind == "pattern" and maps.mask.sum() == 7 * 8 // 2
    summary = json.loads(json.dumps(maps.summary()))
    assert summary["cross_maps"]["n_keys"] == 5 and summary["cross_maps"]["row_sums_ok"]
    assert summary["encoder_maps"]["n_layers"] == 2 and summary["n_layers"] == 3


def test_decoder_only_maps_have_no_stacks():
    maps = attention_maps(ModelConfig(n_layers=1, d_model=32, n_heads=2), "a=>b")
    assert maps.stacks is None and "cross_maps" not in maps.summary() and len(maps.tokens) == 4


def test_gradient_norms_per_stack_match_backward():
    cfg = small()
    got = gradient_norms(cfg, seq_len=6, batch=2, seed=3)
    model = build_model(cfg).train()
    src, tgt = input_batch(cfg, 6, 2, 3)
    torch.manual_seed(3)
    logits = model(src, tgt).logits
    F.cross_entropy(logits[:, :-1].reshape(-1, 256), tgt[:, 1:].reshape(-1)).backward()
    blocks = list(model.encoder.blocks) + list(model.decoder.blocks)
    assert got["stack"] == ["encoder"] * 2 + ["decoder"] * 3
    np.testing.assert_allclose(got["attn_out"], [b.attn.out_proj.weight.grad.norm().item() for b in blocks], rtol=1e-4)
    np.testing.assert_allclose(
        got["cross_out"][2:], [b.cross.out_proj.weight.grad.norm().item() for b in model.decoder.blocks], rtol=1e-4
    )
    assert got["cross_out"][:2] == [None, None]
    ffn = [sum(p.grad.pow(2).sum() for p in b.ffn.output_parameters()).sqrt().item() for b in blocks]
    np.testing.assert_allclose(got["ffn_out"], ffn, rtol=1e-4)
    assert len(got["residual"]) == 5 and all(r > 0 for r in got["residual"])


def test_kv_cache_counts_decoder_layers():
    cfg = small()
    got = kv_cache_bytes(cfg, [10])
    assert got["current"] == [2 * 3 * cfg.kv_heads * cfg.d_head * 10 * 2]


def test_summary_counts_every_parameter():
    cfg = small()
    s = model_summary(cfg, seq_len=8)
    assert s["parameters"] == sum(p.numel() for p in build_model(cfg).parameters())
    assert s["flops_per_token"] > 0


@pytest.mark.parametrize(
    "axis, pairs", [("both", [(4, 4), (8, 8)]), ("source", [(4, 6), (8, 6)]), ("target", [(6, 4), (6, 8)])]
)
def test_sweep_times_source_and_target_lengths(axis, pairs):
    from explorer.analysis.cost.sweep import _inputs, input_lengths

    cfg = small(n_decoder_layers=1, n_encoder_layers=1)
    recs = latency_memory_sweep(cfg, [4, 8], seq2seq_axis=axis, fixed_len=6, repeats=1, min_repeats=1)
    assert [(r["src_len"], r["tgt_len"]) for r in recs] == pairs
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["peak_bytes"] > 0 for r in recs), recs
    src, tgt = _inputs(cfg, input_lengths(cfg, 8, axis, 6), 2, "cpu", 8)
    assert (src.shape[1], tgt.shape[1]) == pairs[1] and src.shape[0] == tgt.shape[0] == 2


def test_sweep_refuses_an_unknown_axis():
    with pytest.raises(ConfigError) as err:
        latency_memory_sweep(small(), [4], seq2seq_axis="sideways")
    assert err.value.field == "seq2seq_axis"


def test_model_card_splits_the_stacks():
    from explorer.figures import readings as report

    cfg = small()
    s = model_summary(cfg, seq_len=8)
    model = build_model(cfg)
    st = s["stacks"]
    assert (st["encoder_layers"], st["decoder_layers"]) == (2, 3)
    shared = sum(p.numel() for p in model.embed.parameters()) + sum(
        p.numel() for p in model.head.parameters() if all(p is not q for q in model.embed.parameters())
    )
    assert st["encoder_params"] + st["decoder_params"] + shared == s["parameters"]
    assert st["cross_params"] == 3 * 4 * 32 * 32  # q, k, v, out projections of d_model x d_model per layer
    card = report.model_markdown(s)
    assert "encoder 2 layers" in card and "decoder 3 layers" in card
    assert model_summary(ModelConfig(n_layers=1, d_model=32, n_heads=2), 8)["stacks"] is None
