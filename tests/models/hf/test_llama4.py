"""The Llama 4 (text) reader: its choices (chunked RoPE layers and NoPE full layers as a layer schedule, the
weightless per-head query/key norm of the RoPE layers, the NoPE layers' query temperature, the sigmoid-routed
experts with a shared expert, interleaved RoPE read through permuted q/k rows), the logits of transformers' own
eager forward within 1e-4 (absolute, float32) with and without padding, the terms whose absence breaks that
agreement, the language model of a multimodal ``llama4`` folder, and what is refused by name."""

import json
import shutil

import pytest
import torch

from models.errors import ConfigError
from models.hf import load, plan
from models.hf.llama4 import deinterleave_rows

transformers = pytest.importorskip("transformers")

ATOL = 1e-4
VOCAB = 96
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=24,
    intermediate_size_mlp=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    num_local_experts=3,
    num_experts_per_tok=2,
    attention_chunk_size=5,
    max_position_embeddings=64,
    initializer_range=0.2,  # larger than 0.02 so scores, routing and logits are far from uniform
)


def _build(cls="Llama4ForCausalLM", config=None, **changes):
    if config is None:
        config = transformers.Llama4TextConfig(**{**TEXT, **changes})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config).eval()
    with torch.no_grad():  # norms start at 1 and biases at 0: move them so every weight matters
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cache = {}

    def get(**changes):
        key = tuple(sorted((k, json.dumps(v)) for k, v in changes.items()))
        if key not in cache:
            folder = tmp_path_factory.mktemp("llama4")
            model = _build(**changes)
            model.save_pretrained(folder)
            cache[key] = folder, model
        return cache[key]

    return get


def _ids(seed=1, B=2, L=14):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def _want(hf, ids, mask=None):
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask).logits


def _diff(got, want) -> float:
    return float((got - want).abs().max())


def _edit(src, tmp_path, **changes):
    dst = tmp_path / "edited"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_llama4_maps_onto_catalogue_choices(saved):
    c = plan(saved()[0]).config
    assert (c.norm_placement, c.norm, c.norm_eps, c.ffn, c.n_experts, c.top_k, c.d_ff) == (
        "pre",
        "rmsnorm",
        1e-5,
        "moe_llama4",
        3,
        2,
        24,
    )
    assert (c.position, c.attention, c.layer_schedule, c.attention_chunk_size) == (
        "rope",
        "chunked",
        "chunked*3,full:nope",
        5,
    )
    assert (c.qk_norm, c.attn_temp_floor, c.attn_temp_scale, c.rope_base) == ("rms_rope", 8192, 0.1, 500000.0)
    assert (c.n_kv_heads, c.head_dim, c.attn_bias) == (2, None, "none")


CASES = {
    "default": {},
    # temperature tuning acts from position floor_scale - 1 on: a floor of 3 tunes most of the 14 positions
    "tuned": dict(floor_scale=3, attn_scale=0.7),
    "bias_tied_no_qk_norm": dict(attention_bias=True, tie_word_embeddings=True, use_qk_norm=False),
    "nope_every_2nd_top1": dict(no_rope_layer_interval=2, num_experts_per_tok=1, floor_scale=4),
    "explicit_no_rope": dict(no_rope_layers=[0, 1, 1, 0], floor_scale=2),
    "no_chunks": dict(attention_chunk_size=None, floor_scale=3),
    "all_dense": dict(moe_layers=[], head_dim=16),
    # Maverick's layout: every second layer MoE (layers 1, 3), the others Llama4TextMLP of intermediate_size_mlp
    "interleaved_moe": dict(interleave_moe_layer_step=2, floor_scale=3),
    "explicit_moe_layers": dict(moe_layers=[0, 3], no_rope_layer_interval=3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_llama4_logits_match_transformers(saved, case):
    folder, hf = saved(**CASES[case])
    ckpt = load(folder)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) <= ATOL
    right = torch.ones_like(ids)
    right[1, 9:] = 0  # right padding: the same positions
    got, want = ckpt.logits(ids, attention_mask=right), _want(hf, ids, right)
    assert _diff(got[right.bool()], want[right.bool()]) <= ATOL


def test_interleaved_moe_maps_onto_dense_layers(saved):
    c = plan(saved(**CASES["interleaved_moe"])[0]).config
    assert (c.layer_schedule, c.ffn, c.d_ff, c.dense_ffn, c.dense_d_ff) == (
        "chunked:dense,chunked,chunked:dense,full:nope",
        "moe_llama4",
        24,
        "swiglu",
        40,
    )
    assert [c.layer_config(i).ffn for i in range(4)] == ["swiglu", "moe_llama4", "swiglu", "moe_llama4"]


def test_absent_sizes_take_the_config_class_defaults(saved):
    """A config.json without ``num_key_value_heads`` / ``head_dim`` reads ``Llama4TextConfig``'s defaults (8 K/V
    heads, heads of 128), not the MHA / ``hidden / heads`` of other families (transformers 5.24's strict config
    refuses a null for either)."""
    from models.hf.fields import Fields
    from models.hf.llama4 import config

    hf = json.loads((saved()[0] / "config.json").read_text())
    absent, _ = config(Fields({k: v for k, v in hf.items() if k not in ("num_key_value_heads", "head_dim")}))
    theirs = transformers.Llama4TextConfig(
        **{k: v for k, v in TEXT.items() if k not in ("num_key_value_heads", "head_dim")}
    )
    assert (absent["n_kv_heads"], absent["head_dim"]) == (theirs.num_key_value_heads, theirs.head_dim) == (8, 128)


def test_llama4_left_padding_matches_transformers(saved):
    """Left padding: transformers counts chunks from the first real token (``chunked_overlay``'s left padding
    offset) and RoPE is relative, as a row run on its own tokens; the temperature, counted from the padded start
    there, is the same below ``floor_scale`` (the default 8192)."""
    folder, hf = saved()
    ckpt = load(folder)
    ids = _ids(L=13)
    left = torch.ones_like(ids)
    left[0, :4] = 0
    got, want = ckpt.logits(ids, attention_mask=left), _want(hf, ids, left)
    assert _diff(got[left.bool()], want[left.bool()]) <= ATOL


def test_the_temperature_case_reaches_past_the_floor(saved):
    """The tuned case is no no-op: transformers' own logits move when its temperature tuning is switched off."""
    _, hf = saved(**CASES["tuned"])
    ids = _ids()
    tuned = _want(hf, ids)
    hf.config.attn_temperature_tuning = False
    for layer in hf.model.layers:
        layer.self_attn.attn_temperature_tuning = False
    try:
        assert _diff(_want(hf, ids), tuned) > 1e-2
    finally:
        for layer in hf.model.layers:
            layer.self_attn.attn_temperature_tuning = True


def _broken(ckpt, **changes):
    """The checkpoint's weights in a model of the same config with ``changes``."""
    from models.model import build_model

    model = build_model(ckpt.config.replace(**changes)).eval()
    model.load_state_dict(ckpt.model.state_dict())
    return model


@pytest.mark.parametrize(
    "case, changes",
    [
        ("tuned", dict(attn_temp_floor=None)),
        ("tuned", dict(attn_temp_scale=0.1)),
        ("default", dict(qk_norm="none")),
        ("default", dict(attention_chunk_size=64)),
        ("default", dict(layer_schedule="chunked*3,full")),  # the NoPE layer rotated (and its temperature off)
        ("default", dict(top_k=1)),
    ],
)
def test_each_llama4_term_matters(saved, case, changes):
    folder, hf = saved(**CASES[case])
    ckpt = load(folder)
    if "layer_schedule" in changes:
        changes["attn_temp_floor"] = None  # no NoPE layer left for it to tune
    ids = _ids()
    with torch.no_grad():
        assert _diff(_broken(ckpt, **changes)(ids).logits, _want(hf, ids)) > 1e-2


def test_interleaved_rope_needs_the_row_permutation(saved):
    """Loaded without the permutation (each RoPE layer's q / k rows as stored), rotate-half RoPE reads another
    function; the permutation itself is the even dims of each head, then the odd ones."""
    folder, hf = saved()
    ckpt = load(folder)
    t = torch.arange(16.0)[:, None]  # two heads of 8 rows
    assert deinterleave_rows(t, 8).flatten().tolist() == [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]
    with torch.no_grad():
        for i, block in enumerate(ckpt.model.stack.blocks):
            if ckpt.config.layer_config(i).position == "rope":
                src = hf.model.layers[i].self_attn
                block.attn.q_proj.weight.copy_(src.q_proj.weight)
                block.attn.k_proj.weight.copy_(src.k_proj.weight)
    ids = _ids()
    assert _diff(ckpt.logits(ids), _want(hf, ids)) > 1e-2


def test_multimodal_llama4_reads_the_language_model(tmp_path):
    """A ``Llama4ForConditionalGeneration`` folder: ``text_config`` read, the vision tower's tensors left unread,
    the logits of its language model on text (its forward embeds the ids and calls ``language_model``; 5.24's
    ``forward`` itself fails at its return on text-only input, reading ``image_outputs`` of the text output)."""
    vision = dict(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=28,
        patch_size=14,
        vision_output_dim=32,
        projector_input_dim=32,
        projector_output_dim=32,
        pixel_shuffle_ratio=0.5,
    )
    config = transformers.Llama4Config(
        text_config=dict(TEXT, floor_scale=3),
        vision_config=vision,
        image_token_index=VOCAB - 1,
        boi_token_index=VOCAB - 3,
        eoi_token_index=VOCAB - 2,
    )
    hf = _build("Llama4ForConditionalGeneration", config=config)
    folder = tmp_path / "mm"
    hf.save_pretrained(folder)
    ckpt = load(folder)
    assert ckpt.family == "llama4" and "vision tower" in ckpt.notes[0]
    assert ckpt.n_params == sum(p.numel() for p in hf.language_model.parameters())
    ids = _ids()
    with torch.no_grad():
        want = hf.language_model(inputs_embeds=hf.get_input_embeddings()(ids)).logits
    assert _diff(ckpt.logits(ids), want) <= ATOL
    bad = _edit(folder, tmp_path, text_config="llama4_text")
    with pytest.raises(ConfigError) as e:
        plan(bad)
    assert "text_config" in e.value.field
    huge = tmp_path / "huge"
    shutil.copytree(folder, huge)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["num_hidden_layers"] = 1 << 30  # the text model's sizes are bounded as the top level's are
    (huge / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        plan(huge)
    assert "num_hidden_layers" in e.value.field


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(hidden_act="gelu"), "hidden_act"),
        (
            dict(
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500000.0,
                    "factor": 16.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 1.0,
                    "original_max_position_embeddings": 8,
                }
            ),
            "rope_scaling",
        ),
        (dict(layer_types=["sliding_attention"] * 4), "layer_types"),
        (dict(no_rope_layers=[1, 2, 1, 0]), "no_rope_layers"),
        (dict(no_rope_layers=[1, 1]), "no_rope_layers"),
        (dict(moe_layers="1,3"), "moe_layers"),
        (dict(no_rope_layer_interval=0, no_rope_layers=None), "no_rope_layer_interval"),
        (dict(attention_chunk_size=None), "attention_chunk_size"),  # its layer_types still say chunked
        (dict(num_experts_per_tok=4), "top_k"),
    ],
)
def test_llama4_refusals_name_the_key(saved, tmp_path, changes, field):
    with pytest.raises(ConfigError) as e:
        plan(_edit(saved()[0], tmp_path, **changes))
    assert field in e.value.field
