"""The Train tab trains the model on the controls: scaled down to the training cap only when it is over
it (the built model's parameter count is the reference), the box follows the controls, the checkpoint
is named after the config, and "Weights: your run" sets the size controls to a scaled-down run's."""

import json

import pytest

from explorer.app.controls import train_source as ts
from explorer.app.controls import weights as ui_weights
from explorer.app.controls.fields import config_updates
from explorer.app.controls.state import new_state
from explorer.app.tabs.parts.train_files import config_stem
from explorer.training.trainer import MAX_TRAIN_PARAMS, RunConfig, Trainer
from models import ModelConfig, build_model

BIG = ModelConfig(n_layers=12, d_model=512, n_heads=8)  # ~38 M parameters: over the training cap


def values_of(cfg) -> dict:
    return {n: u["value"] for n, u in config_updates(cfg).items()}


def n_params(cfg) -> int:
    return sum(p.numel() for p in build_model(cfg).parameters())


@pytest.mark.parametrize(
    "cfg",
    [
        ModelConfig(),
        ModelConfig(attention="sliding_window", position="alibi"),
        ModelConfig(n_layers=2, d_model=64, n_heads=4),
    ],
)
def test_a_model_within_the_cap_trains_as_it_is(cfg):
    assert n_params(cfg) <= MAX_TRAIN_PARAMS
    fitted, changes = ts.fit_to_caps(cfg)
    assert fitted == cfg and changes == []


@pytest.mark.parametrize(
    "cfg",
    [
        BIG,
        ModelConfig(n_layers=8, d_model=256, attention="sliding_window", position="alibi"),
        ModelConfig(n_layers=2, d_model=512, n_heads=8, position="learned", max_len=4096),
    ],
)
def test_a_model_over_the_cap_is_scaled_down_in_size_only(cfg):
    assert n_params(cfg) > MAX_TRAIN_PARAMS
    fitted, changes = ts.fit_to_caps(cfg)
    assert n_params(fitted) <= MAX_TRAIN_PARAMS
    before, after = cfg.to_dict(), fitted.to_dict()
    assert {k for k in before if before[k] != after[k]} == {f for f, _, _ in changes} <= set(ts.SCALED)
    assert all(b < a for _, a, b in changes)
    line = ts.source_line(fitted, changes).replace("\\", "")
    assert "Scaled down" in line and all(f"{f} {a} → {b}" in line for f, a, b in changes)


def test_the_box_follows_the_controls_once_per_change():
    values = values_of(BIG)
    out = ts.follow(values, None)
    fitted, _ = ts.fit_to_caps(BIG)
    assert ModelConfig.from_dict(json.loads(out["train_config"])) == fitted
    assert out["train_synced"] == BIG.to_json()
    again = ts.follow(values, out["train_synced"])  # the same controls: the box (maybe edited) stays
    assert all(isinstance(v, dict) for v in again.values())  # gr.skip()


def test_the_checkpoint_is_named_after_the_config():
    assert config_stem(ModelConfig(attention="sliding_window", position="alibi")) == "sliding_window-alibi"
    assert config_stem(ModelConfig()) == "full"


def test_your_run_sets_the_controls_to_a_scaled_down_runs_size():
    fitted, changes = ts.fit_to_caps(BIG)
    trainer = Trainer(fitted, RunConfig(task="copy", steps=2, lr=3e-3, warmup=0, batch_size=4, seq_len=17, every=1))
    list(trainer.run())
    on = ui_weights.switch(values_of(BIG), "trained", {"trainer": trainer}, new_state())
    assert on["trained"] is not None and on["trained"].step == 2
    assert {f: on[f] for f, _, _ in changes} == {f: b for f, _, b in changes}
    assert "Controls set to your run's size" in on["status"]
    # another architecture than the run's is not a scale-down: refused, the controls untouched
    other = values_of(BIG.replace(attention="sliding_window"))
    off = ui_weights.switch(other, "trained", {"trainer": trainer}, new_state())
    assert off["weights"] == "bundled" and off["trained"] is None
    assert all(isinstance(off[f], dict) for f in ts.SCALED)
