"""The interpretability figures draw the analyses' API answers (the same numbers), with titles, axis titles
and colour-bar titles; the answers are plain JSON."""

import json

import numpy as np
import pytest
import torch

from explorer.analysis.why.attribution import attribute
from explorer.analysis.why.circuits import composition, head_circuits
from explorer.analysis.why.lens import logit_lens
from explorer.analysis.why.patching import patch_heads
from explorer.figures.interpretability import (
    attribution_figure,
    composition_figure,
    copying_figure,
    lens_figure,
    patching_figure,
)
from models import ModelConfig, build_model

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64, vocab_size=256, position="rope", seed=1)


@pytest.fixture(scope="module")
def model():
    return build_model(ModelConfig(**SMALL)).eval()


def ids(text):
    return torch.tensor([list(text.encode())])


def _titled(fig):
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert fig.data[0].colorbar.title.text


def test_lens_figure_draws_the_target_probabilities_and_top_tokens(model):
    answer = json.loads(json.dumps(logit_lens(model, ids("abcabcabc")).to_json()))
    fig = lens_figure(answer)
    _titled(fig)
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float), answer["target_prob"])
    assert [list(r) for r in fig.data[0].text] == [
        [row[p][0] for p in answer["positions"]] for row in answer["top_tokens"]
    ]
    assert list(fig.data[0].y) == ["embedding", "layer 0", "layer 1"]


def test_head_grids_draw_heads_and_ffn(model):
    x = ids("hello hello")
    attr = json.loads(json.dumps(attribute(model, x, 4, alternative=65).to_json()))
    fig = attribution_figure(attr)
    _titled(fig)
    assert np.asarray(fig.data[0].z).tolist() == [row + [f] for row, f in zip(attr["heads"], attr["ffn"])]
    assert list(fig.data[0].x)[-1] == "FFN" and "frozen" in fig.layout.title.text
    corrupt = ids("hello jello")
    patch = json.loads(json.dumps(patch_heads(model, x, corrupt).to_json()))
    fig = patching_figure(patch)
    _titled(fig)
    assert np.asarray(fig.data[0].z).tolist() == [row + [f] for row, f in zip(patch["heads"], patch["ffn"])]


def test_circuit_figures(model):
    circ = json.loads(json.dumps(head_circuits(model).to_json()))
    fig = copying_figure(circ)
    _titled(fig)
    assert np.asarray(fig.data[0].z).tolist() == circ["copying_eigen"] and fig.data[0].zmin == -1
    comp = json.loads(json.dumps(composition(model).to_json()))
    fig = composition_figure(comp)
    _titled(fig)
    assert np.asarray(fig.data[0].z).tolist() == comp["scores"]
    assert f"{comp['random_baseline']:.3f}" in fig.layout.title.text
