"""The grounded labels of the weights on screen: a shipped bundle as trained reads its stored card (and the
card agrees with computing them now); other weights are computed on the probes, memoised."""

import torch

from explorer.analysis.weights import bundled
from explorer.analysis.why.grounded_view import COMPUTED, STORED, compute_grounded, grounded_json
from models import ModelConfig


def one_thread(fn):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many small forwards: two threads on a busy machine make them several times slower
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def test_a_bundle_as_trained_reads_its_card_and_the_card_agrees_with_a_computation():
    b = bundled.load("default")
    weights = bundled.bundled_weights(b.config)
    got = grounded_json(b.config, weights)
    assert got["source"] == STORED and [h["label"] for h in got["heads"][1]] == ["induction"] * 4
    fresh = one_thread(lambda: compute_grounded(b.config, weights))
    assert [[h["label"] for h in row] for row in fresh["heads"]] == [[h["label"] for h in row] for row in got["heads"]]


def test_other_weights_are_computed_and_never_read_induction_in_layer_zero():
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, max_len=64)
    got = one_thread(lambda: grounded_json(cfg, None))
    assert got["source"] == COMPUTED and len(got["heads"]) == 2 and len(got["heads"][0]) == 2
    assert all(h["label"] != "induction" for h in got["heads"][0])
    assert grounded_json(cfg, None) == got  # memoised
