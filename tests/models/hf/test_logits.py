"""Every supported family, loaded through ``models.hf.load``, gives the logits of ``transformers``' own
forward on the same saved checkpoint (float32, 1e-4 relative to the largest logit), with and without
padding, from one file and from shards with their index."""

import pytest
import torch
from hf_models import FAMILIES, VOCAB, make

from models.hf import load, plan

RTOL = 1e-4
ENC_DEC = ("t5", "t5_gated")


def rel_err(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def batch(seed=1, B=2, L=12):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (B, L), generator=g)


def reference(hf, family, ids, mask=None, tgt=None):
    with torch.no_grad():
        if family in ENC_DEC:
            return hf(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
        return hf(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_match_transformers(saved, family):
    folder, hf = saved(family)
    ckpt = load(folder)
    ids, tgt = batch(), batch(seed=2, L=7)
    want = reference(hf, family, ids, tgt=tgt)
    got = ckpt.logits(ids, decoder_ids=tgt) if family in ENC_DEC else ckpt.logits(ids)
    assert got.shape == want.shape
    assert rel_err(got, want) < RTOL, family
    # the catalogue model is an ordinary catalogue model: its own call gives the same logits
    out = ckpt.model(ids, tgt) if family in ENC_DEC else ckpt.model(ids)
    assert rel_err(out.logits.detach(), got) < 1e-6


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_match_with_padding(saved, family):
    folder, hf = saved(family)
    ckpt = load(folder)
    ids, tgt = batch(), batch(seed=2, L=7)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second row is 7 tokens, right-padded
    ids[1, 7:] = 0
    want = reference(hf, family, ids, mask, tgt)
    got = ckpt.logits(ids, attention_mask=mask, decoder_ids=tgt)
    real = mask.bool() if family not in ENC_DEC else torch.ones_like(tgt, dtype=torch.bool)
    assert rel_err(got[real], want[real]) < RTOL, family
    # padding changes what the padded row sees: without the mask the answer differs (the test can fail)
    unmasked = ckpt.logits(ids, decoder_ids=tgt)
    if family in ("bert", "t5", "t5_gated"):
        assert rel_err(unmasked[1][real[1]], want[1][real[1]]) > 1e-3


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5"])
def test_sharded_checkpoint_loads_the_same(tmp_path, family):
    hf = make(family, tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    ckpt = load(tmp_path)
    ids, tgt = batch(), batch(seed=2, L=7)
    got = ckpt.logits(ids, decoder_ids=tgt) if family in ENC_DEC else ckpt.logits(ids)
    assert rel_err(got, reference(hf, family, ids, tgt=tgt)) < RTOL


@pytest.mark.parametrize("family", list(FAMILIES))
def test_parameter_count_and_plan(saved, family):
    folder, hf = saved(family)
    p = plan(folder)
    ckpt = load(folder)
    assert p.n_params == ckpt.n_params == sum(t.numel() for t in ckpt.model.parameters())
    assert p.n_bytes == 4 * p.n_params
    hf_count = sum(t.numel() for t in hf.parameters())
    cfg = p.config
    if family == "bert":  # the token-type table is folded into the position table (one segment)
        hf_count -= hf.config.type_vocab_size * cfg.d_model
    if family == "t5":  # zero FFN biases, and the head stored as the scaled embedding
        hf_count += (cfg.n_encoder_layers + cfg.n_decoder_layers) * (cfg.d_ff + cfg.d_model) + VOCAB * cfg.d_model
    if family == "t5_gated":  # zero-free gated FFN; the head is tied and unscaled (scale_decoder_outputs false)
        assert any("tied" in n for n in p.notes)
    assert ckpt.n_params == hf_count


def test_sliding_window_and_gqa_map_onto_catalogue_choices(saved):
    cfg = plan(saved("mistral")[0]).config
    assert (cfg.attention, cfg.window, cfg.n_kv_heads, cfg.position) == ("sliding_window", 4, 2, "rope")
    qwen = plan(saved("qwen2")[0]).config
    assert (qwen.attn_bias, qwen.attention) == ("qkv", "full")
    smol = plan(saved("smollm")[0])
    assert smol.config.rope_base == 100000.0 and smol.config.n_kv_heads == 1
    assert any("tied" in n for n in smol.notes)


def test_linear_rope_scaling_is_position_interpolation(tmp_path):
    hf = make("llama", tmp_path, rope_scaling={"rope_type": "linear", "factor": 4.0})
    ckpt = load(tmp_path)
    assert ckpt.config.rope_scale == 4.0
    ids = batch()
    assert rel_err(ckpt.logits(ids), reference(hf, "llama", ids)) < RTOL


def test_gpt2_without_score_scaling(tmp_path):
    hf = make("gpt2", tmp_path, scale_attn_weights=False)
    ids = batch()
    assert rel_err(load(tmp_path).logits(ids), reference(hf, "gpt2", ids)) < RTOL


def test_float64_load_agrees_closer(saved):
    folder, hf = saved("llama")
    ids = batch()
    got = load(folder, dtype=torch.float64).logits(ids)
    assert got.dtype == torch.float64
    assert rel_err(got.float(), reference(hf, "llama", ids)) < RTOL


def test_t5_v11_config_with_its_own_lm_head(tmp_path):
    """A T5 v1.1 / Flan-T5 folder written before transformers 5: ``tie_word_embeddings`` false, no
    ``scale_decoder_outputs``, and a separate ``lm_head.weight``: logits are the decoder's final hidden
    state times that head, unscaled."""
    import json

    from safetensors.torch import load_file, save_file

    hf = make("t5_gated", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.pop("scale_decoder_outputs")
    cfg["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(tmp_path / "model.safetensors")
    head = torch.randn(VOCAB, 32, generator=torch.Generator().manual_seed(3))
    tensors["lm_head.weight"] = head
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ids, tgt = batch(), batch(seed=2, L=7)
    with torch.no_grad():
        hidden = hf(input_ids=ids, decoder_input_ids=tgt, output_hidden_states=True).decoder_hidden_states[-1]
    ckpt = load(tmp_path)
    assert any("lm_head" in n for n in ckpt.notes)
    assert rel_err(ckpt.logits(ids, decoder_ids=tgt), hidden @ head.T) < RTOL
