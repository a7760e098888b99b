"""Pretrained checkpoints as the analyses draw them (``explorer.analysis.weights.checkpoints`` and
``explorer.analysis.surgery``), against the model the checkpoint was written from: its tokens, attention and
loss computed here with plain PyTorch, and ``models.surgery`` as the reference of a K/V merge."""

import math
import shutil

import pytest
import torch
import torch.nn.functional as F

from explorer.analysis import attention_maps
from explorer.analysis import surgery as analysis_surgery
from explorer.analysis.gradients.norms import text_gradient_norms
from explorer.analysis.weights import checkpoints
from explorer.runtime.text import model_input
from models import ConfigError, build_model, surgery

TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it."


def test_offered_names_and_hostile_ids(tiny, tmp_path, monkeypatch):
    ckpt, *_ = tiny
    assert ckpt in checkpoints.offered()
    for bad in ("../tiny", "/etc/passwd", "tiny/../../x", "a" * 500, "", None, 3, "hub:../../x", "upload:abc"):
        with pytest.raises(ConfigError) as e:
            checkpoints.load(bad)
        assert e.value.field == "checkpoint"
    with pytest.raises(ConfigError, match="EXPLORER_HUB_DOWNLOADS"):
        checkpoints.load("hub:someone/model")
    with pytest.raises(ConfigError, match="offers"):
        checkpoints.load("not-there")


def test_tokens_and_attention_are_the_written_models(tiny):
    ckpt, model, cfg, tok = tiny
    loaded = checkpoints.load(ckpt)
    assert loaded.config == cfg and loaded.n_params == sum(p.numel() for p in model.parameters())
    w = analysis_surgery.weights_for(loaded.config, checkpoint=ckpt)
    maps = attention_maps(loaded.config, TEXT, weights=w)
    ids = tok.encode(TEXT)
    assert maps.tokens == tok.pieces(ids) and "␣password" in maps.tokens and maps.ids == ids
    with torch.no_grad():
        ref = model(torch.tensor([ids]), return_attention=True)
    for n, layer in enumerate(ref.layers):
        torch.testing.assert_close(torch.from_numpy(maps.attention[n]), layer.attention[0].float(), atol=1e-6, rtol=0)
    assert maps.summary()["vocabulary"] == "tokenizer"


def test_model_input_through_a_tokenizer_caps_tokens(tiny):
    ckpt, model, cfg, tok = tiny
    inp = model_input(cfg, TEXT * 20, max_bytes=50, tokenizer=tok)
    assert inp.ids("tokens") == tuple(tok.encode(TEXT * 20)[:50]) and inp.truncated
    assert inp.labels("tokens") == tuple(tok.pieces(inp.ids("tokens")))
    assert not model_input(cfg, TEXT, tokenizer=tok).truncated


def test_only_surgery_safe_changes_are_accepted(tiny):
    ckpt, model, cfg, tok = tiny
    for field, value in (("ffn", "gelu"), ("norm", "layernorm"), ("d_model", 64), ("position", "alibi")):
        with pytest.raises(ConfigError) as e:
            analysis_surgery.config_for(ckpt, {field: value})
        assert e.value.field == field and "checkpoint 'tiny'" in str(e.value)
    moved = analysis_surgery.config_for(ckpt, {"attention": "sliding_window", "window": 4, "n_sinks": 2})
    assert (moved.attention, moved.window, moved.n_sinks, moved.d_model) == ("sliding_window", 4, 2, cfg.d_model)


def _loss(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return F.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()


def test_loss_change_matches_plain_pytorch(tiny):
    ckpt, model, cfg, tok = tiny
    window = analysis_surgery.config_for(ckpt, {"attention": "sliding_window", "window": 3})
    change = analysis_surgery.loss_change(window, TEXT, checkpoint=ckpt)
    ids = tok.encode(TEXT)
    params = dict(model.named_parameters())
    after = surgery.transplant(params, cfg, window)  # the catalogue's own surgery, as the reference
    (tb, ta), (hb, _ha) = change.text, change.heldout
    assert tb.nats == pytest.approx(_loss(model, ids), rel=1e-5)
    assert ta.nats == pytest.approx(_loss(after, ids), rel=1e-5)
    assert ta.nats != pytest.approx(tb.nats, rel=1e-6)  # a 3-key window matters
    assert change.perplexity()["text"][0] == pytest.approx(math.exp(tb.nats))
    assert change.unit == "nats/token" and change.kind == "checkpoint" and change.changed == ("attention", "window")
    # the text is read whole and says its length against the trained length; the held-out passage is read in
    # windows of the trained length, the mean of the plain per-window losses
    L = analysis_surgery.checkpoint_origin(ckpt).trained_length
    assert (tb.tokens, tb.length, tb.trained_length, tb.past) == (len(ids), len(ids), L, len(ids) > L)
    held = tok.encode(analysis_surgery.heldout_text().decode("utf-8", errors="ignore"))
    windows = [held[i : i + L] for i in range(0, len(held) // L * L, L)]
    assert hb.length == L and not hb.past and "the trained length" in hb.reading()
    assert hb.nats == pytest.approx(sum(_loss(model, w) for w in windows) / len(windows), rel=1e-4)
    assert analysis_surgery.loss_change(cfg, TEXT, checkpoint=ckpt) is None  # no change, nothing to say


def test_merged_kv_heads_are_the_mean_of_the_pair(tiny):
    ckpt, model, cfg, tok = tiny
    mqa = analysis_surgery.config_for(ckpt, {"n_kv_heads": 1})
    w = analysis_surgery.weights_for(mqa, checkpoint=ckpt)
    ref = surgery.transfer(dict(model.named_parameters()), cfg, mqa)
    for name, t in ref.items():
        torch.testing.assert_close(w.tensors[name], t.detach())
    assert w.surgery == ("n_kv_heads",) and w.checkpoint == ckpt and w.tokenizer is not None
    # the other tensors are the checkpoint's own, not copies
    base = checkpoints.load(ckpt).weights.tensors
    assert w.tensors["embed.weight"].data_ptr() == base["embed.weight"].data_ptr()


def test_text_gradients_match_a_plain_backward(tiny):
    ckpt, model, cfg, tok = tiny
    ids = tok.encode(TEXT)
    w = analysis_surgery.weights_for(cfg, checkpoint=ckpt)
    got = text_gradient_norms(cfg, ids, w)
    ref = build_model(cfg)
    ref.load_state_dict(model.state_dict())
    logits = ref(torch.tensor([ids])).logits[0]
    F.cross_entropy(logits[:-1], torch.tensor(ids[1:])).backward()
    assert got["loss"] == pytest.approx(F.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item(), rel=1e-5)
    outs = [m.weight.grad.norm().item() for n, m in ref.named_modules() if n.endswith("attn.out_proj")]
    assert len(outs) == cfg.n_layers
    assert got["attn_out"] == pytest.approx(outs, rel=1e-4)


def test_parameter_cap_and_budget_refuse_before_reading_weights(tiny, monkeypatch):
    ckpt, *_ = tiny
    from models import hf

    def no_read(*a, **k):
        raise AssertionError("the weights were read")

    monkeypatch.setattr(hf, "load", no_read)
    monkeypatch.setenv(checkpoints.MAX_PARAMS_ENV, "1000")
    with pytest.raises(ConfigError, match="at most 0 M parameters|parameters") as e:
        checkpoints.load(ckpt)
    assert e.value.field == "checkpoint"
    monkeypatch.delenv(checkpoints.MAX_PARAMS_ENV)
    monkeypatch.setenv("EXPLORER_REQUEST_BUDGET", "4k")
    with pytest.raises(ConfigError, match="memory budget"):
        checkpoints.load(ckpt)


def test_table_rows_keep_the_weights_and_score_them(tiny, monkeypatch):
    ckpt, *_ = tiny
    from explorer.analysis.surgery import tabulate as table_module

    full = table_module.heldout_ids
    monkeypatch.setattr(table_module, "heldout_ids", lambda origin: full(origin)[:256])
    result = analysis_surgery.table(analysis_surgery.checkpoint_origin(ckpt), lengths=(16,))
    labels = [r["label"] for r in result["rows"]]
    assert labels[0] == "full (as trained)" and any("sinks" in lab for lab in labels)
    assert any(lab.startswith("K/V heads 2 -> 1") for lab in labels) and any("RoPE" in lab for lab in labels)
    loss = {r["label"]: r["loss"]["16"] for r in result["rows"]}
    assert all(v is not None and 0 < v < 10 for v in loss.values())
    assert result["unit"] == "nats/token" and result["kind"] == "checkpoint" and result["scored_tokens"] == 256


def test_folder_without_tokenizer_still_draws_ids(tiny_root, tmp_path, monkeypatch):
    root, model, cfg, tok = tiny_root
    shutil.copytree(root / "tiny", tmp_path / "notok")
    (tmp_path / "notok" / "tokenizer.json").unlink()
    monkeypatch.setenv(checkpoints.ROOTS_ENV, str(tmp_path))
    checkpoints._LOADED.clear()
    loaded = checkpoints.load("notok")
    assert loaded.tokenizer is None
    checkpoints._LOADED.clear()
