"""Checkpoints whose layers differ (Qwen2's sliding window from ``max_window_layers`` on, transformers 5's
``layer_types``) load as a catalogue ``layer_schedule`` and give transformers' own logits (float32, 1e-4
relative to the largest logit), with and without padding, on sequences longer than the window."""

import pytest
import torch
from hf_models import VOCAB, make

from models.hf import load, plan
from models.schedule import layer_kinds

RTOL = 1e-4
WINDOW = 4
CASES = {
    # Qwen2: layers 0 .. max_window_layers - 1 full, the rest slide (transformers derives layer_types)
    "qwen2_max_window_layers": dict(
        num_hidden_layers=3, use_sliding_window=True, max_window_layers=1, sliding_window=WINDOW
    ),
    # layer_types given outright: alternating, starting with a sliding layer (Gemma 2 / gpt-oss style)
    "qwen2_layer_types": dict(
        num_hidden_layers=4,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * 2,
    ),
}
EXPECTED = {
    "qwen2_max_window_layers": ("full", "full,sliding_window*2", ["full", "sliding_window", "sliding_window"]),
    "qwen2_layer_types": ("sliding_window", "sliding_window,full", ["sliding_window", "full"] * 2),
}


@pytest.fixture(scope="module", params=list(CASES))
def saved_case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    hf = make("qwen2", folder, num_key_value_heads=2, **CASES[request.param])
    return request.param, folder, hf


def rel_err(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def ids(seed=1, B=2, L=16):
    return torch.randint(1, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


def test_per_layer_windows_map_onto_a_schedule(saved_case):
    name, folder, hf = saved_case
    attention, schedule, kinds = EXPECTED[name]
    assert hf.config.layer_types == [{"full": "full_attention"}.get(k, "sliding_attention") for k in kinds]
    cfg = plan(folder).config
    assert (cfg.attention, cfg.layer_schedule, cfg.window) == (attention, schedule, WINDOW)
    assert [k.attention for k in layer_kinds(cfg)] == kinds
    ckpt = load(folder)
    assert [b.attn.core.cfg.attention for b in ckpt.model.stack.blocks] == kinds
    assert any("some layers" in n for n in ckpt.notes)


@pytest.mark.parametrize("seed", [1, 2])
def test_logits_match_transformers(saved_case, seed):
    _, folder, hf = saved_case
    ckpt = load(folder)
    x = ids(seed)
    with torch.no_grad():
        want = hf(input_ids=x).logits
    got = ckpt.logits(x)
    assert rel_err(got, want) < RTOL
    # the windows matter: the same weights with every layer full give other logits (the test can fail)
    full = load(folder).model
    for block in full.stack.blocks:
        block.attn.core.cfg = ckpt.config.replace(attention="full", layer_schedule="")
    assert rel_err(full(x).logits.detach(), want) > 1e-3


def test_logits_match_with_padding(saved_case):
    _, folder, hf = saved_case
    ckpt = load(folder)
    x = ids(3)
    mask = torch.ones_like(x)
    mask[1, 11:] = 0  # the second row is 11 tokens (longer than the window), right-padded
    x[1, 11:] = 0
    with torch.no_grad():
        want = hf(input_ids=x, attention_mask=mask).logits
    got = ckpt.logits(x, attention_mask=mask)
    real = mask.bool()
    assert rel_err(got[real], want[real]) < RTOL
