"""The landing text is long enough for every structured pattern to differ from full attention, and keeps
the bundled model's induction heads (the repeat the text is built around)."""

from __future__ import annotations

import pytest
import torch

from explorer.analysis.maps.attention import attention_maps
from explorer.analysis.weights.bundled import bundled_weights
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig
from models.attention.layout import pattern_mask
from models.attention.patterns import PATTERNS

L = len(DEFAULT_TEXT.encode())
CAUSAL = torch.ones(L, L, dtype=torch.bool).tril()  # what full causal attention allows, built by hand
STRUCTURED = [p for p in PATTERNS if p != "full"]


def test_the_landing_text_fits_the_maps():
    # longer than a window (a pattern has room to differ), and short: the redraw's grid grows with L squared
    assert ModelConfig().window < L <= MAX_TEXT_BYTES


@pytest.mark.parametrize("attention", STRUCTURED)
def test_every_structured_pattern_allows_other_pairs_than_full_attention(attention):
    allowed = pattern_mask(ModelConfig(attention=attention), L)
    assert torch.equal(pattern_mask(ModelConfig(), L), CAUSAL)
    assert not (allowed & ~CAUSAL).any()  # a causal pattern never adds a future key
    assert (CAUSAL & ~allowed).sum() >= L  # at least a row's worth of pairs removed: visible on the map


def test_bigbird_random_blocks_and_longformer_globals_show():
    cfg = ModelConfig()
    window = pattern_mask(ModelConfig(attention="sliding_window"), L)
    longformer = pattern_mask(ModelConfig(attention="longformer"), L)
    bigbird = pattern_mask(ModelConfig(attention="bigbird"), L)
    far = torch.arange(L)[:, None] - torch.arange(L)[None, :] >= cfg.window  # keys out of the window's reach
    assert (longformer & ~window).any() and (longformer & ~window)[:, : cfg.n_global].all(-1).any()
    random_only = bigbird & ~longformer  # the random blocks' pairs
    assert (random_only & far).any() and not torch.equal(bigbird, CAUSAL)


def test_a_64_key_window_cannot_reach_back_from_the_third_copy_to_the_second():
    word = "Xq7Rv9Lm2"
    raw = DEFAULT_TEXT.encode()
    copies = [i for i in range(L) if raw.startswith(word.encode(), i)]
    assert len(copies) >= 3
    window = pattern_mask(ModelConfig(attention="sliding_window"), L)
    assert not window[copies[2], copies[1]] and CAUSAL[copies[2], copies[1]]
    assert all(b - a < 128 for a, b in zip(copies, copies[1:]))  # within the bundles' trained length


def test_the_bundled_model_keeps_its_induction_heads_at_the_landing_text():
    cfg = ModelConfig()
    maps = attention_maps(cfg, DEFAULT_TEXT, weights=bundled_weights(cfg))
    layer1 = [h.label for h in maps.heads()[1]]
    assert layer1.count("induction") >= 3, layer1
