"""The maps' reading says when a structured pattern allows exactly full attention's pairs (its maps are then
full attention's), judged against the masks themselves."""

import pytest
import torch

from explorer.figures.readings import allows_every_pair, maps_reading
from models import ModelConfig
from models.attention.layout import pattern_mask
from models.attention.patterns import PATTERNS


def _summary(attention, mask, prefix=0):
    L = mask.shape[0]
    full = torch.cat([torch.ones(L, prefix, dtype=torch.bool), mask], 1)
    return {
        "n_tokens": L,
        "n_keys": L + prefix,
        "n_layers": 1,
        "n_heads": 1,
        "mask_kind": "pattern",
        "attention": attention,
        "allowed_fraction": round(float(full.float().mean()), 6),
    }


@pytest.mark.parametrize("attention", [p for p in PATTERNS if p != "full"])
@pytest.mark.parametrize("L", [20, 89, 185])
@pytest.mark.parametrize("causal", [True, False])
def test_the_same_pairs_are_said_exactly_when_the_masks_are_equal(attention, L, causal):
    mask = pattern_mask(ModelConfig(attention=attention, causal=causal), L)
    full = torch.ones(L, L, dtype=torch.bool)
    if causal:
        full = full.tril()
    for prefix in (0, 4):
        assert allows_every_pair(_summary(attention, mask, prefix)) == torch.equal(mask, full)


def test_the_reading_points_to_a_longer_text():
    L = 89
    mask = pattern_mask(ModelConfig(attention="bigbird"), L)
    assert torch.equal(mask, torch.ones(L, L, dtype=torch.bool).tril())  # the old landing text's length
    text = maps_reading(_summary("bigbird", mask), 256)
    assert "covers every pair full attention allows" in text and "longer text (up to 256 bytes)" in text
    assert "**Long context** tab" in text  # where the pattern parts from full attention
    assert "covers every pair" not in maps_reading(_summary("full", mask), 256)
