"""The one weights source: a Weights choice resolved into a typed record, its prefix parsed in one place,
each kind drawing what it names (a bundle, the initial weights, your run only for its own config), and
another config (Compare's A, another norm placement) never handed weights that are not its own."""

from __future__ import annotations

import pytest
import torch

from explorer.analysis import source
from explorer.analysis.source import drawn_for
from explorer.analysis.weights import bundled
from explorer.analysis.weights.trained import snapshot
from models import ConfigError, ModelConfig, build_model

SMALL = ModelConfig(n_layers=1, d_model=16, n_heads=2)


@pytest.mark.parametrize(
    "choice, kind, ckpt",
    [
        (None, "bundled", None),
        ("", "bundled", None),
        ("initial", "initial", None),
        ("trained", "trained", None),
        ("checkpoint:byte-llama", "checkpoint", "byte-llama"),
        ("checkpoint:upload:ab", "checkpoint", "upload:ab"),
    ],
)
def test_a_choice_names_its_kind_and_its_checkpoint(choice, kind, ckpt):
    assert source.kind_of(choice) == kind and source.checkpoint_id(choice) == ckpt
    if ckpt is not None:
        assert source.checkpoint_choice(ckpt) == choice


@pytest.mark.parametrize("choice", ["Bundled", "checkpoint", "your run", 3, ["bundled"]])
def test_anything_else_is_refused_naming_the_field(choice):
    with pytest.raises(ConfigError) as err:
        source.kind_of(choice)
    assert err.value.field == "weights" and "checkpoint:<id>" in str(err.value)


def test_bundled_draws_the_bundle_trained_with_the_config():
    cfg = ModelConfig()
    src = source.resolve("bundled", cfg)
    assert src.kind == "bundled" and src.config == cfg and src.weights is bundled.bundled_weights(cfg)
    assert src.used()["used"] == "bundled" and src.why == "" and src.choice == "bundled"
    other = cfg.replace(norm_placement="post")  # another placement: its own initial weights, never these
    assert src.for_config(other) is None and drawn_for(src, other) is None and drawn_for(src, cfg) is src.weights


def test_a_config_no_bundle_serves_says_why_and_draws_the_initial_weights():
    cfg = ModelConfig(d_model=48, n_heads=4)
    src = source.resolve(None, cfg)
    assert src.weights is None and src.why
    assert src.used() == {"used": "initial", "source": src.why, "requested": "bundled"}


def test_initial_never_loads_weights():
    src = source.resolve("initial", ModelConfig())
    assert src.weights is None and src.used()["used"] == "initial" and "requested" not in src.used()


def test_your_run_is_drawn_for_its_own_config_only():
    record = snapshot(SMALL, build_model(SMALL))
    mine = source.resolve("trained", SMALL, trained=record)
    assert mine.weights is record and mine.for_other(SMALL) is record
    assert (
        source.resolve("trained", SMALL.replace(window=8, attention="sliding_window"), trained=record).weights is None
    )
    assert mine.for_other(SMALL.replace(n_layers=2)) is None  # Compare's A of another size: initial weights


def test_the_same_bundled_choice_draws_a_pinned_configs_own_bundle():
    b = ModelConfig()
    a = b.replace(attention="sliding_window", window=8)
    src = source.resolve("bundled", b)
    assert src.for_other(b) is src.weights
    moved = src.for_other(a)
    assert moved is not None and moved.surgery and moved.matches(a)


def test_a_checkpoint_resolves_once_with_its_record_and_draws_only_its_own_architecture():
    from explorer.analysis.weights import checkpoints

    loaded = checkpoints.load("byte-llama")
    windowed = source.checkpoint_config(loaded, {"attention": "sliding_window", "window": 16})
    src = source.resolve("checkpoint:byte-llama", windowed, loaded=loaded)
    assert src.loaded is loaded and src.checkpoint == "byte-llama" and src.surgery
    assert src.tokenizer is loaded.tokenizer and src.weights.matches(windowed)
    assert src.used()["used"] == "checkpoint" and src.used()["checkpoint"] == "byte-llama"
    with pytest.raises(ConfigError):
        src.for_other(ModelConfig())
    as_trained = source.resolve("checkpoint:byte-llama", loaded.config, loaded=loaded)
    assert as_trained.weights is loaded.weights and not as_trained.surgery


def test_a_surgery_safe_change_operates_on_the_weights_on_screen_and_names_the_trained_one():
    sw = bundled.load("sliding_window").config  # a bundle trained with exactly this config exists
    src = source.resolve("bundled", sw)
    default = bundled.bundled_weights(ModelConfig())
    assert src.weights.bundle == "default" and src.weights.surgery == ("attention",)
    assert src.trained_exists == "sliding_window" and src.choice == "bundled"
    # the same tensors as the default bundle's (a pattern has no parameters of its own), not the other bundle's
    own = bundled.bundled_weights(sw)
    same = [k for k in default.tensors if torch.equal(src.weights.tensors[k], default.tensors[k])]
    assert len(same) == len(default.tensors) and not all(torch.equal(own.tensors[k], default.tensors[k]) for k in same)
    shown = source.resolve("bundle:sliding_window", sw)  # the explicit choice: that bundle as trained
    assert shown.weights is own and not shown.surgery and shown.trained_exists == ""
    assert shown.choice == "bundle:sliding_window"
    narrower = source.resolve("bundle:sliding_window", sw.replace(window=32))  # surgery on the bundle on screen
    assert narrower.weights.bundle == "sliding_window" and narrower.weights.surgery == ("window",)
    post = source.resolve("bundled", ModelConfig(norm_placement="post"))  # needs other weights: its own bundle
    assert post.weights.bundle == "post_ln" and not post.surgery and post.trained_exists == ""
    with pytest.raises(ConfigError, match="weights"):
        source.resolve("bundle:nope", sw)
