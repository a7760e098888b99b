"""The cost of a request before it runs (``explorer.runtime.cost``): predicted from the model's FLOPs and this
machine's measured rate, refused by name past the per-request budget or the visitor's share."""

import pytest

from explorer.runtime import cost, fair, settings
from models import ConfigError, ModelConfig

BIG = ModelConfig(n_layers=7, n_heads=16, d_model=512, d_ff=4096, vocab_size=4096)


def test_cost_grows_with_passes_length_and_size():
    small = ModelConfig()
    one = cost.predict(small, [(1, 64, 1)])
    assert one > 0
    assert cost.predict(small, [(10, 64, 1)]) == pytest.approx(10 * one)
    assert cost.predict(small, [(1, 128, 1)]) > 2 * one * 0.99
    assert cost.predict(BIG, [(1, 64, 1)]) > 20 * one


def test_the_costliest_patching_the_caps_accept_is_refused_by_name(monkeypatch):
    """The issue's attack: 123 forward passes of the largest model the caps accept, at the maps' 256 tokens."""
    monkeypatch.setenv(settings.REQUEST_SECONDS, "20")
    monkeypatch.setattr(cost, "rate", lambda: 50e9)  # a fast core: still far over 20 s
    with pytest.raises(ConfigError) as err:
        cost.charge(BIG, [(123, 256, 1)], "The patching view")
    message = str(err.value)
    assert err.value.field == "The patching view" and "needs about" in message and "20.0 s" in message
    assert settings.REQUEST_SECONDS in message


def test_a_heavy_job_gets_more_budget(monkeypatch):
    monkeypatch.setenv(settings.REQUEST_SECONDS, "1")
    monkeypatch.setattr(cost, "predict", lambda cfg, parts, kind=None: 3.0)
    with pytest.raises(ConfigError):
        cost.charge(ModelConfig(), [(1, 8, 1)], "x")
    assert cost.charge(ModelConfig(), [(1, 8, 1)], "x", heavy=True) == 3.0


def test_a_visitor_past_its_share_is_refused_and_others_are_not(monkeypatch):
    monkeypatch.setenv(settings.VISITOR_SHARE, "10")
    monkeypatch.setattr(cost, "predict", lambda cfg, parts, kind=None: 2.0)
    ledger = fair.Ledger(window_s=600)
    monkeypatch.setattr(cost, "LEDGER", ledger)
    ledger.add("10.0.0.1", 9.0)
    with cost.visitor("10.0.0.1"):
        with pytest.raises(ConfigError) as err:
            cost.charge(ModelConfig(), [(1, 8, 1)], "/analyze")
    assert "used 9.0 s of its 10.0 s" in str(err.value)
    with cost.visitor("10.0.0.2") as seen:
        assert cost.charge(ModelConfig(), [(1, 8, 1)], "/analyze") == 2.0
    assert seen["predicted"] == 2.0


def test_each_kind_learns_its_own_correction():
    corrections = cost.Corrections()
    corrections.observe("long context", 1.0, 6.0)
    assert corrections.of("long context").ratio > cost.FIRST_RATIO == corrections.of("The lens view").ratio


def test_the_learned_ratio_follows_measurements_within_bounds():
    learned = cost.Learned(low=0.5, high=4.0, weight=0.5, first=1.0)
    learned.observe(1.0, 2.0)
    assert learned.ratio == pytest.approx(1.5)
    for _ in range(50):
        learned.observe(1.0, 100.0)
    assert learned.ratio <= 4.0
    learned.observe(0.001, 50.0)  # too short to say anything
    assert learned.ratio <= 4.0
